"""Export results to xarray / ArviZ (:mod:`pyrolik.results.convert`) and result files: save to
netCDF (or zarr) atomically, load back, rebuild from a tree (``docs/export.md``)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch
import xarray as xr

from pyrolik.annealing.kernel import SMC
from pyrolik.annealing.step_sizes import StepSizes
from pyrolik.results import BDMCResult, EstimateResult
from pyrolik.results.bdmc import Budget
from pyrolik.results.convert import flatten, to_datatree, to_inference_data
from pyrolik.results.estimates import Exported
from pyrolik.results.layout import (
    BLOCK,
    DEFAULT_EXAMPLE_DIM,
    DERIVED,
    EX,
    LAYOUT,
    NESTED,
    Stored,
    _tree,
    declared,
)

__all__ = ["to_datatree", "to_inference_data", "from_datatree", "save", "load", "flatten"]

Result = EstimateResult | BDMCResult
NOT_A_RESULT = ("make one with pyrolik.save(result, 'run.nc') or the pyrolik evaluate / bdmc "
                "commands (their --output)")
_NETCDF_MAGIC = (b"CDF\x01", b"CDF\x02", b"\x89HDF")


def _group(tree: xr.DataTree, path: str) -> xr.Dataset | None:
    """The variables of the group at ``path`` under ``tree``; ``None`` when there is no such group."""
    node: Any = tree
    for name in path.split("/"):
        node = node.children.get(name)
        if node is None:
            return None
    return node.to_dataset()


def _unflatten(tree: xr.DataTree) -> xr.DataTree:
    """Undo :func:`~pyrolik.results.convert.flatten` for a BDMC tree."""
    groups: dict[str, Any] = {}
    for name, node in tree.children.items():
        head, _, rest = name.partition("_")
        groups[f"{head}/{rest}" if head in NESTED and rest else name] = node.to_dataset()
    out = _tree(groups, {str(k): v for k, v in tree.attrs.items()})
    for name in NESTED:  # each flattened group carries its run's attrs
        out[name].attrs = dict(tree[f"{name}_evidence"].attrs)
    return out


#: How a declared attr or structured field is decoded, by codec (objects written by ``to_dict()``).
DECODE: dict[str, Any] = {"json": json.loads, "seed": int, "step_sizes": StepSizes,
                          "none": lambda v: None if v == "none" else v,
                          "kernel": lambda v: SMC.from_dict(json.loads(v)),
                          "budget": lambda v: Budget.from_dict(json.loads(v))}


def from_datatree(tree: Any) -> Any:
    """Rebuild the result object from :func:`to_datatree`'s (or :func:`to_inference_data`'s) output:
    the result class named by the tree, each field read where the class declares it (``stored``).

    Parameters
    ----------
    tree : xarray.DataTree or arviz.InferenceData
        The export of a result.

    Returns
    -------
    result object
    """
    if not isinstance(tree, xr.DataTree) and not hasattr(tree, "to_datatree"):
        raise TypeError(f"expected an xarray.DataTree or arviz.InferenceData, got "
                        f"{type(tree).__name__}")
    tree = tree if isinstance(tree, xr.DataTree) else tree.to_datatree()  # arviz.InferenceData
    kind = tree.attrs.get("pyrolik_result")
    if kind is None:
        raise ValueError("this tree was not written by pyrolik (no 'pyrolik_result' attribute); "
                         "load files made by pyrolik.save or result.to_datatree()")
    if tree.attrs.get("layout") != LAYOUT:
        raise ValueError(f"this {kind} tree has layout {tree.attrs.get('layout')}, not {LAYOUT}: it "
                         "was written by another pyrolik version; load it with that version")
    if kind == "BDMCResult" and "lower" not in tree.children:
        tree = _unflatten(tree)
    cls = Exported.class_named(kind) or EstimateResult  # a newer estimator's: the common fields
    specs = declared(cls)
    evidence = _group(tree, "evidence")
    if evidence is None and any(spec.group == "evidence" for spec in specs.values()):
        raise ValueError(f"this {kind} tree has no 'evidence' group: it was not written whole by "
                         "pyrolik; load files made by pyrolik.save or result.to_datatree()")
    ex = (str(evidence["log_marginal_likelihood"].dims[-1]) if evidence is not None
          else DEFAULT_EXAMPLE_DIM)
    named: dict[str, set[str]] = {}  # the variables each group's declared fields take
    for spec in specs.values():
        names = spec.name if isinstance(spec.name, tuple) else (spec.name,)
        named.setdefault(spec.group, set()).update(n for n in names if n)
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}
    fields: dict[str, Any] = {"example_dim": ex} if hasattr(cls, "example_dim") else {}
    for field, spec in specs.items():
        value = _read(tree, spec, ex, named.get(spec.group, set()))
        if value is not None or field in required:
            fields[field] = value
    return cls(**fields)


def _tensor(da: xr.DataArray, template: tuple[str, ...], ex: str) -> torch.Tensor:
    """A variable back in its field's shape: dims in the declared order, blocks back to chains."""
    dims = [d for t in template for d in (("chain", "particle") if t == BLOCK else
                                          (ex if t == EX else t,))]
    one = [d for d in ("chain", "draw") if d in da.dims and d not in dims]  # a group of one draw
    da = da.squeeze(one, drop=True)
    t = torch.from_numpy(np.array(da.transpose(*[d for d in dims if d in da.dims], ...).values))
    if "particle" not in da.dims:
        return t
    i = dims.index("chain")
    return t.reshape(*t.shape[:i], -1, *t.shape[i + 2:])


