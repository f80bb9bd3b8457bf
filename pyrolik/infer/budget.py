r"""Choosing the number of annealing steps from a tolerance: BDMC on simulated data, steps doubled.

Bidirectional Monte Carlo on data simulated from the model sandwiches :math:`\log p(x)` between a
stochastic lower bound (forward AIS) and a stochastic upper bound (reverse AIS from the simulated
latents); the gap :math:`g_T` between them, averaged over the simulated examples, bounds the average
error of forward AIS at ``T`` steps on such data (Grosse, Ghahramani & Adams 2015). The search runs
BDMC at :math:`T_0, 2T_0, 4T_0, \dots` on one simulated data set until the gap's upper confidence
bound :math:`\bar g_T + z\,\mathrm{se}(\bar g_T)` (``z`` = :data:`CONFIDENCE_Z`, one-sided 97.7%) is
within the tolerance, or until the cap, and the estimating run uses that ``T``.

What it promises, and what not: the gap bounds the error **on data simulated from the model**. Real
data may be harder to anneal to than the model's own samples (Wu et al. 2017, section 4: the
posterior of a held-out example can sit where the prior puts little mass), so the chosen budget
certifies the estimator on simulated data only. A cheap check on the real data compares the
estimate at ``T`` with one at ``T / 2`` on a subset: AIS's bias typically falls like :math:`1/T`,
so the rise of the estimate when the steps double is about the bias left at ``T`` (less, when the
bias falls more slowly); when its lower confidence bound exceeds the tolerance, the real data
disagree with the simulated ones and a warning says so. The check is conservative: it rarely warns
without cause, but it catches gross disagreement (errors of several times the tolerance), not
every one.

This module knows nothing about models: :func:`search_num_steps` and :func:`run_with_tolerance` take
*ways to run* BDMC and the estimating run at a given number of steps, so every estimator with a BDMC
counterpart (``ais``; whole-data-set evidence; the one-run sigma and rate-distortion curves, whose
rounds are decided by their worst grid point, ``Round.point``) can share it.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from pyrolik.exceptions import BudgetWarning
from pyrolik.execution.batches import progress_bar

__all__ = ["Round", "Check", "Budget", "BudgetWarning", "search_num_steps", "run_with_tolerance",
           "check_tolerance", "CONFIDENCE_Z", "MIN_STEPS", "MAX_STEPS"]

CONFIDENCE_Z = 2.0  # the gap's upper confidence bound: mean + 2 standard errors (one-sided 97.7%)
MIN_STEPS = 25  # the search's first number of steps: 25, 50, 100, 200, ...
MAX_STEPS = 6400  # the default cap (25 * 2**8)


class Round(NamedTuple):
    """One BDMC run of the search, on the simulated data."""

    num_steps: int
    gap: float  # mean over simulated examples of upper - lower (nats)
    gap_se: float  # its standard error over the examples
    lower: float  # mean forward estimate on the simulated data (nats)
    gradient_evals: float  # model gradient evaluations of the whole run, pilot included
    seconds: float
    point: str | None = None  # a curve's grid point whose gap decided the round ("sigma 0.05")

    @property
    def gap_upper(self) -> float:
        """The gap's upper confidence bound, ``gap + CONFIDENCE_Z * gap_se``."""
        return self.gap + CONFIDENCE_Z * self.gap_se


class Check(NamedTuple):
    """The check on the real data: the estimate at ``num_steps`` against one at half the steps."""

    num_examples: int  # the subset of x it ran on
    num_steps: int  # the half budget it compared with
    change: float  # mean over the subset of estimate(T) - estimate(T / 2), nats
    change_se: float
    simulated_change: float | None  # the same change of the lower bound on the simulated data
    gradient_evals: float
    seconds: float
    point: str | None = None  # a curve's grid point with the largest change ("sigma 0.05")


