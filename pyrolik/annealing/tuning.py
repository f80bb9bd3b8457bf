"""Step-size tuning: :class:`Pilot` (default, exact), :class:`Online`, :class:`Fixed`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar, NamedTuple, Protocol

import torch
from torch import Tensor

from pyrolik.annealing.step_sizes import HMCParams, StepSizes

__all__ = ["Tuning", "TableTuning", "RowTuning", "Adaptation", "Pilot", "Online", "Fixed",
           "from_settings", "HMCParams", "StepSizes", "PilotRun", "WARMUP_TRANSITIONS"]

# -- what the engine reads ---------------------------------------------------------------------------
class TransitionInfo(Protocol):
    """What a tuning reads of a transition's diagnostics (``HMCInfo``, the engine's ``AISInfo``)."""

    @property
    def acceptance_rate(self) -> Tensor:
        """``(rows,)`` the acceptance probability of each row's proposal."""


class Tuning(Protocol):
    """The engine's view of an adaptation: parameters for the next transition, updated after it
    (the defaults, of a subclass: never, nothing to checkpoint)."""

    def params(self, beta: Tensor) -> HMCParams:
        """Parameters of the transition to the betas ``(rows,)`` of the rows (chain-major)."""

    def start(self, z0: Tensor) -> Tuning:
        """The tuning at the chains' first states ``z0`` ``(rows, d)``."""
        return self

    def update(self, info: TransitionInfo, state: Any) -> Tuning:
        """The tuning after a transition with diagnostics ``info`` that left the chains in
        ``state`` (the engine's state; a new object, never in place)."""
        return self

    def state(self) -> tuple:
        """Tensors to checkpoint; :meth:`restore` takes them back."""
        return ()

    def restore(self, state: tuple) -> Tuning:
        """The tuning with a checkpointed :meth:`state`."""
        return self


@dataclass(frozen=True)
class TableTuning(Tuning):
    """Step sizes (and masses) read from a frozen :class:`StepSizes` table: never updated."""

    table: StepSizes
    num_chains: int

    def params(self, beta: Tensor) -> HMCParams:
        eps, inv_mass = self.table.at(beta.reshape(self.num_chains, -1))  # (K, N): each row's beta
        rows = eps.numel()
        return HMCParams(eps.reshape(rows), None if inv_mass is None else inv_mass.reshape(rows, -1))

    def update(self, info: TransitionInfo, state: Any = None) -> TableTuning:
        return self


@dataclass(frozen=True)
class RowTuning(Tuning):
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


# -- the pilot run ---------------------------------------------------------------------------------

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
    """At each pilot temperature, the smaller of its log step size and the next temperature's."""
    return torch.minimum(log_table, torch.cat([log_table[1:], log_table[-1:]]))


def _coarse(schedule: Tensor, num_pilot: int) -> Tensor:
    idx = torch.linspace(0, len(schedule) - 1, num_pilot + 1).round().long()
    return schedule[torch.unique(idx)]


def _variance(z: Tensor, k: int, n: int) -> Tensor:
    """Per-example variance across chains, regularised toward 1e-3 as in Stan's warm-up."""
    zz = z.reshape(k, n, -1)
    var = zz.var(0, unbiased=True) if k > 1 else torch.ones_like(zz[0])
    return (k / (k + 5.0)) * var + 1e-3 * (5.0 / (k + 5.0))


def weighted_variance(values: Tensor, log_weights: Tensor) -> Tensor:
    r"""Per example (columns), the variance of ``values`` ``(k, n)`` under the chains' normalised
    weights :math:`W`, :math:`\sum_k W_k (v_k - \bar v)^2 / (1 - \sum_k W_k^2)`; equal weights:
    the unbiased variance; NaN with one chain or all weight on one (why: ``docs/kernel.md``)."""
    w = torch.softmax(log_weights.to(values.dtype), 0)
    mean = (w * values).sum(0)
    spread = (w * (values - mean) ** 2).sum(0)
    return spread / (1 - (w * w).sum(0))


