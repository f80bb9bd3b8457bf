"""A run's description: :class:`Problem`, :class:`Recording`, the legs and the latents' layout."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch.distributions import biject_to

from pyrolik._validate import (
    check_count,
    check_model,
    check_optional_count,
    shared_params,
    validate_data,
)
from pyrolik.annealing.kernel import HMC, SMC, Kernel, as_smc
from pyrolik.annealing.step_sizes import StepSizes
from pyrolik.model.target import Target, make_target, prepare_inputs
from pyrolik.schedules import PILOT_NAMES, adaptive, resolve

__all__ = ["as_recording", "require_steps", "Leg", "Problem", "Recording", "Schedule", "describe", "gradient_evals",
           "expand_latents", "latents_to_flat", "resolve_schedule", "adaptive_of"]

Check = Callable[[Target, list[Tensor], list[Tensor]], None]


@dataclass(frozen=True)
class Schedule:
    """Fixed betas, or a schedule built per batch from the pilot on the grid of ``betas``."""

    name: str
    betas: Tensor
    adaptive: bool = False
    per_example: bool = False  # adaptive: one schedule per example, not one pooled for the batch

    @property
    def num_steps(self) -> int:
        return len(self.betas) - 1

    def for_batch(self, table: StepSizes | None) -> Tensor:
        """The forward betas a batch anneals along: the fixed ones, or from the pilot's variances pooled over
        the batch ``(T + 1,)``, or with ``per_example`` one per example ``(T + 1, n)``."""
        if not self.adaptive:
            return self.betas
        if table is None or table.log_ratio_var is None:
            raise ValueError("schedule='adaptive' needs the pilot's variances of log p(x | z) "
                             "(StepSizes.log_ratio_var); the given step_sizes table has none: pass "
                             "a table from a pilot of this version, or schedule='sigmoid'")
        if self.per_example:  # a failed example's NaN variances leave it the floor's even steps
            return adaptive(self.num_steps, table.betas, table.log_ratio_var).to(self.betas)
        # pooled at each pilot temperature over the examples that have a variance there: not those
        # whose density failed (NaN/inf, marked failed later), nor those whose pilot weights all
        # sat on one chain (NaN: no variance under the weights)
        var = table.log_ratio_var
        var = torch.where(torch.isfinite(var), var, torch.full_like(var, torch.nan))
        if var.isnan().all():
            return self.betas
        return adaptive(self.num_steps, table.betas, var.nanmean(1)).to(self.betas)


def adaptive_of(schedule: str | Tensor, kernel: HMC, num_chains: int) -> bool:
    """Whether ``schedule=`` is built from the pilot (``"auto"``: with 2 or more pilot chains)."""
    if not isinstance(schedule, str) or schedule not in PILOT_NAMES:
        return False
    chains = kernel.adaptation.pilot_chains(num_chains)
    if schedule == "auto":
        return kernel.adaptation.name == "pilot" and chains >= 2
    if kernel.adaptation.name != "pilot":
        raise ValueError(f"schedule={schedule!r} is built from the pilot run's variance of "
                         "log p(x | z): use a kernel with adapt='pilot' (the default), or "
                         "schedule='auto' (adaptive with a pilot, sigmoid without)")
    if chains < 2:
        raise ValueError(f"schedule={schedule!r} needs at least 2 pilot chains per example to "
                         f"estimate a variance; this run's pilot has {chains} (num_chains="
                         f"{num_chains}): raise num_chains or pilot_chains, or pass "
                         "schedule='sigmoid'")
    return True


def resolve_schedule(schedule: str | Tensor, num_steps: int | None, kernel: HMC,
                     num_chains: int) -> Schedule:
    """The checked :class:`Schedule` named by ``schedule=`` (a name, :data:`PILOT_NAMES`
    included, or betas) and ``num_steps`` (``None`` with betas)."""
    adaptive = adaptive_of(schedule, kernel, num_chains)
    if isinstance(schedule, str) and schedule in PILOT_NAMES:
        # a schedule built from the pilot starts from the sigmoid: the pilot's grid is taken from it
        per_example = schedule == "adaptive_per_example"
        name = schedule if per_example else "adaptive" if adaptive else "sigmoid"
        return Schedule(name, resolve("sigmoid", num_steps), adaptive, per_example)
    betas = resolve(schedule, num_steps)
    return Schedule(schedule if isinstance(schedule, str) else "custom", betas)


@dataclass(frozen=True)
class Leg:
    """Chains annealed in one direction: forward from :math:`f_0`, or reverse from ``latents``."""

    direction: str  # "forward" or "reverse"
    num_chains: int
    latents: dict[str, Tensor] | None = None  # reverse: exact posterior draws {site: (K, N, *site)}

    @property
    def method(self) -> str:
        """The estimator whose result this leg gives: ``"ais"`` or ``"reverse_ais"``."""
        return "ais" if self.direction == "forward" else "reverse_ais"


@dataclass(frozen=True)
class Problem:
    """What an annealing run computes: the model on ``x``, the path, the legs, the schedule and the
    kernel (the move, its tuner and the resampling)."""

    model: Callable[..., Any]
    x: Tensor
    kernel: SMC
    schedule: Schedule
    legs: tuple[Leg, ...]
    guide: Callable[..., Any] | None = None  # AIS+encoder: the path starts at the guide
    model_args: tuple = ()
    model_kwargs: dict = field(default_factory=dict)
    step_sizes: StepSizes | None = None  # a given pilot table instead of a pilot
    check: Check | None = None  # after a fresh batch: (first leg's target, starts, final states)
    # (N,) each example's largest beta, one of the schedule's (forward legs stay there, reverse legs
    # start there: engine.run); results keep the schedule's betas uncapped (distortion.bounds reads)
    stops: Tensor | None = None

    @property
    def path_name(self) -> str:
        return "prior" if self.guide is None else "guide"

    def stops_of(self, start: int, stop: int) -> Tensor | None:
        """The stops of examples ``[start, stop)`` (``None`` when every example runs to the end)."""
        return None if self.stops is None else self.stops[start:stop]

    @property
    def islands(self) -> int | None:
        """Islands per example of each leg (``None``: plain AIS, no resampling)."""
        return self.kernel.islands_for(self.legs[0].num_chains)

    @property
    def rows_per_example(self) -> int:
        return sum(leg.num_chains for leg in self.legs)

    def settings(self, batch_size: int | None) -> dict[str, Any]:
        """The settings every AIS result records, costs included (gradient evaluations per example of one
        leg's chains and of the pilot)."""
        kernel, num_chains, num_steps = self.kernel.move, self.legs[0].num_chains, self.schedule.num_steps
        chains, pilot = gradient_evals(kernel, num_steps, num_chains)
        a = kernel.adaptation
        return {"num_steps": num_steps, "num_chains": num_chains, "schedule": self.schedule.name,
                "num_leapfrog": kernel.num_leapfrog, "adapt": str(a.name),
                "target_accept": a.target_accept, "initial_step_size": a.step_size,
                "mass_matrix": bool(getattr(a, "mass_matrix", False)), "batch_size": batch_size,
                "resample": self.kernel.resample, "islands": self.islands,
                "init": "prior" if self.guide is None else getattr(self.guide, "__name__", "guide"),
                "gradient_evals_per_example": chains, "pilot_gradient_evals_per_example": pilot}

    def fingerprint_extra(self) -> dict[str, Tensor]:
        """The tensors besides the settings that a checkpoint of this run must match."""
        extra = {"schedule": self.schedule.betas}
        extra.update({f"latents.{name}": v for leg in self.legs
                      for name, v in (leg.latents or {}).items()})
        extra.update({f"step_sizes.{i}": v for i, v in enumerate(self.step_sizes or ())
                      if v is not None})
        if self.stops is not None:
            extra["stops"] = self.stops
        return extra


def gradient_evals(move: HMC, num_steps: int, num_chains: int) -> tuple[int, int]:
    """Gradient evaluations per example of ``num_chains`` chains of ``num_steps`` steps with ``move``
    (one to start, ``num_leapfrog`` per step), and of the pilot before them (0 without one)."""
    strategy = move.adaptation
    pilot = strategy.pilot_transitions(num_steps)
    return ((num_steps * move.num_leapfrog + 1) * num_chains,
            (pilot * move.num_leapfrog + 1) * strategy.pilot_chains(num_chains) if pilot else 0)


@dataclass(frozen=True)
class Recording:
    """What an AIS run records besides its final state: ``record=Recording(every=10, states=True)``.

    Diagnostics every ``every`` steps (default about 100 records) or at ``steps``, the states too
    with ``states`` (memory grows with the records), their :math:`\\log f_1 - \\log f_0` with
    ``log_ratio``.

    Examples
    --------
    >>> import pyrolik
    >>> from pyrolik.annealing import Recording
    >>> from pyrolik_models import LinearGaussian
    >>> lg = LinearGaussian.random(data_dim=3, latent_dim=2, seed=0)
    >>> r = pyrolik.ais(lg, lg.sample(2), num_steps=20, num_chains=4, progress=False,
    ...                 record=Recording(every=5, states=True))
    >>> r.trace_steps.tolist(), tuple(r.trace["z"].shape)   # (records, chains, examples, latent_dim)
    ([5, 10, 15, 20], (4, 4, 2, 2))
    """

    every: int | None = None
    states: bool = False
    steps: tuple[int, ...] | None = None
    log_ratio: bool = False

    def settings(self) -> dict[str, Any]:
        """What a checkpoint of the run must match."""
        out: dict[str, Any] = {"record_every": self.every, "keep_states": self.states}
        if self.steps is not None or self.log_ratio:
            out.update(record_steps=self.steps, record_log_ratio=self.log_ratio)
        return out


def require_steps(num_steps: int | None, schedule: str | Tensor | None,
                  steps: str = "annealing steps, e.g. 200", searches: bool = True) -> None:
    """Refuse a named schedule without ``num_steps`` (a tensor fixes them), and a ``Tolerance`` that
    reached an estimator which does not search (one that does has replaced it by then);
    ``searches``: the caller takes a Tolerance."""
    if num_steps is None and isinstance(schedule, str):
        search = ("num_steps=pyrolik.Tolerance(nats) to choose them by BDMC on simulated data, "
                  if searches else "")
        raise ValueError(f"num_steps is required with a named schedule: pass num_steps= ({steps}), "
                         f"{search}or a schedule tensor")
    if type(num_steps).__name__ == "Tolerance":
        raise ValueError(f"num_steps must be a number of annealing steps here, got {num_steps!r}: "
                         "only ais, evidence, sigma_curve and rate_distortion choose the steps for "
                         "a Tolerance; pass the result.budget.num_steps of one of them (for ais, "
                         "pyrolik.budget(model, x, tolerance).num_steps chooses them alone)")


def as_recording(record: int | Recording | None) -> Recording:
    """``record=`` as a :class:`Recording`: ``None`` the default, an int the stride."""
    if record is None or isinstance(record, Recording):
        out = record or Recording()
        check_optional_count("record.every", out.every)
        return out
    return Recording(every=check_count("record", record))


@shared_params
def describe(model: Callable[..., Any], x: Tensor, *, directions: Sequence[str],
             num_steps: int | None, num_chains: int, schedule: str | Tensor, kernel: Kernel | None,
             init: Callable[..., Any] | None = None, latents: Tensor | dict[str, Tensor] | None = None,
             model_args: tuple = (), model_kwargs: dict | None = None,
             step_sizes: StepSizes | None = None, check: Check | None = None,
             stops: Tensor | None = None) -> Problem:
    """Check the arguments every annealing front end takes; the run, one leg per direction.

    Parameters
    ----------
    directions : sequence of {"forward", "reverse"}
        One leg per entry, in this order.
    num_steps : int or None
        Annealing steps T; ``None`` with a schedule tensor.
    num_chains : int
        Chains per example of each leg (K).
    schedule : str or torch.Tensor
        A schedule's name or its betas (:func:`resolve_schedule`).
    latents : dict or torch.Tensor, optional
        The reverse legs' start: exact posterior draws ``(N, *site)`` or ``(K, N, *site)`` by site.
    step_sizes : StepSizes, optional
        A pilot table of an earlier run on the same data instead of a new pilot.
    check : callable, optional
        Called after each fresh batch with the first leg's target, the starts and the final states.
    stops : torch.Tensor, shape ``(N,)``, optional
        Each example's largest beta, a beta of the (fixed) schedule: it anneals only up to there.
    """
    check_model(model)
    x = validate_data(x)
    check_count("num_chains", num_chains)
    check_optional_count("num_steps", num_steps)
    kernel = as_smc(kernel)
    kernel.islands_for(num_chains)  # refuses islands that do not split the chains
    resolved = resolve_schedule(schedule, num_steps, kernel.move, num_chains)
    if init is not None and not callable(init):
        raise TypeError(f"init must be a callable Pyro guide or None, got {type(init).__name__}")
    model_args, model_kwargs = tuple(model_args), dict(model_kwargs or {})
    expanded = None
    if "reverse" in directions:
        if latents is None:
            raise ValueError("a reverse leg starts from given latents")
        first = prepare_inputs(model, x, model_args, model_kwargs).batch(0, 1)
        probe = make_target(model, x[:1], num_chains, model_args=first.model_args,
                            model_kwargs=first.model_kwargs)
        expanded = expand_latents(probe, latents, x.shape[0])
    if step_sizes is not None and not isinstance(step_sizes, StepSizes):
        raise TypeError("step_sizes must be a StepSizes table (result.step_sizes of pyrolik.ais, or "
                        "result.lower.step_sizes of an earlier bdmc, on the same x), got "
                        f"{type(step_sizes).__name__}")
    if stops is not None and (resolved.adaptive or stops.shape != (x.shape[0],) or not bool(
            torch.isin(stops.to(resolved.betas), resolved.betas).all())):
        raise ValueError("stops must be one beta of the (fixed) schedule per example")
    legs = tuple(Leg(d, num_chains, expanded if d == "reverse" else None) for d in directions)
    return Problem(model, x, kernel, resolved, legs, init, model_args, model_kwargs, step_sizes,
                   check, stops)


def expand_latents(target: Target, latents: Tensor | dict[str, Tensor], num_examples: int
                   ) -> dict[str, Tensor]:
    """Latents ``(N, *site)`` or ``(K, N, *site)`` (a tensor: one site) as ``(K, N, *site)``."""
    k, n = target.layout.num_chains, num_examples
    if isinstance(latents, Tensor):
        if len(target.layout.sites) != 1:
            raise TypeError(f"the model has latent sites {[s.name for s in target.layout.sites]}: "
                            "pass latents as a dict {site: tensor}")
        latents = {target.layout.sites[0].name: latents}
    if not isinstance(latents, dict):
        raise TypeError(f"latents must be a dict {{site: tensor}} or a tensor, got "
                        f"{type(latents).__name__}")
    names = [s.name for s in target.layout.sites]
    missing, unknown = [n for n in names if n not in latents], sorted(set(latents) - set(names))
    if missing:
        raise ValueError(f"latents miss the site(s) {missing}; pass one value per latent site "
                         f"{names}")
    if unknown:
        raise ValueError(f"latents name no latent site of the model: {unknown}; pass one value per "
                         f"latent site {names}")
    probe = target.layout.constrain(torch.zeros(target.layout.rows, target.layout.latent_dim,
                                                dtype=target.program.x.dtype))
    out = {}
    for s in target.layout.sites:
        per_example = tuple(probe[s.name].movedim(s.plate_index, 0).shape[1:])
        v = torch.as_tensor(latents[s.name]).to(target.program.x)
        if tuple(v.shape) == (n,) + per_example:
            v = v.unsqueeze(0).expand(k, *v.shape)
        if tuple(v.shape) != (k, n) + per_example:
            raise ValueError(f"latents[{s.name!r}] has shape {tuple(v.shape)}; expected "
                             f"{(n,) + per_example} or {(k, n) + per_example}")
        support = target.layout.supports[s.name]
        base = getattr(support, "base_constraint", support)
        if not any(isinstance(b, Tensor) and b.numel() > 1 for b in vars(base).values()):
            _unconstrained(s.name, support, v)  # checked before any run; else per batch, below
        out[s.name] = v
    return out


def _unconstrained(name: str, support: Any, v: Tensor) -> Tensor:
    """``v`` mapped to the real line, refused outside or on the edge of ``support``."""
    if not bool(support.check(v).all()):
        raise ValueError(f"latents[{name!r}] lie outside the site's support {support}")
    u = biject_to(support).inv(v)
    if not bool(torch.isfinite(u).all()):
        raise ValueError(f"latents[{name!r}] lie on the edge of the site's support {support} (e.g. "
                         "exactly 0 for a positive site), where its map to the real line is "
                         "infinite: pass values inside the support")
    return u


def latents_to_flat(target: Target, latents: dict[str, Tensor]) -> Tensor:
    """``{site: (K, N, *site)}`` constrained values -> flat unconstrained ``u`` ``(K * N, d)``,
    checked against each example's own support (its bounds may differ by example)."""
    k, n = target.layout.num_chains, target.layout.num_examples
    flat = {}
    for s in target.layout.sites:
        v = latents[s.name].reshape(k * n, *latents[s.name].shape[2:]).movedim(0, s.plate_index)
        flat[s.name] = _unconstrained(s.name, target.layout.supports[s.name], v)
    return target.layout.join(flat)
