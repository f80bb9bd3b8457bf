r"""Export results to ``xarray.DataTree`` / ``arviz.InferenceData``; save them and load them back.

The only module that knows xarray. Numpy dicts go through ArviZ's ``dict_to_dataset`` (ArviZ 0.23's,
or ``arviz_base``'s in ArviZ 1.x), one group at a time; the groups are assembled into a
:class:`xarray.DataTree`, the common form of both ArviZ generations. Layout of an AIS result
(``K`` chains, ``N`` examples, ``R`` recorded steps, ``d`` unconstrained latent dims):

==========================  ====================================================================
group                       variables (dims)
==========================  ====================================================================
``posterior``               final states by latent site ``(chain, draw=1, example, <site>_dim_i)``,
                            constrained (forward AIS; reverse AIS ends at beta = 0: ``prior``)
``unconstrained_posterior`` the flat unconstrained final state ``u`` ``(chain, draw, example,
                            latent_dim)`` (``unconstrained_prior`` for reverse AIS)
``sample_stats``            ``acceptance_rate``, ``step_size``, ``diverging``, the running
                            ``log_weight`` ``(chain, draw, example)``; ``draw`` is the annealing
                            step, ``beta`` a coordinate along it
``log_weights``             ``log_weight`` ``(chain | sample, example)``; per example
                            ``log_likelihood``, ``ess``, ``mcse``, ``khat``; for AIS the run-mean
                            ``mean_acceptance_rate`` and ``num_divergent`` ``(chain, example)``
``trajectory``              recorded states ``u`` ``(chain, draw, example, latent_dim)``, if kept
``observed_data``           ``x`` ``(example, x_dim_i)``
``constant_data``           ``schedule`` ``(step)``; the pilot table ``pilot_beta``,
                            ``log_step_size``, ``inv_mass`` ``(pilot_step, example[, latent_dim])``;
                            KDE: ``bandwidth_grid``, ``validation_log_likelihood``
==========================  ====================================================================

Root attrs: ``inference_library="pyrolik"``, the pyrolik, torch, pyro, arviz and xarray versions,
``pyrolik_result`` (the class), ``method``, ``bound``, ``direction``, ``path``, ``settings`` and
``kernel`` (JSON), ``seed``, ``wall_time``, ``created_at``. A BDMC result is a tree with ``lower``
and ``upper`` subtrees (each the export of its AIS run), a ``bdmc`` group (per-example ``lower``,
``upper``, ``gap``) and a ``simulated`` group (the exact latents).
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import platform
import shutil
import uuid
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import xarray as xr

from pyrolik._version import __version__
from pyrolik.mcmc.hmc import HMC
from pyrolik.mcmc.step_sizes import StepSizes
from pyrolik.results import AISResult, BDMCResult, EstimateResult

__all__ = ["to_datatree", "to_inference_data", "from_datatree", "save", "load"]

Result = EstimateResult | BDMCResult
# what ArviZ reads off the "library" it records: its name and version
_LIBRARY = SimpleNamespace(__name__="pyrolik", __version__=__version__)
SITE_GROUPS = {"forward": ("posterior", "unconstrained_posterior"),
               "reverse": ("prior", "unconstrained_prior")}
SAMPLE = ["chain", "draw"]


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def _dataset(data: dict[str, Any], dims: dict[str, list[str]], coords: dict[str, Any],
             sample_dims: list[str]) -> xr.Dataset:
    """One group through ArviZ's converter; ``dims`` name the non-sample dims of each variable."""
    data = {k: _np(v) if isinstance(v, torch.Tensor) else np.asarray(v) for k, v in data.items()}
    try:  # ArviZ >= 1.0
        from arviz_base import dict_to_dataset

        kw = {"inference_library": _LIBRARY, "sample_dims": sample_dims, "check_conventions": False}
    except ImportError:  # ArviZ 0.x
        from arviz import dict_to_dataset

        kw = {"library": _LIBRARY, "default_dims": sample_dims}
    with warnings.catch_warnings():
        # one draw per AIS chain is the layout, not a transposed array
        warnings.filterwarnings("ignore", message="More chains", category=UserWarning)
        return dict_to_dataset(data, coords=coords, dims=dims, index_origin=0, **kw)


def _event_dims(name: str, ndim: int) -> list[str]:
    return [f"{name}_dim_{i}" for i in range(ndim)]


def _versions() -> dict[str, str]:
    import arviz
    import pyro

    return {"inference_library": "pyrolik", "inference_library_version": __version__,
            "torch_version": torch.__version__, "pyro_version": pyro.__version__,
            "arviz_version": arviz.__version__, "xarray_version": xr.__version__,
            "python_version": platform.python_version()}