@dataclass(frozen=True)
class PilotTuning:
    r"""Per example :math:`\log\epsilon_n \mathrel{+}= g\,(\bar a_n - a^*)` after every transition
    (its chains' mean acceptance), with a mass matrix the inverse mass from their variance; at each
    pilot temperature's end (``ends``) a row of :meth:`table`: the mean of its second half of step
    sizes, the mass and the weighted variance of :math:`r`."""

    log_step_size: Tensor  # (n,)
    inv_mass: Tensor | None  # (n, d)
    num_chains: int
    gain: float
    target_accept: float
    betas: Tensor  # (P,) the pilot temperatures
    ends: frozenset[int]  # the transitions (counted from 1) that end a temperature
    mass_matrix: bool = False
    step: int = 0  # transitions made
    history: tuple[Tensor, ...] = ()  # this temperature's step sizes so far
    logs: tuple[Tensor, ...] = ()  # per finished temperature: (n,)
    variances: tuple[Tensor, ...] = ()
    masses: tuple[Tensor, ...] = ()

    def start(self, z0: Tensor) -> PilotTuning:
        """The tuning at the first states ``z0`` (their variance: the first inverse mass)."""
        if not self.mass_matrix:
            return self
        return replace(self, inv_mass=_variance(z0, self.num_chains, self.log_step_size.shape[0]))

    def params(self, beta: Tensor) -> HMCParams:
        k = self.num_chains
        return HMCParams(self.log_step_size.exp().repeat(k),
                         None if self.inv_mass is None else self.inv_mass.repeat(k, 1))

    def update(self, info: TransitionInfo, state: Any) -> PilotTuning:
        k, n = self.num_chains, self.log_step_size.shape[0]
        acc = info.acceptance_rate.reshape(k, n).mean(0)
        log_eps = self.log_step_size + self.gain * (acc - self.target_accept)
        inv_mass = None if self.inv_mass is None else _variance(state.position.z, k, n)
        done = replace(self, log_step_size=log_eps, inv_mass=inv_mass, step=self.step + 1,
                       history=(*self.history, log_eps))
        if done.step not in self.ends:
            return done
        return replace(
            done, history=(),
            logs=(*self.logs, torch.stack(done.history[len(done.history) // 2 :]).mean(0)),
            variances=(*self.variances, weighted_variance(state.position.log_ratio.reshape(k, -1),
                                                          state.log_weight.reshape(k, -1))),
            masses=self.masses if inv_mass is None else (*self.masses, inv_mass))

    def table(self) -> StepSizes:
        """The smoothed table, capped where the next temperature's step size is smaller."""
        log_table = _smooth(_no_overshoot(torch.stack(self.logs)))
        mass_table = _smooth(torch.stack(self.masses)) if self.masses else None
        return StepSizes(self.betas, log_table, mass_table, torch.stack(self.variances))

    def state(self) -> tuple:
        return (self.log_step_size, self.inv_mass, self.step, list(self.history), list(self.logs),
                list(self.variances), list(self.masses))

    def restore(self, state: tuple) -> PilotTuning:
        eps, inv_mass, step, history, logs, variances, masses = state
        return replace(self, log_step_size=eps, inv_mass=inv_mass, step=step,
                       history=tuple(history), logs=tuple(logs), variances=tuple(variances),
                       masses=tuple(masses))


class PilotRun(NamedTuple):
    """The pilot as an annealing run: its chains per example, its schedule, where each temperature's
    transitions end, and where its adaptation starts."""

    num_chains: int
    schedule: Tensor  # (S + 1, 1): beta_0 (the start), then every transition's beta
    ends: list[int]  # the step at which each pilot temperature's transitions end
    step_size: float
    gain: float
    target_accept: float
    mass_matrix: bool

    def tuning(self, num_examples: int, like: Tensor) -> PilotTuning:
        """The tuning before the first state (:meth:`PilotTuning.start` gives it the state's)."""
        return PilotTuning(like.new_full((num_examples,), math.log(self.step_size)), None,
                           self.num_chains, self.gain, self.target_accept,
                           self.schedule[self.ends, 0].to(like), frozenset(self.ends),
                           self.mass_matrix)


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


@dataclass(frozen=True)
class Fixed(Adaptation):
    """``step_size`` at every transition (``HMC(adapt=None)``)."""

    step_size: float = 0.1
    name: ClassVar[str | None] = None

    def tuning(self, table, num_chains, num_examples, like):
        return RowTuning(like.new_full((num_chains * num_examples,), math.log(self.step_size)))

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
        return RowTuning(like.new_full((num_chains * num_examples,), math.log(self.step_size)),
                         self.gain, self.target_accept)

    def settings(self) -> dict:
        return {"step_size": self.step_size, "target_accept": self.target_accept,
                "adapt": "online", "adapt_gain": self.gain}


@dataclass(frozen=True)
class Pilot(Adaptation):
    r"""Per-example, per-temperature step sizes from a pilot run, frozen for the estimating run.

    Update :math:`\log\epsilon \mathrel{+}= g(\bar a - a^*)` for ``fraction`` of the run's steps
    on ``chains`` chains per example (``docs/kernel.md``).
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
        """Pilot annealing steps for a run of ``num_steps``: ``fraction`` of them, at least ``min_steps``,
        at most ``num_steps``."""
        return min(num_steps, max(self.min_steps, round(self.fraction * num_steps)))

    def pilot_transitions(self, num_steps: int) -> int:
        # pilot_steps + 1 temperatures: one transition at each inner one, the warm-ups at the ends
        return self.pilot_steps(num_steps) - 1 + 2 * WARMUP_TRANSITIONS

    def pilot_chains(self, num_chains: int) -> int:
        return min(self.chains or num_chains, num_chains)

    def pilot(self, num_chains: int, schedule: Tensor) -> PilotRun:
        """The pilot before a run along ``schedule`` ``(T + 1,)``: ``pilot_steps(T) + 1`` of its
        betas, evenly spaced in index, the first and last with ``WARMUP_TRANSITIONS`` transitions."""
        betas = _coarse(schedule, self.pilot_steps(len(schedule) - 1))
        repeats = [WARMUP_TRANSITIONS if j in (0, len(betas) - 1) else 1 for j in range(len(betas))]
        column = torch.cat([betas[:1], betas.repeat_interleave(torch.tensor(repeats))])
        ends = torch.tensor(repeats).cumsum(0).tolist()
        return PilotRun(self.pilot_chains(num_chains), column.unsqueeze(-1), ends, self.step_size,
                        self.gain, self.target_accept, self.mass_matrix)

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
    """The checked strategy of :class:`pyrolik.HMC`'s arguments (``target_accept=None``: own)."""
    if isinstance(adapt, Adaptation):
        return adapt
    if not isinstance(adapt, str | None) or adapt not in ADAPT_MODES:
        raise ValueError(f"adapt must be one of {ADAPT_MODES} or an adaptation strategy, got "
                         f"{adapt!r}")
    uses = {None: (), "online": ("target_accept", "adapt_gain")}.get(adapt)
    given = dict(target_accept=target_accept, pilot_fraction=pilot_fraction,
                 min_pilot_steps=min_pilot_steps, pilot_chains=pilot_chains, adapt_gain=adapt_gain)
    defaults = from_settings.__kwdefaults__ or {}
    # a kernel's fields hold what its strategy resolved (replace(HMC(), adapt=None) carries 0.9)
    resolved = (Pilot.target_accept, Online.target_accept)
    unused = [] if uses is None else [
        k for k, v in given.items() if k not in uses and v != defaults[k]
        and not (k == "target_accept" and v in resolved)]
    if unused:
        raise ValueError(f"adapt={adapt!r} does not use {', '.join(unused)}: drop "
                         f"{'it' if len(unused) == 1 else 'them'}, or use adapt='pilot'")
    for name, value in (("step_size", step_size), ("adapt_gain", adapt_gain)):
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not 0 < value < math.inf:
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    if not isinstance(mass_matrix, bool):
        raise TypeError(f"mass_matrix must be True or False, got {mass_matrix!r}")
    if target_accept is None:
        target_accept = Online.target_accept if adapt == "online" else Pilot.target_accept
    if not 0 < target_accept < 1:
        raise ValueError(f"target_accept must be in (0, 1), got {target_accept}")
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
