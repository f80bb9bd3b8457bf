r"""The weighted part of an export: resampled ``posterior``, raw ``particles`` and ``evidence``.

For a forward AIS run, IWAE or likelihood weighting with ``K`` chains (samples) per example split
into ``C`` blocks of ``M`` (:mod:`pyrolik.ops.stats`); ``<plate>`` is the example dim:

===========================  ==================================================================
group                        variables (dims)
===========================  ==================================================================
``posterior``                per latent site, equally weighted draws: each block's ``M`` final
                             states systematically resampled by their weights
                             ``(chain, draw, <plate>, <site>_dim_i)``; ``chain`` = block
``unconstrained_posterior``  ``u (chain, draw, <plate>, latent_dim)``, the same draws
``sample_stats``             per draw: ``particle`` (the chain it copies), its ``log_weight``,
                             ``acceptance_rate`` (run mean), ``diverging`` (any divergent
                             proposal), ``max_energy_error`` (largest absolute energy error at the
                             recorded steps) ``(chain, draw, <plate>)``
``particles``                the raw final states and ``log_weight (chain, particle, <plate>)``
                             (``particle`` = position in the block: chain ``c * M + particle``);
                             per block ``log_marginal_likelihood`` and ``ess (chain, <plate>)``;
                             AIS: ``mean_acceptance_rate``, ``num_divergent``
``unconstrained_particles``  AIS: the raw final states ``u (chain, particle, <plate>,
                             latent_dim)``, flat and unconstrained
``evidence``                 pooled over all ``K``: ``log_marginal_likelihood``, ``mcse``, ``ess``,
                             ``pareto_k`` (attrs ``good_k``, ``n_samples``) ``(<plate>)``; scalar
                             coordinate ``bound``
===========================  ==================================================================

Reverse AIS ends at :math:`\beta = 0`: its final states go unresampled into ``prior`` /
``unconstrained_prior`` / ``sample_stats_prior`` (``draw`` = the particle's place in its block),
and its block and pooled ``log_marginal_likelihood`` are :math:`-\log\frac1M\sum w`, upper bounds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pyrolik.ops.stats import DEFAULT_BLOCKS, num_blocks, systematic

__all__ = ["weighted_groups", "blocked", "block_log_z", "kish_ess", "good_k", "BLOCK_DIMS",
           "PARTICLE_STATS"]

BLOCK_DIMS = ["chain", "particle"]
#: ``particles`` variables that are not latent sites (a site may not have one of these names)
PARTICLE_STATS = ("log_weight", "log_marginal_likelihood", "ess", "mean_acceptance_rate",
                  "num_divergent")


def _np(t: Any) -> np.ndarray:
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


def good_k(num_samples: int) -> float:
    r""":math:`\min(1 - 1/\log_{10} K,\ 0.7)` (Vehtari et al. 2024); ``-inf`` for ``K = 1``."""
    return -math.inf if num_samples < 2 else min(1.0 - 1.0 / math.log10(num_samples), 0.7)


def blocked(a: np.ndarray, c: int, axis: int = 0) -> np.ndarray:
    """Split axis ``axis`` (length ``K``) into ``(c, K // c)``: block-major, chains in order."""
    shape = a.shape
    return a.reshape(shape[:axis] + (c, shape[axis] // c) + shape[axis + 1:])


def _log_mean_exp(lw: np.ndarray, axis: int) -> np.ndarray:
    top = np.max(lw, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.mean(np.exp(lw - top), axis=axis, keepdims=True)) + top
    return np.squeeze(out, axis=axis)


def kish_ess(lw: np.ndarray, axis: int) -> np.ndarray:
    r"""Kish's effective sample size :math:`(\sum w)^2 / \sum w^2` along ``axis``."""
    top = np.max(lw, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    w = np.exp(lw - top)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(w, axis=axis) ** 2 / np.sum(w * w, axis=axis)


def block_log_z(lw: np.ndarray, direction: str = "forward") -> np.ndarray:
    r"""Per block log Z from ``(..., C, M, N)`` log-weights: :math:`\pm\log\frac1M\sum_m w_m`."""
    lme = _log_mean_exp(lw, axis=-2)
    return lme if direction == "forward" else -lme


def _gather(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values`` ``(C, M, N, *event)`` at ``idx`` ``(C, M, N)`` along axis 1."""
    full = idx.reshape(idx.shape + (1,) * (values.ndim - 3))
    return np.take_along_axis(values, np.broadcast_to(full, idx.shape + values.shape[3:]), axis=1)


def _event_dims(name: str, ndim: int) -> list[str]:
    return [f"{name}_dim_{i}" for i in range(ndim)]


def weighted_groups(result: Any, ex: str, make_dataset, *, blocks: int = DEFAULT_BLOCKS,
                    rng: np.random.Generator) -> dict[str, Any]:
    """The groups of the module docstring for ``result`` (AIS or importance sampling).

    ``make_dataset(data, dims, coords, sample_dims)`` builds one group (ArviZ's converter). An
    importance-sampling result's ``draws`` were resampled as its samples streamed by
    (:mod:`pyrolik.infer.resampling`) and are used as they are; they fix the number of blocks.
    """
    draws = getattr(result, "draws", None)
    lw = None if result.log_weights is None else _np(result.log_weights).astype(np.float64)
    n = result.num_examples
    k = lw.shape[0] if lw is not None else result.num_weights
    c = draws["draw_index"].shape[0] if draws else num_blocks(k, blocks)
    m = k // c
    direction = getattr(result, "direction", "forward")
    coords: dict[str, Any] = {"chain": np.arange(c), ex: np.arange(n)}
    groups: dict[str, Any] = {}
    sites = getattr(result, "latents", None) or getattr(result, "samples", None) or {}
    flat = getattr(result, "final_state", None)
    per_chain: dict[str, np.ndarray] = {}
    if getattr(result, "acceptance_rate", None) is not None:
        per_chain["acceptance_rate"] = _np(result.acceptance_rate)
    if getattr(result, "num_divergent", None) is not None:
        per_chain["num_divergent"] = _np(result.num_divergent)
    trace = getattr(result, "trace", None) or {}
    if "energy_error" in trace:
        energy = np.abs(_np(trace["energy_error"]).astype(np.float64))
        per_chain["max_energy_error"] = np.where(np.isfinite(energy), energy, np.inf).max(0)

    # particles: everything raw, by block
    part: dict[str, Any] = {}
    dims: dict[str, list[str]] = {}
    if lw is not None:
        lw_b = blocked(lw, c)  # (C, M, N)
        part = {"log_weight": lw_b, "log_marginal_likelihood": block_log_z(lw_b, direction),
                "ess": kish_ess(lw_b, axis=1)}
        dims = {"log_weight": [*BLOCK_DIMS, ex], "log_marginal_likelihood": ["chain", ex],
                "ess": ["chain", ex]}
        for s, v in sites.items():
            if s in PARTICLE_STATS:
                raise ValueError(f"the latent site {s!r} has the name of a variable of the export's "
                                 f"particles group ({', '.join(PARTICLE_STATS)}): rename the site")
            v = _np(v)
            part[s], dims[s] = blocked(v, c), [*BLOCK_DIMS, ex, *_event_dims(s, v.ndim - 2)]
        flat_b = None if flat is None else blocked(_np(flat), c)
        for name, new in (("acceptance_rate", "mean_acceptance_rate"),
                          ("num_divergent", "num_divergent")):
            if name in per_chain:
                part[new], dims[new] = blocked(per_chain[name], c), [*BLOCK_DIMS, ex]
        groups["particles"] = make_dataset(part, dims, {**coords, "particle": np.arange(m)}, [])
        if flat_b is not None:
            groups["unconstrained_particles"] = make_dataset(
                {"u": flat_b}, {"u": [*BLOCK_DIMS, ex, "latent_dim"]},
                {**coords, "particle": np.arange(m)}, [])

    sample = ["chain", "draw"]
    if draws:  # importance sampling, resampled as it streamed
        d = draws["draw_index"].shape[1]
        draw_coords = {**coords, "draw": np.arange(d)}
        values = {s: _np(v) for s, v in draws.items() if not s.startswith("draw_")}
        if values:
            groups["posterior"] = make_dataset(
                values, {s: [ex, *_event_dims(s, v.ndim - 3)] for s, v in values.items()},
                draw_coords, sample)
        stats = {"particle": _np(draws["draw_index"]),
                 "log_weight": _np(draws["draw_log_weight"])}
        groups["sample_stats"] = make_dataset(stats, dict.fromkeys(stats, [ex]), draw_coords,
                                              sample)
    elif lw is not None and (sites or flat is not None):
        if direction == "forward":
            idx = systematic(lw_b, rng)
            site_group, flat_group, stats_group = ("posterior", "unconstrained_posterior",
                                                   "sample_stats")
        else:  # reverse AIS: its final states approximate the prior, left unweighted
            idx = np.broadcast_to(np.arange(m).reshape(1, m, 1), (c, m, n))
            site_group, flat_group, stats_group = ("prior", "unconstrained_prior",
                                                   "sample_stats_prior")
        draw_coords = {**coords, "draw": np.arange(m)}
        if sites:
            data = {s: _gather(part[s], idx) for s in sites}
            groups[site_group] = make_dataset(data, {s: dims[s][2:] for s in sites}, draw_coords,
                                              sample)
        if flat_b is not None:
            groups[flat_group] = make_dataset({"u": _gather(flat_b, idx)},
                                              {"u": [ex, "latent_dim"]}, draw_coords, sample)
        stats = {"particle": (idx + (np.arange(c) * m).reshape(c, 1, 1)).astype(np.int64),
                 "log_weight": _gather(lw_b, idx)}
        if "acceptance_rate" in per_chain:
            stats["acceptance_rate"] = _gather(blocked(per_chain["acceptance_rate"], c), idx)
        if "num_divergent" in per_chain:
            stats["diverging"] = _gather(blocked(per_chain["num_divergent"], c), idx) > 0
        if "max_energy_error" in per_chain:
            stats["max_energy_error"] = _gather(blocked(per_chain["max_energy_error"], c), idx)
        groups[stats_group] = make_dataset(stats, dict.fromkeys(stats, [ex]), draw_coords, sample)
    groups["evidence"] = evidence_group(result, ex, make_dataset, k)
    return groups


def evidence_group(result: Any, ex: str, make_dataset, num_samples: int | None) -> Any:
    """Pooled ``log_marginal_likelihood``, ``mcse``, ``ess``, ``pareto_k`` per example."""
    data = {"log_marginal_likelihood": _np(result.log_likelihood)}
    for name, attr in (("mcse", "mcse"), ("ess", "ess"), ("pareto_k", "khat")):
        if getattr(result, attr, None) is not None:
            data[name] = _np(getattr(result, attr))
    ds = make_dataset(data, dict.fromkeys(data, [ex]), {ex: np.arange(len(data[
        "log_marginal_likelihood"]))}, [])
    if "pareto_k" in ds and num_samples is not None:
        ds["pareto_k"].attrs.update(good_k=float(good_k(num_samples)), n_samples=int(num_samples))
    return ds.assign_coords(bound=str(result.bound or "none"))
