r"""The pilot of :class:`pyrolik.mcmc.adaptation.Pilot`, as a plan for an ordinary annealing run.

A short AIS pass on a coarse copy of the schedule, from exact draws of :math:`f_0`, adapts one step
size per example toward the target acceptance from the population acceptance of that example's
chains, :math:`\log\epsilon_n \mathrel{+}= g\,(\bar a_n - a^*)` (and, optionally, a diagonal inverse
mass matrix from the variance of the chains). It warms up at :math:`\beta = 0` and at
:math:`\beta = 1` (``WARMUP_TRANSITIONS`` each), so starting far from a good step size costs nothing
(the slow adaptation of ``PEERS.md`` is avoided). The sizes met at each pilot temperature, each
capped by the next temperature's (the adaptation lags a stiffening target; :func:`_no_overshoot`),
are smoothed into a :class:`StepSizes` table, beside the across-chain variance of
:math:`r = \log f_1 - \log f_0` per example at each pilot temperature (measured after that
temperature's transitions), from which ``schedule="adaptive"`` is built
(:func:`pyrolik.mcmc.schedules.adaptive`). The transitions use the kernel's step-size jitter, so the
acceptance the pilot aims for is the one the estimating run will see.

Nothing here loops over transitions: :class:`PilotRun` describes the pilot as an annealing run of
the engine (:mod:`pyrolik.infer.engine`) on its own schedule (the coarse betas, the end ones
repeated for the warm-ups), with a :class:`PilotTuning` that adapts as it goes and a
:class:`PilotTable` hook that builds the table; the driver runs it like any other run, so it
reports progress and checkpoints like one (BlackJAX's ``smc/inner_kernel_tuning.py``: the kernel
never knows it is tuned).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from pyrolik.mcmc.step_sizes import HMCParams, StepSizes
from pyrolik.mcmc.transition import HMCState

__all__ = ["PilotRun", "PilotTuning", "PilotTable", "PilotSettings", "plan_pilot",
           "WARMUP_TRANSITIONS"]

WARMUP_TRANSITIONS = 10  # adaptation transitions at beta = 0 before the pilot anneals, and at 1


def _smooth(table: Tensor, width: int = 5) -> Tensor:
    """Centered moving average along dim 0 with edge padding (the pilot's estimates are noisy)."""
    if table.shape[0] < width:
        return table
    pad = width // 2
    padded = torch.cat([table[:1].expand(pad, *table.shape[1:]), table,
                        table[-1:].expand(pad, *table.shape[1:])])
    return padded.unfold(0, width, 1).mean(-1)


def _no_overshoot(log_table: Tensor) -> Tensor:
    r"""At each pilot temperature, the smaller of its log step size and the next temperature's.

    The pilot's value at :math:`\beta_j` was tuned on acceptances at :math:`\beta_j` and before, so
    where the target stiffens it lags behind; the estimating run reads it, interpolated, up to
    :math:`\beta_{j+1}`, where the target is stiffer still. Taking the next value where it is smaller
    removes that overshoot where step sizes fall and changes nothing where they rise.
    """
    return torch.minimum(log_table, torch.cat([log_table[1:], log_table[-1:]]))


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

    @property
    def step_size(self) -> float: ...

    @property
    def target_accept(self) -> float: ...

    @property
    def gain(self) -> float: ...

    @property
    def mass_matrix(self) -> bool: ...

    def pilot_steps(self, num_steps: int) -> int:
        """Pilot temperatures for a run of ``num_steps``."""


class _Info(Protocol):
    @property
    def acceptance_rate(self) -> Tensor: ...


class _Positioned(Protocol):
    @property
    def position(self) -> HMCState: ...


@dataclass(frozen=True)
class PilotTuning:
    r"""One log step size per example, :math:`\log\epsilon_n \mathrel{+}= g\,(\bar a_n - a^*)` after
    every transition from the mean acceptance of the example's chains; with a mass matrix, the
    diagonal inverse mass per example from the chains' variance after that transition."""

    log_step_size: Tensor  # (n,)
    inv_mass: Tensor | None  # (n, d)
    num_chains: int
    gain: float
    target_accept: float

    def params(self, beta: Tensor) -> HMCParams:
        k = self.num_chains
        return HMCParams(self.log_step_size.exp().repeat(k),
                         None if self.inv_mass is None else self.inv_mass.repeat(k, 1))

    def update(self, info: _Info, state: _Positioned) -> PilotTuning:
        k, n = self.num_chains, self.log_step_size.shape[0]
        acc = info.acceptance_rate.reshape(k, n).mean(0)
        log_eps = self.log_step_size + self.gain * (acc - self.target_accept)
        inv_mass = None if self.inv_mass is None else _variance(state.position.z, k, n)
        return replace(self, log_step_size=log_eps, inv_mass=inv_mass)

    def state(self) -> tuple:
        return (self.log_step_size, self.inv_mass)

    def restore(self, state: tuple) -> PilotTuning:
        return replace(self, log_step_size=state[0], inv_mass=state[1])


class PilotTable:
    """The hook that builds the :class:`StepSizes` table while the pilot runs.

    At the last transition of each pilot temperature it keeps the mean of the second half of the
    log step sizes met there (a warm-up's last value oscillates around the target: acceptance falls
    off a cliff just above the best step size in low dimensions), the across-chain variance of
    :math:`r` per example, and the inverse mass; :meth:`table` smooths them into the table.
    """

    def __init__(self, schedule: Tensor, ends: list[int], num_chains: int, num_examples: int):
        self.betas = schedule[ends, 0]  # (P,) the pilot temperatures
        self.ends, self.num_chains, self.num_examples = frozenset(ends), num_chains, num_examples
        self.history: list[Tensor] = []
        self.logs: list[Tensor] = []
        self.variances: list[Tensor] = []
        self.masses: list[Tensor] = []

    def __call__(self, t: int, state: Any, info: Any, tuning: Any) -> None:
        self.history.append(tuning.log_step_size)
        if t not in self.ends:
            return
        k = self.num_chains
        self.logs.append(torch.stack(self.history[len(self.history) // 2 :]).mean(0))
        self.history = []
        log_ratio = state.position.log_ratio
        self.variances.append(log_ratio.reshape(k, -1).var(0) if k > 1
                              else torch.full_like(tuning.log_step_size, torch.nan))
        if tuning.inv_mass is not None:
            self.masses.append(tuning.inv_mass)

    def table(self) -> StepSizes:
        """The smoothed table, capped where the next temperature's step size is smaller."""
        log_table = _smooth(_no_overshoot(torch.stack(self.logs)))
        mass_table = _smooth(torch.stack(self.masses)) if self.masses else None
        return StepSizes(self.betas, log_table, mass_table, torch.stack(self.variances))

    def state(self) -> dict[str, list[Tensor]]:
        """What a checkpoint keeps (copies of the lists, which the hook goes on appending to)."""
        return {"history": list(self.history), "logs": list(self.logs),
                "variances": list(self.variances), "masses": list(self.masses)}

    def restore(self, saved: dict[str, list[Tensor]]) -> None:
        self.history, self.logs = list(saved["history"]), list(saved["logs"])
        self.variances, self.masses = list(saved["variances"]), list(saved["masses"])


class PilotRun(NamedTuple):
    """The pilot as an annealing run: its chains per example, its schedule, its first tuning and
    the hook that builds the table."""

    num_chains: int
    schedule: Tensor  # (S + 1, 1): beta_0 (the start), then every transition's beta
    ends: list[int]  # the step at which each pilot temperature's transitions end

    def tuning(self, strategy: PilotSettings, z0: Tensor, num_examples: int) -> PilotTuning:
        """The tuning at the start, from the chains' first states ``z0`` ``(k * n, d)``."""
        k, n = self.num_chains, num_examples
        inv_mass = _variance(z0, k, n) if strategy.mass_matrix else None
        return PilotTuning(z0.new_full((n,), math.log(strategy.step_size)), inv_mass, k,
                           strategy.gain, strategy.target_accept)

    def table_hook(self, schedule: Tensor, num_examples: int) -> PilotTable:
        """A fresh :class:`PilotTable` for ``schedule`` (this run's, on the chains' device)."""
        return PilotTable(schedule, self.ends, self.num_chains, num_examples)


def plan_pilot(strategy: PilotSettings, num_chains: int, schedule: Tensor) -> PilotRun:
    """The pilot of a run along ``schedule`` ``(T + 1,)``, on ``num_chains`` chains per example.

    Its temperatures are ``strategy.pilot_steps(T) + 1`` betas of ``schedule``, evenly spaced in
    index; the first and the last get ``WARMUP_TRANSITIONS`` transitions, the others one. It costs
    ``pilot_transitions(T)`` transitions per pilot chain.
    """
    betas = _coarse(schedule, strategy.pilot_steps(len(schedule) - 1))
    repeats = [WARMUP_TRANSITIONS if j in (0, len(betas) - 1) else 1 for j in range(len(betas))]
    column = torch.cat([betas[:1], betas.repeat_interleave(torch.tensor(repeats))])
    ends = torch.tensor(repeats).cumsum(0).tolist()
    return PilotRun(num_chains, column.unsqueeze(-1), ends)
