"""The annealing engine: one pure AIS transition, and the loop that drives it."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from pyrolik.annealing.step_sizes import rows_of
from pyrolik.annealing.transition import HMCState, HMCTransition, ValueAndGradFn
from pyrolik.annealing.tuning import Tuning
from pyrolik.ops.resampling import systematic
from pyrolik.ops.stats import effective_sample_size

__all__ = ["AISState", "AISInfo", "Resampler", "init", "step", "run", "Hook", "StatefulHook",
           "Recorder", "Totals", "Checkpointer", "Progress", "capped"]


class AISState(NamedTuple):
    """What the next annealing step needs, per row (chains x examples, chain-major), and the
    tuning that gives its transition's parameters (BlackJAX's ``inner_kernel_tuning``)."""

    position: HMCState  # z and the split density cache: log f0, r = log f1 - log f0, gradients
    log_weight: Tensor  # (rows,) float64, running
    beta: Tensor  # (rows,) the inverse temperature the position was last moved at
    ancestor: Tensor  # (rows,) long: the row each row's chain descends from at the start
    tuning: Tuning  # the step sizes (and masses) of the next transition, updated after each


class AISInfo(NamedTuple):
    """Diagnostics of one annealing step, per row; never fed back into the chain."""

    acceptance_rate: Tensor  # (rows,)
    is_accepted: Tensor  # (rows,) bool
    is_divergent: Tensor  # (rows,) bool
    energy_error: Tensor  # (rows,)
    step_size: Tensor  # (rows,) the step size used
    resampled: Tensor | None = None  # (rows,) bool: the row's example was resampled this step


@dataclass(frozen=True)
class Resampler:
    """Resampling within islands, bound to a run's rows.

    ``groups`` gives each leg's chains and islands ``(K, B)`` (rows chain-major, leg after leg);
    island ``i`` of a leg holds its chains ``i K/B`` to ``(i + 1) K/B - 1`` of every example."""

    threshold: float
    groups: tuple[tuple[int, int], ...]
    num_examples: int

    def __call__(self, log_weight: Tensor, generator: torch.Generator | None
                 ) -> tuple[Tensor, Tensor, Tensor]:
        """``(source rows, log weights, resampled)``, each ``(rows,)``: row ``r`` takes the state
        of row ``source[r]`` (itself where its island was not resampled)."""
        n, sources, weights, flags, lo = self.num_examples, [], [], [], 0
        for k, b in self.groups:
            s = k // b
            lw = log_weight[lo : lo + k * n].reshape(b, s, n)  # [island, position, example]
            do = (effective_sample_size(lw, 1) < self.threshold * s).unsqueeze(1)  # NaN: False
            pick = systematic(lw.transpose(0, 1), generator=generator).transpose(0, 1)
            own = torch.arange(s, device=lw.device).view(1, s, 1)
            chain = torch.where(do, pick, own) + s * torch.arange(b, device=lw.device).view(b, 1, 1)
            sources.append(lo + chain * n + torch.arange(n, device=lw.device))
            mean = torch.logsumexp(lw, 1, keepdim=True) - math.log(s)
            weights.append(torch.where(do, mean, lw))
            flags.append(do.expand(b, s, n))
            lo += k * n
        return (torch.cat([v.reshape(-1) for v in sources]),
                torch.cat([v.reshape(-1) for v in weights]),
                torch.cat([v.reshape(-1) for v in flags]))


def init(z: Tensor, density: ValueAndGradFn, kernel: HMCTransition, beta: Tensor,
         tuning: Tuning) -> AISState:
    """The state at ``z`` (exact draws of :math:`f_{\\beta}`), weights zero; one evaluation.

    Parameters
    ----------
    z : torch.Tensor, shape ``(rows, d)``
        Unconstrained start positions, chain-major.
    density, kernel
        As in :func:`step`.
    beta : torch.Tensor, shape ``(rows,)``
        The inverse temperature ``z`` is drawn at.
    tuning : Tuning
        The tuning of the transitions, started at ``z``.
    """
    rows = z.shape[0]
    return AISState(kernel.init(z, density), torch.zeros(rows, dtype=torch.float64, device=z.device),
                    beta, torch.arange(rows, device=z.device), tuning.start(z))


def step(state: AISState, beta_next: Tensor, *, kernel: HMCTransition,
         density: ValueAndGradFn, generator: torch.Generator | None,
         resample: Resampler | None = None) -> tuple[AISState, AISInfo]:
    r"""One annealing step to ``beta_next``: the weight update, the resampling, one transition.

    :math:`\log w \mathrel{+}= (\beta' - \beta)\,r(z)`, then :math:`z \sim \mathcal T_{\beta'}`
    with the parameters of ``state.tuning.params(beta')``; the tuning is updated after it.

    Parameters
    ----------
    state : AISState
        The chains' state.
    beta_next : torch.Tensor, shape ``(rows,)``
        The inverse temperature to step to.
    kernel : HMCTransition
        The transition.
    density : callable
        ``density(z)``: the split log density and its gradients at ``z``.
    generator : torch.Generator or None
        Draws the momenta, jitter and resampling (``None``: torch's global generator).
    resample : Resampler, optional
        Resample within islands before the transition (SMC); ``None``: plain AIS.
    """
    params = state.tuning.params(beta_next)
    increment = (beta_next - state.beta) * state.position.log_ratio
    log_weight = state.log_weight + increment.double()
    position, ancestor, resampled = state.position, state.ancestor, None
    if resample is not None:
        source, log_weight, resampled = resample(log_weight, generator)
        position = HMCState._make(None if v is None else v[source] for v in position)
        ancestor = ancestor[source]
    position, moved_info = kernel.step(position, density, beta_next, params.step_size, generator,
                                       params.inv_mass)
    moved = AISState(position, log_weight, beta_next, ancestor, state.tuning)
    info = AISInfo(*moved_info, params.step_size, resampled)
    return moved._replace(tuning=state.tuning.update(info, moved)), info


class Hook(Protocol):
    """Called after every step of :func:`run`."""

    def __call__(self, t: int, state: AISState, info: AISInfo) -> None: ...


class StatefulHook(Hook, Protocol):
    """A hook whose state a checkpoint keeps: ``restore(state())`` puts it back as it was."""

    def state(self) -> Any: ...

    def restore(self, saved: Any) -> None: ...


def run(state: AISState, schedule: Tensor, *, kernel: HMCTransition,
        density: ValueAndGradFn, generator: torch.Generator | None, num_examples: int,
        first_step: int = 1, hooks: Sequence[Hook] = (), stops: Tensor | None = None,
        resample: Resampler | None = None) -> AISState:
    """Anneal every chain along its column of ``schedule`` from ``first_step`` to ``T``.

    Parameters
    ----------
    state : AISState
        The chains' state at step ``first_step - 1``.
    schedule : torch.Tensor, shape ``(T + 1, C)``
        Each column's betas.
    kernel, density, generator, resample
        As in :func:`step`.
    num_examples : int
        Examples among the rows (N).
    first_step : int
        The first step to run (after a checkpoint, the next one).
    hooks : sequence of Hook
        Called after every step with ``(t, state, info)``.
    stops : torch.Tensor, shape ``(rows,)``, optional
        Each row's largest beta (:func:`capped`): a row is an AIS run to its stop.
    """
    k = state.log_weight.shape[0] // num_examples
    for t in range(first_step, schedule.shape[0]):
        beta_next = capped(rows_of(schedule[t], k, num_examples), stops)
        state, info = step(state, beta_next, kernel=kernel, density=density, generator=generator,
                           resample=resample)
        for hook in hooks:
            hook(t, state, info)
    return state


def capped(beta: Tensor, stops: Tensor | None) -> Tensor:
    """Per-row betas ``(rows,)`` capped at the rows' ``stops`` (``None``: as they are).

    Parameters
    ----------
    beta, stops : torch.Tensor, shape ``(rows,)``
        The schedule's betas; each row's largest beta (optional).
    """
    return beta if stops is None else torch.minimum(beta, stops)


# -- hooks ---------------------------------------------------------------------------------------------
class Totals:
    """Acceptance summed, divergences and resamplings counted over the run, per row."""

    def __init__(self, rows: int, like: Tensor):
        self.acceptance_sum = torch.zeros(rows, dtype=like.dtype, device=like.device)
        self.num_divergent = torch.zeros(rows, dtype=torch.long, device=like.device)
        self.num_resampled = torch.zeros(rows, dtype=torch.long, device=like.device)

    def __call__(self, t, state, info) -> None:
        self.acceptance_sum = self.acceptance_sum + info.acceptance_rate
        self.num_divergent = self.num_divergent + info.is_divergent.long()
        if info.resampled is not None:
            self.num_resampled = self.num_resampled + info.resampled.long()

    def state(self) -> dict[str, Tensor]:
        return {"acceptance_sum": self.acceptance_sum, "num_divergent": self.num_divergent,
                "num_resampled": self.num_resampled}

    def restore(self, saved: dict[str, Tensor]) -> None:
        self.acceptance_sum, self.num_divergent = saved["acceptance_sum"], saved["num_divergent"]
        self.num_resampled = saved["num_resampled"]


class Recorder:
    r"""Diagnostics at chosen steps: every ``stride`` steps and the last, or the given ``steps``."""

    NAMES = ("acceptance_rate", "step_size", "log_weight", "beta", "diverging", "energy_error")

    def __init__(self, schedule: Tensor, num_chains: int, *, stride: int | None = None,
                 steps: Sequence[int] | None = None, keep_states: bool = False,
                 record_log_ratio: bool = False, record_ancestor: bool = False):
        self.schedule, self.num_chains, self.num_steps = schedule, num_chains, schedule.shape[0] - 1
        self.stride = stride or max(1, self.num_steps // 100)
        self.steps = None if steps is None else frozenset(int(s) for s in steps)
        names = (self.NAMES + ("z",) * keep_states + ("log_ratio",) * record_log_ratio
                 + ("ancestor",) * record_ancestor)
        self.records: dict[str, list[Tensor]] = {name: [] for name in names}
        self.record_steps: list[int] = []

    def __call__(self, t, state, info) -> None:
        every = t % self.stride == 0 or t == self.num_steps
        if not (every if self.steps is None else t in self.steps):
            return
        self.record_steps.append(t)
        beta = self.schedule[t]  # per chain (C = 1 or K), or per row: then (K, N)
        beta = (beta.expand(self.num_chains) if beta.shape[0] in (1, self.num_chains)
                else beta.reshape(self.num_chains, -1))
        values = {"acceptance_rate": info.acceptance_rate, "step_size": info.step_size,
                  "log_weight": state.log_weight, "beta": beta, "diverging": info.is_divergent,
                  "energy_error": info.energy_error, "z": state.position.z,
                  "log_ratio": state.position.log_ratio, "ancestor": state.ancestor}
        for name, record in self.records.items():
            record.append(values[name])

    def trace(self) -> tuple[dict[str, Tensor], Tensor]:
        """``({name: (R, ...)}, record steps (R,))``."""
        return ({name: torch.stack(v) for name, v in self.records.items()},
                torch.tensor(self.record_steps, dtype=torch.long))

    def state(self) -> dict[str, Any]:
        return {"records": self.records, "record_steps": self.record_steps}

    def restore(self, saved: dict[str, Any]) -> None:
        self.records = {name: list(v) for name, v in saved["records"].items()}
        self.record_steps = list(saved["record_steps"])


class Checkpointer:
    """Every ``every`` steps (not after the last), hand ``save`` ``{**tag, "loop": ...}``, the loop
    being everything :func:`run` needs to go on bit for bit: the step, the state, the tuning, the
    other hooks' state and the generator's."""

    def __init__(self, every: int, num_steps: int, save: Callable[[dict[str, Any]], None],
                 hooks: dict[str, StatefulHook], generator: torch.Generator | None,
                 tag: dict[str, Any]):
        self.every, self.num_steps, self.save = every, num_steps, save
        self.hooks, self.generator, self.tag = hooks, generator, tag

    def __call__(self, t, state, info) -> None:
        if t % self.every or t >= self.num_steps:
            return
        self.save({**self.tag, "loop": {
            "step": t, "state": (tuple(state.position), state.log_weight, state.beta,
                                 state.ancestor), "tuning": state.tuning.state(),
            "hooks": {name: hook.state() for name, hook in self.hooks.items()},
            "generator": None if self.generator is None else self.generator.get_state()}})


def restore(saved: dict, tuning: Tuning) -> AISState:
    """The inverse of :class:`Checkpointer`'s save: the state, its tuning restored on ``tuning``."""
    position, log_weight, beta, ancestor = saved["state"]
    return AISState(HMCState(*position), log_weight, beta, ancestor,
                    tuning.restore(saved["tuning"]))


class Progress:
    """Advance a tqdm bar about 200 times over the run."""

    def __init__(self, bar, num_steps: int):
        self.bar, self.num_steps, self.every = bar, num_steps, max(1, num_steps // 200)

    def __call__(self, t, state, info) -> None:
        if t % self.every == 0 or t == self.num_steps:
            self.bar.update(t - self.bar.n)
