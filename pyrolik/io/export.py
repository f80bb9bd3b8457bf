"""Export results to xarray / ArviZ and result files: the public ``pyrolik.io.export`` module.

Two modules do the work, and neither imports its caller: :mod:`pyrolik.results.convert` turns a
result into an ``xarray.DataTree`` or ``arviz.InferenceData`` (it does not import
:mod:`pyrolik.results`, whose ``to_datatree()`` method calls it); :mod:`pyrolik.io.netcdf` rebuilds
results from trees and saves and loads files (it imports both). Both follow the result classes'
declaration of where each field is stored. The layout is described in
:mod:`pyrolik.results.convert` and ``docs/export.md``.
"""

from __future__ import annotations

from pyrolik.io.netcdf import from_datatree, load, save
from pyrolik.results.convert import flatten, to_datatree, to_inference_data

__all__ = ["to_datatree", "to_inference_data", "from_datatree", "save", "load", "flatten"]
