r"""Results to ``xarray.DataTree`` / ``arviz.InferenceData``: the only module that builds xarray.

Numpy dicts go through ArviZ's ``dict_to_dataset`` (ArviZ 0.23's, or ``arviz_base``'s in ArviZ 1.x),
one group at a time; the groups are assembled into a :class:`xarray.DataTree`, the common form of both
ArviZ generations. This module reads results by their attributes and does not import
:mod:`pyrolik.results` (whose ``to_datatree`` method calls it); reading back is
:mod:`pyrolik.io.netcdf`. Layout of an AIS result (``K`` chains, ``N`` examples, ``R`` recorded steps,
``d`` unconstrained latent dims; ``<plate>`` is the example dim, named after the model's data plate,
e.g. ``data``, or ``example`` when the estimator did not record it):

==========================  ====================================================================
group                       variables (dims)
==========================  ====================================================================
``posterior``               final states by latent site ``(chain, draw=1, <plate>, <site>_dim_i)``,
                            constrained (forward AIS; reverse AIS ends at beta = 0: ``prior``)
``unconstrained_posterior`` the flat unconstrained final state ``u`` ``(chain, draw, <plate>,
                            latent_dim)`` (``unconstrained_prior`` for reverse AIS)
``sample_stats``            ``acceptance_rate``, ``step_size``, ``diverging``, ``energy_error``
                            (when the run recorded it), the running ``log_weight``
                            ``(chain, draw, <plate>)``; ``draw`` is the annealing step, ``beta`` a
                            coordinate along it (``(chain, draw, <plate>)`` when batches annealed
                            along their own adaptive schedules)
``log_weights``             ``log_weight`` ``(chain | sample, <plate>)``; per example
                            ``log_likelihood``, ``ess``, ``mcse``, ``khat``; for AIS the run-mean
                            ``mean_acceptance_rate`` and ``num_divergent`` ``(chain, <plate>)``
``trajectory``              recorded states ``u`` ``(chain, draw, <plate>, latent_dim)``, if kept
``observed_data``           ``x`` ``(<plate>, x_dim_i)``; ``num_observed`` ``(<plate>)``, the
                            entries of each example the model observes (bits/dim's D), when counted
``constant_data``           ``schedule`` ``(step)`` (``(step, <plate>)`` when batches annealed along
                            their own adaptive schedules); the pilot table ``pilot_beta``,
                            ``log_step_size``, ``inv_mass``, ``log_ratio_var``
                            ``(pilot_step, <plate>[, latent_dim])``;
                            KDE: ``bandwidth_grid``, ``validation_log_likelihood``
==========================  ====================================================================

Root attrs, all plain ``str``, ``int`` or ``float`` (what netCDF, h5netcdf and zarr store):
``inference_library="pyrolik"``, the pyrolik, torch, pyro, arviz, xarray and Python versions,
``pyrolik_result`` (the class), ``method``, ``bound``, ``direction``, ``path``, ``settings`` and
``kernel`` (JSON), ``seed``, ``wall_time``, ``created_at``. A BDMC result is a tree with ``lower`` and
``upper`` subtrees (each the export of its AIS run), a ``bdmc`` group (per-example ``lower``,
``upper``, ``gap``) and a ``simulated`` group (the exact latents); :func:`flatten` turns it into the
one-level layout ``lower_posterior``, ..., ``upper_prior``, ..., ``bdmc``, ``simulated`` that
ArviZ 0.x's ``InferenceData`` and ``az.from_netcdf`` see (and that :func:`pyrolik.save` writes).
"""

from __future__ import annotations

import datetime
import json
import platform
import re
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import xarray as xr

from pyrolik._version import __version__

__all__ = ["to_datatree", "to_inference_data", "flatten", "example_dim", "SITE_GROUPS",
           "DEFAULT_EXAMPLE_DIM"]

# what ArviZ reads off the "library" it records: its name and version
_LIBRARY = SimpleNamespace(__name__="pyrolik", __version__=__version__)
SITE_GROUPS = {"forward": ("posterior", "unconstrained_posterior"),
               "reverse": ("prior", "unconstrained_prior")}
SAMPLE = ["chain", "draw"]
DEFAULT_EXAMPLE_DIM = "example"
# dims the layout uses for something else: a plate with one of these names is exported as "example"
_RESERVED_DIMS = {"chain", "draw", "sample", "step", "pilot_step", "bandwidth", "latent_dim"}
ORDER = ["posterior", "prior", "unconstrained_posterior", "unconstrained_prior", "sample_stats",
         "log_weights", "trajectory", "observed_data", "constant_data"]
