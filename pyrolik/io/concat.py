r"""Join the chains (or samples) of runs on the same data into one result: ``pyrolik.concat``."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from pyrolik.io.export import from_datatree
from pyrolik.ops.stats import chain_statistics, log_mean_exp
from pyrolik.results import AISResult, BDMCResult, EstimateResult

__all__ = ["concat"]

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
    if a.x is None or b.x is None or a.x.shape != b.x.shape or not torch.equal(a.x, b.x):
        raise ValueError(f"the results were computed on different data x; {_FIX}")
    if a.log_weights is None or b.log_weights is None:
        raise ValueError("concat needs every weight: rerun with keep_weights=True")
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
        fields.update(ancestor=ancestor, num_resampled=resamplings,
                      trace=_cat(a.trace, b.trace, 1) if same_trace else None,
                      **{n: _cat(getattr(a, n), getattr(b, n))
                         for n in ("latents", "final_state", "acceptance_rate", "num_divergent")})
    else:
        fields.update(samples=_cat(a.samples, b.samples), draws=_draws(a, b, lw_a.shape[0]))
    return dataclasses.replace(a, **fields)