def _attrs(result: EstimateResult) -> dict[str, Any]:
    attrs = {**_versions(), "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
             "pyrolik_result": type(result).__name__, "method": result.method,
             "bound": result.bound or "none", "wall_time": float(result.wall_time),
             "settings": json.dumps(result.settings, default=str)}
    if result.seed is not None:
        attrs["seed"] = int(result.seed)
    if isinstance(result, AISResult):
        attrs.update(direction=result.direction, path=result.path)
        if result.kernel is not None:
            attrs["kernel"] = json.dumps(result.kernel.to_dict())
    return attrs


def _estimate_groups(result: EstimateResult, sample_dim: str) -> dict[str, xr.Dataset]:
    n = result.num_examples
    coords = {"example": np.arange(n)}
    data: dict[str, Any] = {"log_likelihood": result.log_likelihood}
    dims = {name: ["example"] for name in ("log_likelihood", "ess", "mcse", "khat")}
    for name in ("ess", "mcse", "khat"):
        if getattr(result, name) is not None:
            data[name] = getattr(result, name)
    if result.log_weights is not None:
        data["log_weight"] = result.log_weights
        dims["log_weight"] = [sample_dim, "example"]
    if isinstance(result, AISResult):
        for name, value in (("mean_acceptance_rate", result.acceptance_rate),
                            ("num_divergent", result.num_divergent)):
            if value is not None:
                data[name], dims[name] = value, ["chain", "example"]
    groups = {"log_weights": _dataset(data, dims, coords, [])}
    if result.x is not None:
        x_dims = {"x": ["example", *_event_dims("x", result.x.dim() - 1)]}
        groups["observed_data"] = _dataset({"x": result.x}, x_dims, coords, [])
    constant = {}
    if result.method == "kde" and result.settings.get("validation_log_likelihood") is not None:
        constant["bandwidth_grid"] = np.asarray(result.settings["bandwidth_grid"])
        constant["validation_log_likelihood"] = np.asarray(
            result.settings["validation_log_likelihood"])
    if constant:
        groups["constant_data"] = _dataset(constant, dict.fromkeys(constant, ["bandwidth"]), {}, [])
    return groups


def _ais_groups(result: AISResult) -> dict[str, xr.Dataset]:
    groups = _estimate_groups(result, "chain")
    k, n = result.log_weights.shape
    coords: dict[str, Any] = {"chain": np.arange(k), "example": np.arange(n), "draw": [0]}
    site_group, flat_group = SITE_GROUPS[result.direction]
    if result.latents:
        data = {s: v.unsqueeze(1) for s, v in result.latents.items()}
        dims = {s: ["example", *_event_dims(s, v.dim() - 2)] for s, v in result.latents.items()}
        groups[site_group] = _dataset(data, dims, coords, SAMPLE)
    if result.final_state is not None:
        groups[flat_group] = _dataset({"u": result.final_state.unsqueeze(1)},
                                      {"u": ["example", "latent_dim"]}, coords, SAMPLE)
    if result.trace:
        steps = _np(result.trace_steps)
        coords = {**coords, "draw": steps}
        trace = {name: v.movedim(0, 1) for name, v in result.trace.items() if name != "beta"}
        z = trace.pop("z", None)
        stats = _dataset(trace, {name: ["example", *_event_dims(name, v.dim() - 3)]
                                 for name, v in trace.items()}, coords, SAMPLE)
        beta = _np(result.trace["beta"])  # (R, K)
        beta_coord = ("draw", beta[:, 0]) if (beta == beta[:, :1]).all() else (SAMPLE, beta.T)
        groups["sample_stats"] = stats.assign_coords(beta=beta_coord)
        if z is not None:
            groups["trajectory"] = _dataset({"u": z}, {"u": ["example", "latent_dim"]}, coords,
                                            SAMPLE).assign_coords(beta=beta_coord)
    constant: dict[str, Any] = {}
    dims: dict[str, list[str]] = {}
    if result.schedule is not None:
        constant["schedule"], dims["schedule"] = result.schedule, ["step"]
    table = result.step_sizes
    if table is not None:
        constant["pilot_beta"], dims["pilot_beta"] = table.betas, ["pilot_step"]
        constant["log_step_size"], dims["log_step_size"] = table.log_step_size, ["pilot_step",
                                                                                 "example"]
        if table.inv_mass is not None:
            constant["inv_mass"] = table.inv_mass
            dims["inv_mass"] = ["pilot_step", "example", "latent_dim"]
    if constant:
        groups["constant_data"] = _dataset(constant, dims, {"example": np.arange(n)}, [])
    return groups


ORDER = ["posterior", "prior", "unconstrained_posterior", "unconstrained_prior", "sample_stats",
         "log_weights", "trajectory", "observed_data", "constant_data"]


