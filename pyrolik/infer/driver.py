"""The one driver behind ``ais``, ``reverse_ais`` and ``bdmc``: batches, tuning, the engine, results.

A front end describes its run as :class:`Legs <Leg>` of chains annealed in one batched pass, each
with a direction and a start: forward chains start from exact draws of :math:`f_0` (the prior, or
the guide for AIS+encoder), reverse chains from given exact posterior draws and visit the schedule
backwards. ``ais`` is one forward leg, ``reverse_ais`` one reverse leg, ``bdmc`` a forward and a
reverse leg sharing one pass and one pilot. For each batch of examples the driver builds the model's
target, lets the kernel's adaptation strategy prepare (the pilot runs here, on the first leg's
chains, independent of the estimating chains), draws the starts, runs the engine with its hooks,
and cuts the rows back into one :class:`LegOutput` per leg: the unit that is checkpointed and gathered
across processes. :func:`finish` reduces a leg's outputs over all batches into an ``AISResult``.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from pyrolik._validate import (
    check_count,
    check_guide,
    check_model,
    check_optional_count,
    validate_data,
)
from pyrolik.execution.batches import Batch, progress_bar
from pyrolik.execution.checkpoint import Checkpoint, checkpoint_path, fingerprint
from pyrolik.execution.distributed import Shard
from pyrolik.execution.runner import run_batches
from pyrolik.infer import engine
from pyrolik.infer.latents import latents_to_flat
from pyrolik.mcmc import schedules
from pyrolik.mcmc.hmc import HMC
from pyrolik.mcmc.step_sizes import StepSizes, rows_of
from pyrolik.model.target import AnnealingPath, Inputs, Target, make_target, prepare_inputs
from pyrolik.ops.stats import (
    effective_sample_size,
    log_mean_exp,
    mcse_log_mean_exp,
    pareto_khat,
)
from pyrolik.results import AISResult

__all__ = ["Leg", "Run", "LegOutput", "anneal", "finish", "settings_of", "open_checkpoint", "prepare"]


@dataclass(frozen=True)
class Leg:
    """Chains annealed in one direction: forward from :math:`f_0`, or reverse from ``latents``."""

    direction: str  # "forward" or "reverse"
    num_chains: int
    latents: dict[str, Tensor] | None = None  # reverse: exact posterior draws {site: (K, N, *site)}


@dataclass(frozen=True)
class Run:
    """Everything a front end decided about a run; :func:`anneal` does the rest."""

    method: str  # what the checkpoint is of: "ais", "reverse_ais" or "bdmc"
    model: Callable[..., Any]
    x: Tensor
    betas: Tensor  # (T + 1,) the forward schedule
    kernel: HMC
    legs: tuple[Leg, ...]
    seed: int
    shard: Shard
    settings: dict[str, Any]
    guide: Callable[..., Any] | None = None  # AIS+encoder: the path starts at the guide
    model_args: tuple = ()
    model_kwargs: dict = field(default_factory=dict)
    batch_size: int | None = None
    record_every: int | None = None
    record_states: bool = False
    record_steps: tuple[int, ...] | None = None  # record at these steps instead of every record_every
    record_log_ratio: bool = False  # also record the states' log f1 - log f0 (engine.Recorder)
    progress: bool = True
    desc: str = "AIS"
    checkpoint_every: int = 100
    step_sizes: StepSizes | None = None  # a given pilot table (reverse AIS after forward AIS)
    adaptive: bool = False  # build each batch's schedule from its pilot (betas: the pilot's base)
    check: Callable[[Target, list[Tensor], list[Tensor]], None] | None = None  # after a batch

    @property
    def path_name(self) -> str:
        return "prior" if self.guide is None else "guide"


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


def prepare(model: Callable[..., Any], x: Tensor, num_steps: int | None, num_chains: int,
            schedule: str | Tensor, kernel: HMC | None, init: Callable[..., Any] | None,
            record_every: int | None = None) -> tuple[Tensor, Tensor, HMC]:
    """Check the arguments every AIS front end takes; return ``(x, betas, kernel)``."""
    check_model(model)
    x = validate_data(x)
    check_count("num_chains", num_chains)
    check_optional_count("num_steps", num_steps)
    check_optional_count("record_every", record_every)
    kernel = HMC() if kernel is None else kernel
    if not isinstance(kernel, HMC):
        raise TypeError(f"kernel must be a pyrolik.HMC, got {type(kernel).__name__}")
    adaptive_of(schedule, kernel, num_chains)
    # a schedule built from the pilot starts from the sigmoid: the pilot's grid is taken from it
    base = "sigmoid" if isinstance(schedule, str) and schedule in schedules.PILOT_NAMES \
        else schedule
    betas = schedules.resolve(base, num_steps)
    check_guide(init, "init", optional=True)
    return x, betas, kernel


def adaptive_of(schedule: str | Tensor, kernel: HMC, num_chains: int) -> bool:
    """Whether the run's schedule is built from its pilot (:func:`pyrolik.mcmc.schedules.adaptive`):
    ``"adaptive"``, or ``"auto"`` with a pilot of at least 2 chains per example (else the sigmoid).
    """
    if not isinstance(schedule, str) or schedule not in schedules.PILOT_NAMES:
        return False
    chains = kernel.adaptation.pilot_chains(num_chains)
    if schedule == "auto":
        return kernel.adapt == "pilot" and chains >= 2
    if kernel.adapt != "pilot":
        raise ValueError("schedule='adaptive' is built from the pilot run's variance of "
                         "log p(x | z): use a kernel with adapt='pilot' (the default), or "
                         "schedule='auto' (adaptive with a pilot, sigmoid without)")
    if chains < 2:
        raise ValueError(f"schedule='adaptive' needs at least 2 pilot chains per example to estimate "
                         f"a variance; this run's pilot has {chains} (num_chains={num_chains}): "
                         "raise num_chains or pilot_chains, or pass schedule='sigmoid'")
    return True


def settings_of(num_steps: int, num_chains: int, schedule: str | Tensor, kernel: HMC,
                batch_size: int | None, guide: Callable | None) -> dict[str, Any]:
    """The settings every AIS result records, costs included: gradient evaluations per example of
    the estimating chains and of the pilot (its transitions times its chains, plus its start)."""
    strategy = kernel.adaptation
    pilot_chains = strategy.pilot_chains(num_chains)
    pilot = strategy.pilot_transitions(num_steps)
    if isinstance(schedule, str) and schedule in schedules.PILOT_NAMES:
        schedule = "adaptive" if adaptive_of(schedule, kernel, num_chains) else "sigmoid"
    return {"num_steps": num_steps, "num_chains": num_chains,
            "schedule": schedule if isinstance(schedule, str) else "custom",
            "num_leapfrog": kernel.num_leapfrog, "adapt": str(kernel.adapt),
            "target_accept": kernel.target_accept, "initial_step_size": kernel.step_size,
            "mass_matrix": kernel.mass_matrix, "batch_size": batch_size,
            "init": "prior" if guide is None else getattr(guide, "__name__", "guide"),
            "gradient_evals_per_example": (num_steps * kernel.num_leapfrog + 1) * num_chains,
            "pilot_gradient_evals_per_example":
                (pilot * kernel.num_leapfrog + 1) * pilot_chains if pilot else 0}


def open_checkpoint(run: Run, path: str | os.PathLike | None,
                    extra: dict[str, Any]) -> Checkpoint | None:
    """The run's :class:`Checkpoint` (checked against an existing file), or ``None``."""
    check_count("checkpoint_every", run.checkpoint_every)
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"checkpoint must be a file path, got {type(path).__name__}")
    settings = {**run.settings, "kernel": run.kernel, "path": run.path_name,
                "record_every": run.record_every, "record_states": run.record_states}
    if run.record_steps is not None or run.record_log_ratio:
        settings.update(record_steps=run.record_steps, record_log_ratio=run.record_log_ratio)
    fp = fingerprint(run.method, model=run.model, x=run.x, seed=run.seed, settings=settings,
                     guide=run.guide, model_args=run.model_args, model_kwargs=run.model_kwargs,
                     extra=extra, shard=(run.shard.rank, run.shard.world_size))
    return Checkpoint(checkpoint_path(path, (run.shard.rank, run.shard.world_size)), run.checkpoint_every, fp,
                      run.x.device)


