r"""One-run curves and their BDMC checks as ``xarray.DataTree`` (``beta`` a coordinate), and back.

Layout of a :class:`~pyrolik.distortion.curve.DistortionCurve` (m recorded betas, K chains, N
examples):

=================  ==========================================================================
group              variables (dims)
=================  ==========================================================================
``curve``          per example ``log_z``, ``mcse``, ``ess``, ``distortion``, ``distortion_mcse``,
                   ``rate`` and (Gaussian mode) ``log_likelihood`` ``(beta, example)``; their
                   means ``*_mean`` and, for log p_sigma, ``stderr`` ``(beta,)``; coordinates
                   ``beta`` and (Gaussian mode) ``sigma`` along it
``log_weights``    ``log_weight`` and ``distortion`` per chain ``(beta, chain, example)``
``observed_data``  ``x`` ``(example, x_dim_i)``
``constant_data``  ``schedule`` ``(step)`` in :math:`b = \beta/\beta_{\max}`, ``record_step``
                   ``(beta)``
``ais``            the AIS run's own export (:func:`pyrolik.io.export.to_datatree`): acceptance,
                   step sizes, final states
``posterior``,     the ``ais`` run's resampled draws at ``beta_max`` and their per-draw stats
``sample_stats``   (so that ``az.summary`` and ``az.plot_trace`` work on the curve's export)
=================  ==========================================================================

Root attrs: the versions, ``pyrolik_result``, ``mode``, ``num_values``, ``beta_max``, ``settings``
(JSON), ``seed``, ``wall_time``, ``bound``, the per-example-sigma warning and, with ``tolerance=``,
``budget`` (JSON of :meth:`pyrolik.infer.tolerance.Budget.to_dict`).
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import numpy as np
import torch
import xarray as xr

from pyrolik.infer.tolerance import Budget
from pyrolik.io.netcdf import from_datatree
from pyrolik.results.convert import _versions, to_datatree

__all__ = ["curve_to_datatree", "curve_fields", "bdmc_to_datatree", "bdmc_fields"]


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def curve_to_datatree(curve: Any) -> xr.DataTree:
    """See the module docstring; every value equals the curve's tensor."""
    m, k, n = curve.log_weights.shape
    coords: dict[str, Any] = {"beta": _np(curve.betas), "example": np.arange(n)}
    if curve.mode == "gaussian":
        coords["sigma"] = ("beta", _np(curve.sigmas))
    per_example = {"log_z": curve.log_z, "mcse": curve.mcse, "ess": curve.ess,
                   "distortion": curve.distortion, "distortion_mcse": curve.distortion_mcse,
                   "rate": curve.rate}
    if curve.mode == "gaussian":
        per_example["log_likelihood"] = curve.log_likelihood
    data: dict[str, tuple[tuple[str, ...], np.ndarray]] = {
        name: (("beta", "example"), _np(v)) for name, v in per_example.items()}
    for name in ("log_z", "distortion", "rate") + (("log_likelihood",) if curve.mode == "gaussian"
                                                   else ()):
        data[f"{name}_mean"] = (("beta",), _np(per_example[name].mean(-1)))
    if curve.mode == "gaussian":
        data["stderr"] = (("beta",), _np(curve.stderr))
    chains = {"log_weight": (("beta", "chain", "example"), _np(curve.log_weights)),
              "distortion": (("beta", "chain", "example"), _np(curve.distortions))}
    x = curve.x.detach().cpu().numpy()
    groups: dict[str, Any] = {
        "curve": xr.Dataset(data, coords=coords),
        "log_weights": xr.Dataset(chains, coords={**coords, "chain": np.arange(k)}),
        "observed_data": xr.Dataset({"x": (("example", *[f"x_dim_{i}" for i in
                                                         range(x.ndim - 1)]), x)},
                                    coords={"example": np.arange(n)}),
        "constant_data": xr.Dataset({"schedule": (("step",), _np(curve.schedule)),
                                     "record_step": (("beta",), curve.record_steps.cpu().numpy())},
                                    coords={"beta": coords["beta"]}),
    }
    if curve.ais is not None:
        ais = to_datatree(curve.ais)
        for name in ("posterior", "sample_stats"):  # the run's draws at beta_max, for ArviZ
            if name in ais.children:
                groups[name] = ais[name].to_dataset()
    tree = xr.DataTree.from_dict(groups)
    if curve.ais is not None:
        tree["ais"] = ais
    tree.attrs = {**_versions(), "created_at": _now(), "pyrolik_result": "DistortionCurve",
                  "method": "ais (distortion path)", "mode": curve.mode,
                  "num_values": int(curve.num_values), "beta_max": float(curve.beta_max),
                  "settings": json.dumps(curve.settings, default=str),
                  "wall_time": float(curve.wall_time),
                  "bound": "log_z and log_likelihood: stochastic lower bounds at every beta; "
                           "(distortion, rate): on or above the rate-distortion curve in expectation",
                  "per_example_sigma_warning": curve.optimal_sigma_warning}
    if curve.seed is not None:
        tree.attrs["seed"] = int(curve.seed)
    if curve.budget is not None:  # tolerance=: how num_steps was chosen
        tree.attrs["budget"] = json.dumps(curve.budget.to_dict(), default=str)
    return tree