@dataclass
class Budget:
    r"""How ``tolerance=`` chose ``num_steps``, and what the choice cost.

    ``rounds`` are the BDMC runs on ``num_simulated`` examples simulated from the model (one data set
    for all rounds), each with its gap, the gap's standard error and its upper confidence bound;
    ``num_steps`` is the first whose bound was within ``tolerance`` (``converged``), else the cap.
    Costs are model gradient evaluations (pilot runs included) and seconds, of the search, of the
    check on the real data and of the final run. The bound holds on simulated data; see
    :mod:`pyrolik.infer.budget` for what it does not promise.
    """

    tolerance: float
    num_steps: int
    converged: bool
    num_simulated: int
    rounds: list[Round]
    final_gradient_evals: float
    final_seconds: float
    check: Check | None = None
    max_steps: int = MAX_STEPS
    confidence_z: float = CONFIDENCE_Z
    notes: list[str] = field(default_factory=list)  # the warnings it gave, in plain words

    @property
    def search_gradient_evals(self) -> float:
        return float(sum(r.gradient_evals for r in self.rounds))

    @property
    def search_seconds(self) -> float:
        return float(sum(r.seconds for r in self.rounds))

    @property
    def gap(self) -> float:
        """The BDMC gap (simulated data) at the chosen ``num_steps``."""
        return self.rounds[-1].gap

    @property
    def cost_ratio(self) -> float:
        """(search + check + final run) / final run, in gradient evaluations."""
        extra = self.search_gradient_evals + (self.check.gradient_evals if self.check else 0.0)
        return (extra + self.final_gradient_evals) / self.final_gradient_evals

    @property
    def time_ratio(self) -> float:
        """(search + check + final run) / final run, in seconds."""
        extra = self.search_seconds + (self.check.seconds if self.check else 0.0)
        return (extra + self.final_seconds) / self.final_seconds

    def summary_fields(self) -> dict[str, Any]:
        """What a result's ``summary()`` shows of the budget."""
        last = self.rounds[-1]
        where = "" if last.point is None else f" at {last.point}"
        return {"tolerance [nats]": self.tolerance,
                "steps chosen": self.num_steps if self.converged
                else f"{self.num_steps} (cap; not within tolerance)",
                "BDMC gap (simulated)": f"{self.gap:.3f} +- {last.gap_se:.3f}{where}",
                "search + final / final": self.cost_ratio}

    def table(self):
        """One row per round: steps, gap, its standard error and upper bound, cost (a DataFrame)."""
        import pandas as pd

        return pd.DataFrame([{**r._asdict(), "gap_upper": r.gap_upper} for r in self.rounds]
                            ).set_index("num_steps")

    def to_dict(self) -> dict[str, Any]:
        """Plain values (what the export stores as JSON), derived costs included."""
        out = asdict(self)
        out["rounds"] = [r._asdict() for r in self.rounds]
        out["check"] = None if self.check is None else self.check._asdict()
        out.update(search_gradient_evals=self.search_gradient_evals,
                   search_seconds=self.search_seconds, cost_ratio=self.cost_ratio)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Budget:
        """The inverse of :meth:`to_dict` (derived costs are recomputed)."""
        keep = {k: v for k, v in d.items()
                if k not in ("search_gradient_evals", "search_seconds", "cost_ratio")}
        keep["rounds"] = [Round(**r) for r in d["rounds"]]
        keep["check"] = None if d.get("check") is None else Check(**d["check"])
        return cls(**keep)


def check_tolerance(tolerance: Any, num_steps: Any, schedule: Any, max_steps: Any, *,
                    named: str = "auto") -> float:
    """Validate ``tolerance=`` with the arguments it would contradict; return it as a float.

    ``named``: a schedule name the estimator accepts, for the message refusing a tensor.
    """
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)):
        raise TypeError(f"tolerance must be a number of nats (e.g. tolerance=0.3), got "
                        f"{type(tolerance).__name__}")
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"tolerance must be a positive number of nats (the largest BDMC gap to "
                         f"accept, e.g. 0.3), got {tolerance!r}")
    if num_steps is not None:
        raise ValueError(f"pass either num_steps= (a budget you choose) or tolerance= (a budget "
                         f"chosen by BDMC on simulated data), not both: got num_steps={num_steps} "
                         f"and tolerance={tolerance}; to bound the search use max_steps=")
    if not isinstance(schedule, str):
        raise ValueError("tolerance= chooses the number of steps, which a schedule tensor fixes: "
                         f"pass a schedule by name (e.g. {named!r}) with tolerance=, or the tensor "
                         "with num_steps=None and no tolerance")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < MIN_STEPS:
        raise ValueError(f"max_steps must be an int of at least {MIN_STEPS} (the search starts "
                         f"there and doubles), got {max_steps!r}")
    return float(tolerance)


