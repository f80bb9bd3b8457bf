r"""Adaptation strategies: how each annealing step's HMC step size (and mass matrix) is chosen.

A strategy is chosen once, in :class:`pyrolik.HMC` (``adapt="pilot" | "online" | None``, or a
strategy object), and used in one place, the AIS driver: before a batch's chains start,
:meth:`Adaptation.pilot` may plan a pilot run (:mod:`pyrolik.mcmc.pilot`), which the driver runs
like any annealing run and which leaves a :class:`StepSizes` table; :meth:`Adaptation.tuning` then
gives the engine a :class:`Tuning`, which it asks for the :class:`HMCParams` of every transition
and updates with that transition's diagnostics and state.

- :class:`Pilot` (the default): a short AIS pass on a coarse copy of the schedule adapts one step
  size per example toward the target acceptance, from the *population* acceptance of that example's
  chains, :math:`\log\epsilon_n \mathrel{+}= g\,(\bar a_n - a^*)`; the sizes met at each pilot
  temperature are smoothed into a table that the estimating run reads, interpolated in
  :math:`\beta`, and never changes. The pilot's chains are independent of the estimating chains, so
  the run is an exact AIS estimator (Neal 2001) in both directions, which is what BDMC needs. The
  same table carries the pilot's variance of :math:`\log f_1 - \log f_0` per temperature, from
  which ``schedule="adaptive"`` is built, equally independent of the estimating chains.

  The default target acceptance is 0.9, not the 0.65 of Wu et al. (2017): what AIS needs from a
  transition is movement of :math:`r = \log f_1 - \log f_0` (the weights' increments), and the
  expected squared jump of :math:`r` per gradient peaks at acceptances of 0.85-0.95 (at 0.97-1 on a
  linear-Gaussian decoder, whose stiff directions carry :math:`r`), while the jump in :math:`z`
  that 0.65 maximises is dominated by directions :math:`r` does not depend on. On the binarized-MNIST
  reference model 0.9 gives a several times smaller BDMC gap than 0.65, and four pilot chains per
  example tune as well as ten (``benchmarks/RESULTS.md``, "Kernel design figures").
- :class:`Online`: each chain adapts its own step size from its own acceptance during the run, as in
  Wu et al. (2017); cheaper, but a chain's history then shapes its transitions, which biases the
  weights slightly (outside Neal's unbiasedness argument).
- :class:`Fixed`: one step size throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from torch import Tensor

from pyrolik.mcmc.pilot import WARMUP_TRANSITIONS, PilotRun, plan_pilot
from pyrolik.mcmc.step_sizes import HMCParams, StepSizes

__all__ = ["Tuning", "TableTuning", "RowTuning", "Adaptation", "Pilot", "Online", "Fixed",
           "from_settings", "HMCParams", "StepSizes", "PilotRun", "WARMUP_TRANSITIONS"]

# -- what the engine reads ---------------------------------------------------------------------------
class TransitionInfo(Protocol):
    """What a tuning reads of a transition's diagnostics (an :class:`HMCInfo`, or the engine's
    per-step info that extends it)."""

    @property
    def acceptance_rate(self) -> Tensor:
        """``(rows,)`` the acceptance probability of each row's proposal."""


class Tuning(Protocol):
    """The engine's view of an adaptation: parameters for the next transition, updated after it."""

    def params(self, beta: Tensor) -> HMCParams:
        """Parameters of the transition to the betas ``(rows,)`` of the rows (chain-major)."""

    def update(self, info: TransitionInfo, state: Any) -> Tuning:
        """The tuning after a transition with diagnostics ``info`` that left the chains in
        ``state`` (the engine's state; a new object, never in place)."""

    def state(self) -> tuple:
        """Tensors to checkpoint; :meth:`restore` takes them back."""

    def restore(self, state: tuple) -> Tuning:
        """The tuning with a checkpointed :meth:`state`."""


