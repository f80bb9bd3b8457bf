r"""Pilot tuning of HMC step sizes (and a diagonal mass matrix) per example and temperature.

A short AIS pass on a coarse copy of the schedule adapts one step size per example toward the target
acceptance rate, from the *population* acceptance of that example's chains:
:math:`\log\epsilon_n \mathrel{+}= g\,(\bar a_n - a^*)`. The sizes met at each pilot temperature are
smoothed and stored in a :class:`StepSizes` table; the estimating run (forward or reverse) reads
them, interpolated in :math:`\beta`, and never adapts. Because the pilot chains are independent of
the estimating chains, the estimating run is an exact AIS estimator (Neal 2001) in both directions,
which is what BDMC needs. Starting far from a good step size costs nothing: the pilot warms up at
:math:`\beta = 0` first (the slow adaptation of ``PEERS.md`` is avoided).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from pyrolik.mcmc.hmc import HMC, HMCState
from pyrolik.model.target import Target

__all__ = ["StepSizes", "pilot", "pilot_steps", "WARMUP_TRANSITIONS"]

WARMUP_TRANSITIONS = 10  # adaptation transitions at beta = 0 before the pilot anneals, and at 1


class StepSizes(NamedTuple):
    """Frozen per-example step sizes (and inverse masses) on a grid of betas."""

    betas: Tensor  # (P,) increasing from 0 to 1
    log_step_size: Tensor  # (P, N)
    inv_mass: Tensor | None = None  # (P, N, d)

    def _weights(self, beta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b = beta.to(self.betas).contiguous()
        hi = torch.searchsorted(self.betas, b).clamp(1, len(self.betas) - 1)
        lo = hi - 1
        w = ((b - self.betas[lo]) / (self.betas[hi] - self.betas[lo])).clamp(0.0, 1.0)
        return lo, hi, w

    def at(self, beta: Tensor) -> tuple[Tensor, Tensor | None]:
        """Step sizes ``(C, N)`` and inverse masses ``(C, N, d)`` at the betas ``(C,)`` of C chains.

        Log step sizes and log inverse masses are interpolated linearly in beta.
        """
        lo, hi, w = self._weights(beta)
        w1 = w.unsqueeze(-1)
        eps = torch.exp((1 - w1) * self.log_step_size[lo] + w1 * self.log_step_size[hi])
        if self.inv_mass is None:
            return eps, None
        w2 = w1.unsqueeze(-1)
        log_m = (1 - w2) * self.inv_mass[lo].log() + w2 * self.inv_mass[hi].log()
        return eps, log_m.exp()


def _smooth(table: Tensor, width: int = 5) -> Tensor:
    """Centered moving average along dim 0 with edge padding (the pilot's estimates are noisy)."""
    if table.shape[0] < width:
        return table
    pad = width // 2
    padded = torch.cat([table[:1].expand(pad, *table.shape[1:]), table,
                        table[-1:].expand(pad, *table.shape[1:])])
    return padded.unfold(0, width, 1).mean(-1)


def pilot_steps(kernel: HMC, num_steps: int) -> int:
    """Annealing steps of the pilot for a run of ``num_steps``: ``pilot_fraction`` of them, at least
    ``min_pilot_steps``, at most ``num_steps`` (the warm-ups' ``2 * WARMUP_TRANSITIONS`` come on top)."""
    return min(num_steps, max(kernel.min_pilot_steps, round(kernel.pilot_fraction * num_steps)))


def _coarse(schedule: Tensor, num_pilot: int) -> Tensor:
    idx = torch.linspace(0, len(schedule) - 1, num_pilot + 1).round().long()
    return schedule[torch.unique(idx)]


def _variance(z: Tensor, k: int, n: int) -> Tensor:
    """Per-example variance across chains, regularised toward 1e-3 as in Stan's warm-up."""
    zz = z.reshape(k, n, -1)
    var = zz.var(0, unbiased=True) if k > 1 else torch.ones_like(zz[0])
    return (k / (k + 5.0)) * var + 1e-3 * (5.0 / (k + 5.0))


def pilot(
    target: Target,
    path: str,
    z0: Tensor,
    kernel: HMC,
    schedule: Tensor,
    generator: torch.Generator | None,
) -> StepSizes:
    """Run the pilot pass from ``z0`` (exact draws of the initial distribution); return the table.

    Costs :func:`pilot_steps` ``+ 2 * WARMUP_TRANSITIONS``
    transitions of ``kernel.pilot_chains`` chains per example (default: all of ``target``'s).
    """
    if kernel.pilot_chains is not None and kernel.pilot_chains < target.num_chains:
        z0 = z0[: kernel.pilot_chains * target.num_examples]
        target = target.first_chains(kernel.pilot_chains)
    k, n = target.num_chains, target.num_examples
    num_steps = len(schedule) - 1
    betas = _coarse(schedule, pilot_steps(kernel, num_steps)).to(z0.dtype)

    def fn(z):
        return target.value_and_grad(z, path)

    state: HMCState = kernel.init(z0, fn)
    log_eps = z0.new_full((n,), math.log(kernel.step_size))
    inv_mass = _variance(z0, k, n) if kernel.mass_matrix else None

    def transition(state, beta, log_eps, inv_mass):
        rows_beta = beta.expand(k * n)
        eps = log_eps.exp().repeat(k)
        im = None if inv_mass is None else inv_mass.repeat(k, 1)
        state, info = kernel.step(state, fn, rows_beta, eps, generator, im)
        acc = info.acceptance_rate.reshape(k, n).mean(0)
        return state, log_eps + kernel.adapt_gain * (acc - kernel.target_accept)

    logs, masses = [], []
    for j, beta in enumerate(betas):
        repeats = WARMUP_TRANSITIONS if j in (0, len(betas) - 1) else 1
        history = []
        for _ in range(repeats):
            state, log_eps = transition(state, beta, log_eps, inv_mass)
            history.append(log_eps)
            if kernel.mass_matrix:
                inv_mass = _variance(state.z, k, n)
        # a warm-up's last value oscillates around the target (acceptance falls off a cliff just
        # above the best step size in low dimensions): keep the mean of its second half
        logs.append(torch.stack(history[len(history) // 2 :]).mean(0))
        if kernel.mass_matrix:
            masses.append(inv_mass)
    log_table = _smooth(torch.stack(logs))
    mass_table = _smooth(torch.stack(masses)) if kernel.mass_matrix else None
    return StepSizes(betas, log_table, mass_table)