def _betas(run: Run, table: StepSizes | None) -> Tensor:
    """The batch's forward schedule: ``run.betas``, or with ``run.adaptive`` the schedule at
    constant thermodynamic speed built from the pilot's variances of the batch's examples, pooled
    (root mean square over examples: one schedule for the batch, which tuned better than one per
    example from four pilot chains each). Independent of the estimating chains."""
    if not run.adaptive:
        return run.betas
    if table is None or table.log_ratio_var is None:
        raise ValueError("schedule='adaptive' needs the pilot's variances of log p(x | z) "
                         "(StepSizes.log_ratio_var); the given step_sizes table has none: pass a "
                         "table from a pilot of this version, or schedule='sigmoid'")
    # examples whose density failed (NaN/inf, marked failed later) take no part in the pooling
    finite = torch.isfinite(table.log_ratio_var).all(0)
    if not finite.any():
        return run.betas
    return schedules.adaptive(run.betas.shape[0] - 1, table.betas,
                              table.log_ratio_var[:, finite].mean(1)).to(run.betas)


def _schedule(run: Run, betas: Tensor) -> Tensor:
    """``(T + 1, C)``: one column for a single leg, else one per chain of every leg."""
    columns = [betas if leg.direction == "forward" else betas.flip(0) for leg in run.legs]
    if len(run.legs) == 1:
        return columns[0].unsqueeze(-1)
    return torch.cat([c.unsqueeze(1).expand(-1, leg.num_chains)
                      for c, leg in zip(columns, run.legs, strict=True)], 1)


