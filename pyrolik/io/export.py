"""Export results to xarray / ArviZ (:mod:`pyrolik.results.convert`) and result files: save to
netCDF (or zarr) atomically, load back, rebuild from a tree (``docs/export.md``); join runs."""

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
from pyrolik.ops.stats import chain_statistics, log_mean_exp
from pyrolik.results import AISResult, BDMCResult, EstimateResult
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
    SUBTREES,
    Stored,
    _tree,
    declared,
)

__all__ = ["to_datatree", "to_inference_data", "from_datatree", "save", "load", "flatten", "concat"]

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
    """Undo :func:`~pyrolik.results.convert.flatten`: the subtrees it recorded (a BDMC file written
    before the record: ``lower`` and ``upper``, their attrs on each of their groups)."""
    record = tree.attrs.get(SUBTREES)
    subtrees = (json.loads(record) if record else
                {name: dict(tree[f"{name}_evidence"].attrs) for name in NESTED})
    paths = sorted(subtrees, key=len, reverse=True)  # beta_0/lower before beta_0
    groups: dict[str, Any] = {}
    for name, node in tree.children.items():
        path = next((p for p in paths if name.startswith(p.replace("/", "_") + "_")), None)
        groups[name if path is None else f"{path}/{name[len(path) + 1:]}"] = node.to_dataset()
    out = _tree(groups, {str(k): v for k, v in tree.attrs.items() if k != SUBTREES})
    for path, attrs in subtrees.items():
        out[path].attrs = attrs
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
    if SUBTREES in tree.attrs or (kind == "BDMCResult" and "lower" not in tree.children):
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
    tree = flatten(result if isinstance(result, xr.DataTree) else to_datatree(result))
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


_FIX = "join runs of one estimator on the same x with the same settings (seed aside)"


def _cat(a: Any, b: Any, dim: int = 0) -> Any:
    """Two tensors (or dicts of them, key by key) joined along ``dim``; None if either is None."""
    if a is None or b is None:
        return None
    if isinstance(a, dict):
        return {k: torch.cat([a[k], b[k]], dim=dim) for k in a}
    return torch.cat([a, b], dim=dim)


def _check(a: EstimateResult, b: EstimateResult) -> tuple[torch.Tensor, torch.Tensor]:
    """Refuse runs that cannot be joined; the weights of both runs."""
    if type(a) is not type(b) or a.method != b.method:
        raise TypeError(f"cannot concat a {a.method} result with a {b.method} result; {_FIX}")
    if (a.quantity, a.bound) != (b.quantity, b.bound):
        raise ValueError(f"cannot concat an estimate of {a.quantity} ({a.bound} bound) with one of "
                         f"{b.quantity} ({b.bound} bound): they average different weights; {_FIX}")
    if a.x is None or b.x is None or a.x.shape != b.x.shape or not torch.equal(a.x, b.x):
        raise ValueError(f"the results were computed on different data x; {_FIX}")
    if a.log_weights is None or b.log_weights is None:
        raise ValueError("concat needs every weight: " + (
            "a kde result keeps none; run pyrolik.kde once on both runs' samples, torch.cat([samples_a, "
            "samples_b])" if a.method == "kde" else
            f"rerun {a.method} with keep_weights=True"))
    if isinstance(a, AISResult) and isinstance(b, AISResult):  # same type, checked above
        same_schedule = (a.schedule is None and b.schedule is None) or (
            a.schedule is not None and b.schedule is not None
            and torch.equal(a.schedule, b.schedule))
        if not (a.direction == b.direction and a.path == b.path and same_schedule):
            raise ValueError(f"the AIS runs differ in direction, path or schedule; {_FIX} "
                             "(pass the same schedule= tensor to both)")
    return a.log_weights, b.log_weights


def _draws(a: EstimateResult, b: EstimateResult, shift: int) -> dict | None:
    """The resampled draws of two importance-sampling runs, blocks side by side."""
    if not a.draws or not b.draws:
        return None
    if a.draws["draw_index"].shape[:2] != b.draws["draw_index"].shape[:2]:
        raise ValueError(f"the runs resampled different numbers of blocks or draws; {_FIX} "
                         "(the same num_samples)")
    return _cat(a.draws, {**b.draws, "draw_index": b.draws["draw_index"] + shift})


