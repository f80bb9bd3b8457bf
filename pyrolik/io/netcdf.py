"""Result files: save a result to netCDF (or zarr) atomically, load it back, rebuild it from a tree.

The reverse of :mod:`pyrolik.results.datatree`. Files are written with xarray's own writer, so ArviZ's
and xarray's readers open them (``az.from_netcdf``, ``xr.open_datatree``); a BDMC result is written
in the flat layout of :func:`pyrolik.results.datatree.flatten`, whose groups ArviZ 0.x sees. Files are
never unpickled: a netCDF/zarr store holds arrays and plain attributes only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import uuid
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch
import xarray as xr

from pyrolik.infer.budget import Budget
from pyrolik.mcmc.hmc import HMC
from pyrolik.mcmc.step_sizes import StepSizes
from pyrolik.results import AISResult, BDMCResult, EstimateResult
from pyrolik.results.annealing_group import DERIVED
from pyrolik.results.datatree import NESTED, flatten, to_datatree
from pyrolik.results.weighted import PARTICLE_STATS

__all__ = ["from_datatree", "save", "load", "register_reader", "NOT_A_RESULT"]

Result = EstimateResult | BDMCResult
NOT_A_RESULT = ("make one with pyrolik.save(result, 'run.nc') or the pyrolik evaluate / bdmc "
                "commands (their --output)")
_NETCDF_MAGIC = (b"CDF\x01", b"CDF\x02", b"\x89HDF")


def _t(da: xr.DataArray, *dims: str) -> torch.Tensor:
    values = da.transpose(*dims, ...).values if dims else da.values
    return torch.from_numpy(np.array(values))


def _opt(ds: xr.Dataset | None, name: str, *dims: str) -> torch.Tensor | None:
    return _t(ds[name], *dims) if ds is not None and name in ds else None


def _group(tree: xr.DataTree, name: str) -> xr.Dataset | None:
    """The variables of the child group ``name`` of ``tree``; ``None`` when there is no such group."""
    node = tree.children.get(name)
    return None if node is None else node.to_dataset()


def _missing(tree: xr.DataTree, name: str) -> ValueError:
    return ValueError(f"this {tree.attrs.get('pyrolik_result')} tree has no {name!r} group: it was "
                      "not written whole by pyrolik; load files made by pyrolik.save or "
                      "result.to_datatree()")


def _required(tree: xr.DataTree, name: str) -> xr.Dataset:
    """The child group ``name``, which every pyrolik result tree of this layout has."""
    ds = _group(tree, name)
    if ds is None:
        raise _missing(tree, name)
    return ds


def _dim(dim: Hashable) -> str:
    """A dim name read off a file (netCDF/zarr dim names are strings)."""
    return str(dim)


def _unflatten(tree: xr.DataTree) -> xr.DataTree:
    """Undo :func:`~pyrolik.results.datatree.flatten` for a BDMC tree."""
    groups: dict[str, Any] = {}
    for name, node in tree.children.items():
        head, _, rest = name.partition("_")
        path = f"{head}/{rest}" if head in NESTED and rest else name
        groups[path] = node.to_dataset()
    out = xr.DataTree.from_dict(groups)
    out.attrs = dict(tree.attrs)
    for name in NESTED:  # each flattened group carries its run's attrs
        out[name].attrs = dict(tree[f"{name}_evidence"].attrs)
    return out


def _seed(attrs: dict) -> int | None:
    return int(attrs["seed"]) if "seed" in attrs else None  # an int, or a str past int64


#: Readers of trees that other packages write themselves (``exports_itself`` results), by their
#: ``pyrolik_result`` attribute; registered by those packages (:func:`register_reader`), so that
#: this module imports none of them.
READERS: dict[str, Any] = {}


def register_reader(kind: str, reader: Any) -> None:
    """Let :func:`from_datatree` (and :func:`load`) rebuild trees whose ``pyrolik_result`` is ``kind``."""
    READERS[kind] = reader


def from_datatree(tree: Any) -> Result:
    """Rebuild the result object from :func:`to_datatree`'s (or :func:`to_inference_data`'s) output.

    Summaries, warnings, diagnostics and plots then work without rerunning anything. The kernel is
    rebuilt from its recorded parameters. Trees written before the example dim was named after the
    model's plate (dim ``example``) load the same way: the dim is read off ``log_likelihood``.
    """
    if not isinstance(tree, xr.DataTree):
        if hasattr(tree, "to_datatree"):  # arviz.InferenceData
            tree = tree.to_datatree()
        else:
            raise TypeError(f"expected an xarray.DataTree or arviz.InferenceData, got "
                            f"{type(tree).__name__}")
    kind = tree.attrs.get("pyrolik_result")
    if kind is None:
        raise ValueError("this tree was not written by pyrolik (no 'pyrolik_result' attribute); "
                         "load files made by pyrolik.save or result.to_datatree()")
    if kind in READERS:
        return READERS[kind](tree)
    if kind == "BDMCResult":
        if "lower" not in tree.children:
            tree = _unflatten(tree)
        lower, upper = from_datatree(tree["lower"]), from_datatree(tree["upper"])
        if not isinstance(lower, AISResult) or not isinstance(upper, AISResult) or lower.x is None:
            raise ValueError("this BDMCResult tree's lower and upper runs are not AIS runs on "
                             "observed data; load files made by pyrolik.save or "
                             "result.to_datatree()")
        sim = _group(tree, "simulated")
        latents = {} if sim is None else {str(s): _t(da) for s, da in sim.items()}
        return BDMCResult(lower=lower, upper=upper, x=lower.x, latents=latents,
                          wall_time=float(tree.attrs.get("wall_time", np.nan)))
    return _estimate(tree)


def _common(tree: xr.DataTree, ex: str, log_weights: torch.Tensor | None) -> dict[str, Any]:
    attrs = tree.attrs
    ev = _required(tree, "evidence")
    obs = _group(tree, "observed_data")
    return dict(
        method=attrs["method"], log_likelihood=_t(ev["log_marginal_likelihood"]),
        bound=None if attrs["bound"] == "none" else attrs["bound"], log_weights=log_weights,
        ess=_opt(ev, "ess"), mcse=_opt(ev, "mcse"), khat=_opt(ev, "pareto_k"),
        x=None if obs is None else _t(obs["x"], ex), num_observed=_opt(obs, "num_observed"),
        settings=json.loads(attrs.get("settings", "{}")), seed=_seed(attrs),
        wall_time=float(attrs.get("wall_time", np.nan)), example_dim=ex,
    )


def _unblock(da: xr.DataArray, ex: str, *lead: str) -> torch.Tensor:
    """``(..., chain, particle, <plate>, ...)`` -> ``(..., K, N, ...)``: blocks back to chains."""
    t = _t(da, *lead, "chain", "particle", ex)
    i = len(lead)
    return t.reshape(*t.shape[:i], -1, *t.shape[i + 2:])


def _estimate(tree: xr.DataTree) -> Result:
    """Rebuild from the resampled layout: raw values from ``particles``, ``evidence``, ``annealing``."""
    kind, attrs = tree.attrs["pyrolik_result"], tree.attrs
    ex = _dim(_required(tree, "evidence")["log_marginal_likelihood"].dims[0])
    part = _group(tree, "particles")
    lw = None if part is None else _unblock(part["log_weight"], ex)
    sites = {} if part is None else {str(s): _unblock(part[s], ex) for s in part.data_vars
                                     if s not in PARTICLE_STATS}
    common = _common(tree, ex, lw)
    if kind != "AISResult":
        draws = None
        if "sample_stats" in tree.children:
            stats = _required(tree, "sample_stats")
            post = _group(tree, "posterior")
            draws = {"draw_index": _t(stats["particle"], "chain", "draw", ex),
                     "draw_log_weight": _t(stats["log_weight"], "chain", "draw", ex),
                     **({} if post is None else {str(s): _t(da, "chain", "draw", ex) for s, da in
                                                 post.data_vars.items()})}
        return EstimateResult(**common, samples=sites or None, draws=draws)
    if part is None or lw is None:  # an AIS tree has its particles
        raise _missing(tree, "particles")
    flat_ds = _group(tree, "unconstrained_particles")
    flat = None if flat_ds is None else _unblock(flat_ds["u"], ex)
    const = _group(tree, "constant_data")
    trace: dict[str, torch.Tensor] | None = None
    steps = None
    if "annealing" in tree.children:
        ann = _required(tree, "annealing")
        k = lw.shape[0]
        trace = {str(name): _unblock(da, ex, "step") for name, da in ann.data_vars.items()
                 if name not in DERIVED}
        beta = _t(ann["beta"], "step")
        trace["beta"] = (beta.unsqueeze(1).expand(-1, k).contiguous() if beta.dim() == 1
                         else beta.unsqueeze(1).expand(-1, k, -1).contiguous())
        if "trajectory" in tree.children:
            trace["z"] = _unblock(_required(tree, "trajectory")["u"], ex, "step")
        steps = torch.from_numpy(np.array(ann["step"].values))
    return AISResult(
        **common, direction=attrs["direction"], path=attrs["path"],
        schedule=_opt(const, "schedule", "step"), step_sizes=_table(const, ex),
        kernel=_kernel(attrs),
        final_state=flat, latents=sites,
        acceptance_rate=None if "mean_acceptance_rate" not in part else _unblock(
            part["mean_acceptance_rate"], ex),
        num_divergent=None if "num_divergent" not in part else _unblock(part["num_divergent"], ex),
        trace=trace, trace_steps=steps, budget=_budget(attrs),
    )


def _kernel(attrs: dict) -> HMC | None:
    """The recorded kernel, rebuilt from its parameters."""
    return HMC(**json.loads(attrs["kernel"])) if "kernel" in attrs else None


def _budget(attrs: dict) -> Budget | None:
    """How ``ais(tolerance=)`` chose the number of steps, if it did (the ``budget`` attr)."""
    return Budget.from_dict(json.loads(attrs["budget"])) if "budget" in attrs else None


def _table(const: xr.Dataset | None, ex: str) -> StepSizes | None:
    if const is None or "pilot_beta" not in const:
        return None
    return StepSizes(_t(const["pilot_beta"]), _t(const["log_step_size"], "pilot_step"),
                     _opt(const, "inv_mass", "pilot_step", ex),
                     _opt(const, "log_ratio_var", "pilot_step", ex))


def _engine(path: Path, engine: str | None) -> str:
    if engine is not None:
        return engine
    if path.suffix == ".zarr":
        return "zarr"
    for name, module in (("netcdf4", "netCDF4"), ("h5netcdf", "h5netcdf")):
        if importlib.util.find_spec(module) is not None:
            return name
    raise ImportError("saving a result needs netCDF4 or h5netcdf (netCDF groups): "
                      "pip install netCDF4, or save to a path ending in .zarr with zarr installed")


def save(result: Result | xr.DataTree, path: str | os.PathLike, *, engine: str | None = None
         ) -> Path:
    """Write a result to netCDF (or zarr, for a path ending in ``.zarr``) atomically.

    The tree is written to a temporary file beside ``path`` and moved into place with
    :func:`os.replace`, so a crash never leaves a half-written file under ``path``. A BDMC result
    is written flat (``lower_posterior``, ..., ``bdmc``, ``simulated``) so that ``az.from_netcdf``
    sees every group; :func:`load` reads it back, and reads nested files too.
    """
    path = Path(path)
    tree = result if isinstance(result, xr.DataTree) else to_datatree(result)
    if tree.attrs.get("pyrolik_result") == "BDMCResult":
        tree = flatten(tree)
    engine = _engine(path, engine)
    tmp, old = (path.with_name(f".{path.name}.{uuid.uuid4().hex}.{s}") for s in ("tmp", "old"))
    try:
        if engine == "zarr":
            tree.to_zarr(tmp, consolidated=False)  # consolidated metadata is not zarr v3
            if path.is_dir():  # os.replace cannot replace a non-empty directory: swap it out
                os.replace(path, old)
        else:
            # xarray checks the engine's name itself; its stub lists the names as a Literal
            tree.to_netcdf(tmp, engine=cast(Literal["netcdf4", "h5netcdf"], engine))
        os.replace(tmp, path)
    finally:
        if old.exists() and not path.exists():  # the swap failed: put the old store back
            os.replace(old, path)
        for leftover in (tmp, old):
            if leftover.is_dir():
                shutil.rmtree(leftover)
            elif leftover.exists():
                leftover.unlink()
    return path


def _check_format(path: Path) -> None:
    """Refuse, in words, a file that is not a netCDF/HDF5 file or a zarr store (e.g. ``model.pt``)."""
    if path.is_dir():
        return
    with open(path, "rb") as f:
        head = f.read(4)
    if head in _NETCDF_MAGIC:
        return
    kind = ""
    if head.startswith(b"PK\x03\x04") or head[:1] == b"\x80":
        kind = (" (it looks like a torch.save file, such as a model's state dict or a checkpoint; "
                "pyrolik never unpickles it)")
    raise ValueError(f"{path} is not a pyrolik result file: results are netCDF files or zarr "
                     f"stores{kind}; {NOT_A_RESULT}")


def load(path: str | os.PathLike, *, engine: str | None = None) -> Result:
    """Read a result written by :func:`save` back into a result object (no rerun needed).

    Only netCDF files and zarr stores are read; anything else (a ``torch.save`` file such as a
    state dict) is refused with a ``ValueError`` that says how to make a result file.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no saved result at {path}")
    _check_format(path)
    engine = _engine(path, engine)
    kwargs: dict[str, Any] = {"consolidated": False} if engine == "zarr" else {}
    with xr.open_datatree(path, engine=engine, **kwargs) as tree:
        tree.load()
    if "pyrolik_result" not in tree.attrs:
        raise ValueError(f"{path} is a netCDF/zarr file but not a pyrolik result (no "
                         f"'pyrolik_result' attribute); {NOT_A_RESULT}")
    return from_datatree(tree)
