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
from pyrolik.distortion.curve import DistortionCurve
from pyrolik.distortion.schedule import grid_from_betas, grid_from_sigmas, merge_grid
from pyrolik.execution.faults import warn_failed
from pyrolik.execution.options import Execution
from pyrolik.infer.driver import drive
from pyrolik.infer.run import Recording, describe
from pyrolik.mcmc.hmc import HMC
from pyrolik.model.distortion import DistortionFn, DistortionModel, distortion_model

__all__ = ["sigma_curve", "rate_distortion", "run_curve"]


def sigma_curve(
    model: Callable[..., Any],
    x: Tensor,
    sigmas: Sequence[float] | Tensor,
    *,
    num_steps: int | None,
    num_chains: int,
    schedule: str | Tensor = "geometric",
    kernel: HMC | None = None,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    progress: bool = True,
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
        steps). ``None`` when ``schedule`` is a tensor.
    num_chains : int
        AIS chains per example.
    schedule : {"geometric", "sigmoid", "linear"} or torch.Tensor
        Base schedule in :math:`b = \beta/\beta_{\max} = (\sigma_{\min}/\sigma)^2` from 0 to 1
        (default geometric: equal steps in log sigma, :mod:`pyrolik.distortion.schedule`). Not
        ``"auto"``/``"adaptive"`` (:func:`pyrolik.ais`'s default builds each batch's schedule from
        its pilot; the grid needs fixed steps): a ``ValueError`` says so.
    kernel, model_args, model_kwargs, seed, batch_size, progress
        As in :func:`pyrolik.ais`.

    Returns
    -------
    DistortionCurve
        ``log_likelihood`` (m, N) at ``sigmas`` (decreasing order), ``mcse``, ``stderr`` (m,),
        ``best_sigma()``, ``optimal_sigma()`` (Table 3), ``rate``/``distortion``, ``summary()``.

    References
    ----------
    .. [1] Y. Wu, Y. Burda, R. Salakhutdinov, R. Grosse. On the quantitative analysis of
       decoder-based generative models. ICLR, 2017.
    .. [2] S. Huang, A. Makhzani, Y. Cao, R. Grosse. Evaluating lossy compression rates of deep
       generative models. ICML, 2020.
    """
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
    num_steps: int | None,
    num_chains: int,
    schedule: str | Tensor = "geometric",
    kernel: HMC | None = None,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    progress: bool = True,
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

    Other parameters are those of :func:`sigma_curve`.

    Returns
    -------
    DistortionCurve
        ``rate`` and ``distortion`` (m, N), ``log_z`` (m, N), ``summary()``.
    """
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
