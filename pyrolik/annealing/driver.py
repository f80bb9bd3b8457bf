"""The one driver behind ``ais``, ``reverse_ais``, ``bdmc`` and the distortion curves."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

import pyrolik.annealing.engine as engine
from pyrolik.annealing.run import Leg, Problem, Recording, describe, latents_to_flat, require_steps
from pyrolik.annealing.step_sizes import StepSizes, rows_of
from pyrolik.annealing.transition import HMCTransition, ValueAndGradFn
from pyrolik.annealing.tuning import Adaptation, PilotTuning, Tuning
from pyrolik.execution.batches import Batch, Execution, progress_bar, run_batches, warn_failed
from pyrolik.execution.checkpoint import Checkpoint, checkpoint_path, fingerprint
from pyrolik.model.target import AnnealingPath, Inputs, Target, make_target, prepare_inputs
from pyrolik.ops.stats import chain_statistics, log_mean_exp
from pyrolik.results import AISResult

__all__ = ["drive", "run", "open_checkpoint", "Phase", "run_phase", "pilot_phase",
           "run_pilot", "LegOutput", "finish"]


def drive(method: str, problem: Problem, execution: Execution,
          recording: Recording | None = None) -> list[AISResult] | None:
    """Run ``problem`` as ``execution`` says; one result per leg, in order (``None`` off rank 0).

    Parameters
    ----------
    method : str
        Names the run in its checkpoint (``"ais"``, ``"reverse_ais"``, ``"bdmc"``, ...).
    problem : Problem
        What to run (:func:`describe`).
    execution : Execution
        Seed, batches, progress bar, checkpoint and shard of the run.
    recording : Recording, optional
        What to record besides the final states (default: about 100 records of the diagnostics).
    """
    start = time.perf_counter()
    recording = Recording() if recording is None else recording
    checkpoint = open_checkpoint(method, problem, execution, recording)
    inputs = prepare_inputs(problem.model, problem.x, problem.model_args, problem.model_kwargs,
                            problem.guide)
    parts = run_batches(problem.x.shape[0], execution.batch_size, execution.seed, problem.x.device,
                        functools.partial(_batch, problem, execution, recording, inputs),
                        shard=execution.shard, rows_per_example=problem.rows_per_example,
                        checkpoint=checkpoint)
    if parts is None:
        return None
    settings = problem.settings(execution.batch_size)
    return [finish(leg, problem, [LegOutput(**p[i]) for p in parts], seed=execution.seed,
                   settings=settings, start=start) for i, leg in enumerate(problem.legs)]


def open_checkpoint(method: str, problem: Problem, execution: Execution,
                    recording: Recording) -> Checkpoint | None:
    """The run's :class:`Checkpoint` (checked against an existing file), or ``None``."""
    if execution.checkpoint is None:
        return None
    settings = {**problem.settings(execution.batch_size), "kernel": problem.kernel,
                "path": problem.path_name, **recording.settings()}
    fp = fingerprint(method, model=problem.model, x=problem.x, seed=execution.seed,
                     settings=settings, guide=problem.guide, model_args=problem.model_args,
                     model_kwargs=problem.model_kwargs, extra=problem.fingerprint_extra(),
                     shard=execution.shard)
    return Checkpoint(checkpoint_path(execution.checkpoint, execution.shard),
                      execution.checkpoint_every, fp, problem.x.device)


def _columns(legs: tuple[Leg, ...], betas: Tensor) -> Tensor:
    """``(T + 1, C)``: a column for a single leg, else one per chain of every leg (or per row)."""
    columns = [betas if leg.direction == "forward" else betas.flip(0) for leg in legs]
    if betas.dim() == 2:
        return torch.cat([c.repeat(1, leg.num_chains) for c, leg in zip(columns, legs,
                                                                         strict=True)], 1)
    if len(legs) == 1:
        return columns[0].unsqueeze(-1)
    return torch.cat([c.unsqueeze(1).expand(-1, leg.num_chains)
                      for c, leg in zip(columns, legs, strict=True)], 1)


