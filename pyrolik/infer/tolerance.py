"""The number of annealing steps for a tolerance: BDMC on simulated data, steps doubled."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count, shared_params, validate_data
from pyrolik.advice import BEST_SPLIT_CHAINS
from pyrolik.annealing.driver import run
from pyrolik.annealing.kernel import SMC, Kernel, as_smc
from pyrolik.annealing.run import Recording
from pyrolik.annealing.run import gradient_evals as gradient_evals_of
from pyrolik.exceptions import BudgetWarning
from pyrolik.execution.batches import local, progress_bar
from pyrolik.infer.sandwich import sandwich, simulate
from pyrolik.model.arguments import has_per_example, mark_arguments, take_rows
from pyrolik.model.autoguides import is_autoguide
from pyrolik.model.reuse import TargetCache
from pyrolik.results import AISResult
from pyrolik.results.bdmc import CONFIDENCE_Z, MAX_STEPS, Budget, Check, Round

__all__ = ["budget", "search", "with_budget", "search_steps", "Sandwich", "Budget", "Round", "Check",
           "Tolerance", "choose_budget", "check_tolerance", "CONFIDENCE_Z", "MIN_STEPS", "MAX_STEPS"]

MIN_STEPS = 25  # the search's first number of steps: 25, 50, 100, 200, ...


@dataclass(frozen=True)
class Tolerance:
    """``num_steps=Tolerance(nats)``: the annealing steps whose BDMC gap is within ``nats``.

    Taken by :func:`pyrolik.ais`, :func:`pyrolik.evidence` (on whole data sets),
    :func:`pyrolik.sigma_curve` and :func:`pyrolik.rate_distortion` (at every grid point), and
    :func:`pyrolik.budget` alone. The estimator runs BDMC on data simulated like ``x`` at 25, 50,
    100, ... steps until the gap's
    mean + 2 standard errors is within ``nats``, then a check on a subset of ``x`` that warns
    (:class:`~pyrolik.BudgetWarning`) when real data disagree; ``result.budget`` records the search
    (``docs/tolerance.md``). :func:`pyrolik.budget` runs the same search alone.

    Parameters
    ----------
    nats : float
        The largest BDMC gap to accept.
    max_steps : int
        The search's cap; reaching it first warns and keeps the estimate there.

    Examples
    --------
    >>> import pyrolik
    >>> from pyrolik_models import LinearGaussian
    >>> lg = LinearGaussian.random(data_dim=3, latent_dim=2, seed=0)
    >>> r = pyrolik.ais(lg, lg.sample(32), num_steps=pyrolik.Tolerance(0.5), num_chains=4, seed=0,
    ...                 progress=False)
    >>> r.budget.num_steps == r.settings["num_steps"], r.budget.gap <= 0.5
    (True, True)
    """

    nats: float
    max_steps: int = MAX_STEPS

    def __post_init__(self):
        t, m = self.nats, self.max_steps
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            raise TypeError(f"Tolerance takes a number of nats (e.g. Tolerance(0.3)), got "
                            f"{type(t).__name__}")
        if not (math.isfinite(t) and t > 0):
            raise ValueError(f"a tolerance must be a positive number of nats (the largest BDMC gap "
                             f"to accept, e.g. 0.3), got {t!r}")
        if isinstance(m, bool) or not isinstance(m, int) or m < MIN_STEPS:
            raise ValueError(f"max_steps must be an int of at least {MIN_STEPS} (the search starts "
                             f"there and doubles), got {m!r}")
        object.__setattr__(self, "nats", float(t))


def check_tolerance(tolerance: Any, schedule: Any, *, named: str = "auto") -> Tolerance:
    """``tolerance`` as a :class:`Tolerance` (a number: its nats), refused with a schedule tensor."""
    tolerance = tolerance if isinstance(tolerance, Tolerance) else Tolerance(tolerance)
    if not isinstance(schedule, str):
        raise ValueError("a Tolerance chooses the number of steps, which a schedule tensor fixes: "
                         f"pass a schedule by name (e.g. {named!r}) with num_steps=Tolerance(...), "
                         "or the tensor with num_steps=None")
    return tolerance


def choose_budget(tolerance: Tolerance, *, bdmc_at: Callable[[int], Round],
                  check_at: Callable[[int], Check | None] | None = None, num_simulated: int,
                  min_steps: int = MIN_STEPS, progress: bool = True, what: str = "ais",
                  stacklevel: int = 3, cap_fix: str | None = None) -> Budget:
    """Double the steps from ``min_steps`` until ``bdmc_at(num_steps) -> Round`` is within the
    tolerance, or the cap (the last round runs at the cap); then ``check_at(num_steps)`` on the real
    data. Warns (:class:`BudgetWarning`) when the cap came first (``cap_fix``: what to do) or the
    check disagrees.
    """
    cap_fix = cap_fix or "raise max_steps, use more chains, or start from an encoder (init=guide)"
    max_steps, nats = tolerance.max_steps, tolerance.nats
    rounds: list[Round] = []
    total = int(math.ceil(math.log2(max_steps / min_steps))) + 1
    bar = progress_bar(total, f"choosing num_steps (tolerance {nats:g} nats)", progress)
    steps = min_steps
    with bar:
        while True:
            last = bdmc_at(steps)
            rounds.append(last)
            bar.update(1)
            bar.set_postfix_str(f"T={steps}: gap {last.gap:.3f} +- {last.gap_se:.3f}")
            converged = last.gap_upper <= nats
            if converged or steps >= max_steps:
                break
            steps = min(2 * steps, max_steps)
    notes = []
    if not converged:
        notes.append(f"the budget search reached max_steps={max_steps} before the tolerance: the "
                     f"BDMC gap on simulated data at {steps} steps is {last.gap:.3f} +- "
                     f"{last.gap_se:.3f} nats (upper bound {last.gap_upper:.3f} > tolerance "
                     f"{nats:g}{'' if last.point is None else ' at ' + last.point}); the "
                     f"estimate at {steps} steps is kept but its error may exceed the tolerance: "
                     f"{cap_fix}")
    check = None if check_at is None else check_at(steps)
    if check is not None and check.change - CONFIDENCE_Z * check.change_se > nats:
        sim = ("" if check.simulated_change is None
               else f" (on the simulated data it rose by {check.simulated_change:.3f})")
        at = "" if check.point is None else f" at {check.point}"
        notes.append(f"on {check.num_examples} examples of x the estimate{at} rose by "
                     f"{check.change:.3f} +- {check.change_se:.3f} nats from {check.num_steps} to "
                     f"{steps} steps{sim}: more than the tolerance {nats:g}, so AIS has not "
                     "converged on these data as it has on data simulated from the model (real data "
                     "can be harder: Wu et al. 2017, section 4); pass a larger num_steps")
    for note in notes:
        warnings.warn(f"{what}: {note}", BudgetWarning, stacklevel=stacklevel)
    return Budget(nats, steps, converged, num_simulated, rounds, check=check,
                  max_steps=max_steps, confidence_z=CONFIDENCE_Z, notes=notes)


CHECK_SEED = 1_000_003  # the real-data check's seed offset from the final run's
CHECK_EXAMPLES = 50  # examples of x the real-data check runs on (all up to this many)


def simulated_size(num_examples: int) -> int:
    """Simulated examples for the search: a twelfth of ``x`` (search cost about a third of the final
    run), at least 16 (a gap's standard error needs examples), at most 100."""
    return min(100, max(16, num_examples // 12))


def evenly_spaced(num_examples: int, count: int) -> Tensor:
    """``count`` indices spread over ``range(num_examples)`` (data may be sorted, e.g. by class)."""
    return torch.linspace(0, num_examples - 1, count).round().long().unique()


def simulation_arguments(model_args: tuple, model_kwargs: dict | None, num_examples: int,
                         count: int) -> tuple[tuple[tuple, dict], bool, int, tuple[tuple, dict]]:
    """The user's arguments marked per example, whether any is, how many examples to simulate, and
    their arguments (per-example ones at up to ``count`` rows evenly spaced over ``x``)."""
    marked = mark_arguments(tuple(model_args), dict(model_kwargs or {}), num_examples)
    if not has_per_example(*marked):
        return marked, False, count, marked
    rows = evenly_spaced(num_examples, min(count, num_examples))
    return marked, True, len(rows), take_rows(*marked, 1, rows)


def gradient_evals(result: AISResult, legs: int = 1, pilot: bool = True) -> float:
    """Gradient evaluations of a run: its chains' (``legs`` directions) and, with ``pilot``, its
    pilot's (none ran when an earlier pass's step-size table was given)."""
    s = result.settings
    return float(result.num_examples * (legs * s["gradient_evals_per_example"]
                                        + pilot * s["pilot_gradient_evals_per_example"]))


def with_budget(result: Any, chosen: Budget | None, run: AISResult | None = None) -> Any:
    """``result`` with the budget that chose its steps and what its AIS ``run`` (default: the result
    itself) cost; unchanged without a budget."""
    if chosen is None:
        return result
    evals = gradient_evals(result if run is None else run)
    return replace(result, budget=chosen.with_final(evals, result.wall_time))


@shared_params
def budget(model: Callable[..., Any], x: Tensor, tolerance: float | Tolerance | None = None, *,
           gradients: float | None = None, num_chains: int | None = None,
           schedule: str | Tensor = "auto", kernel: Kernel | None = None,
           init: Callable[..., Any] | None = None, model_args: tuple = (),
           model_kwargs: dict | None = None, seed: int | None = None,
           batch_size: int | None = None, progress: bool = True) -> Budget:
    """The split of a budget between chains and steps: for a ``tolerance``, the number of annealing
    steps whose BDMC gap on simulated data is within it; for ``gradients``, the most steps they pay.

    With a tolerance: BDMC on data simulated like ``x`` at 25, 50, 100, ... steps until the gap's
    mean + 2 standard errors is within ``tolerance``; a check on ``x`` warns when real data disagree
    (Wu et al. 2017, section 4; ``docs/tolerance.md``). Without ``num_chains`` the steps are for
    :data:`~pyrolik.advice.BEST_SPLIT_CHAINS` chains, the best split of every budget on the measured
    frontier (``benchmarks/RESULTS.md``).

    Parameters
    ----------
    tolerance : float or Tolerance, optional
        The largest BDMC gap to accept (nats), or a :class:`Tolerance` with its search's cap.
    gradients : float, optional
        Instead of a tolerance: gradient evaluations per example to spend, the pilot's included
        (no search runs, so the options of a run are refused with it).
    num_chains : int, optional
        Chains per example (default: the frontier's best split,
        :data:`~pyrolik.advice.BEST_SPLIT_CHAINS`).

    Returns
    -------
    Budget
        ``num_steps`` and ``num_chains`` to pass to the estimator, the rounds, the check, the notes
        it warned with, the seed.

    Examples
    --------
    >>> import pyrolik
    >>> from pyrolik_models import LinearGaussian
    >>> lg = LinearGaussian.random(data_dim=3, latent_dim=2, seed=0)
    >>> b = pyrolik.budget(lg, lg.sample(4), gradients=2000)
    >>> b.num_chains, b.num_steps > 100
    (4, True)
    >>> r = pyrolik.ais(lg, lg.sample(4), num_steps=b.num_steps, num_chains=b.num_chains,
    ...                 progress=False)
    >>> r.settings["gradient_evals_per_example"] + r.settings["pilot_gradient_evals_per_example"] <= 2000
    True
    """
    if (tolerance is None) == (gradients is None):
        raise ValueError("pass tolerance= (the largest BDMC gap to accept, in nats) or gradients= "
                         "(gradient evaluations per example to spend), one of them")
    chains = BEST_SPLIT_CHAINS if num_chains is None else num_chains
    if tolerance is None:
        given = {"init": init, "model_args": model_args or None, "model_kwargs": model_kwargs,
                 "seed": seed, "batch_size": batch_size}
        if unused := [f"{name}=" for name, value in given.items() if value is not None]:
            raise ValueError(f"budget(gradients=) splits the gradients between chains and steps by "
                             f"arithmetic and runs nothing, so {', '.join(unused)} would have no "
                             "effect: pass them to the estimator you run with the budget")
        return split(gradients, chains, as_smc(kernel), schedule)
    return search(model, x, tolerance, num_chains=chains, schedule=schedule, kernel=kernel,
                  init=init, model_args=model_args, model_kwargs=model_kwargs, seed=seed,
                  batch_size=batch_size, progress=progress, what="budget(tolerance=)",
                  stacklevel=4)


def split(gradients: Any, num_chains: int, kernel: SMC, schedule: str | Tensor) -> Budget:
    """The most steps of ``num_chains`` chains whose run, pilot included, costs at most
    ``gradients`` gradient evaluations per example."""
    if isinstance(gradients, bool) or not isinstance(gradients, int | float) or not (
            math.isfinite(gradients) and gradients > 0):
        raise ValueError(f"gradients must be a positive number of gradient evaluations per example, "
                         f"e.g. gradients=10000; got {gradients!r}")
    check_count("num_chains", num_chains)
    if not isinstance(schedule, str):
        raise ValueError("a schedule tensor fixes the number of steps: pass a schedule by name with "
                         "gradients=, or the tensor with num_steps=None")

    def cost(steps: int) -> int:
        return sum(gradient_evals_of(kernel.move, steps, num_chains))

    if cost(1) > gradients:
        raise ValueError(f"gradients={gradients:g} do not pay one step of {num_chains} chains and "
                         f"its pilot ({cost(1)} per example): give more gradients or fewer chains")
    lo, hi = 1, 2
    while cost(hi) <= gradients:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # the cost grows with the steps
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cost(mid) <= gradients else (lo, mid)
    return Budget(None, lo, True, 0, [], num_chains=num_chains, gradients=float(gradients))


class Sandwich(NamedTuple):
    """One BDMC pass of a search at each of its ``m`` grid points (one for :func:`search`)."""

    gap: Tensor  # (m,) float64, nats
    gap_se: Tensor  # (m,)
    lower: Tensor  # (m,) mean forward estimate on the simulated data
    gradient_evals: float  # the pass's, its pilot's included when one ran
    table: Any  # the pilot's step sizes, for a later pass with as long a pilot


def search_steps(tolerance: Tolerance, x: Tensor, *, marked: tuple[tuple, dict], per_example: bool,
                 num_simulated: int, seed: int,
                 sandwich_at: Callable[[int, int, Any], Sandwich],
                 estimate_at: Callable[..., tuple[Tensor, float]],
                 pilot_length: Callable[[int], int | None], labels: Sequence[str | None] = (None,),
                 progress: bool, what: str, stacklevel: int, cap_fix: str | None = None) -> Budget:
    """The one budget search (:func:`choose_budget` on one process without checkpoints), whatever runs.

    ``sandwich_at(steps, seed, table)``: BDMC on the simulated data (``table``: an earlier pass's
    pilot table of as long a pilot, ``pilot_length(steps)``, or ``None``). ``estimate_at(steps,
    x_sub, model_args, model_kwargs, seed=)``: the ``(m, n)`` estimates on a subset of ``x`` and
    their gradient evaluations, for the real-data check. A round's gap, and the check's change, are
    those of the grid point (``labels``) with the largest upper confidence bound.
    """
    lowers: dict[int, Tensor] = {}
    tables: dict[int, Any] = {}  # pilot length -> the table a pass's pilot of that length made
    targets = TargetCache()

    def bdmc_at(steps: int) -> Round:
        start = time.perf_counter()
        length = pilot_length(steps)
        given = tables.get(length) if length is not None else None
        with targets:  # the rounds share the model's targets and recordings (same data)
            out = sandwich_at(steps, seed + 2 + steps, given)
        if length is not None and given is None and out.table is not None:
            tables[length] = out.table
        lowers[steps] = out.lower
        j = int(torch.argmax(torch.nan_to_num(out.gap + CONFIDENCE_Z * out.gap_se, nan=math.inf)))
        return Round(steps, float(out.gap[j]), float(out.gap_se[j]), float(out.lower[j]),
                     out.gradient_evals, time.perf_counter() - start, labels[j])

    def check_at(steps: int) -> Check | None:
        half, n = steps // 2, x.shape[0]
        if half < 1 or n < 2:  # one example has no standard error to test
            return None
        idx = evenly_spaced(n, min(n, CHECK_EXAMPLES))  # data may be sorted, e.g. by class
        args, kwargs = take_rows(*marked, 1, idx) if per_example else marked
        runs = []
        with targets:  # both runs on the same subset: one target, one recording
            for t in (steps, half):  # seeded apart from the final run
                start = time.perf_counter()
                out = estimate_at(t, x[idx.to(x.device)], args, kwargs, seed=seed + CHECK_SEED)
                runs.append((*out, time.perf_counter() - start))
        (full, e_full, s_full), (r, e_half, s_half) = runs
        diff = (full - r).double()  # (m, n)
        diff = diff[:, torch.isfinite(diff).all(0)]
        k = diff.shape[1]
        change = diff.mean(-1)
        se = diff.std(-1) / k**0.5 if k > 1 else torch.full_like(change, math.inf)
        j = int(torch.argmax(torch.nan_to_num(change - CONFIDENCE_Z * se, nan=-math.inf)))
        sim = (float(lowers[steps][j] - lowers[half][j]) if half in lowers and steps in lowers
               else None)
        return Check(k, half, float(change[j]), float(se[j]), sim, e_full + e_half,
                     s_full + s_half, labels[j])

    with local():
        chosen = choose_budget(tolerance, bdmc_at=bdmc_at, check_at=check_at,
                               num_simulated=num_simulated, progress=progress, what=what,
                               stacklevel=stacklevel + 1, cap_fix=cap_fix)
    return replace(chosen, seed=seed)


def _f64(value: float) -> Tensor:
    return torch.tensor([value], dtype=torch.float64)


def search(model: Callable[..., Any], x: Tensor, tolerance: float | Tolerance, *, num_chains: int,
           schedule: str | Tensor, kernel: Kernel | None, init: Callable[..., Any] | None,
           model_args: tuple, model_kwargs: dict | None, seed: int | None,
           batch_size: int | None, progress: bool, what: str, stacklevel: int) -> Budget:
    """:func:`budget`'s search (:func:`search_steps` with BDMC and AIS), its warnings naming ``what``
    and pointing ``stacklevel`` frames up."""
    tolerance = check_tolerance(tolerance, schedule)
    kernel = as_smc(kernel)
    check_count("num_chains", num_chains)
    x = validate_data(x)
    seed = resolve_seed(seed)
    if init is not None and is_autoguide(init):
        raise ValueError("a Tolerance runs BDMC on data simulated from the model, and an AutoGuide "
                         f"({type(init).__name__}) fitted on x has no proposal for those examples: "
                         "pass num_steps= with this guide, or use an amortised guide (an encoder) "
                         "with a Tolerance")
    marked, per_example, num_sim, sim_args = simulation_arguments(
        model_args, model_kwargs, x.shape[0], simulated_size(x.shape[0]))
    try:
        sim = simulate(model, num_sim, data_shape=tuple(x.shape[1:]), model_args=sim_args[0],
                       model_kwargs=sim_args[1], seed=seed + 1, dtype=x.dtype, device=x.device)
    except ValueError as err:
        raise ValueError(f"a Tolerance chooses num_steps by BDMC on data simulated from the model, "
                         f"and this model cannot be simulated ({err}). Pass num_steps= instead, and "
                         "check it with pyrolik.bdmc(model, (x, latents), num_steps=...) on pairs you "
                         "draw yourself from the model's joint") from err
    pilot_steps = getattr(kernel.move.adaptation, "pilot_steps", None)
    common: dict[str, Any] = dict(num_chains=num_chains, schedule=schedule, kernel=kernel, init=init,
                                  batch_size=batch_size, progress=progress)

    def sandwich_at(steps: int, seed: int, given: Any) -> Sandwich:
        r = sandwich(model, sim, num_steps=steps, model_args=sim_args[0], model_kwargs=sim_args[1],
                     seed=seed, step_sizes=given, **common)
        assert r is not None  # one process: bdmc returns None only off rank 0
        return Sandwich(_f64(r.gap), _f64(r.gap_stderr), _f64(r.lower.mean),
                        gradient_evals(r.lower, legs=2, pilot=given is None), r.lower.step_sizes)

    def estimate_at(steps: int, x_sub: Tensor, args: tuple, kwargs: dict, *,
                    seed: int) -> tuple[Tensor, float]:
        _, out = run("ais", model, x_sub, directions=("forward",), num_steps=steps,
                     model_args=args, model_kwargs=kwargs, seed=seed, recording=Recording(None),
                     desc="AIS (budget check)", **common)
        assert out is not None  # one process
        return out[0].log_likelihood.unsqueeze(0), gradient_evals(out[0])

    chosen = search_steps(tolerance, x, marked=marked, per_example=per_example,
                          num_simulated=num_sim, seed=seed, sandwich_at=sandwich_at,
                          estimate_at=estimate_at,
                          pilot_length=lambda steps: None if pilot_steps is None
                          else pilot_steps(steps),
                          progress=progress, what=what, stacklevel=stacklevel)
    return replace(chosen, num_chains=num_chains)