def concat(a: Any, b: Any) -> Any:
    """The result of ``a`` and ``b`` together: chains (samples) joined, evidence recomputed.

    Parameters
    ----------
    a, b : AISResult, EstimateResult or BDMCResult (or their exports: DataTree, InferenceData)
        Runs of one estimator on the same ``x`` (and schedule), e.g. two seeds.

    Returns
    -------
    The same type with ``K_a + K_b`` chains; the seeds are in ``settings["seeds"]``.

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models.oracles.linear_gaussian import LinearGaussian
    >>> model = LinearGaussian.random(data_dim=5, latent_dim=2, seed=0)   # exact log p(x) known
    >>> x = model.sample(4, torch.Generator().manual_seed(0))
    >>> schedule = pyrolik.schedules.sigmoid(50)   # the same schedule for both runs
    >>> a = pyrolik.ais(model, x, schedule=schedule, num_chains=8, seed=0, progress=False)
    >>> b = pyrolik.ais(model, x, schedule=schedule, num_chains=8, seed=1, progress=False)
    >>> pyrolik.concat(a, b).log_weights.shape   # 16 chains per example
    torch.Size([16, 4])
    """
    a, b = (from_datatree(r) if hasattr(r, "children") or hasattr(r, "groups") else r
            for r in (a, b))
    if isinstance(a, BDMCResult) and isinstance(b, BDMCResult):
        if not torch.equal(a.x, b.x):
            raise ValueError(f"the BDMC runs simulated different data; {_FIX}")
        return dataclasses.replace(a, lower=concat(a.lower, b.lower), upper=concat(a.upper, b.upper),
                                   wall_time=a.wall_time + b.wall_time)
    if not isinstance(a, EstimateResult) or not isinstance(b, EstimateResult):
        raise TypeError(f"concat takes two pyrolik results, got {type(a).__name__} and "
                        f"{type(b).__name__}")
    lw_a, lw_b = _check(a, b)
    lw = torch.cat([lw_a, lw_b])
    lme = log_mean_exp(lw)
    forward = getattr(a, "direction", "forward") == "forward"
    count = "num_chains" if isinstance(a, AISResult) else "num_samples"
    settings = {**a.settings, count: int(lw.shape[0]), "seeds": [a.seed, b.seed]}
    ancestor = islands = resamplings = None
    if isinstance(a, AISResult) and isinstance(b, AISResult) and a.ancestor is not None \
            and b.ancestor is not None and a.num_resampled is not None \
            and b.num_resampled is not None:  # resampled runs (SMC): b's islands follow a's
        ancestor = torch.cat([a.ancestor, b.ancestor + a.ancestor.shape[0]])
        islands = settings["islands"] = a.settings.get("islands", 1) + b.settings.get("islands", 1)
        resamplings = (a.num_resampled.double() + b.num_resampled.double()) / 2
    ess, mcse, khat = chain_statistics(lw, ancestor, islands)
    fields: dict[str, Any] = dict(
        log_likelihood=(lme if forward else -lme).to(a.log_likelihood.dtype), log_weights=lw,
        ess=ess, mcse=mcse, khat=khat, settings=settings, seed=None,
        wall_time=a.wall_time + b.wall_time)
    if isinstance(a, AISResult) and isinstance(b, AISResult):  # same type (_check)
        steps_match = a.trace_steps is not None and b.trace_steps is not None and torch.equal(
            a.trace_steps, b.trace_steps)
        same_trace = steps_match and a.trace and b.trace and a.trace.keys() == b.trace.keys()
        b_trace = dict(b.trace or {})
        if "ancestor" in b_trace:  # b's chains follow a's
            b_trace["ancestor"] = b_trace["ancestor"] + lw_a.shape[0]
        fields.update(ancestor=ancestor, num_resampled=resamplings,
                      trace=_cat(a.trace, b_trace, 1) if same_trace else None,
                      **{n: _cat(getattr(a, n), getattr(b, n))
                         for n in ("latents", "final_state", "acceptance_rate", "num_divergent")})
    else:
        fields.update(samples=_cat(a.samples, b.samples), draws=_draws(a, b, lw_a.shape[0]))
    return dataclasses.replace(a, **fields)