def _starts(legs: tuple[Leg, ...], path: AnnealingPath, batch: Batch) -> list[Tensor]:
    """Each leg's starting rows: reverse legs' latents, forward legs' rows of f_0's draws."""
    n, starts, offset = batch.stop - batch.start, [], 0
    for leg in legs:
        rows = slice(offset * n, (offset + leg.num_chains) * n)
        if leg.direction == "reverse":
            assert leg.latents is not None  # run.describe gives every reverse leg its latents
            half = path.first_chains(leg.num_chains).target
            starts.append(latents_to_flat(half, {name: v[:, batch.start : batch.stop]
                                                 for name, v in leg.latents.items()}))
        else:
            starts.append(path.sample_initial(batch.generator)[rows])
        offset += leg.num_chains
    return starts


def _tune(problem: Problem, execution: Execution, path: AnnealingPath, batch: Batch,
          saved: dict | None, save: Callable[[dict], None] | None) -> StepSizes | None:
    """The batch's step-size table: a given one, the pilot's (run or resumed), or ``None``."""
    pilot = pilot_phase(problem.kernel.move.adaptation, path, problem.schedule.betas,
                        problem.stops_of(batch.start, batch.stop),
                        None if problem.islands is None else problem.kernel.resample)
    if pilot is None:
        return None
    if problem.step_sizes is not None:  # a table from an earlier pilot: no pilot runs
        return problem.step_sizes.rows(batch.start, batch.stop)
    return _pilot_table(pilot, path, problem.kernel.move.transition, batch.generator,
                        f"{execution.desc} pilot [{batch.start}:{batch.stop}]", execution.progress,
                        saved, save, execution.checkpoint_every)


def _pilot_table(pilot: tuple[Phase, int], path: AnnealingPath, kernel: HMCTransition,
                 generator: torch.Generator | None, desc: str, progress: bool,
                 saved: dict | None = None, save: Callable[[dict], None] | None = None,
                 every: int = 1) -> StepSizes:
    """The table of the pilot ``(phase, chains)`` on ``path``, run from ``saved`` or afresh."""
    # the starts are drawn for all chains, so the random stream does not depend on the pilot's
    (phase, chains), n = pilot, path.target.layout.num_examples
    start = None if saved is not None else path.sample_initial(generator)[: chains * n]
    bar = progress_bar(phase.schedule.shape[0] - 1, desc, progress)
    state = run_phase(phase, start, kernel=kernel, generator=generator, num_examples=n, hooks={},
                      saved=saved, save=save, tag={"phase": "pilot"}, every=every, bar=bar)
    assert isinstance(state.tuning, PilotTuning)
    return state.tuning.table()


def _batch(problem: Problem, execution: Execution, recording: Recording, inputs: Inputs,
           batch: Batch, resume: dict | None, save: Callable[[dict], None] | None) -> list[dict]:
    """One batch: the pilot, then the estimating run (each resumed where a checkpoint left it)."""
    n, k_all = batch.stop - batch.start, problem.rows_per_example
    mine = inputs.batch(batch.start, batch.stop)  # per-example arguments and guide of the batch
    target = make_target(problem.model, problem.x[batch.start : batch.stop], k_all,
                         model_args=mine.model_args, model_kwargs=mine.model_kwargs,
                         guide=mine.guide)
    path = target.path(problem.path_name)
    # a checkpoint holds either the pilot in progress, or its table and the estimating run's loop
    in_pilot = resume is not None and resume.get("phase") == "pilot"
    if resume is not None and not in_pilot:
        table = None if resume["table"] is None else StepSizes(*resume["table"])
    else:
        table = _tune(problem, execution, path.first_chains(problem.legs[0].num_chains), batch,
                      resume["loop"] if resume is not None else None, save)
    betas = problem.schedule.for_batch(table)
    schedule = _columns(problem.legs, betas).to(dtype=target.dtype, device=problem.x.device)
    saved = resume["loop"] if resume is not None and not in_pilot else None
    starts = [] if saved is not None else _starts(problem.legs, path, batch)
    totals = engine.Totals(k_all * n, schedule)
    islands = problem.islands  # resampled runs record each chain's starting ancestor too
    recorder = engine.Recorder(schedule, k_all, stride=recording.every, steps=recording.steps,
                               keep_states=recording.states, record_log_ratio=recording.log_ratio,
                               record_ancestor=islands is not None)
    phase = Phase(schedule, path.value_and_grad,
                  problem.kernel.move.adaptation.tuning(table, k_all, n, schedule),
                  problem.stops_of(batch.start, batch.stop),
                  _resampler(problem.kernel.resample,
                             tuple((leg.num_chains, islands) for leg in problem.legs), n))
    bar = progress_bar(schedule.shape[0] - 1, f"{execution.desc} [{batch.start}:{batch.stop}]",
                       execution.progress)
    keep = None if table is None else tuple(table)
    state = run_phase(phase, torch.cat(starts) if starts else None,
                      kernel=problem.kernel.move.transition, generator=batch.generator,
                      num_examples=n, hooks={"totals": totals, "recorder": recorder}, saved=saved,
                      save=save, tag={"table": keep}, every=execution.checkpoint_every, bar=bar)
    outputs = _cut(problem.legs, state, totals, recorder, path, target, betas, keep, islands)
    if problem.check is not None and starts:  # a fresh estimating run: its starts are known
        problem.check(path.first_chains(problem.legs[0].num_chains).target, starts,
                      [o.final_state.reshape(-1, o.final_state.shape[-1]) for o in outputs])
    return [asdict(o) for o in outputs]  # plain dicts and tensors, as checkpoints and gathers carry