NESTED = ("lower", "upper")  # the subtrees of a BDMC export


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
             "settings": json.dumps(result.settings, default=str)}
    if result.seed is not None:
        attrs["seed"] = _seed_attr(result.seed)
    if _is_ais(result):
        attrs.update(direction=str(result.direction), path=str(result.path))
        if result.kernel is not None:
            attrs["kernel"] = json.dumps(result.kernel.to_dict(), default=str)
    return attrs


def _estimate_groups(result: Any, sample_dim: str, ex: str) -> dict[str, xr.Dataset]:
    coords = {ex: np.arange(result.num_examples)}
    data: dict[str, Any] = {"log_likelihood": result.log_likelihood}
    dims = {name: [ex] for name in ("log_likelihood", "ess", "mcse", "khat")}
    for name in ("ess", "mcse", "khat"):
        if getattr(result, name) is not None:
            data[name] = getattr(result, name)
    if result.log_weights is not None:
        data["log_weight"] = result.log_weights
        dims["log_weight"] = [sample_dim, ex]
    if _is_ais(result):
        for name, value in (("mean_acceptance_rate", result.acceptance_rate),
                            ("num_divergent", result.num_divergent)):
            if value is not None:
                data[name], dims[name] = value, ["chain", ex]
    groups = {"log_weights": _dataset(data, dims, coords, [])}
    if result.x is not None:
        x_dims = {"x": [ex, *_event_dims("x", result.x.dim() - 1)]}
        observed = {"x": result.x}
        if getattr(result, "num_observed", None) is not None:
            observed["num_observed"], x_dims["num_observed"] = result.num_observed, [ex]
        groups["observed_data"] = _dataset(observed, x_dims, coords, [])
    constant = {}
    if result.method == "kde" and result.settings.get("validation_log_likelihood") is not None:
        constant["bandwidth_grid"] = np.asarray(result.settings["bandwidth_grid"])
        constant["validation_log_likelihood"] = np.asarray(
            result.settings["validation_log_likelihood"])
    if constant:
        groups["constant_data"] = _dataset(constant, dict.fromkeys(constant, ["bandwidth"]), {}, [])
    return groups


def _ais_groups(result: Any, ex: str) -> dict[str, xr.Dataset]:
    groups = _estimate_groups(result, "chain", ex)
    k, n = result.log_weights.shape
    coords: dict[str, Any] = {"chain": np.arange(k), ex: np.arange(n), "draw": [0]}
    site_group, flat_group = SITE_GROUPS[result.direction]
    if result.latents:
        data = {s: v.unsqueeze(1) for s, v in result.latents.items()}
        dims = {s: [ex, *_event_dims(s, v.dim() - 2)] for s, v in result.latents.items()}
        groups[site_group] = _dataset(data, dims, coords, SAMPLE)
    if result.final_state is not None:
        groups[flat_group] = _dataset({"u": result.final_state.unsqueeze(1)},
                                      {"u": [ex, "latent_dim"]}, coords, SAMPLE)
    if result.trace:
        coords = {**coords, "draw": _np(result.trace_steps)}
        # every recorded diagnostic (acceptance_rate, step_size, diverging, energy_error,
        # log_weight, ...) goes to sample_stats under its own (ArviZ) name
        trace = {name: v.movedim(0, 1) for name, v in result.trace.items() if name != "beta"}
        z = trace.pop("z", None)
        stats = _dataset(trace, {name: [ex, *_event_dims(name, v.dim() - 3)]
                                 for name, v in trace.items()}, coords, SAMPLE)
        beta = _np(result.trace["beta"])  # (R, K), or (R, K, N): one schedule per batch
        if beta.ndim == 3:
            beta_coord = ([*SAMPLE, ex], beta.transpose(1, 0, 2))
        elif (beta == beta[:, :1]).all():
            beta_coord = ("draw", beta[:, 0])
        else:
            beta_coord = (SAMPLE, beta.T)
        groups["sample_stats"] = stats.assign_coords(beta=beta_coord)
        if z is not None:
            groups["trajectory"] = _dataset({"u": z}, {"u": [ex, "latent_dim"]}, coords,
                                            SAMPLE).assign_coords(beta=beta_coord)
    constant: dict[str, Any] = {}
    dims: dict[str, list[str]] = {}
    if result.schedule is not None:
        constant["schedule"] = result.schedule
        dims["schedule"] = ["step"] if result.schedule.dim() == 1 else ["step", ex]
    table = result.step_sizes
    if table is not None:
        constant["pilot_beta"], dims["pilot_beta"] = table.betas, ["pilot_step"]
        constant["log_step_size"], dims["log_step_size"] = table.log_step_size, ["pilot_step", ex]
        if table.inv_mass is not None:
            constant["inv_mass"] = table.inv_mass
            dims["inv_mass"] = ["pilot_step", ex, "latent_dim"]
        if table.log_ratio_var is not None:
            constant["log_ratio_var"] = table.log_ratio_var
            dims["log_ratio_var"] = ["pilot_step", ex]
    if constant:
        groups["constant_data"] = _dataset(constant, dims, {ex: np.arange(n)}, [])
    return groups