def curve_fields(tree: xr.DataTree) -> dict[str, Any]:
    """The constructor arguments of a :class:`~pyrolik.distortion.curve.DistortionCurve` read back
    from :func:`curve_to_datatree`'s output (no rerun)."""
    attrs = tree.attrs
    if attrs.get("pyrolik_result") != "DistortionCurve":
        raise ValueError(f"not a DistortionCurve tree (pyrolik_result={attrs.get('pyrolik_result')})")
    lw = tree["log_weights"].to_dataset()
    const = tree["constant_data"].to_dataset()

    def t(da: xr.DataArray, *dims: str) -> torch.Tensor:
        return torch.from_numpy(np.array(da.transpose(*dims).values))

    ais = from_datatree(tree["ais"]) if "ais" in tree.children else None
    return dict(
        mode=attrs["mode"], betas=t(lw["beta"], "beta").double(),
        log_weights=t(lw["log_weight"], "beta", "chain", "example").double(),
        distortions=t(lw["distortion"], "beta", "chain", "example").double(),
        num_values=int(attrs["num_values"]),
        x=torch.from_numpy(np.array(tree["observed_data"].to_dataset()["x"].values)),
        schedule=t(const["schedule"], "step").double(),
        record_steps=t(const["record_step"], "beta").long(), beta_max=float(attrs["beta_max"]),
        ais=ais, seed=attrs.get("seed"), settings=json.loads(attrs.get("settings", "{}")),
        wall_time=float(attrs.get("wall_time", np.nan)),
        budget=Budget.from_dict(json.loads(attrs["budget"])) if "budget" in attrs else None)


def bdmc_to_datatree(result: Any) -> xr.DataTree:
    """A :class:`~pyrolik.distortion.bounds.DistortionBDMC` as a tree: a ``bdmc`` group of bounds
    ``(beta, example)`` and, per checked beta ``j``, the :func:`pyrolik.bdmc` export as ``beta_j``."""
    coords: dict[str, Any] = {"beta": _np(result.betas),
                              "example": np.arange(result.lower.shape[-1])}
    if result.mode == "gaussian":
        coords["sigma"] = ("beta", _np(result.sigmas))
    data: dict[str, tuple[tuple[str, ...], np.ndarray]] = {
        name: (("beta", "example"), _np(getattr(result, name)))
        for name in ("lower", "upper", "distortion", "rate_lower", "rate_upper")}
    data["gap"] = (("beta",), _np(result.gap))
    data["gap_stderr"] = (("beta",), _np(result.gap_stderr))
    tree = xr.DataTree.from_dict({"bdmc": xr.Dataset(data, coords=coords)})
    for j, res in enumerate(result.results):
        tree[f"beta_{j}"] = to_datatree(res)
    tree.attrs = {**_versions(), "created_at": _now(), "pyrolik_result": "DistortionBDMC",
                  "method": "bdmc (distortion path)", "mode": result.mode, "bound": "sandwich",
                  "num_values": int(result.num_values), "wall_time": float(result.wall_time)}
    return tree


def bdmc_fields(tree: xr.DataTree) -> dict[str, Any]:
    """The constructor arguments of a :class:`~pyrolik.distortion.bounds.DistortionBDMC` read back
    from :func:`bdmc_to_datatree`'s output."""
    ds = tree["bdmc"].to_dataset()

    def t(name: str) -> torch.Tensor:
        return torch.from_numpy(np.array(ds[name].transpose("beta", "example").values))

    results = [from_datatree(tree[f"beta_{j}"]) for j in range(ds.sizes["beta"])]
    return dict(mode=tree.attrs["mode"], betas=torch.from_numpy(np.array(ds["beta"].values)),
                lower=t("lower"), upper=t("upper"), distortion=t("distortion"),
                num_values=int(tree.attrs["num_values"]), x=[r.x for r in results],
                results=results, wall_time=float(tree.attrs.get("wall_time", np.nan)))