def _cut(legs: tuple[Leg, ...], state: engine.AISState, totals: engine.Totals,
         recorder: engine.Recorder, path: AnnealingPath, target: Target, betas: Tensor,
         table: tuple | None, islands: int | None) -> list[LegOutput]:
    """The estimating run's rows (chain-major, leg after leg) as one :class:`LegOutput` per leg."""
    resampled = islands is not None
    n, num_steps = target.layout.num_examples, len(betas) - 1
    trace, steps = recorder.trace()
    outputs, offset = [], 0
    for leg in legs:
        lo, hi, k = offset * n, (offset + leg.num_chains) * n, leg.num_chains
        z, leg_layout = state.position.z[lo:hi], path.first_chains(k).target.layout
        leg_trace = {name: v[:, offset : offset + k] if name == "beta"
                     else v[:, lo:hi].reshape(v.shape[0], k, n, *v.shape[2:])
                     for name, v in trace.items()}
        if "ancestor" in leg_trace:  # rows -> the leg's chain each descends from
            leg_trace["ancestor"] = (leg_trace["ancestor"] - lo) // n
        outputs.append(LegOutput(
            log_weight=state.log_weight[lo:hi].reshape(k, n), final_state=z.reshape(k, n, -1),
            acceptance_rate=(totals.acceptance_sum[lo:hi] / num_steps).reshape(k, n),
            num_divergent=totals.num_divergent[lo:hi].reshape(k, n), trace=leg_trace,
            trace_steps=steps, latents=leg_layout.by_chain(leg_layout.constrain(z)),
            table=table, schedule=betas, evaluation=path.evaluation, plate=target.layout.plate_name,
            num_observed=target.layout.num_observed,
            ancestor=((state.ancestor[lo:hi] - lo) // n).reshape(k, n) if resampled else None,
            num_resampled=(totals.num_resampled[lo:hi].reshape(k, n).double().mean(0)
                           if resampled else None), islands=islands))
        offset += k
    return outputs


class Phase(NamedTuple):
    """One engine run: its schedule, density, first tuning, and what stops and resamples its rows."""

    schedule: Tensor  # (T + 1, C) on the chains' device and dtype
    density: ValueAndGradFn
    tuning: Tuning  # before the first state (``start`` gives it the first positions)
    stops: Tensor | None = None  # (n,) each example's largest beta (engine.run's stops), or None
    resample: engine.Resampler | None = None  # SMC within islands, or None: plain AIS


def _resampler(threshold: float | None, groups: tuple[tuple[int, int | None], ...], n: int
               ) -> engine.Resampler | None:
    """Resampling within the ``(chains, islands)`` of each leg, or ``None`` for plain AIS."""
    bound = tuple((k, b) for k, b in groups if b is not None)
    if threshold is None or len(bound) < len(groups):
        return None
    return engine.Resampler(float(threshold), bound, n)


def run_phase(phase: Phase, start: Tensor | None, *, kernel: HMCTransition,
              generator: torch.Generator | None, num_examples: int,
              hooks: dict[str, engine.StatefulHook], saved: dict | None,
              save: Callable[[dict], None] | None, tag: dict, every: int, bar: Any
              ) -> engine.AISState:
    """Run ``phase`` to its last step from ``start`` (rows of first positions), or from ``saved``
    (a checkpoint's loop state, restoring ``hooks``); ``save`` receives ``{**tag, "loop": ...}``
    every ``every`` steps."""
    if saved is not None:
        state, first = engine.restore(saved, phase.tuning), saved["step"] + 1
        if generator is not None:
            generator.set_state(saved["generator"].cpu())
        for name, hook in hooks.items():
            hook.restore(saved["hooks"][name])
    else:
        assert start is not None
        state = engine.init(start, phase.density, kernel, engine.capped(
            rows_of(phase.schedule[0], start.shape[0] // num_examples, num_examples),
            _row_stops(phase.stops, start)), phase.tuning)
        first = 1
    num_steps = phase.schedule.shape[0] - 1
    every_hook: list = list(hooks.values())
    if save is not None:
        every_hook.append(engine.Checkpointer(every, num_steps, save, hooks, generator, tag))
    every_hook.append(engine.Progress(bar, num_steps))
    bar.update(first - 1)
    state = engine.run(state, phase.schedule, kernel=kernel, density=phase.density,
                       generator=generator, num_examples=num_examples, first_step=first,
                       hooks=every_hook, stops=_row_stops(phase.stops, state.position.z),
                       resample=phase.resample)
    bar.close()
    return state


def _row_stops(stops: Tensor | None, z: Tensor) -> Tensor | None:
    """Per-example stops as per-row ``(rows,)`` on ``z``'s device (rows chain-major)."""
    return None if stops is None else stops.to(z).repeat(z.shape[0] // stops.shape[0])


def pilot_phase(strategy: Adaptation, path: AnnealingPath, schedule: Tensor,
                stops: Tensor | None = None, resample: float | None = None
                ) -> tuple[Phase, int] | None:
    """The pilot of ``strategy`` before a run along ``schedule`` on ``path``'s first chains, and
    their number (``None``: no pilot); they stop at ``stops``, resampled as one island."""
    k_all, n = path.target.layout.num_chains, path.target.layout.num_examples
    plan = strategy.pilot(k_all, schedule)
    if plan is None:
        return None
    mine = path.first_chains(plan.num_chains) if plan.num_chains < k_all else path
    betas = plan.schedule.to(dtype=path.target.dtype, device=path.target.program.x.device)
    return (Phase(betas, mine.value_and_grad, plan.tuning(n, betas), stops,
                  _resampler(resample, ((plan.num_chains, 1),), n)), plan.num_chains)


def run_pilot(strategy: Adaptation, path: AnnealingPath, kernel: HMCTransition, schedule: Tensor,
              generator: torch.Generator | None) -> StepSizes | None:
    """Run ``strategy``'s pilot on ``path`` before a run along ``schedule``; return its table
    (``None`` when the strategy runs no pilot). No checkpoint, no progress bar."""
    pilot = pilot_phase(strategy, path, schedule)
    return None if pilot is None else _pilot_table(pilot, path, kernel, generator, "pilot", False)


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
    ancestor: Tensor | None = None  # (K, n) the chain each chain descends from (resampled runs)
    num_resampled: Tensor | None = None  # (n,) resamplings of each example, mean over its islands
    islands: int | None = None  # islands per example of a resampled run


def _visited(base: Tensor, parts: Sequence[LegOutput]) -> tuple[Tensor, Tensor]:
    """The forward schedule and recorded betas, per example when the batches' betas differ."""
    scheds = [base if p.schedule is None else p.schedule for p in parts]
    if all(s.dim() == 1 for s in scheds) and all(torch.equal(s, scheds[0]) for s in scheds[1:]):
        return scheds[0], parts[0].trace["beta"]
    sizes = [p.log_weight.shape[1] for p in parts]
    schedule = torch.cat([_per_example(s, n, 2) for s, n in zip(scheds, sizes, strict=True)], dim=1)
    beta = torch.cat([_per_example(p.trace["beta"], n, 3)
                      for p, n in zip(parts, sizes, strict=True)], dim=2)
    return schedule, beta


def _per_example(values: Tensor, n: int, dims: int) -> Tensor:
    """``values`` with a last dimension over the batch's ``n`` examples (``dims`` in all)."""
    return values if values.dim() == dims else values.unsqueeze(-1).expand(*values.shape, n)


def finish(leg: Leg, problem: Problem, parts: Sequence[LegOutput], *, seed: int,
           settings: dict[str, Any], start: float) -> AISResult:
    """Concatenate one leg's batch outputs along the examples and reduce them into an AISResult."""
    forward = leg.direction == "forward"
    lw = torch.cat([p.log_weight for p in parts], dim=1)
    ll = log_mean_exp(lw) if forward else -log_mean_exp(lw)
    ancestors = [p.ancestor for p in parts if p.ancestor is not None]
    resampled = [p.num_resampled for p in parts if p.num_resampled is not None]
    observed = [p.num_observed for p in parts if p.num_observed is not None]  # None: some uncounted
    ancestor = torch.cat(ancestors, dim=1) if len(ancestors) == len(parts) else None
    ess, mcse, khat = chain_statistics(lw, ancestor, parts[0].islands)
    trace = {name: torch.cat([p.trace[name] for p in parts], dim=2)
             for name in parts[0].trace if name != "beta"}
    schedule, trace["beta"] = _visited(problem.schedule.betas, parts)
    table = (None if parts[0].table is None
             else StepSizes.concat([StepSizes(*p.table) for p in parts if p.table is not None]))
    # "replay" if every batch replayed its recorded evaluation, else the first other status
    evaluation = next((p.evaluation for p in parts if p.evaluation != "replay"), "replay")
    x = problem.x
    return AISResult(
        method=leg.method, log_likelihood=ll.to(x.dtype if x.is_floating_point() else ll.dtype),
        bound="lower" if forward else "upper", log_weights=lw, ess=ess, mcse=mcse, khat=khat, x=x,
        ancestor=ancestor, num_resampled=torch.cat(resampled) if ancestor is not None else None,
        settings={**settings, "evaluation": evaluation}, seed=seed, example_dim=parts[0].plate,
        wall_time=time.perf_counter() - start, direction=leg.direction, path=problem.path_name,
        schedule=schedule if forward else schedule.flip(0), step_sizes=table,
        final_state=torch.cat([p.final_state for p in parts], dim=1),
        acceptance_rate=torch.cat([p.acceptance_rate for p in parts], dim=1),
        num_divergent=torch.cat([p.num_divergent for p in parts], dim=1),
        trace=trace, trace_steps=parts[0].trace_steps, kernel=problem.kernel,
        num_observed=torch.cat(observed) if len(observed) == len(parts) else None,
        latents={name: torch.cat([p.latents[name] for p in parts], dim=1)
                 for name in parts[0].latents})


_DESC = {"ais": "AIS", "reverse_ais": "reverse AIS", "bdmc": "BDMC"}


def run(method: str, model: Callable[..., Any], x: Tensor, *, directions: tuple[str, ...],
        num_steps: int | None, seed: int | None, batch_size: int | None, progress: bool,
        recording: Recording | None = None, desc: str | None = None, scoped: bool = True,
        execution: Execution | None = None,
        **problem: Any) -> tuple[Problem, list[AISResult] | None]:
    """The annealing estimators' common path: describe the run, drive it in the execution scope
    (:func:`pyrolik.checkpoint`, :func:`pyrolik.distributed`; refused unless ``scoped``) or the
    caller's ``execution``, warn of failed examples; the problem described and the results per leg
    (``None`` off rank 0)."""
    require_steps(num_steps, problem.get("schedule"), searches=method == "ais")
    described = describe(model, x, directions=directions, num_steps=num_steps, **problem)
    if execution is None:
        execution = Execution.create(seed=seed, batch_size=batch_size, progress=progress,
                                     desc=desc or _DESC.get(method, method), method=method,
                                     supports=("checkpoint", "distributed") if scoped else ())
    results = drive(method, described, execution, recording)
    if results is not None and len(results) == 1:  # bdmc warns of its pair
        warn_failed(results[0], method, stacklevel=4)
    return described, results
