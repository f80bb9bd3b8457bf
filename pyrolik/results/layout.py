"""How a result field is laid out in its export: the declaration (``stored``) that drives the
writer (the converters) and the reader (:func:`pyrolik.io.export.from_datatree`), and the helpers the
converters build their groups with (``docs/export.md``)."""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from collections.abc import Hashable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import xarray as xr

from pyrolik._version import __version__
from pyrolik.ops.stats import effective_sample_size, khat_threshold, log_mean_exp

__all__ = ["Stored", "stored", "declared", "example_dim", "blocked", "kish_ess", "khat_attrs", "pit",
           "EX", "BLOCK", "DERIVED", "NESTED", "SUBTREES", "LAYOUT", "DEFAULT_EXAMPLE_DIM", "CONVERTER"]

EX = "<example>"  # in a declaration's dims: the example dim (the model's plate)
BLOCK = "<block>"  # in a declaration's dims: K chains as (chain, particle), C blocks of M
#: Variables the converters compute from the stored ones (not read back).
DERIVED = {"particles": ("log_marginal_likelihood", "ess"),
           "annealing": ("log_marginal_likelihood", "ess")}
NESTED = ("lower", "upper")  # the subtrees of a BDMC export
SUBTREES = "pyrolik_subtrees"  # a flattened tree's root attr: JSON {subtree path: its attrs}
LAYOUT = 3  # the version of the layout, a root attr
DEFAULT_EXAMPLE_DIM = "example"
# dims the layout uses for something else: a plate with one of these names is exported as "example"
_RESERVED_DIMS = {"chain", "draw", "sample", "step", "pilot_step", "bandwidth", "latent_dim"}
# what ArviZ reads off the "library" it records: its name and version
_LIBRARY = SimpleNamespace(__name__="pyrolik", __version__=__version__)
#: Which ArviZ converter builds the groups: "auto" (ArviZ 0.x's when ``arviz.InferenceData``
#: exists, else ``arviz_base``'s), "arviz" or "arviz_base" (the tests set it to check both).
CONVERTER = "auto"


@dataclasses.dataclass(frozen=True)
class Stored:
    """Where a result field lives in its export: ``group`` (a group, ``"attrs"`` or, for
    ``codec="result"``, a subtree); ``name`` (the variable or attr; a tuple for a NamedTuple field,
    ``None`` for a dict field: one variable per key); ``dims`` (truncated to the rank, extra dims
    ``<name>_dim_i``); ``codec`` (the reader's key)."""

    group: str
    name: str | tuple[str, ...] | None = None
    dims: tuple[str, ...] = ()
    codec: str | None = None


def stored(group: str, name: str | tuple[str, ...] | None = None, dims: Sequence[str] = (),
           codec: str | None = None, **kwargs: Any) -> Any:
    """A dataclass field (``kwargs`` as :func:`dataclasses.field`) declaring where it is exported."""
    return dataclasses.field(metadata={"stored": Stored(group, name, tuple(dims), codec)}, **kwargs)


def declared(cls: Any) -> dict[str, Stored]:
    """``{field: Stored}`` of a result class or object."""
    return {f.name: f.metadata["stored"] for f in dataclasses.fields(cls) if "stored" in f.metadata}


def _np(t: Any) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def _event_dims(name: str, ndim: int) -> list[str]:
    return [f"{name}_dim_{i}" for i in range(ndim)]


