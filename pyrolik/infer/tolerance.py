r"""``pyrolik.ais(..., tolerance=)``: the budget search of :mod:`pyrolik.infer.budget` wired to AIS.

The search simulates one data set shaped like ``x`` from the model (:func:`simulated_size` examples,
per-example arguments taken from evenly spaced rows of ``x``'s), runs :func:`pyrolik.bdmc` on it
at 25, 50, 100, ... steps with the kernel, schedule, chains and path of the final run (a round whose
pilot would have the same length as an earlier round's reuses that round's pilot table, the default
kernel's pilot being 20 steps up to 100 annealing steps; longer pilots run anew, as the final run's
will: the gap certifies the algorithm the final run uses), then forward
AIS on ``x`` at the chosen budget, then the check on real data: forward AIS at half the steps on
:func:`check_size` evenly spaced examples of ``x``, compared with the final run's estimates of
those examples.

Costs in model gradient evaluations: a BDMC round at ``T`` steps on ``n`` examples costs about
``2 T L K n``; the rounds together about twice the last, so the search costs about
``4 n / N`` of the final run on ``N`` examples, the check ``m / (2 N)``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from pyrolik.infer.budget import Check, Round, run_with_tolerance
from pyrolik.mcmc.hmc import HMC
from pyrolik.model.arguments import has_per_example, mark_arguments, take_rows
from pyrolik.model.autoguides import is_autoguide
from pyrolik.model.reuse import TargetCache
from pyrolik.results import AISResult

__all__ = ["ais_with_tolerance", "simulated_size", "check_size", "evenly_spaced", "gradient_evals",
           "simulation_arguments", "run_on_check_subset"]

CHECK_SEED = 1_000_003  # the real-data check's seed offset from the final run's


def simulated_size(num_examples: int) -> int:
    """Simulated examples for the search: a twelfth of ``x`` (search cost about a third of the final
    run), at least 16 (a gap's standard error needs examples), at most 100."""
    return min(100, max(16, num_examples // 12))


def check_size(num_examples: int) -> int:
    """Examples of ``x`` the real-data check runs on: all up to 50."""
    return min(num_examples, 50)


def evenly_spaced(num_examples: int, count: int) -> Tensor:
    """``count`` indices spread over ``range(num_examples)`` (data may be sorted, e.g. by class)."""
    return torch.linspace(0, num_examples - 1, count).round().long().unique()


def simulation_arguments(model_args: tuple, model_kwargs: dict | None, num_examples: int,
                         count: int) -> tuple[tuple[tuple, dict], bool, int, tuple[tuple, dict]]:
    """The user's arguments marked per example (:func:`pyrolik.model.arguments.mark_arguments`),
    whether any is, how many examples to simulate, and their arguments: per-example ones at up to
    ``count`` rows evenly spaced over ``x`` (at most ``num_examples``), shared ones as they are."""
    marked = mark_arguments(tuple(model_args), dict(model_kwargs or {}), num_examples)
    if not has_per_example(*marked):
        return marked, False, count, marked
    rows = evenly_spaced(num_examples, min(count, num_examples))
    return marked, True, len(rows), take_rows(*marked, 1, rows)


def run_on_check_subset(run_at: Callable[..., Any], x: Tensor, marked: tuple[tuple, dict],
                        per_example: bool,
                        steps: int, seed: int) -> tuple[Tensor, Any, float]:
    """The real-data check's run: ``run_at(steps, x_subset, args, kwargs, seed=)`` on
    :func:`check_size` examples evenly spaced over ``x`` (with their rows of the per-example
    arguments), seeded apart from the final run; ``(indices, result, seconds)``."""
    n = x.shape[0]
    idx = evenly_spaced(n, check_size(n))
    sub_args = take_rows(*marked, 1, idx) if per_example else marked
    start = time.perf_counter()
    result = run_at(steps, x[idx.to(x.device)], sub_args[0], sub_args[1], seed=seed + CHECK_SEED)
    return idx, result, time.perf_counter() - start


def gradient_evals(result: AISResult, legs: int = 1) -> float:
    """Gradient evaluations of a run: its chains' (``legs`` directions) and its pilot's."""
    s = result.settings
    return float(result.num_examples * (legs * s["gradient_evals_per_example"]
                                        + s["pilot_gradient_evals_per_example"]))


def ais_with_tolerance(
    model: Callable[..., Any],
    x: Tensor,
    tolerance: float,
    *,
    ais_at: Callable[..., AISResult],
    num_chains: int,
    schedule: str,
    kernel: Any,
    init: Callable[..., Any] | None,
    model_args: tuple,
    model_kwargs: dict | None,
    seed: int,
    batch_size: int | None,
    max_steps: int,
    progress: bool,
) -> AISResult:
    """Choose ``num_steps`` by BDMC on simulated data, run ``ais_at(num_steps, seed=..)`` on ``x``.

    ``ais_at(num_steps, x_subset=None, model_args=None, model_kwargs=None, *, seed)`` is
    :func:`pyrolik.ais` with every other argument of the user's call bound (all of ``x`` and the
    user's arguments when ``x_subset`` is ``None``).
    """
    from pyrolik.infer.sandwich import bdmc, simulate

    if init is not None and is_autoguide(init):
        raise ValueError("tolerance= runs BDMC on data simulated from the model, and an AutoGuide "
                         f"({type(init).__name__}) fitted on x has no proposal for those examples: "
                         "pass num_steps= with this guide, or use an amortised guide (an encoder) "
                         "with tolerance=")
    marked, per_example, num_sim, sim_args = simulation_arguments(
        model_args, model_kwargs, x.shape[0], simulated_size(x.shape[0]))
    try:
        sim = simulate(model, num_sim, data_shape=tuple(x.shape[1:]), model_args=sim_args[0],
                       model_kwargs=sim_args[1], seed=seed + 1, dtype=x.dtype, device=x.device)
    except ValueError as err:
        raise ValueError(f"tolerance= chooses num_steps by BDMC on data simulated from the model, "
                         f"and this model cannot be simulated ({err}). Pass num_steps= instead, and "
                         "check it with pyrolik.bdmc(model, data=(x, latents), num_steps=...) on "
                         "data you simulate yourself") from err
    lowers: dict[int, float] = {}
    tables: dict[int | None, Any] = {}  # pilot length -> the table a round's pilot of that length made
    kernel = HMC() if kernel is None else kernel
    pilot_steps = getattr(kernel.adaptation, "pilot_steps", None)
    targets = TargetCache()

    def bdmc_at(steps: int) -> Round:
        start = time.perf_counter()
        # a pilot of the same length as an earlier round's is the same pilot (the default's is 20
        # steps up to 100 annealing steps): reuse its table rather than run it again
        length = None if pilot_steps is None else pilot_steps(steps)
        given = tables.get(length)
        with targets:  # the rounds share the model's targets and recordings (same data)
            r = bdmc(model, data=sim, num_steps=steps, num_chains=num_chains, schedule=schedule,
                     kernel=kernel, init=init, model_args=sim_args[0], model_kwargs=sim_args[1],
                     seed=seed + 2 + steps, batch_size=batch_size, progress=progress,
                     step_sizes=given)
        assert r is not None  # one process: bdmc returns None only off rank 0
        if length is not None and given is None and r.lower.step_sizes is not None:
            tables[length] = r.lower.step_sizes
        lowers[steps] = r.lower.mean
        evals = gradient_evals(r.lower, legs=2)
        if given is not None:  # no pilot ran
            evals -= r.lower.num_examples * r.lower.settings["pilot_gradient_evals_per_example"]
        return Round(steps, r.gap, r.gap_stderr, r.lower.mean, evals,
                     time.perf_counter() - start)

    def final_at(steps: int) -> tuple[AISResult, float]:
        result = ais_at(steps, seed=seed)
        return result, gradient_evals(result)

    def check_at(steps: int, result: AISResult) -> Check | None:
        half = steps // 2
        if half < 1:
            return None
        idx, r, seconds = run_on_check_subset(ais_at, x, marked, per_example, half, seed)
        diff = (result.log_likelihood[idx.to(x.device)] - r.log_likelihood).double()
        ok = torch.isfinite(diff)
        diff = diff[ok]
        se = float(diff.std() / len(diff) ** 0.5) if len(diff) > 1 else float("inf")
        sim_change = lowers[steps] - lowers[half] if half in lowers and steps in lowers else None
        return Check(len(diff), half, float(diff.mean()) if len(diff) else float("nan"), se,
                     sim_change, gradient_evals(r), seconds)

    result, budget = run_with_tolerance(tolerance, bdmc_at=bdmc_at, final_at=final_at,
                                        check_at=check_at, num_simulated=num_sim,
                                        max_steps=max_steps, progress=progress, what="ais")
    return dataclasses.replace(result, budget=budget)