def search_num_steps(bdmc_at: Callable[[int], Round], tolerance: float, *,
                     min_steps: int = MIN_STEPS, max_steps: int = MAX_STEPS,
                     progress: bool = True) -> tuple[int, bool, list[Round]]:
    r"""Double the steps from ``min_steps`` until BDMC's gap is within ``tolerance``.

    Parameters
    ----------
    bdmc_at : callable
        ``bdmc_at(num_steps) -> Round``: BDMC at that many steps on one fixed simulated data set
        (each call with fresh chains).
    tolerance : float
        The largest gap upper confidence bound :math:`\bar g + z\,\mathrm{se}` to accept (nats).
    min_steps, max_steps : int
        The first number of steps, and the cap: the search stops at the largest
        :math:`T_0 2^k \le` ``max_steps``.

    Returns
    -------
    (num_steps, converged, rounds)
        The first number of steps whose bound was within the tolerance (``converged``), else the
        last one tried; the rounds in order.
    """
    rounds: list[Round] = []
    total = int(math.floor(math.log2(max_steps / min_steps))) + 1
    bar = progress_bar(total, f"choosing num_steps (tolerance {tolerance:g} nats)", progress)
    steps = min_steps
    try:
        while True:
            rnd = bdmc_at(steps)
            rounds.append(rnd)
            bar.update(1)
            bar.set_postfix_str(f"T={steps}: gap {rnd.gap:.3f} +- {rnd.gap_se:.3f}")
            if rnd.gap_upper <= tolerance:
                return steps, True, rounds
            if 2 * steps > max_steps:
                return steps, False, rounds
            steps *= 2
    finally:
        bar.close()


def run_with_tolerance(
    tolerance: float,
    *,
    bdmc_at: Callable[[int], Round],
    final_at: Callable[[int], tuple[Any, float]],
    check_at: Callable[[int, Any], Check | None] | None = None,
    num_simulated: int,
    min_steps: int = MIN_STEPS,
    max_steps: int = MAX_STEPS,
    progress: bool = True,
    what: str = "ais",
    stacklevel: int = 4,
    cap_fix: str = "raise max_steps, use more chains, or start from an encoder (init=guide)",
) -> tuple[Any, Budget]:
    """The search (:func:`search_num_steps`), then the estimating run at the chosen budget.

    ``final_at(num_steps) -> (result, gradient_evals)`` runs the estimator on the real data;
    ``check_at(num_steps, result) -> Check`` (optional) compares with half the steps on a subset.
    Warns (:class:`BudgetWarning`) when the cap came before the tolerance (the result at the cap
    is kept; ``cap_fix`` says what to do) and when the check disagrees (``stacklevel``: the user's
    call, as seen from here).
    Returns the result and its :class:`Budget`.
    """
    steps, converged, rounds = search_num_steps(bdmc_at, tolerance, min_steps=min_steps,
                                                max_steps=max_steps, progress=progress)
    notes = []
    if not converged:
        last = rounds[-1]
        notes.append(f"the budget search reached max_steps={max_steps} before the tolerance: the "
                     f"BDMC gap on simulated data at {steps} steps is {last.gap:.3f} +- "
                     f"{last.gap_se:.3f} nats (upper bound {last.gap_upper:.3f} > tolerance "
                     f"{tolerance:g}{'' if last.point is None else ' at ' + last.point}); the "
                     f"estimate at {steps} steps is kept but its error may exceed the tolerance: "
                     f"{cap_fix}")
    start = time.perf_counter()
    result, final_evals = final_at(steps)
    final_seconds = time.perf_counter() - start
    check = None if check_at is None else check_at(steps, result)
    if check is not None and check.change - CONFIDENCE_Z * check.change_se > tolerance:
        sim = ("" if check.simulated_change is None
               else f" (on the simulated data it rose by {check.simulated_change:.3f})")
        at = "" if check.point is None else f" at {check.point}"
        notes.append(f"on {check.num_examples} examples of x the estimate{at} rose by "
                     f"{check.change:.3f} +- {check.change_se:.3f} nats from {check.num_steps} to "
                     f"{steps} steps{sim}: more than the tolerance {tolerance:g}, so AIS has not "
                     "converged on these data as it has on data simulated from the model (real data "
                     "can be harder: Wu et al. 2017, section 4); pass a larger num_steps")
    budget = Budget(tolerance, steps, converged, num_simulated, rounds, float(final_evals),
                    final_seconds, check, max_steps, CONFIDENCE_Z, notes)
    for note in notes:
        warnings.warn(f"{what}(tolerance=): {note}", BudgetWarning, stacklevel=stacklevel)
    return result, budget
