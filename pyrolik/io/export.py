"""Export results to xarray / ArviZ and result files: the public ``pyrolik.io.export`` module (``docs/export.md``)."""

from __future__ import annotations

from pyrolik.io.netcdf import from_datatree, load, save
from pyrolik.results.convert import flatten, to_datatree, to_inference_data

__all__ = ["to_datatree", "to_inference_data", "from_datatree", "save", "load", "flatten"]
