r"""One AIS run along the distortion path, read at a grid of inverse temperatures.

:func:`sigma_curve` gives :math:`\log p_\sigma(x)` for a grid of observation-noise levels (Wu et al.
2017, figure 2(a) and Table 3) and :func:`rate_distortion` the rate-distortion curve of Huang,
Makhzani, Cao & Grosse (2020), both from *one* forward AIS run from the prior:

.. math:: \log f_\beta(z) = \log p(z) - \beta\, d(x, f(z)), \qquad 0 = \beta_0 < \dots < \beta_T =
   \beta_{\max},

whose running log-weights at every intermediate :math:`\beta` are themselves AIS estimates of
:math:`Z_\beta(x)` (an AIS run stopped at step t is an AIS run to :math:`\beta_t`). The run costs
what one AIS run to the smallest sigma costs, instead of one run per sigma
(``benchmarks/sigma_curve_onerun.py`` measures the ratio). The path is the ordinary prior path of the
model wrapped by :func:`pyrolik.model.distortion.distortion_model`, so every kernel, adaptation,
batching and replay feature of :func:`pyrolik.ais` applies.

Only the prior path gives the whole curve: from an encoder (``init=guide``) the intermediate
distributions :math:`q^{1-b} (p\,e^{-\beta_{\max} d})^b` are not the tempered family, so there is no
``init`` argument.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count, validate_data
from pyrolik.annealing.driver import drive
from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.run import Recording, describe
from pyrolik.annealing.schedules import grid_from_betas, grid_from_sigmas, merge_grid
from pyrolik.distortion.curve import DistortionCurve
from pyrolik.distortion.tolerance import curve_with_tolerance
from pyrolik.execution.faults import warn_failed
from pyrolik.execution.options import Execution
from pyrolik.infer.budget import MAX_STEPS, check_tolerance
from pyrolik.model.distortion import DistortionFn, DistortionModel, distortion_model

__all__ = ["sigma_curve", "rate_distortion", "run_curve"]


def sigma_curve(
    model: Callable[..., Any],
    x: Tensor,
    sigmas: Sequence[float] | Tensor,
    *,
    num_steps: int | None = None,
    num_chains: int,
    schedule: str | Tensor = "geometric",
    kernel: HMC | None = None,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    progress: bool = True,
    tolerance: float | None = None,
    max_steps: int = MAX_STEPS,
) -> DistortionCurve:
    r"""Per-example :math:`\log p_\sigma(x)` for every sigma of a grid, from one AIS run.

    The model's Gaussian observation site(s) :math:`\mathcal N(x; f(z), \cdot)` get standard
    deviation :math:`\sigma` (whatever the model sets); the run anneals
    :math:`p(z) e^{-\lVert x - f(z)\rVert^2 / (2\sigma^2)}` from :math:`\sigma = \infty` down to the
    smallest grid sigma and reads :math:`\log p_\sigma(x) = \log Z_\beta - \tfrac D2
    \log(2\pi\sigma^2)`, :math:`\beta = 1/(2\sigma^2)`, at each grid sigma: a stochastic lower bound at
    every one of them [1]_, [2]_.

    Parameters
    ----------
    model : callable
        Pyro model (the README's model convention) whose observed sites are ``Normal`` (a
        Bernoulli or other observation site raises ``ValueError``: use :func:`rate_distortion`
        with a ``distortion``).
    x : torch.Tensor, shape ``(N, *event_shape)``
        Observations.
    sigmas : sequence of float
        The grid (any order; all positive).
    num_steps : int or None
        Steps of the base schedule; the grid sigmas are merged in (up to ``len(sigmas) - 1`` more
        steps). ``None`` when ``schedule`` is a tensor or with ``tolerance``.
    num_chains : int
        AIS chains per example.
    schedule : {"geometric", "sigmoid", "linear"} or torch.Tensor
        Base schedule in :math:`b = \beta/\beta_{\max} = (\sigma_{\min}/\sigma)^2` from 0 to 1
        (default geometric: equal steps in log sigma, :mod:`pyrolik.annealing.schedules`). Not
        ``"auto"``/``"adaptive"`` (:func:`pyrolik.ais`'s default builds each batch's schedule from
        its pilot; the grid needs fixed steps): a ``ValueError`` says so.
    kernel, model_args, model_kwargs, seed, batch_size, progress
        As in :func:`pyrolik.ais`.
    tolerance : float, optional
        Instead of ``num_steps``: choose the base number of steps by BDMC on data simulated from
        the model (:mod:`pyrolik.distortion.tolerance`). Each grid sigma gets its own simulated
        data set, shaped like ``x``, with noise sigma (exact draws of the tempered posterior), and
        :func:`distortion_bdmc` runs on them at 25, 50, 100, ... base steps until the **worst grid
        point's** gap upper confidence bound (mean + 2 standard errors over the simulated
        examples; usually the smallest sigma's, at the end of the path) is within ``tolerance``
        nats; then the curve runs on ``x`` with that budget (the same result as
        ``num_steps=curve.budget.num_steps`` and the same seed). This bounds the average error
        at every grid sigma **on simulated data**; real data can be harder (Wu et al. 2017,
        section 4): the curve at half the steps on a subset of ``x`` warns
        (``BudgetWarning``) when the estimate at some sigma rose by more than the tolerance.
        ``curve.budget`` (:class:`pyrolik.infer.budget.Budget`) records the rounds (with the
        deciding grid point), the simulated examples and the cost of the search.
    max_steps : int
        With ``tolerance``: the search's cap on the base steps; reaching it first warns and keeps
        the curve at the cap.

    Returns
    -------
    DistortionCurve
        ``log_likelihood`` (m, N) at ``sigmas`` (decreasing order), ``mcse``, ``stderr`` (m,),
        ``best_sigma()``, ``optimal_sigma()`` (Table 3), ``rate``/``distortion``, ``summary()``;
        ``budget`` with ``tolerance`` (else ``None``).

    References
    ----------
    .. [1] Y. Wu, Y. Burda, R. Salakhutdinov, R. Grosse. On the quantitative analysis of
       decoder-based generative models. ICLR, 2017.
    .. [2] S. Huang, A. Makhzani, Y. Cao, R. Grosse. Evaluating lossy compression rates of deep
       generative models. ICML, 2020.
    """
    if tolerance is not None:
        return _with_tolerance(sigma_curve, "sigmas", sigmas, model, x, tolerance,
                               num_steps=num_steps, num_chains=num_chains, schedule=schedule,
                               kernel=kernel, model_args=model_args, model_kwargs=model_kwargs,
                               seed=seed, batch_size=batch_size, max_steps=max_steps,
                               progress=progress)
    _require_steps(num_steps, schedule)
    betas, sigma_min = grid_from_sigmas(sigmas)
    dm = distortion_model(model, sigma=sigma_min)
    return run_curve(dm, x, betas, "gaussian", num_steps=num_steps, num_chains=num_chains,
                     schedule=schedule, kernel=kernel, model_args=model_args,
                     model_kwargs=model_kwargs, seed=seed, batch_size=batch_size, progress=progress)


def rate_distortion(
    model: Callable[..., Any],
    x: Tensor,
    betas: Sequence[float] | Tensor,
    *,
    distortion: DistortionFn | None = None,
    num_steps: int | None = None,
    num_chains: int,
    schedule: str | Tensor = "geometric",
    kernel: HMC | None = None,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    progress: bool = True,
    tolerance: float | None = None,
    max_steps: int = MAX_STEPS,
) -> DistortionCurve:
    r"""The rate-distortion curve of a decoder model on ``x``, from one AIS run (Huang et al. 2020).

    At each grid :math:`\beta`: distortion :math:`\hat D_\beta` (the weighted mean of
    :math:`d(x, f(z))` over the chains) and rate :math:`\hat R_\beta = -\beta \hat D_\beta - \log
    \hat Z_\beta` in nats, a point on or above the model's rate-distortion curve in expectation
    (:mod:`pyrolik.distortion.curve` has the argument). :func:`distortion_bdmc` checks the
    estimates on simulated data.

    Parameters
    ----------
    betas : sequence of float
        Inverse temperatures (positive); the largest is the end of the run.
    distortion : callable, optional
        ``d(x, x_hat)`` of the data and the observed site's mean, per element or per example.
        Default: the squared error :math:`\lVert x - f(z)\rVert^2` through the model's Gaussian
        observation sites (then ``sigmas`` and ``log_likelihood`` are defined too).
    tolerance, max_steps
        As in :func:`sigma_curve`, on :math:`\log Z_\beta` at every grid beta (the gap is also
        the width of the rate sandwich of :func:`distortion_bdmc`); squared error only: a user
        ``distortion`` is not a noise model, so there are no simulated data to search on
        (``ValueError``).

    Other parameters are those of :func:`sigma_curve`.

    Returns
    -------
    DistortionCurve
        ``rate`` and ``distortion`` (m, N), ``log_z`` (m, N), ``summary()``.
    """
    if tolerance is not None:
        if distortion is not None:
            raise ValueError("tolerance= chooses num_steps by BDMC on data simulated at every grid "
                             "beta, and a user distortion is not a noise model (nothing to "
                             "simulate exact draws of q_beta from): pass num_steps= and check it "
                             "with pyrolik.distortion_bdmc(model, betas=..., distortion=..., "
                             "data={beta: (x, latents)}) on exact draws you have")
        return _with_tolerance(rate_distortion, "betas", betas, model, x, tolerance,
                               num_steps=num_steps, num_chains=num_chains, schedule=schedule,
                               kernel=kernel, model_args=model_args, model_kwargs=model_kwargs,
                               seed=seed, batch_size=batch_size, max_steps=max_steps,
                               progress=progress)
    _require_steps(num_steps, schedule)
    grid = grid_from_betas(betas)
    beta_max = float(grid[-1])
    if distortion is None:
        dm = distortion_model(model, sigma=(0.5 / beta_max) ** 0.5)
        grid = grid.clone()
        grid[-1] = dm.beta_max  # the same number as the wrapper's, so that b = 1 exactly
        mode = "gaussian"
    else:
        dm = distortion_model(model, distortion=distortion, beta_max=beta_max)
        mode = "user"
    return run_curve(dm, x, grid, mode, num_steps=num_steps, num_chains=num_chains,
                     schedule=schedule, kernel=kernel, model_args=model_args,
                     model_kwargs=model_kwargs, seed=seed, batch_size=batch_size, progress=progress)


def _with_tolerance(curve_fn: Callable[..., DistortionCurve], grid_name: str,
                    grid: Sequence[float] | Tensor, model: Callable[..., Any], x: Tensor,
                    tolerance: Any, *, num_steps: Any, num_chains: int, schedule: Any,
                    kernel: HMC | None, model_args: tuple, model_kwargs: dict | None,
                    seed: int | None, batch_size: int | None, max_steps: Any,
                    progress: bool) -> DistortionCurve:
    """``curve_fn`` (:func:`sigma_curve` or :func:`rate_distortion`, whose grid ``grid_name`` is
    ``grid``) with ``tolerance=``: its arguments checked, then the budget search
    (:func:`pyrolik.distortion.tolerance.curve_with_tolerance`) over calls of ``curve_fn`` with
    every other argument of the user's call bound."""
    tolerance = check_tolerance(tolerance, num_steps, schedule, max_steps, named="geometric")
    check_count("num_chains", num_chains)
    x, seed = validate_data(x), resolve_seed(seed)
    assert isinstance(schedule, str)  # check_tolerance refused a tensor

    def curve_at(steps: int, x_sub: Tensor | None = None, args_sub: tuple = (),
                 kwargs_sub: dict | None = None, *, seed: int) -> DistortionCurve:
        final = x_sub is None  # the run on all of x (the check runs on a subset)
        return curve_fn(model, x if final else x_sub, grid, num_steps=steps,
                        num_chains=num_chains, schedule=schedule, kernel=kernel,
                        model_args=model_args if final else args_sub,
                        model_kwargs=model_kwargs if final else kwargs_sub, seed=seed,
                        batch_size=batch_size, progress=progress)

    grids: dict[str, Any] = {"sigmas": None, "betas": None, grid_name: grid}
    return curve_with_tolerance(model, x, tolerance, **grids, curve_at=curve_at,
                                num_chains=num_chains, schedule=schedule, kernel=kernel,
                                model_args=model_args, model_kwargs=model_kwargs, seed=seed,
                                batch_size=batch_size, max_steps=max_steps, progress=progress,
                                what=curve_fn.__name__)


