r"""The pilot run of :class:`pyrolik.mcmc.adaptation.Pilot`: step sizes per example and temperature.

A short AIS pass on a coarse copy of the schedule, from exact draws of :math:`f_0`, adapts one step
size per example toward the target acceptance from the population acceptance of that example's
chains, :math:`\log\epsilon_n \mathrel{+}= g\,(\bar a_n - a^*)` (and, optionally, a diagonal inverse
mass matrix from the variance of the chains). It warms up at :math:`\beta = 0` and at
:math:`\beta = 1` (``WARMUP_TRANSITIONS`` each), so starting far from a good step size costs nothing
(the slow adaptation of ``PEERS.md`` is avoided). The sizes met at each pilot temperature are smoothed
into a :class:`StepSizes` table, beside the across-chain variance of
:math:`r = \log f_1 - \log f_0` per example at each pilot temperature (measured after that
temperature's transitions), from which ``schedule="adaptive"`` is built
(:func:`pyrolik.mcmc.schedules.adaptive`). The transitions use the kernel's step-size jitter, so the
acceptance the pilot aims for is the one the estimating run will see.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import Tensor

from pyrolik.mcmc.step_sizes import StepSizes
from pyrolik.mcmc.transition import HMCState, HMCTransition
from pyrolik.model.target import AnnealingPath

__all__ = ["run_pilot", "PilotSettings", "WARMUP_TRANSITIONS"]

WARMUP_TRANSITIONS = 10  # adaptation transitions at beta = 0 before the pilot anneals, and at 1


def _smooth(table: Tensor, width: int = 5) -> Tensor:
    """Centered moving average along dim 0 with edge padding (the pilot's estimates are noisy)."""
    if table.shape[0] < width:
        return table
    pad = width // 2
    padded = torch.cat([table[:1].expand(pad, *table.shape[1:]), table,
                        table[-1:].expand(pad, *table.shape[1:])])
    return padded.unfold(0, width, 1).mean(-1)


def _coarse(schedule: Tensor, num_pilot: int) -> Tensor:
    idx = torch.linspace(0, len(schedule) - 1, num_pilot + 1).round().long()
    return schedule[torch.unique(idx)]


def _variance(z: Tensor, k: int, n: int) -> Tensor:
    """Per-example variance across chains, regularised toward 1e-3 as in Stan's warm-up."""
    zz = z.reshape(k, n, -1)
    var = zz.var(0, unbiased=True) if k > 1 else torch.ones_like(zz[0])
    return (k / (k + 5.0)) * var + 1e-3 * (5.0 / (k + 5.0))


class PilotSettings(Protocol):
    """What the pilot reads of its strategy (:class:`pyrolik.mcmc.adaptation.Pilot`)."""

    step_size: float
    target_accept: float
    gain: float
    chains: int | None
    mass_matrix: bool

    def pilot_steps(self, num_steps: int) -> int:
        """Pilot temperatures for a run of ``num_steps``."""


def run_pilot(strategy: PilotSettings, path: AnnealingPath, z0: Tensor, kernel: HMCTransition,
              schedule: Tensor, generator: torch.Generator | None) -> StepSizes:
    """Run the pilot from ``z0`` (exact draws of the path's :math:`f_0`); return the table.

    Costs ``strategy.pilot_transitions(num_steps)`` transitions of ``strategy.chains`` chains per
    example (default: all of the path's).
    """
    target = path.target
    if strategy.chains is not None and strategy.chains < target.num_chains:
        z0 = z0[: strategy.chains * target.num_examples]
        path = path.first_chains(strategy.chains)
        target = path.target
    k, n = target.num_chains, target.num_examples
    num_steps = len(schedule) - 1
    betas = _coarse(schedule, strategy.pilot_steps(num_steps)).to(z0.dtype)
    fn = path.value_and_grad

    state: HMCState = kernel.init(z0, fn)
    log_eps = z0.new_full((n,), math.log(strategy.step_size))
    inv_mass = _variance(z0, k, n) if strategy.mass_matrix else None

    def transition(state, beta, log_eps, inv_mass):
        rows_beta = beta.expand(k * n)
        eps = log_eps.exp().repeat(k)
        im = None if inv_mass is None else inv_mass.repeat(k, 1)
        state, info = kernel.step(state, fn, rows_beta, eps, generator, im)
        acc = info.acceptance_rate.reshape(k, n).mean(0)
        return state, log_eps + strategy.gain * (acc - strategy.target_accept)

    logs, masses, variances = [], [], []
    for j, beta in enumerate(betas):
        repeats = WARMUP_TRANSITIONS if j in (0, len(betas) - 1) else 1
        history = []
        for _ in range(repeats):
            state, log_eps = transition(state, beta, log_eps, inv_mass)
            history.append(log_eps)
            if strategy.mass_matrix:
                inv_mass = _variance(state.z, k, n)
        # a warm-up's last value oscillates around the target (acceptance falls off a cliff just
        # above the best step size in low dimensions): keep the mean of its second half
        logs.append(torch.stack(history[len(history) // 2 :]).mean(0))
        variances.append(state.log_ratio.reshape(k, n).var(0) if k > 1
                         else torch.full_like(log_eps, torch.nan))
        if inv_mass is not None:  # with strategy.mass_matrix
            masses.append(inv_mass)
    log_table = _smooth(torch.stack(logs))
    mass_table = _smooth(torch.stack(masses)) if strategy.mass_matrix else None
    return StepSizes(betas, log_table, mass_table, torch.stack(variances))