@dataclass(frozen=True)
class TableTuning:
    """Step sizes (and masses) read from a frozen :class:`StepSizes` table: never updated."""

    table: StepSizes
    num_chains: int

    def params(self, beta: Tensor) -> HMCParams:
        eps, inv_mass = self.table.at(beta.reshape(self.num_chains, -1))  # (K, N): each row's beta
        rows = eps.numel()
        return HMCParams(eps.reshape(rows), None if inv_mass is None else inv_mass.reshape(rows, -1))

    def update(self, info: TransitionInfo, state: Any = None) -> TableTuning:
        return self

    def state(self) -> tuple:
        return ()

    def restore(self, state: tuple) -> TableTuning:
        return self


@dataclass(frozen=True)
class RowTuning:
    r"""One log step size per row; with ``gain > 0``, :math:`\log\epsilon \mathrel{+}= g\,(a - a^*)`
    after every transition, from that row's own acceptance ``a``."""

    log_step_size: Tensor  # (rows,)
    gain: float = 0.0
    target_accept: float = 0.65

    def params(self, beta: Tensor) -> HMCParams:
        return HMCParams(self.log_step_size.exp())

    def update(self, info: TransitionInfo, state: Any = None) -> RowTuning:
        if not self.gain:
            return self
        return RowTuning(self.log_step_size + self.gain * (info.acceptance_rate - self.target_accept),
                         self.gain, self.target_accept)

    def state(self) -> tuple:
        return (self.log_step_size,)

    def restore(self, state: tuple) -> RowTuning:
        return RowTuning(state[0], self.gain, self.target_accept)


# -- the strategies ------------------------------------------------------------------------------------
class Adaptation:
    """Base of the strategies. ``name`` is what results and files record (``settings["adapt"]``)."""

    name: ClassVar[str | None]
    step_size: float
    target_accept: float | None = None

    def pilot(self, num_chains: int, schedule: Tensor) -> PilotRun | None:
        """The run to make before the estimating chains start, independent of them, on the first
        ``pilot_chains(num_chains)`` of ``num_chains`` chains per example (``None``: none)."""
        return None

    def tuning(self, table: StepSizes | None, num_chains: int, num_examples: int,
               like: Tensor) -> Tuning:
        """The engine's :class:`Tuning` for ``num_chains * num_examples`` rows (``like``: dtype
        and device)."""
        raise NotImplementedError

    def pilot_transitions(self, num_steps: int) -> int:
        """Transitions the pilot runs per pilot chain before a run of ``num_steps`` (0: no pilot)."""
        return 0

    def pilot_chains(self, num_chains: int) -> int:
        """Chains per example the pilot runs when the run has ``num_chains``."""
        return 0

    def settings(self) -> dict:
        """The :class:`pyrolik.HMC` constructor arguments that give this strategy."""
        raise NotImplementedError


def _row_tuning(step_size: float, gain: float, target: float, k: int, n: int, like: Tensor):
    return RowTuning(like.new_full((k * n,), math.log(step_size)), gain, target)


@dataclass(frozen=True)
class Fixed(Adaptation):
    """``step_size`` at every transition (``HMC(adapt=None)``)."""

    step_size: float = 0.1
    name: ClassVar[str | None] = None

    def tuning(self, table, num_chains, num_examples, like):
        return _row_tuning(self.step_size, 0.0, 0.65, num_chains, num_examples, like)

    def settings(self) -> dict:
        return {"step_size": self.step_size, "adapt": None}


@dataclass(frozen=True)
class Online(Adaptation):
    """Each chain adapts its own step size from its own acceptance (slightly biased; see module)."""

    step_size: float = 0.1
    target_accept: float = 0.65
    gain: float = 1.0
    name: ClassVar[str | None] = "online"

    def tuning(self, table, num_chains, num_examples, like):
        return _row_tuning(self.step_size, self.gain, self.target_accept, num_chains,
                           num_examples, like)

    def settings(self) -> dict:
        return {"step_size": self.step_size, "target_accept": self.target_accept,
                "adapt": "online", "adapt_gain": self.gain}