def _require_steps(num_steps: int | None, schedule: str | Tensor) -> None:
    if num_steps is None and isinstance(schedule, str):
        raise ValueError("num_steps is required with a named schedule: pass num_steps= (base "
                         "annealing steps, e.g. 1000), or tolerance= (nats) to choose them by "
                         "BDMC on simulated data, or a schedule tensor")


def run_curve(dm: DistortionModel, x: Tensor, betas: Tensor, mode: str, *, num_steps: int | None,
              num_chains: int, schedule: str | Tensor, kernel: HMC | None, model_args: tuple,
              model_kwargs: dict | None, seed: int | None, batch_size: int | None,
              progress: bool) -> DistortionCurve:
    """Anneal ``dm`` along ``schedule`` merged with ``betas / dm.beta_max``; read the grid."""
    start = time.perf_counter()
    x = validate_data(x)
    check_count("num_chains", num_chains)
    seed = resolve_seed(seed)
    grid_b = betas / dm.beta_max
    grid_b[-1] = 1.0
    path, steps = merge_grid(grid_b, schedule, num_steps)
    model_kwargs = dict(model_kwargs or {})
    num_values = dm.num_values(x, *model_args, **model_kwargs)
    result, log_w, ratio = _recorded(dm, x, path, steps, num_chains, kernel, seed, batch_size,
                                     progress, model_args, model_kwargs)
    b = path[steps].unsqueeze(-1).unsqueeze(-1)
    constant = num_values * dm.offset  # the wrapped observation term is -beta_max d + constant
    log_w = log_w - b * constant
    distortions = (constant - ratio) / dm.beta_max
    settings = {"num_steps": len(path) - 1, "num_chains": num_chains,
                "schedule": schedule if isinstance(schedule, str) else "custom",
                "base_num_steps": num_steps, "mode": mode, "beta_max": dm.beta_max,
                "sigma_min": dm.sigma, "distortion": getattr(dm.distortion, "__name__", None)
                if dm.distortion is not None else "squared error",
                "kernel": repr(result.kernel), "batch_size": batch_size,
                "evaluation": result.settings.get("evaluation")}
    return DistortionCurve(mode=mode, betas=betas.to(torch.float64), log_weights=log_w,
                           distortions=distortions, num_values=num_values, x=x, schedule=path,
                           record_steps=steps, beta_max=dm.beta_max, ais=result, seed=seed,
                           settings=settings, wall_time=time.perf_counter() - start)


def _recorded(dm, x, path, steps, num_chains, kernel, seed, batch_size, progress, model_args,
              model_kwargs):
    """The run (the driver behind :func:`pyrolik.ais`, recording only at ``steps``) and there the
    log-weights and the states' cached log f1 - log f0, each ``(m, K, N)`` float64."""
    problem = describe(dm, x, directions=("forward",), num_steps=None, num_chains=num_chains,
                       schedule=path, kernel=kernel, model_args=model_args,
                       model_kwargs=model_kwargs)
    execution = Execution.create(seed=seed, batch_size=batch_size, progress=progress,
                                 desc="AIS (distortion path)")
    recording = Recording(steps=tuple(int(t) for t in steps), log_ratio=True)
    results = drive("sigma_curve", problem, execution, recording)
    assert results is not None  # one process
    result = results[0]
    warn_failed(result, "sigma_curve")
    assert torch.equal(result.trace_steps, steps.cpu())
    log_w = result.trace["log_weight"].double()
    ratio = result.trace["log_ratio"].double()
    return result, log_w, ratio
