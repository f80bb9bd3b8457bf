r"""Results to ``xarray.DataTree`` / ``arviz.InferenceData``: one converter per result kind.

Modelled on ArviZ's ``io_numpyro.py``; the layout of every group is in ``docs/export.md``.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from datetime import datetime, timezone
from functools import cached_property
from typing import Any

import numpy as np
import torch
import xarray as xr

from pyrolik._version import __version__
from pyrolik.ops.resampling import RESAMPLING_STREAM, systematic
from pyrolik.ops.stats import (
    DEFAULT_BLOCKS,
    ancestor_log_weights,
    check_blocks,
    effective_sample_size,
)
from pyrolik.ops.stats import num_blocks as num_blocks_of
from pyrolik.results.layout import (
    BLOCK,
    DERIVED,
    EX,
    LAYOUT,
    SUBTREES,
    Variables,
    _attr,
    _dataset,
    _event_dims,
    _gather,
    _laid_out,
    _log_mean_exp,
    _np,
    _one_draw,
    _tree,
    blocked,
    declared,
    example_dim,
    khat_attrs,
    kish_ess,
)

__all__ = ["EstimateConverter", "AISConverter", "to_datatree", "to_inference_data", "flatten",
           "versions"]

SITE_GROUPS = {"forward": ("posterior", "unconstrained_posterior", "sample_stats"),
               "reverse": ("prior", "unconstrained_prior", "sample_stats_prior")}
ORDER = ["posterior", "prior", "unconstrained_posterior", "unconstrained_prior", "sample_stats",
         "sample_stats_prior", "particles", "unconstrained_particles", "evidence", "annealing",
         "trajectory", "observed_data", "constant_data", "simulated", "calibration"]


def versions() -> dict[str, str]:
    """The root attributes every written file carries: pyrolik's and its libraries' versions."""
    import arviz
    import pyro

    # str(): torch.__version__ is a TorchVersion, which netCDF writers cannot store
    return {"inference_library": "pyrolik", "inference_library_version": str(__version__),
            "torch_version": str(torch.__version__), "pyro_version": str(pyro.__version__),
            "arviz_version": str(arviz.__version__), "xarray_version": str(xr.__version__),
            "python_version": platform.python_version()}


class Converter:
    """What every converter shares: the declared fields (``stored``) and the root attrs."""

    result: Any
    ex: str  # the example dim
    c: Any = None  # the blocks the K chains are split into (None: no chains)

    def variables(self, group: str) -> Variables:
        """The fields declared in ``group``, in their dims (the trace and the draws aside)."""
        out: Variables = {}
        for field, spec in declared(self.result).items():
            value = getattr(self.result, field)
            if spec.group != group or value is None or spec.codec in ("trace", "draws", "coord"):
                continue
            if spec.name is None:  # a dict of sites
                items: Any = value.items()
            elif isinstance(spec.name, tuple):  # a NamedTuple of tensors
                items = zip(spec.name, value, strict=True)
            else:
                items = [(spec.name, value)]
            for name, v in items:
                if v is not None:
                    out[name] = self.layout(name, _np(v), spec.dims)
        return out

    def layout(self, name: str, v: np.ndarray, template: Sequence[str]) -> tuple[list[str], Any]:
        return _laid_out(name, v, template, self.ex, self.c)

    def attrs(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {**versions(), "pyrolik_result": type(self.result).__name__,
                                 "created_at": datetime.now(timezone.utc).isoformat()}
        for field, spec in declared(self.result).items():
            value = getattr(self.result, field)
            if spec.group == "attrs" and (value is not None or spec.codec == "none"):
                attrs[str(spec.name)] = _attr(value, spec.codec)
        attrs["layout"] = LAYOUT
        if self.c is not None:
            attrs["num_blocks"] = int(self.c)
        return attrs


class EstimateConverter(Converter):
    """Importance-sampling estimates (IWAE, likelihood weighting) and KDE (``docs/export.md``)."""

    def __init__(self, result: Any, num_blocks: int = DEFAULT_BLOCKS):
        self.result = result
        self.ex = example_dim(result)
        self.n = result.num_examples
        self.draws = result.draws
        # (K, N) float64 weights, and the number of blocks (None: no weights, no draws)
        self.lw: Any = None if result.log_weights is None else _np(result.log_weights).astype(float)
        self.k = self.lw.shape[0] if self.lw is not None else result.num_weights
        self.c: Any = (self.draws["draw_index"].shape[0] if self.draws else None if self.lw is None
                       else num_blocks_of(self.k, num_blocks, result.settings.get("islands")))
        self.m: Any = None if self.lw is None else self.k // self.c  # the chains of a block
        self.sites = getattr(result, "latents", None) or getattr(result, "samples", None) or {}
        self.flat = getattr(result, "final_state", None)
        self.direction = getattr(result, "direction", "forward")

    def coords(self, **more: Any) -> dict[str, Any]:
        base = {"chain": np.arange(self.c)} if self.c is not None else {}
        return {**base, self.ex: np.arange(self.n), **more}

    @cached_property
    def per_chain(self) -> dict[str, np.ndarray]:
        """Per-chain run statistics, spread over the draws in ``sample_stats``."""
        r = self.result
        out = {name: _np(getattr(r, name)) for name in ("acceptance_rate", "num_divergent")
               if getattr(r, name, None) is not None}
        energy = (getattr(r, "trace", None) or {}).get("energy_error")
        if energy is not None:
            energy = np.abs(_np(energy).astype(np.float64))
            out["max_energy_error"] = np.where(np.isfinite(energy), energy, np.inf).max(0)
        return out

    @cached_property
    def index(self) -> np.ndarray | None:
        """``(C, D, N)``: the chain each draw copies, within its block (forward: systematic
        resampling from the result's seed; reverse: every particle once, in order)."""
        if self.draws or self.lw is None or not (self.sites or self.flat is not None):
            return None
        if self.direction == "forward":
            seed = getattr(self.result, "seed", None)
            g = torch.Generator().manual_seed((RESAMPLING_STREAM * 1_000_003
                                               + (0 if seed is None else int(seed))) % 2**63)
            lw = torch.from_numpy(blocked(self.lw, self.c)).movedim(1, 0)  # (M, C, N)
            return systematic(lw, generator=g).movedim(0, 1).numpy()
        return np.broadcast_to(np.arange(self.m).reshape(1, self.m, 1), (self.c, self.m, self.n))

    def posterior_to_xarray(self) -> xr.Dataset | None:
        """The sites' equally weighted draws (reverse AIS: its final states, in ``prior``)."""
        if self.draws:
            values = {s: v for s, v in self.draws.items() if not s.startswith("draw_")}
            if not values:
                return None
            variables = {s: ([self.ex, *_event_dims(s, v.dim() - 3)], _np(v))
                         for s, v in values.items()}
        elif self.index is not None and self.sites:
            variables = {s: (d[2:], _gather(v, self.index)) for s, (d, v) in
                         ((s, self.layout(s, _np(v), (BLOCK, EX))) for s, v in self.sites.items())}
        else:
            return None
        return self._sampled(variables)

    def unconstrained_posterior_to_xarray(self) -> xr.Dataset | None:
        if self.index is None or self.flat is None:
            return None
        flat = blocked(_np(self.flat), self.c)
        return self._sampled({"u": ([self.ex, "latent_dim"], _gather(flat, self.index))})

    def sample_stats_to_xarray(self) -> xr.Dataset | None:
        """Per draw: the chain it copies, its weight, and its chain's run statistics."""
        if self.draws:
            stats = {"particle": _np(self.draws["draw_index"]),
                     "log_weight": _np(self.draws["draw_log_weight"])}
        elif self.index is not None and self.lw is not None:
            idx, c = self.index, self.c
            stats = {"particle": (idx + (np.arange(c) * self.m).reshape(c, 1, 1)).astype(np.int64),
                     "log_weight": _gather(blocked(self.lw, c), idx)}
            for name, v in self.per_chain.items():  # num_divergent as ArviZ's boolean "diverging"
                v = _gather(blocked(v, c), idx)
                stats.update({"diverging": v > 0} if name == "num_divergent" else {name: v})
        else:
            return None
        return self._sampled({k: ([self.ex], v) for k, v in stats.items()})

    def _sampled(self, variables: Variables) -> xr.Dataset:
        d = next(iter(variables.values()))[1].shape[1]
        return _dataset(variables, self.coords(draw=np.arange(d)), ["chain", "draw"])

    def particles_to_xarray(self) -> xr.Dataset | None:
        """The raw draws and weights by block, and each block's estimate and ESS."""
        if self.lw is None:
            return None
        variables = self.variables("particles")
        clash = set(self.sites) & {"log_weight", *DERIVED["particles"], "mean_acceptance_rate",
                                   "num_divergent"}
        if clash:
            raise ValueError(f"the latent site {sorted(clash)[0]!r} has the name of a variable of "
                             "the export's particles group (log_weight, log_marginal_likelihood, "
                             "ess, mean_acceptance_rate, num_divergent): rename the site")
        lw = blocked(self.lw, self.c)  # (C, M, N), float64
        lme = _log_mean_exp(lw, axis=-2)
        variables = {"log_weight": (["chain", "particle", self.ex], lw),
                     "log_marginal_likelihood": (["chain", self.ex],
                                                 lme if self.direction == "forward" else -lme),
                     "ess": (["chain", self.ex], kish_ess(lw, axis=1)), **variables}
        return _dataset(variables, self.coords(particle=np.arange(self.m)), [])

    def unconstrained_particles_to_xarray(self) -> xr.Dataset | None:
        if self.lw is None or not (variables := self.variables("unconstrained_particles")):
            return None
        return _dataset(variables, self.coords(particle=np.arange(self.m)), [])

    def evidence_to_xarray(self) -> xr.Dataset:
        """The pooled per-example estimate and its diagnostics."""
        ds = _dataset(self.variables("evidence"), {self.ex: np.arange(self.n)}, [])
        if "pareto_k" in ds and self.k is not None:
            ds["pareto_k"].attrs.update(khat_attrs(self.k))
        return _one_draw(ds).assign_attrs(bound=str(self.result.bound or "none"))

    def observed_data_to_xarray(self) -> xr.Dataset | None:
        variables = self.variables("observed_data")
        return _dataset(variables, {self.ex: np.arange(self.n)}, []) if variables else None

    def constant_data_to_xarray(self) -> xr.Dataset | None:
        settings = self.result.settings
        if self.result.method != "kde" or settings.get("validation_log_likelihood") is None:
            return None
        return _dataset({name: (["bandwidth"], np.asarray(settings[name])) for name in
                         ("bandwidth_grid", "validation_log_likelihood")}, {}, [])

    def groups(self) -> dict[str, xr.Dataset | None]:
        """Every group, by name, in the order of the tree; ``None`` where it does not apply."""
        site, flat, stats = SITE_GROUPS[self.direction]
        return {site: self.posterior_to_xarray(), flat: self.unconstrained_posterior_to_xarray(),
                stats: self.sample_stats_to_xarray(), "particles": self.particles_to_xarray(),
                "unconstrained_particles": self.unconstrained_particles_to_xarray(),
                "evidence": self.evidence_to_xarray(),
                "observed_data": self.observed_data_to_xarray(),
                "constant_data": self.constant_data_to_xarray()}

    def to_datatree(self) -> xr.DataTree:
        groups = self.groups()
        return _tree({g: groups.get(g) for g in ORDER}, self.attrs())


def _block_ess(lw: np.ndarray, variables: Variables) -> np.ndarray:
    """``(step, block, example)`` ESS of the blocked log-weights ``lw`` ``(step, block, particle,
    example)``; of a resampled run's, over the chains' starting ancestors, as the run's own ESS
    (each block holds whole islands, so every chain descends from one of its block)."""
    if "ancestor" not in variables:
        return kish_ess(lw, axis=2)
    m = lw.shape[2]
    local = variables["ancestor"][1] - (np.arange(lw.shape[1]) * m)[None, :, None, None]
    if local.min() < 0 or local.max() >= m:  # cannot happen while blocks hold whole islands
        raise ValueError("a resampled run's blocks of chains must hold whole islands")
    families = ancestor_log_weights(torch.from_numpy(np.moveaxis(lw, 2, 0).copy()),
                                    torch.from_numpy(np.moveaxis(local, 2, 0).copy()))
    return effective_sample_size(families).numpy()


class AISConverter(EstimateConverter):
    """Forward and reverse AIS: the estimate's groups, and what the run recorded along its path."""

    def _path_coords(self) -> dict[str, Any]:
        return self.coords(step=_np(self.result.trace_steps), particle=np.arange(self.m))

    def annealing_to_xarray(self) -> xr.Dataset | None:
        """Per recorded step and chain, and the per-block running estimate and ESS."""
        trace = self.result.trace
        if not trace:
            return None
        variables = {name: self.layout(name, _np(v), ("step", BLOCK, EX))
                     for name, v in trace.items() if name != "z"}
        if "log_weight" in variables:
            lw = variables["log_weight"][1].astype(np.float64)
            lml = _log_mean_exp(lw, axis=2)
            if self.direction == "reverse":  # shifted to 0 at beta = 0
                lml = lml - _log_mean_exp(blocked(self.lw, self.c), axis=1)
            variables["log_marginal_likelihood"] = (["step", "chain", self.ex], lml)
            variables["ess"] = (["step", "chain", self.ex], _block_ess(lw, variables))
        return _dataset(variables, self._path_coords(), [])

    def trajectory_to_xarray(self) -> xr.Dataset | None:
        trace = self.result.trace
        if not trace or "z" not in trace:
            return None
        u = self.layout("u", _np(trace["z"]), ("step", BLOCK, EX, "latent_dim"))
        return _dataset({"u": u}, self._path_coords(), [])

    def constant_data_to_xarray(self) -> xr.Dataset | None:
        variables = self.variables("constant_data")
        return _dataset(variables, {self.ex: np.arange(self.n)}, []) if variables else None

    def groups(self) -> dict[str, xr.Dataset | None]:
        return {**super().groups(), "annealing": self.annealing_to_xarray(),
                "trajectory": self.trajectory_to_xarray()}


class CurveConverter(Converter):
    """A curve from one run along the distortion path, with the run (``docs/export.md``)."""

    #: the root attr ``bound``: what the curve's numbers bound
    BOUND = ("log_z and log_likelihood: stochastic lower bounds at every beta; (distortion, rate): "
             "on or above the rate-distortion curve in expectation")

    def __init__(self, result: Any, num_blocks: int = DEFAULT_BLOCKS):
        self.result = result
        self.ex = example_dim(result)
        self.run = None if result.ais is None else to_datatree(result.ais, num_blocks=num_blocks)
        islands = None if result.ais is None else result.ais.settings.get("islands")
        self.c = num_blocks_of(result.num_chains, num_blocks, islands)  # the run's own blocks

    def coords(self, **more: Any) -> dict[str, Any]:
        return {"beta": _np(self.result.betas), self.ex: np.arange(self.result.num_examples),
                **more}

    def curve_to_xarray(self) -> xr.Dataset:
        """Per beta and example the estimates, per beta their means (one draw, as ``evidence``)."""
        r = self.result
        per_example = {"log_z": r.log_z, "mcse": r.mcse, "ess": r.ess, "distortion": r.distortion,
                       "distortion_mcse": r.distortion_mcse, "rate": r.rate}
        means = {f"{name}_mean": per_example[name].mean(-1)
                 for name in ("log_z", "distortion", "rate")}
        if r.mode == "gaussian":
            per_example["log_likelihood"] = r.log_likelihood
            means.update(log_likelihood_mean=r.log_likelihood.mean(-1), stderr=r.stderr,
                         sigma=r.sigmas)
        variables: Variables = {name: (["beta", self.ex], _np(v)) for name, v in per_example.items()}
        variables.update({name: (["beta"], _np(v)) for name, v in means.items()})
        return _one_draw(_dataset(variables, self.coords(), []))

    def particles_to_xarray(self) -> xr.Dataset:
        m = self.result.num_chains // self.c
        return _dataset(self.variables("particles"),
                        self.coords(chain=np.arange(self.c), particle=np.arange(m)), [])

    def groups(self) -> dict[str, Any]:
        run = {} if self.run is None else self.run.children  # its draws at beta_max, for ArviZ
        return {**{g: run[g].to_dataset() for g in ("posterior", "sample_stats") if g in run},
                "curve": self.curve_to_xarray(), "particles": self.particles_to_xarray(),
                "observed_data": _dataset(self.variables("observed_data"),
                                          {self.ex: np.arange(self.result.num_examples)}, []),
                "constant_data": _dataset(self.variables("constant_data"),
                                          {"beta": _np(self.result.betas)}, [])}

    def to_datatree(self) -> xr.DataTree:
        tree = _tree(self.groups(), {**self.attrs(), "method": "ais (distortion path)",
                                     "bound": self.BOUND, "per_example_sigma_warning":
                                     self.result.optimal_sigma_warning})
        if self.run is not None:
            tree["ais"] = self.run
        return tree


def to_datatree(result: Any, *, num_blocks: int = DEFAULT_BLOCKS) -> xr.DataTree:
    """Export a result of any estimator to a DataTree.

    AIS, reverse AIS, IWAE, likelihood weighting, KDE, BDMC, CSL or a curve of
    ``pyrolik.distortion``. Groups and dims: ``docs/export.md``; ``posterior`` holds draws resampled
    with the result's seed.

    Parameters
    ----------
    result : EstimateResult, AISResult, BDMCResult, DistortionCurve or DistortionBDMC
        A result of any estimator, fresh or loaded (:func:`pyrolik.load`).
    num_blocks : int
        ArviZ chains the K chains are split into (:mod:`pyrolik.ops.stats`).
    """
    kind = getattr(result, "converter", None)
    if kind is None:
        raise TypeError(f"expected a pyrolik result (EstimateResult, AISResult, BDMCResult, "
                        f"DistortionCurve or DistortionBDMC), got {type(result).__name__}")
    check_blocks(num_blocks)
    return kind(result, num_blocks).to_datatree()


def flatten(tree: xr.DataTree) -> xr.DataTree:
    """One level of groups: ``lower/posterior`` becomes ``lower_posterior`` (``ais/...``,
    ``beta_0/lower/...`` likewise), the layout ArviZ 0.x reads; a subtree's attrs go onto each of
    its groups, and into the root's ``pyrolik_subtrees`` for the reader. A flat tree is returned as
    it is.

    Parameters
    ----------
    tree : xarray.DataTree
        A tree of :func:`to_datatree`.
    """
    if not any(node.children for node in tree.children.values()):
        return tree
    groups: dict[str, xr.Dataset] = {}
    subtrees: dict[str, dict] = {}  # each subtree's own attrs, for the reader (SUBTREES)
    for name, node in tree.children.items():
        if node.children:
            flat = flatten(node)
            subtrees[name] = {str(k): v.item() if isinstance(v, np.generic) else v
                              for k, v in node.attrs.items()}
            subtrees.update({f"{name}/{path}": attrs for path, attrs
                             in json.loads(flat.attrs.get(SUBTREES, "{}")).items()})
            for group, leaf in flat.children.items():
                ds = leaf.to_dataset()
                groups[f"{name}_{group}"] = ds.assign_attrs({**ds.attrs, **node.attrs})
        else:
            groups[name] = node.to_dataset()
    return _tree(dict(groups), {**{str(k): v for k, v in tree.attrs.items()},
                                SUBTREES: json.dumps(subtrees)})


def to_inference_data(result: Any, *, num_blocks: int = DEFAULT_BLOCKS):
    """Export to an :class:`arviz.InferenceData` (ArviZ 0.x); a DataTree under ArviZ 1.x.

    Parameters
    ----------
    result : EstimateResult, AISResult, BDMCResult, DistortionCurve, DistortionBDMC or xarray.DataTree
        A result of any estimator, or its tree (:func:`to_datatree`).
    num_blocks : int
        ArviZ chains the K chains are split into (unused for a tree).
    """
    import arviz as az

    tree = result if isinstance(result, xr.DataTree) else to_datatree(result, num_blocks=num_blocks)
    if not hasattr(az, "InferenceData"):  # ArviZ 1.x: the DataTree is its InferenceData
        return tree
    flat = flatten(tree)
    # Any: InferenceData's **kwargs stub also covers its bool options, so a dict of Datasets fails
    groups: dict[str, Any] = {name: node.to_dataset() for name, node in flat.children.items()}
    return az.InferenceData(attrs=dict(flat.attrs), **groups)
