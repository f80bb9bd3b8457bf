"""Helpers every export module shares: ArviZ's converter, dim names, versions and run attrs.

Imports no pyrolik module but :mod:`pyrolik._version` (results are read by their attributes).
"""

from __future__ import annotations

import datetime
import json
import platform
import re
import warnings
from collections.abc import Hashable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import xarray as xr

from pyrolik._version import __version__

__all__ = ["example_dim", "SITE_GROUPS", "DEFAULT_EXAMPLE_DIM", "NESTED", "LAYOUT", "ORDER"]

# what ArviZ reads off the "library" it records: its name and version
_LIBRARY = SimpleNamespace(__name__="pyrolik", __version__=__version__)
SITE_GROUPS = {"forward": ("posterior", "unconstrained_posterior"),
               "reverse": ("prior", "unconstrained_prior")}
SAMPLE = ["chain", "draw"]
DEFAULT_EXAMPLE_DIM = "example"
# dims the layout uses for something else: a plate with one of these names is exported as "example"
_RESERVED_DIMS = {"chain", "draw", "sample", "step", "pilot_step", "bandwidth", "latent_dim"}
ORDER = ["posterior", "prior", "unconstrained_posterior", "unconstrained_prior", "sample_stats",
         "sample_stats_prior", "particles", "unconstrained_particles", "evidence", "annealing",
         "trajectory", "observed_data", "constant_data"]
#: the version of the layout, a root attr; files without it have the first (pre-resampling) one
LAYOUT = 2
NESTED = ("lower", "upper")  # the subtrees of a BDMC export


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


#: Which ArviZ converter builds the groups: "auto" (ArviZ 0.x's when ``arviz.InferenceData``
#: exists, else ``arviz_base``'s), "arviz" or "arviz_base" (the tests set it to check both).
CONVERTER = "auto"


def converter() -> str:
    """``"arviz"`` (ArviZ 0.x's ``dict_to_dataset``) or ``"arviz_base"`` (ArviZ 1.x's)."""
    if CONVERTER != "auto":
        return CONVERTER
    import arviz

    return "arviz" if hasattr(arviz, "InferenceData") else "arviz_base"


def _dataset(data: dict[str, Any], dims: dict[str, list[str]], coords: dict[str, Any],
             sample_dims: list[str]) -> xr.Dataset:
    """One group through ArviZ's converter; ``dims`` name the non-sample dims of each variable."""
    data = {k: _np(v) if isinstance(v, torch.Tensor) else np.asarray(v) for k, v in data.items()}
    event_dims: dict[Hashable, Sequence[Hashable]] = {k: v for k, v in dims.items()}
    with warnings.catch_warnings():
        # more blocks than draws per block (num_blocks=10 of 4 chains each) is a layout, not a
        # transposed array
        warnings.filterwarnings("ignore", message="More chains", category=UserWarning)
        if converter() == "arviz_base":  # ArviZ >= 1.0
            from arviz_base import dict_to_dataset as base_dict_to_dataset

            return base_dict_to_dataset(
                data, coords=coords, dims=event_dims, index_origin=0,
                # the stub asks for a module; ArviZ reads only __name__ and __version__ off it
                inference_library=_LIBRARY,  # type: ignore[arg-type]
                sample_dims=sample_dims, check_conventions=False)
        from arviz import dict_to_dataset  # ArviZ 0.x

        return dict_to_dataset(data, coords=coords, dims=event_dims, index_origin=0,
                               library=_LIBRARY, default_dims=sample_dims)


def _event_dims(name: str, ndim: int) -> list[str]:
    return [f"{name}_dim_{i}" for i in range(ndim)]


def example_dim(result: Any) -> str:
    """The name of the example dim: the result's ``example_dim`` (the model's data plate).

    ``"example"`` when the result does not say, or when the plate's name is one the layout uses for
    something else (``chain``, ``draw``, ``sample``, ``latent_dim``, ``<name>_dim_<i>``, ...).
    """
    if hasattr(result, "lower") and hasattr(result, "upper"):  # BDMC: its runs' plate
        result = result.lower
    name = getattr(result, "example_dim", None)
    if (not isinstance(name, str) or not name or name in _RESERVED_DIMS
            or re.fullmatch(r".+_dim_\d+", name)):
        return DEFAULT_EXAMPLE_DIM
    return name


def _versions() -> dict[str, str]:
    import arviz
    import pyro

    # str(): torch.__version__ is a TorchVersion, which netCDF writers cannot store
    return {"inference_library": "pyrolik", "inference_library_version": str(__version__),
            "torch_version": str(torch.__version__), "pyro_version": str(pyro.__version__),
            "arviz_version": str(arviz.__version__), "xarray_version": str(xr.__version__),
            "python_version": platform.python_version()}


def _created_at() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def _seed_attr(seed: int) -> int | str:
    """An int attr when netCDF can hold it (int64), its decimal string otherwise."""
    seed = int(seed)
    return seed if -(2**63) <= seed < 2**63 else str(seed)


def _is_ais(result: Any) -> bool:
    return hasattr(result, "direction") and hasattr(result, "trace")


def _attrs(result: Any) -> dict[str, Any]:
    attrs = {**_versions(), "created_at": _created_at(),
             "pyrolik_result": type(result).__name__, "method": str(result.method),
             "bound": str(result.bound or "none"), "wall_time": float(result.wall_time),
             "settings": json.dumps(result.settings, default=str), "layout": LAYOUT}
    if result.seed is not None:
        attrs["seed"] = _seed_attr(result.seed)
    if _is_ais(result):
        attrs.update(direction=str(result.direction), path=str(result.path))
        if result.kernel is not None:
            attrs["kernel"] = json.dumps(result.kernel.to_dict(), default=str)
    if getattr(result, "budget", None) is not None:  # ais(tolerance=): how num_steps was chosen
        attrs["budget"] = json.dumps(result.budget.to_dict(), default=str)
    return attrs


