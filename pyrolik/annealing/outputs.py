"""What one leg of an annealing run yields per batch, and its reduction into an ``AISResult``.

A :class:`LegOutput` is one leg's share of one batch: the unit that is checkpointed and gathered
across processes. :func:`finish` concatenates a leg's outputs over all batches along the examples
and reduces the log-weights once, in float64: :math:`\\log \\hat p(x) = \\log \\frac1K \\sum_k w_k`
for a forward leg, :math:`-\\log \\frac1K \\sum_k w_k` for a reverse one (Neal 2001; Grosse,
Ghahramani & Adams 2015).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from pyrolik.annealing.run import Leg, Problem
from pyrolik.annealing.step_sizes import StepSizes
from pyrolik.ops.stats import (
    effective_sample_size,
    log_mean_exp,
    mcse_log_mean_exp,
    pareto_khat,
)
from pyrolik.results import AISResult

__all__ = ["LegOutput", "finish"]


@dataclass
class LegOutput:
    """One leg's share of one batch: per-chain tensors of shape ``(K, n, ...)``."""

    log_weight: Tensor  # (K, n) float64
    final_state: Tensor  # (K, n, d) unconstrained
    acceptance_rate: Tensor  # (K, n) mean over the run
    num_divergent: Tensor  # (K, n)
    trace: dict[str, Tensor]  # (R, K, n, ...); "beta" (R, K)
    trace_steps: Tensor  # (R,)
    latents: dict[str, Tensor]  # constrained final states (K, n, *site)
    table: tuple | None = None  # the pilot's StepSizes, as a tuple
    schedule: Tensor | None = None  # (T + 1,) the forward betas this batch annealed along
    evaluation: str = "eager"  # how the model was evaluated (AnnealingPath.evaluation)
    plate: str = "example"  # the name of the model's plate over the examples
    num_observed: Tensor | None = None  # (n,) entries of each example observed (bits/dim's D)

    def as_dict(self) -> dict[str, Any]:
        """Plain nested dicts and tensors: what a checkpoint file and ``gather_object`` carry."""
        return asdict(self)


def _evaluation(parts: Sequence[LegOutput]) -> str:
    """``"replay"`` if every batch replayed its recorded evaluation, else the first other status."""
    return next((p.evaluation for p in parts if p.evaluation != "replay"), "replay")


def _visited(base: Tensor, parts: Sequence[LegOutput]) -> tuple[Tensor, Tensor]:
    """The forward schedule ``(T + 1,)`` and the recorded betas ``(R, K)`` when every batch annealed
    along the same betas; else (adaptive schedules of several batches, or one per example) per
    example: ``(T + 1, N)`` and ``(R, K, N)``."""
    scheds = [base if p.schedule is None else p.schedule for p in parts]
    if all(s.dim() == 1 for s in scheds) and all(torch.equal(s, scheds[0]) for s in scheds[1:]):
        return scheds[0], parts[0].trace["beta"]
    sizes = [p.log_weight.shape[1] for p in parts]
    schedule = torch.cat([_per_example(s, n, 2) for s, n in zip(scheds, sizes, strict=True)], dim=1)
    beta = torch.cat([_per_example(p.trace["beta"], n, 3)
                      for p, n in zip(parts, sizes, strict=True)], dim=2)
    return schedule, beta


def _per_example(values: Tensor, n: int, dims: int) -> Tensor:
    """A batch's values with ``dims`` dimensions, the last over its ``n`` examples: as they are
    when they have one, else the same for every example (a trailing dimension of ``n``)."""
    return values if values.dim() == dims else values.unsqueeze(-1).expand(*values.shape, n)


def _observed(parts: Sequence[LegOutput]) -> Tensor | None:
    """The entries observed per example over all batches, or None if some batch did not count."""
    counts = [p.num_observed for p in parts if p.num_observed is not None]
    return torch.cat(counts) if len(counts) == len(parts) else None


def finish(leg: Leg, problem: Problem, parts: Sequence[LegOutput], *, seed: int,
           settings: dict[str, Any], start: float) -> AISResult:
    """Concatenate one leg's batch outputs along the examples and reduce them into an AISResult."""
    forward = leg.direction == "forward"
    lw = torch.cat([p.log_weight for p in parts], dim=1)
    ll = log_mean_exp(lw) if forward else -log_mean_exp(lw)
    trace = {name: torch.cat([p.trace[name] for p in parts], dim=2)
             for name in parts[0].trace if name != "beta"}
    schedule, trace["beta"] = _visited(problem.schedule.betas, parts)
    table = None
    if parts[0].table is not None:
        table = StepSizes.concat([StepSizes(*p.table) for p in parts if p.table is not None])
    x = problem.x
    return AISResult(
        method=leg.method, log_likelihood=ll.to(x.dtype if x.is_floating_point() else ll.dtype),
        bound="lower" if forward else "upper", log_weights=lw,
        ess=effective_sample_size(lw), mcse=mcse_log_mean_exp(lw), khat=pareto_khat(lw), x=x,
        settings={**settings, "evaluation": _evaluation(parts)}, seed=seed,
        wall_time=time.perf_counter() - start, direction=leg.direction, path=problem.path_name,
        schedule=schedule if forward else schedule.flip(0), step_sizes=table,
        final_state=torch.cat([p.final_state for p in parts], dim=1),
        acceptance_rate=torch.cat([p.acceptance_rate for p in parts], dim=1),
        num_divergent=torch.cat([p.num_divergent for p in parts], dim=1),
        trace=trace, trace_steps=parts[0].trace_steps, kernel=problem.kernel,
        example_dim=parts[0].plate, num_observed=_observed(parts),
        latents={name: torch.cat([p.latents[name] for p in parts], dim=1)
                 for name in parts[0].latents},
    )
