"""One engine run of a batch, fresh or resumed from a checkpoint: the pilot or the estimating run.

A batch makes up to two runs of the same loop (:func:`pyrolik.infer.engine.run`): the tuner's pilot
(:mod:`pyrolik.mcmc.pilot`), on its own schedule, and the estimating run. :func:`run_phase` gives
both the same machinery: the state drawn fresh or restored from a checkpoint (with the batch's
random stream), the tuning and the hooks built for the schedule on the chains' device and restored,
a checkpoint every ``checkpoint_every`` steps that holds everything needed to go on bit for bit,
and a progress bar. :func:`run_pilot` is the pilot on its own (no checkpoint, no bar).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor

from pyrolik.execution.batches import progress_bar
from pyrolik.infer import engine
from pyrolik.mcmc.adaptation import Adaptation, Tuning
from pyrolik.mcmc.pilot import PilotTable
from pyrolik.mcmc.step_sizes import StepSizes, rows_of
from pyrolik.mcmc.transition import HMCTransition, ValueAndGradFn
from pyrolik.model.target import AnnealingPath

__all__ = ["Phase", "run_phase", "pilot_phase", "run_pilot"]

class Phase(NamedTuple):
    """One engine run: its name in a checkpoint, schedule, density, start and what it is tuned and
    watched by."""

    name: str  # "pilot" or "anneal"
    schedule: Tensor  # (T + 1, C)
    density: ValueAndGradFn
    start: Callable[[], Tensor]  # draws the starting rows (called only when not resumed)
    tuning: Callable[[Tensor, Tensor], Tuning]  # (schedule on device, first positions) -> tuning
    hooks: Callable[[Tensor], dict[str, engine.StatefulHook]]  # schedule on device -> checkpointed hooks
    stops: Tensor | None = None  # (n,) each example's largest beta (engine.run's stops), or None


def run_phase(phase: Phase, *, kernel: HMCTransition, generator: torch.Generator | None,
              num_examples: int, saved: dict | None, save: Callable[[dict], None] | None,
              every: int, bar: Any) -> tuple[engine.AISState, dict[str, engine.StatefulHook]]:
    """Run ``phase`` to its last step, from ``saved`` (a checkpoint's loop state) when given.

    ``save(loop)`` (``None``: not checkpointed) receives the loop state every ``every`` steps;
    ``bar`` is a tqdm bar of the phase's steps, closed at the end.
    """
    if saved is not None:
        state, first = engine.restore(saved["state"]), saved["step"] + 1
        if generator is not None:
            generator.set_state(saved["generator"].cpu())
    else:
        z0 = phase.start()
        state = engine.init(z0, phase.density, kernel, engine.capped(
            rows_of(phase.schedule[0].to(z0), z0.shape[0] // num_examples, num_examples),
            _row_stops(phase, z0)))
        first = 1
    schedule = phase.schedule.to(state.position.z)
    stops = _row_stops(phase, state.position.z)
    num_steps = schedule.shape[0] - 1
    tuning = phase.tuning(schedule, state.position.z)
    kept = phase.hooks(schedule)
    if saved is not None:
        tuning = tuning.restore(saved["tuning"])
        for name, hook in kept.items():
            hook.restore(saved["hooks"][name])
    hooks: list = list(kept.values())
    if save is not None:
        hooks.append(engine.Checkpointer(every, num_steps, save, kept, generator))
    hooks.append(engine.Progress(bar, num_steps))
    bar.update(first - 1)
    state, _ = engine.run(state, schedule, tuning, kernel=kernel, density=phase.density,
                          generator=generator, num_examples=num_examples, first_step=first,
                          hooks=hooks, stops=stops)
    bar.close()
    return state, kept


def _row_stops(phase: Phase, z: Tensor) -> Tensor | None:
    """The phase's per-example stops as per-row ``(rows,)`` on ``z``'s device (rows chain-major)."""
    if phase.stops is None:
        return None
    stops = phase.stops.to(z)
    return stops.repeat(z.shape[0] // stops.shape[0])


def pilot_phase(strategy: Adaptation, path: AnnealingPath, schedule: Tensor,
                generator: torch.Generator | None, stops: Tensor | None = None) -> Phase | None:
    """The pilot of ``strategy`` on ``path``'s chains (their first ``pilot_chains``) before a run
    along ``schedule`` ``(T + 1,)``, as a :class:`Phase`; ``None`` when the strategy runs none.
    With ``stops`` ``(n,)`` its chains stop where the estimating run's do (the table above an
    example's stop then holds step sizes tuned at the stop, which the run reads at most through
    the interpolation to the first pilot temperature above the stop).

    Its starts are exact draws of :math:`f_0` for all of ``path``'s chains, of which the pilot keeps
    its own (so that the random stream does not depend on how many chains the pilot runs).
    """
    k_all, n = path.target.num_chains, path.target.num_examples
    plan = strategy.pilot(k_all, schedule)
    if plan is None:
        return None
    mine = path.first_chains(plan.num_chains) if plan.num_chains < k_all else path
    return Phase(
        "pilot", plan.schedule, mine.value_and_grad,
        start=lambda: path.sample_initial(generator)[: plan.num_chains * n],
        tuning=lambda schedule, z: plan.tuning(strategy, z, n),  # type: ignore[arg-type]
        hooks=lambda schedule: {"table": plan.table_hook(schedule, n)}, stops=stops)


def run_pilot(strategy: Adaptation, path: AnnealingPath, kernel: HMCTransition, schedule: Tensor,
              generator: torch.Generator | None) -> StepSizes | None:
    """Run ``strategy``'s pilot on ``path`` before a run along ``schedule``; return its table
    (``None`` when the strategy runs no pilot). No checkpoint, no progress bar."""
    phase = pilot_phase(strategy, path, schedule, generator)
    if phase is None:
        return None
    _, hooks = run_phase(phase, kernel=kernel, generator=generator,
                         num_examples=path.target.num_examples, saved=None, save=None, every=1,
                         bar=progress_bar(phase.schedule.shape[0] - 1, "pilot", False))
    return cast(PilotTable, hooks["table"]).table()