def _read(tree: xr.DataTree, spec: Stored, ex: str, named: set[str]) -> Any:
    """The value of one declared field, or ``None`` where the tree does not hold it."""
    if spec.group == "attrs":
        value = tree.attrs.get(str(spec.name))
        if value is None:
            return None
        value = value.item() if isinstance(value, np.generic) else value
        return DECODE[spec.codec](value) if spec.codec else value
    if spec.codec == "result":
        return from_datatree(tree[spec.group]) if spec.group in tree.children else None
    if spec.codec == "results":  # a list of results: the subtrees <group>_0, <group>_1, ...
        found: list[Any] = []
        while f"{spec.group}_{len(found)}" in tree.children:
            found.append(from_datatree(tree[f"{spec.group}_{len(found)}"]))
        return found
    ds = _group(tree, spec.group)
    if ds is None:
        return None
    if spec.codec == "draws":  # the resampled draws: sample_stats and posterior
        post = _group(tree, "posterior")
        order = ("chain", "draw", EX)
        return {"draw_index": _tensor(ds["particle"], order, ex),
                "draw_log_weight": _tensor(ds["log_weight"], order, ex),
                **({} if post is None else {str(s): _tensor(da, order, ex)
                                            for s, da in post.data_vars.items()})}
    if isinstance(spec.name, tuple):  # a NamedTuple, one variable per entry
        if spec.name[0] not in ds:
            return None
        return DECODE[str(spec.codec)](*(_tensor(ds[n], spec.dims, ex) if n in ds else None
                                         for n in spec.name))
    if spec.name is not None:
        return _tensor(ds[spec.name], spec.dims, ex) if spec.name in ds else None
    derived = DERIVED.get(spec.group, ())
    sites = {str(s): _tensor(da, spec.dims, ex) for s, da in ds.data_vars.items()
             if s not in named and s not in derived}
    traj = _group(tree, "trajectory") if spec.codec == "trace" else None
    if traj is not None:  # the recorded states
        sites["z"] = _tensor(traj["u"], spec.dims, ex)
    return sites or None


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

    Parameters
    ----------
    result : result object or xarray.DataTree
        A result of any estimator, or its export.
    path : str or path-like
        The file (``.nc``) or zarr store (``.zarr``); replaced whole if it exists.
    engine : str, optional
        ``"h5netcdf"``, ``"netcdf4"`` or ``"zarr"`` (default: from the path).

    Returns
    -------
    pathlib.Path
        ``path``.

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models.oracles.linear_gaussian import LinearGaussian
    >>> model = LinearGaussian.random(data_dim=5, latent_dim=2, seed=0)   # exact log p(x) known
    >>> x = model.sample(4, torch.Generator().manual_seed(0))
    >>> result = pyrolik.likelihood_weighting(model, x, num_samples=64, seed=0, progress=False)
    >>> path = pyrolik.save(result, "run.nc")
    >>> again = pyrolik.load(path)
    >>> type(again).__name__, bool(torch.equal(again.log_likelihood, result.log_likelihood))
    ('EstimateResult', True)
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
    pickled = head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"
    kind = (" (it looks like a torch.save file, such as a model's state dict or a checkpoint; "
            "pyrolik never unpickles it)") if pickled else ""
    raise ValueError(f"{path} is not a pyrolik result file: results are netCDF files or zarr "
                     f"stores{kind}; {NOT_A_RESULT}")


def load(path: str | os.PathLike, *, engine: str | None = None) -> Result:
    """Read a result written by :func:`save` (netCDF or zarr; else ``ValueError``).

    Parameters
    ----------
    path : str or path-like
        A file or store written by :func:`save`.
    engine : str, optional
        ``"h5netcdf"``, ``"netcdf4"`` or ``"zarr"`` (default: from the path).

    Returns
    -------
    result object
        The same class as the result saved, with the same numbers.

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models.oracles.linear_gaussian import LinearGaussian
    >>> model = LinearGaussian.random(data_dim=5, latent_dim=2, seed=0)
    >>> x = model.sample(4, torch.Generator().manual_seed(0))
    >>> result = pyrolik.likelihood_weighting(model, x, num_samples=64, seed=0, progress=False)
    >>> _ = pyrolik.save(result, "run.nc")
    >>> pyrolik.load("run.nc").method
    'likelihood_weighting'
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