def _starts(run: Run, path: AnnealingPath, batch: Batch) -> list[Tensor]:
    """Each leg's starting rows: reverse legs their latents; forward legs exact draws of f_0
    (drawn for the whole pass, of which each keeps its own rows)."""
    n, starts, offset = batch.stop - batch.start, [], 0
    for leg in run.legs:
        rows = slice(offset * n, (offset + leg.num_chains) * n)
        if leg.direction == "reverse":
            if leg.latents is None:
                raise ValueError("a reverse leg starts from given latents: Leg(latents=...)")
            half = path.first_chains(leg.num_chains).target
            starts.append(latents_to_flat(half, {name: v[:, batch.start : batch.stop]
                                                 for name, v in leg.latents.items()}))
        else:
            starts.append(path.sample_initial(batch.generator)[rows])
        offset += leg.num_chains
    return starts


def _batch(run: Run, inputs: Inputs, batch: Batch, resume: dict | None, save: Callable | None
           ) -> list[dict]:
    n = batch.stop - batch.start
    k_all = sum(leg.num_chains for leg in run.legs)
    mine = inputs.batch(batch.start, batch.stop)  # per-example arguments and guide of the batch
    target = make_target(run.model, run.x[batch.start : batch.stop], k_all,
                         model_args=mine.model_args, model_kwargs=mine.model_kwargs, guide=mine.guide)
    path = target.path(run.path_name)
    # the transition and its tuner, apart: the transition never knows how its step sizes were chosen
    kernel, strategy = run.kernel.transition, run.kernel.adaptation
    z0 = None
    if resume is None:
        given = None if run.step_sizes is None else run.step_sizes.rows(batch.start, batch.stop)
        table = strategy.prepare(path.first_chains(run.legs[0].num_chains), kernel, run.betas,
                                 batch.generator, given)
        starts = _starts(run, path, batch)
        z0 = torch.cat(starts) if len(starts) > 1 else starts[0]
    else:
        table = None if resume["table"] is None else StepSizes(*resume["table"])
        starts = None
    betas = _betas(run, table)
    schedule = _schedule(run, betas)
    if resume is not None:
        loop = resume["loop"]
        state, first = engine.restore(loop["state"]), loop["step"] + 1
        if batch.generator is not None:
            batch.generator.set_state(loop["generator"].cpu())
    elif z0 is not None:  # a fresh batch: z0 was drawn above
        state = engine.init(z0, path.value_and_grad, kernel,
                            rows_of(schedule[0].to(z0), k_all, n))
        first = 1
    else:
        raise RuntimeError("a fresh batch without starting states")  # unreachable
    schedule = schedule.to(state.position.z)
    num_steps = schedule.shape[0] - 1
    tuning = strategy.tuning(table, k_all, n, schedule)
    totals = engine.Totals(k_all * n, schedule)
    recorder = engine.Recorder(schedule, k_all, stride=run.record_every, steps=run.record_steps,
                               record_states=run.record_states,
                               record_log_ratio=run.record_log_ratio)
    if resume is not None:
        tuning = tuning.restore(loop["tuning"])
        totals.restore(loop["hooks"]["totals"])
        recorder.restore(loop["hooks"]["recorder"])
    bar = progress_bar(num_steps, f"{run.desc} [{batch.start}:{batch.stop}]", run.progress)
    hooks: list = [totals, recorder]
    if save is not None:
        keep = None if table is None else tuple(table)
        hooks.append(engine.Checkpointer(run.checkpoint_every, num_steps,
                                         lambda loop: save({"table": keep, "loop": loop}),
                                         {"totals": totals, "recorder": recorder},
                                         batch.generator))
    hooks.append(engine.Progress(bar, num_steps))
    bar.update(first - 1)
    state, _ = engine.run(state, schedule, tuning, kernel=kernel, density=path.value_and_grad,
                          generator=batch.generator, num_examples=n, first_step=first, hooks=hooks)
    bar.close()
    trace, steps = recorder.trace()
    outputs, offset = [], 0
    for leg in run.legs:
        lo, hi = offset * n, (offset + leg.num_chains) * n
        k = leg.num_chains
        z = state.position.z[lo:hi]
        leg_trace = {name: v[:, offset : offset + k] if name == "beta"
                     else v[:, lo:hi].reshape(v.shape[0], k, n, *v.shape[2:])
                     for name, v in trace.items()}
        outputs.append(LegOutput(
            log_weight=state.log_weight[lo:hi].reshape(k, n), final_state=z.reshape(k, n, -1),
            acceptance_rate=(totals.acceptance_sum[lo:hi] / num_steps).reshape(k, n),
            num_divergent=totals.num_divergent[lo:hi].reshape(k, n), trace=leg_trace,
            trace_steps=steps, latents=path.first_chains(k).target.unravel(z),
            table=None if table is None else tuple(table), schedule=betas,
            evaluation=path.evaluation, plate=target.plate_name,
            num_observed=target.num_observed))
        offset += k
    if run.check is not None and starts is not None:
        run.check(path.first_chains(run.legs[0].num_chains).target, starts,
                  [o.final_state.reshape(-1, o.final_state.shape[-1]) for o in outputs])
    return [o.as_dict() for o in outputs]


