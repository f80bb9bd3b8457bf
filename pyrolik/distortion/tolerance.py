r"""``sigma_curve(tolerance=)`` and ``rate_distortion(tolerance=)``: the budget search of
:mod:`pyrolik.infer.budget` wired to the one-run curve.

A curve is as good as its worst grid point. Before the search, each grid point :math:`\beta_j` gets
its own data set simulated from the model with noise :math:`\sigma_j = 1/\sqrt{2\beta_j}`
(:func:`point_size` examples, shaped like ``x``; per-example arguments taken from evenly spaced rows
of ``x``'s), whose latents are exact draws of :math:`q_{\beta_j}(z \mid x)`; the data sets are kept
for every round. A round at :math:`T` base steps is one :func:`~pyrolik.distortion.bounds.
distortion_bdmc` call on them: at every grid point, BDMC along the betas that the curve's run at
:math:`T` base steps visits up to that point, with the curve's kernel, schedule and chains, all
points in one batched pass (each point's examples stop at their point). The
round's gap is that of the grid point with the **largest upper confidence bound**
:math:`\bar g_j + z\,\mathrm{se}_j` (recorded as ``Round.point``): usually the smallest sigma, the
end of the path, where the posterior is narrowest and the path longest, but whichever point it is,
the search waits for it. When the worst bound is within the tolerance, so is every point's.

Then the curve runs on ``x`` at that ``T`` (the same result as a call with ``num_steps=T`` and the
same seed), and the check on real data: the curve at ``T / 2`` on :func:`~pyrolik.infer.tolerance.
check_size` evenly spaced examples of ``x``, compared at every grid point with the final curve; the
point whose rise has the largest lower confidence bound is reported (``Check.point``) and warned
about when that bound exceeds the tolerance.

Costs, in model gradient evaluations: a round costs about :math:`2 L K n m T` (``n`` examples per
point, ``m`` points, :math:`T` the steps of the merged schedule: in one pass every point's chains
make the whole path's transitions, those past their point at an unchanged beta), and the rounds
together about twice the last; so the search costs about :math:`4 n m / N` of the final run on
``N`` examples, in a few large passes rather than one small run per point. As in
:func:`pyrolik.ais`'s search, a round whose pilot would be as long as an earlier round's (the
default pilot is 20 steps up to 100 annealing steps) reuses that round's pilot table (the table is
a function of each example's path parameter, the same in every round).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from pyrolik.distortion.bounds import distortion_bdmc
from pyrolik.distortion.curve import DistortionCurve
from pyrolik.distortion.schedule import grid_from_betas, grid_from_sigmas, merge_grid, sigma_of
from pyrolik.infer.budget import CONFIDENCE_Z, Check, Round, run_with_tolerance
from pyrolik.infer.sandwich import simulate
from pyrolik.infer.tolerance import (
    gradient_evals,
    run_on_check_subset,
    simulated_size,
    simulation_arguments,
)
from pyrolik.mcmc.hmc import HMC
from pyrolik.model.distortion import distortion_model
from pyrolik.model.reuse import TargetCache
from pyrolik.model.target import make_target

__all__ = ["curve_with_tolerance", "point_size"]

CAP_FIX = "raise max_steps or use more chains"


def point_size(num_examples: int, num_points: int) -> int:
    """Simulated examples per grid point: :func:`~pyrolik.infer.tolerance.simulated_size` shared
    among the points, at least 16 each (a gap's standard error needs examples)."""
    return max(16, simulated_size(num_examples) // num_points)


def curve_with_tolerance(
    model: Callable[..., Any],
    x: Tensor,
    tolerance: float,
    *,
    sigmas: Sequence[float] | Tensor | None,
    betas: Sequence[float] | Tensor | None,
    curve_at: Callable[..., DistortionCurve],
    num_chains: int,
    schedule: str,
    kernel: Any,
    model_args: tuple,
    model_kwargs: dict | None,
    seed: int,
    batch_size: int | None,
    max_steps: int,
    progress: bool,
    what: str,
) -> DistortionCurve:
    """Choose the base ``num_steps`` by BDMC at every grid point on simulated data, then run
    ``curve_at(num_steps, seed=..)`` on ``x``; the curve carries the :class:`Budget` as ``.budget``.

    The grid is ``sigmas`` or (Gaussian mode) ``betas``, exactly one of them. ``curve_at(num_steps,
    x_subset=None, model_args=(), model_kwargs=None, *, seed)`` is the user's curve call with every
    other argument bound (all of ``x`` and the user's arguments when ``x_subset`` is ``None``).
    """
    if sigmas is not None:
        grid, _ = grid_from_sigmas(sigmas)
        keys, name = sigma_of(grid), "sigma"
        grid_arg: dict[str, Any] = {"sigmas": sigmas}
    else:
        assert betas is not None
        grid = grid_from_betas(betas)
        keys, name = grid, "beta"
        grid_arg = {"betas": betas}
    labels = [f"{name} {float(k):g}" for k in keys]
    n, m = x.shape[0], len(grid)
    marked, per_example, num_pt, sim_args = simulation_arguments(model_args, model_kwargs, n,
                                                                 point_size(n, m))
    # one run of the model on x first: a non-Gaussian observed site (or x that does not fit the
    # model) is named as it is without tolerance=, not as a failed simulation
    make_target(distortion_model(model, sigma=(0.5 / float(grid[-1])) ** 0.5), x, 1,
                model_args=tuple(model_args), model_kwargs=dict(model_kwargs or {}))
    data: dict[float, tuple[Tensor, Any]] = {}
    for j, (beta, key) in enumerate(zip(grid.tolist(), keys.tolist(), strict=True)):
        noisy = distortion_model(model, sigma=(0.5 / beta) ** 0.5)
        try:
            data[key] = simulate(noisy, num_pt, data_shape=tuple(x.shape[1:]),
                                 model_args=sim_args[0], model_kwargs=sim_args[1],
                                 seed=seed + 1 + 100_003 * j, dtype=x.dtype, device=x.device)
        except ValueError as err:
            raise ValueError(
                f"tolerance= chooses num_steps by BDMC on data simulated from the model at every "
                f"grid point, and this model cannot be simulated ({err}). Pass num_steps= instead, "
                f"and check it with pyrolik.distortion_bdmc(model, {name}s=..., data={{{name}: "
                "(x, latents)}, ...) on data you simulate yourself") from err
    lowers: dict[int, Tensor] = {}  # steps -> (m,) mean lower bound at each point
    # pilot length -> the table a round's pilot made: a later round whose pilot would be as long
    # reuses it (the default's is 20 steps up to 100 steps)
    tables: dict[int | None, Any] = {}
    pilot_steps = getattr((HMC() if kernel is None else kernel).adaptation, "pilot_steps", None)
    grid_b = grid / grid[-1]
    grid_b[-1] = 1.0
    targets = TargetCache()

    def bdmc_at(steps: int) -> Round:
        start = time.perf_counter()
        length = (None if pilot_steps is None
                  else pilot_steps(int(merge_grid(grid_b, schedule, steps)[1][-1])))
        given = tables.get(length) if length is not None else None
        with targets:  # the rounds share the model's targets and recordings (same data)
            b = distortion_bdmc(model, **grid_arg, data=data, num_steps=steps,
                                num_chains=num_chains,
                                schedule=schedule, kernel=kernel, model_args=sim_args[0],
                                model_kwargs=sim_args[1], seed=seed + 2 + steps,
                                batch_size=batch_size, progress=progress, step_sizes=given)
        evals = sum(gradient_evals(res.lower, legs=2) for res in b.results)
        if given is not None:  # no pilot ran
            evals -= sum(res.lower.num_examples * res.lower.settings[
                "pilot_gradient_evals_per_example"] for res in b.results)
        elif length is not None and b.step_sizes is not None:
            tables[length] = b.step_sizes
        lower = b.log_likelihood_bounds()[0] if name == "sigma" else b.lower
        lowers[steps] = lower.mean(-1)
        upper = torch.nan_to_num(b.gap + CONFIDENCE_Z * b.gap_stderr, nan=math.inf)
        j = int(torch.argmax(upper))
        return Round(steps, float(b.gap[j]), float(b.gap_stderr[j]), float(lowers[steps][j]),
                     evals, time.perf_counter() - start, labels[j])

    def final_at(steps: int) -> tuple[DistortionCurve, float]:
        curve = curve_at(steps, seed=seed)
        return curve, gradient_evals(curve.ais)

    def check_at(steps: int, curve: DistortionCurve) -> Check | None:
        half = steps // 2
        if half < 1:
            return None
        idx, r, seconds = run_on_check_subset(curve_at, x, marked, per_example, half, seed)
        diff = (curve.log_z[:, idx.to(x.device)] - r.log_z).double()  # (m, n): log p_sigma too
        diff = diff[:, torch.isfinite(diff).all(0)]
        k = diff.shape[1]
        change = diff.mean(-1)
        se = diff.std(-1) / k**0.5 if k > 1 else torch.full_like(change, math.inf)
        j = int(torch.argmax(torch.nan_to_num(change - CONFIDENCE_Z * se, nan=-math.inf)))
        sim = (float(lowers[steps][j] - lowers[half][j]) if half in lowers and steps in lowers
               else None)
        return Check(k, half, float(change[j]), float(se[j]), sim, gradient_evals(r.ais), seconds,
                     labels[j])

    curve, budget = run_with_tolerance(tolerance, bdmc_at=bdmc_at, final_at=final_at,
                                       check_at=check_at, num_simulated=num_pt * m,
                                       max_steps=max_steps, progress=progress, what=what,
                                       cap_fix=CAP_FIX)
    return dataclasses.replace(curve, budget=budget)