def _tree(groups: dict[str, xr.Dataset], attrs: dict[str, Any]) -> xr.DataTree:
    groups = dict(sorted(groups.items(), key=lambda kv: ORDER.index(kv[0])))
    tree = xr.DataTree.from_dict(groups)
    tree.attrs = attrs
    return tree


def to_datatree(result: Result) -> xr.DataTree:
    """Export a result (AIS, reverse AIS, IWAE, likelihood weighting, KDE or BDMC) to a DataTree.

    Groups and dims are listed in the module docstring; every value equals the result's tensor.
    """
    if isinstance(result, BDMCResult):
        return _bdmc_tree(result)
    if not isinstance(result, EstimateResult) and hasattr(result, "to_datatree"):
        return result.to_datatree()  # results that export themselves (pyrolik.distortion)
    if not isinstance(result, EstimateResult):
        raise TypeError(f"expected a pyrolik result (EstimateResult, AISResult or BDMCResult), got "
                        f"{type(result).__name__}")
    groups = (_ais_groups(result) if isinstance(result, AISResult)
              else _estimate_groups(result, "sample"))
    return _tree(groups, _attrs(result))


def _bdmc_tree(result: BDMCResult) -> xr.DataTree:
    n = len(result.x)
    coords = {"example": np.arange(n)}
    gap = {"lower": result.lower.log_likelihood, "upper": result.upper.log_likelihood,
           "gap": result.per_example_gap}
    groups: dict[str, Any] = {"bdmc": _dataset(gap, dict.fromkeys(gap, ["example"]), coords, [])}
    if result.latents:
        lat = result.latents  # (N, *site), or (K, N, *site) with one draw per chain
        dims = {s: ["example"] if v.shape[0] == n else ["chain", "example"] for s, v in lat.items()}
        dims = {s: [*d, *_event_dims(s, lat[s].dim() - len(d))] for s, d in dims.items()}
        groups["simulated"] = _dataset(lat, dims, coords, [])
    for name, part in (("lower", result.lower), ("upper", result.upper)):
        sub = to_datatree(part)
        for group, node in sub.children.items():
            groups[f"{name}/{group}"] = node.to_dataset()
    tree = xr.DataTree.from_dict(groups)
    tree["lower"].attrs = _attrs(result.lower)
    tree["upper"].attrs = _attrs(result.upper)
    tree.attrs = {**_versions(), "pyrolik_result": "BDMCResult", "method": "bdmc",
                  "bound": "sandwich", "gap": result.gap, "gap_stderr": result.gap_stderr,
                  "wall_time": float(result.wall_time),
                  "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat()}
    return tree


def to_inference_data(result: Result):
    """Export to an :class:`arviz.InferenceData` (ArviZ 0.x); a DataTree under ArviZ 1.x.

    A BDMC result's nested tree is flattened: its groups are ``lower_posterior``,
    ``lower_sample_stats``, ..., ``upper_prior``, ..., ``bdmc`` and ``simulated``.
    """
    import arviz as az

    tree = to_datatree(result)
    if not hasattr(az, "InferenceData"):  # ArviZ 1.x: the DataTree is its InferenceData
        return tree
    groups: dict[str, xr.Dataset] = {}
    for name, node in tree.children.items():
        if node.children:  # lower / upper: carry the node's attrs onto every flattened group
            for group, leaf in node.children.items():
                ds = leaf.to_dataset()
                groups[f"{name}_{group}"] = ds.assign_attrs({**ds.attrs, **node.attrs})
        else:
            groups[name] = node.to_dataset()
    return az.InferenceData(attrs=dict(tree.attrs), **groups)


# --- loading back ---------------------------------------------------------------------------


def _t(da: xr.DataArray, *dims: str) -> torch.Tensor:
    values = da.transpose(*dims, ...).values if dims else da.values
    return torch.from_numpy(np.array(values))


def _opt(ds: xr.Dataset | None, name: str, *dims: str) -> torch.Tensor | None:
    return _t(ds[name], *dims) if ds is not None and name in ds else None


def _unflatten(tree: xr.DataTree) -> xr.DataTree:
    """Undo the flattening of :func:`to_inference_data` for BDMC results."""
    groups: dict[str, Any] = {}
    for name, node in tree.children.items():
        head, _, rest = name.partition("_")
        path = f"{head}/{rest}" if head in ("lower", "upper") and rest else name
        groups[path] = node.to_dataset()
    out = xr.DataTree.from_dict(groups)
    out.attrs = dict(tree.attrs)
    for name in ("lower", "upper"):
        out[name].attrs = dict(tree[f"{name}_log_weights"].attrs)
    return out


def from_datatree(tree: Any) -> Result:
    """Rebuild the result object from :func:`to_datatree`'s (or :func:`to_inference_data`'s) output.

    Summaries, warnings, diagnostics and plots then work without rerunning anything. The kernel is
    rebuilt from its recorded parameters.
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
    if kind in ("DistortionCurve", "DistortionBDMC"):  # pyrolik.distortion's own trees
        from pyrolik.distortion import export as _distortion

        return (_distortion.curve_from_datatree(tree) if kind == "DistortionCurve"
                else _distortion.bdmc_from_datatree(tree))
    if kind == "BDMCResult":
        if "lower" not in tree.children:
            tree = _unflatten(tree)
        lower, upper = from_datatree(tree["lower"]), from_datatree(tree["upper"])
        sim = tree.children.get("simulated")
        latents = {} if sim is None else {s: _t(da) for s, da in sim.to_dataset().items()}
        return BDMCResult(lower=lower, upper=upper, x=lower.x, latents=latents,
                          wall_time=float(tree.attrs.get("wall_time", np.nan)))
    attrs = tree.attrs
    get = tree.children.get
    lw = get("log_weights").to_dataset()
    obs = get("observed_data")
    sample_dim = "chain" if kind == "AISResult" else "sample"
    common = dict(
        method=attrs["method"], log_likelihood=_t(lw["log_likelihood"]),
        bound=None if attrs["bound"] == "none" else attrs["bound"],
        log_weights=_opt(lw, "log_weight", sample_dim, "example"), ess=_opt(lw, "ess"),
        mcse=_opt(lw, "mcse"), khat=_opt(lw, "khat"),
        x=None if obs is None else _t(obs.to_dataset()["x"], "example"),
        settings=json.loads(attrs.get("settings", "{}")),
        seed=int(attrs["seed"]) if "seed" in attrs else None,
        wall_time=float(attrs.get("wall_time", np.nan)),
    )
    if kind != "AISResult":  # EstimateResult, or a newer estimator's subclass: the common fields
        return EstimateResult(**common)
    site_group, flat_group = SITE_GROUPS[attrs["direction"]]
    sites, flat = get(site_group), get(flat_group)
    latents = None if sites is None else {
        s: _t(da, "chain", "draw", "example")[:, 0] for s, da in sites.to_dataset().items()}
    const = get("constant_data")
    const = None if const is None else const.to_dataset()
    table = None
    if const is not None and "pilot_beta" in const:
        table = StepSizes(_t(const["pilot_beta"]), _t(const["log_step_size"], "pilot_step"),
                          _opt(const, "inv_mass", "pilot_step", "example"))
    trace, steps = None, None
    if "sample_stats" in tree.children:
        stats = tree["sample_stats"].to_dataset()
        trace = {name: _t(da, "draw", "chain", "example") for name, da in stats.items()}
        k = stats.sizes["chain"]
        beta = _t(stats["beta"]) if stats["beta"].ndim == 1 else None
        trace["beta"] = (beta.unsqueeze(1).expand(-1, k).contiguous() if beta is not None
                         else _t(stats["beta"], "draw", "chain"))
        if "trajectory" in tree.children:
            trace["z"] = _t(tree["trajectory"].to_dataset()["u"], "draw", "chain", "example")
        steps = torch.from_numpy(np.array(stats["draw"].values))
    return AISResult(
        **common, direction=attrs["direction"], path=attrs["path"],
        schedule=_opt(const, "schedule"), step_sizes=table,
        kernel=HMC(**json.loads(attrs["kernel"])) if "kernel" in attrs else None,
        final_state=None if flat is None else _t(flat.to_dataset()["u"], "chain", "draw")[:, 0],
        latents=latents, acceptance_rate=_opt(lw, "mean_acceptance_rate", "chain"),
        num_divergent=_opt(lw, "num_divergent", "chain"), trace=trace, trace_steps=steps,
    )


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
    :func:`os.replace`, so a crash never leaves a half-written file under ``path``.
    """
    path = Path(path)
    tree = result if isinstance(result, xr.DataTree) else to_datatree(result)
    engine = _engine(path, engine)
    tmp, old = (path.with_name(f".{path.name}.{uuid.uuid4().hex}.{s}") for s in ("tmp", "old"))
    try:
        if engine == "zarr":
            tree.to_zarr(tmp, consolidated=False)  # consolidated metadata is not zarr v3
            if path.is_dir():  # os.replace cannot replace a non-empty directory: swap it out
                os.replace(path, old)
        else:
            tree.to_netcdf(tmp, engine=engine)
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


def load(path: str | os.PathLike, *, engine: str | None = None) -> Result:
    """Read a result written by :func:`save` back into a result object (no rerun needed)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no saved result at {path}")
    engine = _engine(path, engine)
    kwargs = {"consolidated": False} if engine == "zarr" else {}
    with xr.open_datatree(path, engine=engine, **kwargs) as tree:
        tree.load()
    return from_datatree(tree)
