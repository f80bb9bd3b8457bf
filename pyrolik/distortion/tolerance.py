"""The base number of steps of a one-run curve for a tolerance."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count, validate_data
from pyrolik.annealing.kernel import Kernel, as_smc
from pyrolik.distortion.bounds import distortion_bdmc
from pyrolik.distortion.curve import DistortionCurve, gaussian_curve
from pyrolik.distortion.path import (
    distortion_model,
    grid_from_betas,
    grid_from_sigmas,
    merge_grid,
    sigma_of,
)
from pyrolik.execution.batches import local
from pyrolik.infer.sandwich import simulate
from pyrolik.infer.tolerance import (
    CONFIDENCE_Z,
    Budget,
    Check,
    Round,
    Tolerance,
    check_size,
    check_tolerance,
    choose_budget,
    gradient_evals,
    run_on_check_subset,
    simulated_size,
    simulation_arguments,
)
from pyrolik.model.reuse import TargetCache
from pyrolik.model.target import make_target

__all__ = ["curve_search", "point_size"]

CAP_FIX = "raise max_steps or use more chains"


def point_size(num_examples: int, num_points: int) -> int:
    """Simulated examples per grid point: :func:`~pyrolik.infer.tolerance.simulated_size` shared
    among the points, at least 16 each (a gap's standard error needs examples)."""
    return max(16, simulated_size(num_examples) // num_points)


def curve_search(model: Callable[..., Any], x: Tensor, tolerance: Tolerance, *,
                 sigmas: Sequence[float] | Tensor | None, betas: Sequence[float] | Tensor | None,
                 num_chains: int, schedule: str | Tensor, kernel: Kernel | None, model_args: tuple,
                 model_kwargs: dict | None, seed: int | None, batch_size: int | None,
                 progress: bool, what: str, stacklevel: int) -> Budget:
    """The base ``num_steps`` of a Gaussian curve on ``sigmas`` or ``betas`` whose BDMC gap is within
    ``tolerance`` at every grid point, on data simulated at each point; warnings name ``what``."""
    tolerance = check_tolerance(tolerance, schedule, named="geometric")
    as_smc(kernel)  # refuses another type
    check_count("num_chains", num_chains)
    x, seed = validate_data(x), resolve_seed(seed)
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
    pilot_steps = getattr(as_smc(kernel).move.adaptation, "pilot_steps", None)
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

    def curve_at(steps: int, x_sub: Tensor, args: tuple, kwargs: dict, *,
                 seed: int) -> DistortionCurve:
        return gaussian_curve(model, x_sub, sigmas=sigmas, betas=betas, num_steps=steps,
                              num_chains=num_chains, schedule=schedule, kernel=kernel,
                              model_args=args, model_kwargs=kwargs, seed=seed,
                              batch_size=batch_size, progress=progress)

    def check_at(steps: int) -> Check | None:
        half = steps // 2
        if half < 1 or check_size(n) < 2:  # one example has no standard error to test
            return None
        with targets:  # both runs on the same subset: one target, one recording
            _, full, s_full = run_on_check_subset(curve_at, x, marked, per_example, steps, seed)
            _, r, s_half = run_on_check_subset(curve_at, x, marked, per_example, half, seed)
        diff = (full.log_z - r.log_z).double()  # (m, n): log p_sigma too
        diff = diff[:, torch.isfinite(diff).all(0)]
        k = diff.shape[1]
        change = diff.mean(-1)
        se = diff.std(-1) / k**0.5 if k > 1 else torch.full_like(change, math.inf)
        j = int(torch.argmax(torch.nan_to_num(change - CONFIDENCE_Z * se, nan=-math.inf)))
        sim = (float(lowers[steps][j] - lowers[half][j]) if half in lowers and steps in lowers
               else None)
        return Check(k, half, float(change[j]), float(se[j]), sim,
                     gradient_evals(full.ais) + gradient_evals(r.ais), s_full + s_half, labels[j])

    with local():
        chosen = choose_budget(tolerance, bdmc_at=bdmc_at, check_at=check_at,
                               num_simulated=num_pt * m, progress=progress, cap_fix=CAP_FIX,
                               what=what, stacklevel=stacklevel)
    return replace(chosen, seed=seed)