def blocked(a: np.ndarray, c: int, axis: int = 0) -> np.ndarray:
    """Split axis ``axis`` (length ``K``) into ``(c, K // c)``: block-major, chains in order."""
    return a.reshape(a.shape[:axis] + (c, a.shape[axis] // c) + a.shape[axis + 1:])


def _log_mean_exp(lw: np.ndarray, axis: int) -> np.ndarray:
    """:func:`pyrolik.ops.stats.log_mean_exp` of numpy log-weights along ``axis``."""
    return log_mean_exp(torch.from_numpy(np.ascontiguousarray(lw)), dim=axis).numpy()


def kish_ess(lw: np.ndarray, axis: int) -> np.ndarray:
    """Kish's effective sample size (:func:`pyrolik.ops.stats.effective_sample_size`) along ``axis``."""
    return effective_sample_size(torch.from_numpy(np.ascontiguousarray(lw)), dim=axis).numpy()


def khat_attrs(num_samples: int) -> dict[str, Any]:
    """ArviZ's attrs of ``pareto_k``: ``good_k``, :func:`pyrolik.ops.stats.khat_threshold` (``-inf``
    for 10 or fewer weights: no tail to trust), and ``n_samples``."""
    return {"good_k": float(khat_threshold(num_samples)), "n_samples": int(num_samples)}


def _gather(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values`` ``(C, M, N, *event)`` at ``idx`` ``(C, M, N)`` along axis 1."""
    full = idx.reshape(idx.shape + (1,) * (values.ndim - 3))
    return np.take_along_axis(values, np.broadcast_to(full, idx.shape + values.shape[3:]), axis=1)


def pit(draws: xr.DataArray, truth: xr.DataArray) -> xr.DataArray:
    """Fraction of ``draws`` (over ``chain`` and ``draw``) below ``truth``, ties counted half."""
    below = (draws < truth).mean(("chain", "draw"))
    tied = (draws == truth).mean(("chain", "draw"))
    return (below + 0.5 * tied).astype(np.float64)


Variables = dict[str, tuple[list[str], np.ndarray]]  # name: (dims, values)


def _dataset(variables: Variables, coords: dict[str, Any], sample_dims: list[str]) -> xr.Dataset:
    """One group through ArviZ's converter; ``dims`` name the non-sample dims of each variable."""
    data = {k: v for k, (_, v) in variables.items()}
    dims: dict[Hashable, Sequence[Hashable]] = {k: d for k, (d, _) in variables.items()}
    flavour = CONVERTER  # "arviz" (ArviZ 0.x's dict_to_dataset) or "arviz_base" (ArviZ 1.x's)
    if flavour == "auto":
        import arviz

        flavour = "arviz" if hasattr(arviz, "InferenceData") else "arviz_base"
    with warnings.catch_warnings():
        # more blocks than draws per block (num_blocks=10 of 4 chains each) is a layout, not a
        # transposed array
        warnings.filterwarnings("ignore", message="More chains", category=UserWarning)
        if flavour == "arviz_base":  # ArviZ >= 1.0
            from arviz_base import dict_to_dataset as base_dict_to_dataset

            return base_dict_to_dataset(
                data, coords=coords, dims=dims, index_origin=0,
                # the stub asks for a module; ArviZ reads only __name__ and __version__ off it
                inference_library=_LIBRARY,  # type: ignore[arg-type]
                sample_dims=sample_dims, check_conventions=False)
        from arviz import dict_to_dataset  # ArviZ 0.x

        return dict_to_dataset(data, coords=coords, dims=dims, index_origin=0, library=_LIBRARY,
                               default_dims=sample_dims)


def example_dim(result: Any) -> str:
    """The name of the example dim: the result's ``example_dim`` (the model's data plate)."""
    if hasattr(result, "lower") and hasattr(result, "upper"):  # BDMC: its runs' plate
        result = result.lower
    name = getattr(result, "example_dim", None)
    if (not isinstance(name, str) or not name or name in _RESERVED_DIMS
            or re.fullmatch(r".+_dim_\d+", name)):
        return DEFAULT_EXAMPLE_DIM
    return name


def _laid_out(name: str, v: np.ndarray, template: Sequence[str], ex: str,
              c: int | None = None) -> tuple[list[str], np.ndarray]:
    """``v`` in the dims of ``template``: ``EX`` is ``ex``, ``BLOCK`` is ``c`` blocks of chains."""
    dims: list[str] = []
    for d in template[:v.ndim]:
        if d == BLOCK:
            v = blocked(v, int(c or 1), axis=len(dims))
            dims += ["chain", "particle"]
        else:
            dims.append(ex if d == EX else d)
    return dims + _event_dims(name, v.ndim - len(dims)), v


def _attr(value: Any, codec: str | None) -> Any:
    """A declared attr as netCDF stores it: a plain str, int or float."""
    if codec == "none":
        return str(value or "none")
    if codec == "seed":  # an int when netCDF can hold it (int64), its decimal string otherwise
        return int(value) if -(2**63) <= int(value) < 2**63 else str(value)
    if codec is not None:  # JSON: settings, or an object's to_dict() (kernel, budget)
        return json.dumps(value.to_dict() if hasattr(value, "to_dict") else value, default=str)
    return value if isinstance(value, str | int | float) else str(value)


def _one_draw(ds: xr.Dataset) -> xr.Dataset:
    """A group that is not a sample (a pooled estimate) as one draw, lined up with the draws."""
    return ds.expand_dims({"chain": [0], "draw": [0]})


def _tree(groups: dict[str, xr.Dataset | None], attrs: dict[str, Any]) -> xr.DataTree:
    tree = xr.DataTree.from_dict({k: v for k, v in groups.items() if v is not None})
    tree.attrs = attrs
    return tree