def _tree(groups: dict[str, xr.Dataset], attrs: dict[str, Any]) -> xr.DataTree:
    groups = dict(sorted(groups.items(), key=lambda kv: ORDER.index(kv[0])))
    tree = xr.DataTree.from_dict(groups)
    tree.attrs = attrs
    return tree


def to_datatree(result: Any) -> xr.DataTree:
    """Export a result (AIS, reverse AIS, IWAE, likelihood weighting, KDE or BDMC) to a DataTree.

    Groups and dims are listed in the module docstring; every value equals the result's tensor.
    """
    if getattr(result, "exports_itself", False):  # e.g. pyrolik.distortion's curves
        return result.to_datatree()
    if hasattr(result, "lower") and hasattr(result, "upper"):
        return _bdmc_tree(result)
    if not (hasattr(result, "log_likelihood") and hasattr(result, "method")):
        raise TypeError(f"expected a pyrolik result (EstimateResult, AISResult or BDMCResult), got "
                        f"{type(result).__name__}")
    ex = example_dim(result)
    groups = _ais_groups(result, ex) if _is_ais(result) else _estimate_groups(result, "sample", ex)
    return _tree(groups, _attrs(result))


def _bdmc_tree(result: Any) -> xr.DataTree:
    n, ex = len(result.x), example_dim(result)
    coords = {ex: np.arange(n)}
    gap = {"lower": result.lower.log_likelihood, "upper": result.upper.log_likelihood,
           "gap": result.per_example_gap}
    groups: dict[str, Any] = {"bdmc": _dataset(gap, dict.fromkeys(gap, [ex]), coords, [])}
    if result.latents:
        lat = result.latents  # (N, *site), or (K, N, *site) with one draw per chain
        dims = {s: [ex] if v.shape[0] == n else ["chain", ex] for s, v in lat.items()}
        dims = {s: [*d, *_event_dims(s, lat[s].dim() - len(d))] for s, d in dims.items()}
        groups["simulated"] = _dataset(lat, dims, coords, [])
    for name in NESTED:
        sub = to_datatree(getattr(result, name))
        for group, node in sub.children.items():
            groups[f"{name}/{group}"] = node.to_dataset()
    tree = xr.DataTree.from_dict(groups)
    for name in NESTED:
        tree[name].attrs = _attrs(getattr(result, name))
    tree.attrs = {**_versions(), "pyrolik_result": "BDMCResult", "method": "bdmc",
                  "bound": "sandwich", "gap": float(result.gap),
                  "gap_stderr": float(result.gap_stderr), "wall_time": float(result.wall_time),
                  "created_at": _created_at()}
    return tree


def flatten(tree: xr.DataTree) -> xr.DataTree:
    """One level of groups: a BDMC tree's ``lower/posterior`` becomes ``lower_posterior``, ....

    ArviZ 0.x's ``InferenceData`` and ``az.from_netcdf`` only see the groups under the root, so
    this is the layout of :func:`to_inference_data` and of the files :func:`pyrolik.save` writes.
    The attrs of ``lower`` and ``upper`` (method, bound, settings, ...) are carried onto each of
    their groups. A tree that is already flat is returned as it is.
    """
    if not any(node.children for node in tree.children.values()):
        return tree
    groups: dict[str, xr.Dataset] = {}
    for name, node in tree.children.items():
        if node.children:
            for group, leaf in node.children.items():
                ds = leaf.to_dataset()
                groups[f"{name}_{group}"] = ds.assign_attrs({**ds.attrs, **node.attrs})
        else:
            groups[name] = node.to_dataset()
    out = xr.DataTree.from_dict(groups)
    out.attrs = dict(tree.attrs)
    return out


def to_inference_data(result: Any):
    """Export to an :class:`arviz.InferenceData` (ArviZ 0.x); a DataTree under ArviZ 1.x.

    A BDMC result's nested tree is flattened (:func:`flatten`): its groups are ``lower_posterior``,
    ``lower_sample_stats``, ..., ``upper_prior``, ..., ``bdmc`` and ``simulated``.
    """
    import arviz as az

    tree = to_datatree(result)
    if not hasattr(az, "InferenceData"):  # ArviZ 1.x: the DataTree is its InferenceData
        return tree
    flat = flatten(tree)
    groups = {name: node.to_dataset() for name, node in flat.children.items()}
    return az.InferenceData(attrs=dict(flat.attrs), **groups)