@dataclass(frozen=True)
class Pilot(Adaptation):
    """Per-example, per-temperature step sizes from a pilot run, frozen for the estimating run.

    Parameters
    ----------
    step_size : float
        Where the pilot's adaptation starts.
    target_accept : float
        The acceptance rate the pilot aims for (0.9: see the module docstring).
    fraction, min_steps : float, int
        Pilot annealing steps: ``fraction`` of the run's, at least ``min_steps``.
    chains : int, optional
        Chains per example the pilot runs, at most the run's (BDMC: of its forward half); ``None``:
        all of them. Default 4.
    mass_matrix : bool
        Also a diagonal inverse mass matrix per example and temperature, from the variance of the
        pilot chains.
    gain : float
        Gain of the pilot's update :math:`\\log\\epsilon \\mathrel{+}= g(\\bar a - a^*)`.
    """

    step_size: float = 0.1
    target_accept: float = 0.9
    fraction: float = 0.2
    min_steps: int = 20
    chains: int | None = 4
    mass_matrix: bool = False
    gain: float = 1.0
    name: ClassVar[str | None] = "pilot"

    def pilot_steps(self, num_steps: int) -> int:
        """Annealing steps of the pilot for a run of ``num_steps``: ``fraction`` of them, at least
        ``min_steps``, at most ``num_steps``; the pilot visits ``pilot_steps + 1`` temperatures, the
        first and last with ``WARMUP_TRANSITIONS`` transitions each (:meth:`pilot_transitions`)."""
        return min(num_steps, max(self.min_steps, round(self.fraction * num_steps)))

    def pilot_transitions(self, num_steps: int) -> int:
        # pilot_steps + 1 temperatures: one transition at each inner one, the warm-ups at the ends
        return self.pilot_steps(num_steps) - 1 + 2 * WARMUP_TRANSITIONS

    def pilot_chains(self, num_chains: int) -> int:
        return min(self.chains or num_chains, num_chains)

    def pilot(self, num_chains: int, schedule: Tensor) -> PilotRun:
        return plan_pilot(self, self.pilot_chains(num_chains), schedule)

    def tuning(self, table, num_chains, num_examples, like):
        return TableTuning(table, num_chains)

    def settings(self) -> dict:
        return {"step_size": self.step_size, "target_accept": self.target_accept, "adapt": "pilot",
                "pilot_fraction": self.fraction, "min_pilot_steps": self.min_steps,
                "pilot_chains": self.chains, "mass_matrix": self.mass_matrix,
                "adapt_gain": self.gain}


ADAPT_MODES = ("pilot", "online", None)


def from_settings(adapt: str | Adaptation | None = "pilot", *, step_size: float = 0.1,
                  target_accept: float | None = None, pilot_fraction: float = 0.2,
                  min_pilot_steps: int = 20, pilot_chains: int | None = 4,
                  mass_matrix: bool = False, adapt_gain: float = 1.0) -> Adaptation:
    """The strategy named by :class:`pyrolik.HMC`'s constructor arguments (checked here, once).

    ``target_accept=None`` takes the strategy's own default (pilot 0.9, online 0.65).
    """
    if isinstance(adapt, Adaptation):
        return adapt
    if not step_size > 0:
        raise ValueError(f"step_size must be positive, got {step_size}")
    if target_accept is None:
        target_accept = Online.target_accept if adapt == "online" else Pilot.target_accept
    if not 0 < target_accept < 1:
        raise ValueError(f"target_accept must be in (0, 1), got {target_accept}")
    if adapt not in ADAPT_MODES:
        raise ValueError(f"adapt must be one of {ADAPT_MODES} or an adaptation strategy, got "
                         f"{adapt!r}")
    if not 0 < pilot_fraction <= 1:
        raise ValueError(f"pilot_fraction must be in (0, 1], got {pilot_fraction}")
    if pilot_chains is not None and (isinstance(pilot_chains, bool) or not isinstance(
            pilot_chains, int) or pilot_chains < 1):
        raise ValueError(f"pilot_chains must be a positive integer or None, got {pilot_chains!r}")
    if mass_matrix and adapt != "pilot":
        raise ValueError("mass_matrix=True needs adapt='pilot' (the pilot run estimates it)")
    if adapt is None:
        return Fixed(step_size)
    if adapt == "online":
        return Online(step_size, target_accept, adapt_gain)
    return Pilot(step_size, target_accept, pilot_fraction, min_pilot_steps, pilot_chains,
                 mass_matrix, adapt_gain)
