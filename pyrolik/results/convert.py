r"""Results to ``xarray.DataTree`` / ``arviz.InferenceData``: one converter per result kind.

Modelled on ArviZ's ``io_numpyro.py``; the layout of every group is in ``docs/export.md``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import platform
import re
import warnings
from collections.abc import Hashable, Sequence
from functools import cached_property
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import xarray as xr

from pyrolik._version import __version__
from pyrolik.ops.resampling import systematic
from pyrolik.ops.stats import DEFAULT_BLOCKS, check_blocks
from pyrolik.ops.stats import num_blocks as num_blocks_of

__all__ = ["stored", "declared", "Stored", "EstimateConverter", "AISConverter", "BDMCConverter",
           "to_datatree", "to_inference_data", "flatten", "example_dim", "EX", "BLOCK", "DERIVED",
           "NESTED", "LAYOUT"]

EX = "<example>"  # in a declaration's dims: the example dim (the model's plate)
BLOCK = "<block>"  # in a declaration's dims: K chains as (chain, particle), C blocks of M
#: Variables the converters compute from the stored ones (not read back).
DERIVED = {"particles": ("log_marginal_likelihood", "ess"),
           "annealing": ("log_marginal_likelihood", "ess")}
NESTED = ("lower", "upper")  # the subtrees of a BDMC export
LAYOUT = 3  # the version of the layout, a root attr
DEFAULT_EXAMPLE_DIM = "example"
RESAMPLING_STREAM = 20240  # mixed with the result's seed: the export's own random stream
SITE_GROUPS = {"forward": ("posterior", "unconstrained_posterior", "sample_stats"),
               "reverse": ("prior", "unconstrained_prior", "sample_stats_prior")}
ORDER = ["posterior", "prior", "unconstrained_posterior", "unconstrained_prior", "sample_stats",
         "sample_stats_prior", "particles", "unconstrained_particles", "evidence", "annealing",
         "trajectory", "observed_data", "constant_data", "simulated", "calibration"]
# dims the layout uses for something else: a plate with one of these names is exported as "example"
_RESERVED_DIMS = {"chain", "draw", "sample", "step", "pilot_step", "bandwidth", "latent_dim"}
# what ArviZ reads off the "library" it records: its name and version
_LIBRARY = SimpleNamespace(__name__="pyrolik", __version__=__version__)
#: Which ArviZ converter builds the groups: "auto" (ArviZ 0.x's when ``arviz.InferenceData``
#: exists, else ``arviz_base``'s), "arviz" or "arviz_base" (the tests set it to check both).
CONVERTER = "auto"


# --- the declaration: where each field of a result is stored ----------------------------------


@dataclasses.dataclass(frozen=True)
class Stored:
    """Where a result field lives in its export.

    ``group``: a group, ``"attrs"`` or (``codec="result"``) a subtree. ``name``: the variable or
    attr; a tuple for a NamedTuple field, ``None`` for a dict field (one variable per key).
    ``dims``: truncated to the rank, extra dims ``<name>_dim_i``. ``codec``: the reader's key.
    """

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


# --- shared helpers ---------------------------------------------------------------------------


def _np(t: Any) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def _event_dims(name: str, ndim: int) -> list[str]:
    return [f"{name}_dim_{i}" for i in range(ndim)]


def blocked(a: np.ndarray, c: int, axis: int = 0) -> np.ndarray:
    """Split axis ``axis`` (length ``K``) into ``(c, K // c)``: block-major, chains in order."""
    return a.reshape(a.shape[:axis] + (c, a.shape[axis] // c) + a.shape[axis + 1:])


def _log_mean_exp(lw: np.ndarray, axis: int) -> np.ndarray:
    top = np.max(lw, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.mean(np.exp(lw - top), axis=axis, keepdims=True)) + top
    return np.squeeze(out, axis=axis)


def kish_ess(lw: np.ndarray, axis: int) -> np.ndarray:
    r"""Kish's effective sample size :math:`(\sum w)^2 / \sum w^2` along ``axis``."""
    top = np.max(lw, axis=axis, keepdims=True)
    w = np.exp(lw - np.where(np.isfinite(top), top, 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(w, axis=axis) ** 2 / np.sum(w * w, axis=axis)


def good_k(num_samples: int) -> float:
    r""":math:`\min(1 - 1/\log_{10} K,\ 0.7)` (Vehtari et al. 2024); ``-inf`` for ``K = 1``."""
    return -math.inf if num_samples < 2 else min(1.0 - 1.0 / math.log10(num_samples), 0.7)


def _gather(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values`` ``(C, M, N, *event)`` at ``idx`` ``(C, M, N)`` along axis 1."""
    full = idx.reshape(idx.shape + (1,) * (values.ndim - 3))
    return np.take_along_axis(values, np.broadcast_to(full, idx.shape + values.shape[3:]), axis=1)


def pit(draws: xr.DataArray, truth: xr.DataArray) -> xr.DataArray:
    """Fraction of ``draws`` (over ``chain`` and ``draw``) below ``truth``, ties counted half."""
    below = (draws < truth).mean(("chain", "draw"))
    tied = (draws == truth).mean(("chain", "draw"))
    return (below + 0.5 * tied).astype(np.float64)


def _arviz_flavour() -> str:
    """``"arviz"`` (ArviZ 0.x's ``dict_to_dataset``) or ``"arviz_base"`` (ArviZ 1.x's)."""
    if CONVERTER != "auto":
        return CONVERTER
    import arviz

    return "arviz" if hasattr(arviz, "InferenceData") else "arviz_base"


Variables = dict[str, tuple[list[str], np.ndarray]]  # name: (dims, values)


def _dataset(variables: Variables, coords: dict[str, Any], sample_dims: list[str]) -> xr.Dataset:
    """One group through ArviZ's converter; ``dims`` name the non-sample dims of each variable."""
    data = {k: v for k, (_, v) in variables.items()}
    dims: dict[Hashable, Sequence[Hashable]] = {k: d for k, (d, _) in variables.items()}
    with warnings.catch_warnings():
        # more blocks than draws per block (num_blocks=10 of 4 chains each) is a layout, not a
        # transposed array
        warnings.filterwarnings("ignore", message="More chains", category=UserWarning)
        if _arviz_flavour() == "arviz_base":  # ArviZ >= 1.0
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


def _laid_out(name: str, v: np.ndarray, template: Sequence[str], ex: str,
              c: int | None = None) -> tuple[list[str], np.ndarray]:
    """``v`` in the dims of ``template`` (truncated to its rank): ``EX`` is ``ex``, ``BLOCK`` splits
    its ``K`` chains into ``c`` blocks; further dims are ``<name>_dim_i``."""
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
    """A group that is not a sample (a pooled estimate, the simulated truth) as one draw of one
    chain, so that ArviZ's tables (``to_dataframe``) line it up with the draws."""
    return ds.expand_dims({"chain": [0], "draw": [0]})


def _tree(groups: dict[str, xr.Dataset | None], attrs: dict[str, Any]) -> xr.DataTree:
    tree = xr.DataTree.from_dict({k: v for k, v in groups.items() if v is not None})
    tree.attrs = attrs
    return tree


# --- the converters ---------------------------------------------------------------------------


class EstimateConverter:
    """Importance-sampling estimates (IWAE, likelihood weighting) and KDE (``docs/export.md``)."""

    def __init__(self, result: Any, num_blocks: int = DEFAULT_BLOCKS):
        self.result = result
        self.ex = example_dim(result)
        self.n = result.num_examples
        self.draws = getattr(result, "draws", None)
        # (K, N) float64 weights, and the number of blocks (None: no weights, no draws)
        self.lw: Any = None if result.log_weights is None else _np(result.log_weights).astype(
            np.float64)
        self.k = self.lw.shape[0] if self.lw is not None else result.num_weights
        self.c: Any = (self.draws["draw_index"].shape[0] if self.draws
                       else None if self.lw is None else num_blocks_of(
                           self.k, num_blocks, (getattr(result, "settings", None) or {}).get("islands")))
        self.sites = getattr(result, "latents", None) or getattr(result, "samples", None) or {}
        self.direction = getattr(result, "direction", "forward")

    # what each group is built from

    def variables(self, group: str) -> Variables:
        """The fields the result class declares in ``group``, laid out in their declared dims
        (the trace and the draws aside: their groups' methods lay them out)."""
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

    def coords(self, **more: Any) -> dict[str, Any]:
        base = {"chain": np.arange(self.c)} if self.c is not None else {}
        return {**base, self.ex: np.arange(self.n), **more}

    @cached_property
    def per_chain(self) -> dict[str, np.ndarray]:
        """Per-chain run statistics, spread over the draws in ``sample_stats``."""
        r, out = self.result, {}
        if getattr(r, "acceptance_rate", None) is not None:
            out["acceptance_rate"] = _np(r.acceptance_rate)
        if getattr(r, "num_divergent", None) is not None:
            out["num_divergent"] = _np(r.num_divergent)
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
        m = self.k // self.c
        if self.direction == "forward":
            seed = getattr(self.result, "seed", None)
            g = torch.Generator().manual_seed((RESAMPLING_STREAM * 1_000_003
                                               + (0 if seed is None else int(seed))) % 2**63)
            lw = torch.from_numpy(blocked(self.lw, self.c)).movedim(1, 0)  # (M, C, N)
            return systematic(lw, generator=g).movedim(0, 1).numpy()
        return np.broadcast_to(np.arange(m).reshape(1, m, 1), (self.c, m, self.n))

    @property
    def flat(self) -> Any:
        return getattr(self.result, "final_state", None)

    # one method per group

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
            m = self.k // c
            stats = {"particle": (idx + (np.arange(c) * m).reshape(c, 1, 1)).astype(np.int64),
                     "log_weight": _gather(blocked(self.lw, c), idx)}
            pc = self.per_chain
            if "acceptance_rate" in pc:
                stats["acceptance_rate"] = _gather(blocked(pc["acceptance_rate"], c), idx)
            if "num_divergent" in pc:
                stats["diverging"] = _gather(blocked(pc["num_divergent"], c), idx) > 0
            if "max_energy_error" in pc:
                stats["max_energy_error"] = _gather(blocked(pc["max_energy_error"], c), idx)
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
        return _dataset(variables, self.coords(particle=np.arange(self.k // self.c)), [])

    def unconstrained_particles_to_xarray(self) -> xr.Dataset | None:
        if self.lw is None:
            return None
        variables = self.variables("unconstrained_particles")
        return _dataset(variables, self.coords(particle=np.arange(self.k // self.c)),
                        []) if variables else None

    def evidence_to_xarray(self) -> xr.Dataset:
        """The pooled per-example estimate and its diagnostics."""
        ds = _dataset(self.variables("evidence"), {self.ex: np.arange(self.n)}, [])
        if "pareto_k" in ds and self.k is not None:
            ds["pareto_k"].attrs.update(good_k=float(good_k(self.k)), n_samples=int(self.k))
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

    def attrs(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {**_versions(), "created_at": _created_at(),
                 "pyrolik_result": type(self.result).__name__}
        for field, spec in declared(self.result).items():
            value = getattr(self.result, field)
            if spec.group == "attrs" and (value is not None or spec.codec == "none"):
                attrs[str(spec.name)] = _attr(value, spec.codec)
        attrs["layout"] = LAYOUT
        if self.c is not None:
            attrs["num_blocks"] = int(self.c)
        return attrs

    def to_datatree(self) -> xr.DataTree:
        groups = self.groups()
        return _tree({g: groups.get(g) for g in ORDER}, self.attrs())


class AISConverter(EstimateConverter):
    """Forward and reverse AIS: the estimate's groups, and what the run recorded along its path."""

    def _path_coords(self) -> dict[str, Any]:
        return self.coords(step=_np(self.result.trace_steps), particle=np.arange(self.k // self.c))

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
            variables["ess"] = (["step", "chain", self.ex], kish_ess(lw, axis=2))
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


class BDMCConverter:
    """A BDMC result: its two runs as subtrees, the sandwich, the simulated latents and their PIT."""

    def __init__(self, result: Any, num_blocks: int = DEFAULT_BLOCKS):
        self.result = result
        self.ex = example_dim(result)
        self.subtrees = {name: to_datatree(getattr(result, name), num_blocks=num_blocks)
                         for name in NESTED}

    def evidence_to_xarray(self) -> xr.Dataset:
        """Both bounds per example ``(bound, <plate>)``, the gap and its MCSE."""
        lo, up, ex = self.result.lower, self.result.upper, self.ex
        ev: dict[str, Any] = {
            "log_marginal_likelihood": (("bound", ex), np.stack([_np(lo.log_likelihood),
                                                                 _np(up.log_likelihood)])),
            "gap": ((ex,), _np(self.result.per_example_gap))}
        if lo.mcse is not None and up.mcse is not None:
            mcse = np.stack([_np(lo.mcse), _np(up.mcse)])
            ev["mcse"] = (("bound", ex), mcse)
            ev["gap_mcse"] = ((ex,), np.sqrt((mcse ** 2).sum(0)))
        return _one_draw(xr.Dataset(ev, coords={ex: np.arange(len(self.result.x)),
                                                "bound": ["lower", "upper"]}))

    def simulated_to_xarray(self) -> xr.Dataset | None:
        """The exact latents that generated ``x``, ``(<plate>, ...)`` or ``(sample, <plate>, ...)``."""
        lat, n = self.result.latents, len(self.result.x)
        if not lat:
            return None
        variables = {s: _laid_out(s, _np(v), (EX,) if v.shape[0] == n else ("sample", EX), self.ex)
                     for s, v in lat.items()}
        return _one_draw(_dataset(variables, {self.ex: np.arange(n)}, []))

    def calibration_to_xarray(self, simulated: xr.Dataset | None) -> xr.Dataset | None:
        """The PIT of each simulated latent among the forward run's resampled draws."""
        post = self.subtrees["lower"].children.get("posterior")
        if simulated is None or post is None or any(
                da.dims[2] != self.ex for da in simulated.data_vars.values()):
            return None
        truth = simulated.squeeze(("chain", "draw"), drop=True)
        return _one_draw(xr.Dataset({s: pit(post.dataset[s], truth[s]) for s in truth.data_vars
                                     if s in post.dataset}))

    def groups(self) -> dict[str, xr.Dataset | None]:
        simulated = self.simulated_to_xarray()
        lower = self.subtrees["lower"]
        return {"evidence": self.evidence_to_xarray(), "simulated": simulated,
                "calibration": self.calibration_to_xarray(simulated),
                **{g: lower[g].to_dataset() for g in ("posterior", "sample_stats")
                   if g in lower.children},
                **{f"{name}/{g}": node.to_dataset() for name, sub in self.subtrees.items()
                   for g, node in sub.children.items()}}

    def to_datatree(self) -> xr.DataTree:
        r = self.result
        tree = _tree(self.groups(), {
            **_versions(), "pyrolik_result": type(r).__name__, "method": "bdmc",
            "bound": "sandwich", "gap": float(r.gap), "gap_stderr": float(r.gap_stderr),
            "wall_time": float(r.wall_time), "created_at": _created_at(), "layout": LAYOUT})
        for name, sub in self.subtrees.items():
            tree[name].attrs = dict(sub.attrs)
        return tree


def to_datatree(result: Any, *, num_blocks: int = DEFAULT_BLOCKS) -> xr.DataTree:
    """Export a result (AIS, reverse AIS, IWAE, likelihood weighting, KDE or BDMC) to a DataTree.

    Groups and dims: ``docs/export.md``. ``num_blocks``: ArviZ chains the K chains are split into
    (:mod:`pyrolik.ops.stats`); ``posterior`` holds draws resampled with the result's seed.
    """
    if getattr(result, "exports_itself", False):  # e.g. pyrolik.distortion's curves
        return result.to_datatree()
    kind = getattr(result, "converter", None)
    if kind is None:
        raise TypeError(f"expected a pyrolik result (EstimateResult, AISResult or BDMCResult), got "
                        f"{type(result).__name__}")
    check_blocks(num_blocks)
    return kind(result, num_blocks).to_datatree()


def flatten(tree: xr.DataTree) -> xr.DataTree:
    """One level of groups: a BDMC tree's ``lower/posterior`` becomes ``lower_posterior``, ....

    The layout ArviZ 0.x reads (:func:`to_inference_data`, :func:`pyrolik.save`); the attrs of
    ``lower`` and ``upper`` go onto each of their groups. A flat tree is returned as it is.
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
    return _tree(dict(groups), {str(k): v for k, v in tree.attrs.items()})


def to_inference_data(result: Any, *, num_blocks: int = DEFAULT_BLOCKS):
    """Export to an :class:`arviz.InferenceData` (ArviZ 0.x); a DataTree under ArviZ 1.x."""
    import arviz as az

    tree = result if isinstance(result, xr.DataTree) else to_datatree(result, num_blocks=num_blocks)
    if not hasattr(az, "InferenceData"):  # ArviZ 1.x: the DataTree is its InferenceData
        return tree
    flat = flatten(tree)
    # Any: InferenceData's **kwargs stub also covers its bool options, so a dict of Datasets fails
    groups: dict[str, Any] = {name: node.to_dataset() for name, node in flat.children.items()}
    return az.InferenceData(attrs=dict(flat.attrs), **groups)
