"""Input and output: export to xarray/ArviZ, result files, data sets."""

from pyrolik.io import datasets, export

__all__ = ["datasets", "export"]