def anneal(run: Run, checkpoint: Checkpoint | None) -> list[list[LegOutput]] | None:
    """Run every batch of ``run``; per leg, the outputs of all batches in order (``None`` off
    rank 0 of a multi-process run)."""
    k_all = sum(leg.num_chains for leg in run.legs)
    inputs = prepare_inputs(run.model, run.x, run.model_args, run.model_kwargs, run.guide)
    parts = run_batches(run.x.shape[0], run.batch_size, run.seed, run.x.device,
                        functools.partial(_batch, run, inputs),
                        shard=run.shard, rows_per_example=k_all, checkpoint=checkpoint)
    if parts is None:
        return None
    return [[LegOutput(**p[i]) for p in parts] for i in range(len(run.legs))]


def _evaluation(parts: Sequence[LegOutput]) -> str:
    """``"replay"`` if every batch replayed its recorded evaluation, else the first other status."""
    return next((p.evaluation for p in parts if p.evaluation != "replay"), "replay")


def _visited(run: Run, parts: Sequence[LegOutput]) -> tuple[Tensor, Tensor]:
    """The forward schedule ``(T + 1,)`` and the recorded betas ``(R, K)`` when every batch annealed
    along the same betas; else (adaptive schedules of several batches) per example:
    ``(T + 1, N)`` and ``(R, K, N)``."""
    scheds = [run.betas if p.schedule is None else p.schedule for p in parts]
    if all(torch.equal(s, scheds[0]) for s in scheds[1:]):
        return scheds[0], parts[0].trace["beta"]
    sizes = [p.log_weight.shape[1] for p in parts]
    schedule = torch.cat([s.unsqueeze(1).expand(-1, n) for s, n in zip(scheds, sizes, strict=True)],
                         dim=1)
    beta = torch.cat([p.trace["beta"].unsqueeze(-1).expand(-1, -1, n)
                      for p, n in zip(parts, sizes, strict=True)], dim=2)
    return schedule, beta


def _observed(parts: Sequence[LegOutput]) -> Tensor | None:
    """The entries observed per example over all batches, or None if some batch did not count."""
    counts = [p.num_observed for p in parts if p.num_observed is not None]
    return torch.cat(counts) if len(counts) == len(parts) else None


def finish(method: str, direction: str, run: Run, parts: Sequence[LegOutput], start: float,
           num_chains: int) -> AISResult:
    """Concatenate one leg's batch outputs along the examples and reduce them into an AISResult."""
    lw = torch.cat([p.log_weight for p in parts], dim=1)
    ll = log_mean_exp(lw) if direction == "forward" else -log_mean_exp(lw)
    trace = {name: torch.cat([p.trace[name] for p in parts], dim=2)
             for name in parts[0].trace if name != "beta"}
    schedule, trace["beta"] = _visited(run, parts)
    table = None
    if parts[0].table is not None:
        table = StepSizes.concat([StepSizes(*p.table) for p in parts if p.table is not None])
    x = run.x
    return AISResult(
        method=method, log_likelihood=ll.to(x.dtype if x.is_floating_point() else ll.dtype),
        bound="lower" if direction == "forward" else "upper", log_weights=lw,
        ess=effective_sample_size(lw), mcse=mcse_log_mean_exp(lw), khat=pareto_khat(lw), x=x,
        settings={**run.settings, "evaluation": _evaluation(parts)}, seed=run.seed,
        wall_time=time.perf_counter() - start, direction=direction, path=run.path_name,
        schedule=schedule if direction == "forward" else schedule.flip(0), step_sizes=table,
        final_state=torch.cat([p.final_state for p in parts], dim=1),
        acceptance_rate=torch.cat([p.acceptance_rate for p in parts], dim=1),
        num_divergent=torch.cat([p.num_divergent for p in parts], dim=1),
        trace=trace, trace_steps=parts[0].trace_steps, kernel=run.kernel,
        example_dim=parts[0].plate, num_observed=_observed(parts),
        latents={name: torch.cat([p.latents[name] for p in parts], dim=1)
                 for name in parts[0].latents},
    )
