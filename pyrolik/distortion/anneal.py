"""One AIS run along the distortion path, read at a grid of inverse temperatures; its steps for a
tolerance."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count, shared_params, validate_data
from pyrolik.annealing.kernel import Kernel, as_smc
from pyrolik.annealing.run import require_steps
from pyrolik.distortion.bounds import distortion_bdmc
from pyrolik.distortion.curve import DistortionCurve, gaussian_curve, run_curve
from pyrolik.distortion.path import (
    DistortionFn,
    distortion_model,
    grid_from_betas,
    grid_from_sigmas,
    merge_grid,
    sigma_of,
)
from pyrolik.execution.batches import refuse_scope
from pyrolik.infer.sandwich import simulate
from pyrolik.infer.tolerance import (
    Budget,
    Sandwich,
    Tolerance,
    check_tolerance,
    gradient_evals,
    search_steps,
    simulated_size,
    simulation_arguments,
    with_budget,
)
from pyrolik.model.target import make_target

__all__ = ["sigma_curve", "rate_distortion", "curve_search"]


@shared_params
def sigma_curve(model: Callable[..., Any], x: Tensor, sigmas: Sequence[float] | Tensor, *,
                num_steps: int | Tolerance | None = None, num_chains: int,
                schedule: str | Tensor = "geometric", kernel: Kernel | None = None,
                model_args: tuple = (), model_kwargs: dict | None = None, seed: int | None = None,
                batch_size: int | None = None, progress: bool = True) -> DistortionCurve:
    r"""Per-example :math:`\log p_\sigma(x)` for every sigma of a grid, from one AIS run.

    With the Gaussian observation sites at standard deviation :math:`\sigma`, the run anneals

    .. math:: \log f_\beta(z) = \log p(z) - \beta \lVert x - f(z)\rVert^2, \qquad
       \beta = 1/(2\sigma^2),

    to the smallest sigma and reads :math:`\log p_\sigma(x) = \log Z_\beta - \tfrac D2
    \log(2\pi\sigma^2)` at each grid sigma, each a stochastic lower bound [1]_, [2]_.

    Parameters
    ----------
    model : callable
        Pyro model (``docs/models.md``) whose observed sites are ``Normal``.
    sigmas : sequence of float
        The grid (positive, any order).
    num_steps : int or Tolerance or None
        Base schedule steps; the grid sigmas are merged in. ``None`` with a tensor ``schedule``; a
        :class:`~pyrolik.Tolerance`: steps double from 25 until the worst grid point's BDMC gap is
        within it (``docs/tolerance.md``).
    schedule : {"geometric", "sigmoid", "linear"} or torch.Tensor
        Base schedule in :math:`b = (\sigma_{\min}/\sigma)^2` from 0 to 1.

    Returns
    -------
    DistortionCurve
        ``log_likelihood`` (m, N) at ``sigmas`` (decreasing), ``mcse``, ``rate``/``distortion``.

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models import LinearGaussian
    >>> lg = LinearGaussian.random(data_dim=3, latent_dim=2, seed=0)   # exact log p(x) known
    >>> x = lg.sample(4, torch.Generator().manual_seed(0))
    >>> curve = pyrolik.sigma_curve(lg, x, [0.5, 1.0, 2.0], num_steps=50, num_chains=8, seed=0,
    ...                             progress=False)
    >>> curve.sigmas.tolist(), curve.log_likelihood.shape
    ([2.0, 1.0, 0.5], torch.Size([3, 4]))
    >>> exact = torch.stack([LinearGaussian(lg.W, lg.b, s).exact_log_marginal(x)   # the same model
    ...                      for s in curve.sigmas.tolist()])                     # at each sigma
    >>> bool((curve.log_likelihood - exact).abs().max() < 1.0)
    True

    References
    ----------
    .. [1] Y. Wu, Y. Burda, R. Salakhutdinov, R. Grosse. On the quantitative analysis of
       decoder-based generative models. ICLR, 2017.
    .. [2] S. Huang, A. Makhzani, Y. Cao, R. Grosse. Evaluating lossy compression rates of deep
       generative models. ICML, 2020.
    """
    run: dict[str, Any] = dict(num_steps=num_steps, num_chains=num_chains, schedule=schedule,
                               kernel=kernel, model_args=model_args, model_kwargs=model_kwargs,
                               seed=seed, batch_size=batch_size, progress=progress)
    run, chosen = _choose(model, x, run, "sigma_curve", sigmas=sigmas, betas=None)
    curve = gaussian_curve(model, x, sigmas=sigmas, **run)
    return with_budget(curve, chosen, curve.ais)


@shared_params
def rate_distortion(model: Callable[..., Any], x: Tensor, betas: Sequence[float] | Tensor, *,
                    distortion: DistortionFn | None = None,
                    num_steps: int | Tolerance | None = None, num_chains: int,
                    schedule: str | Tensor = "geometric", kernel: Kernel | None = None,
                    model_args: tuple = (), model_kwargs: dict | None = None,
                    seed: int | None = None, batch_size: int | None = None,
                    progress: bool = True) -> DistortionCurve:
    r"""The rate-distortion curve of a decoder model on ``x``, from one AIS run (Huang et al. 2020).

    At each :math:`\beta`: distortion :math:`\hat D_\beta` (weighted chain mean of :math:`d(x, f(z))`)
    and rate :math:`\hat R_\beta = -\beta \hat D_\beta - \log \hat Z_\beta` (nats), on or above
    the model's rate-distortion curve in expectation.

    Parameters
    ----------
    betas : sequence of float
        Inverse temperatures (positive); the largest ends the run.
    distortion : callable, optional
        ``d(x, x_hat)``, ``x_hat`` the observed site's mean (default: squared error).
    num_steps, schedule
        As in :func:`sigma_curve` (a ``Tolerance``: squared error only).

    Returns
    -------
    DistortionCurve
        ``rate`` and ``distortion`` (m, N), ``log_z`` (m, N), ``summary()``.

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models import LinearGaussian
    >>> lg = LinearGaussian.random(data_dim=3, latent_dim=2, seed=0)   # exact rate-distortion known
    >>> x = lg.sample(4, torch.Generator().manual_seed(0))
    >>> rd = pyrolik.rate_distortion(lg, x, [0.5, 1.0, 2.0], num_steps=50, num_chains=8, seed=0,
    ...                              progress=False)
    >>> rd.betas.tolist(), rd.rate.shape, rd.distortion.shape
    ([0.5, 1.0, 2.0], torch.Size([3, 4]), torch.Size([3, 4]))
    >>> rate, distortion = rd.rate.mean(-1), rd.distortion.mean(-1)
    >>> bool((rate.diff() > 0).all() and (distortion.diff() < 0).all())   # more rate, less distortion
    True
    >>> exact = torch.stack([lg.log_normalizer(x, b) for b in rd.betas.tolist()])
    >>> bool((rd.log_z - exact).abs().max() < 1.0)
    True
    """
    if isinstance(num_steps, Tolerance) and distortion is not None:
        raise ValueError("a Tolerance chooses num_steps by BDMC on data simulated at every grid "
                         "beta, and a user distortion is not a noise model (nothing to "
                         "simulate exact draws of q_beta from): pass num_steps= and check it "
                         "with pyrolik.distortion_bdmc(model, {beta: (x, latents)}, betas=..., "
                         "distortion=...) on exact draws you have")
    run: dict[str, Any] = dict(num_steps=num_steps, num_chains=num_chains, schedule=schedule,
                               kernel=kernel, model_args=model_args, model_kwargs=model_kwargs,
                               seed=seed, batch_size=batch_size, progress=progress)
    run, chosen = _choose(model, x, run, "rate_distortion", sigmas=None, betas=betas)
    if distortion is None:
        curve = gaussian_curve(model, x, betas=betas, **run)
        return with_budget(curve, chosen, curve.ais)
    grid = grid_from_betas(betas)
    dm = distortion_model(model, distortion=distortion, beta_max=float(grid[-1]))
    return run_curve(dm, x, grid, "user", **run)


def _choose(model: Callable[..., Any], x: Tensor, run: dict[str, Any], what: str,
            **grid: Any) -> tuple[dict[str, Any], Budget | None]:
    """The curve's run keywords ``run``; with a :class:`Tolerance` for ``num_steps``, the steps and
    seed of the budget search for the curve ``what`` on its ``grid`` (sigmas or betas), and that
    budget."""
    refuse_scope(what)  # before a budget search, not after it
    chosen = None
    if isinstance(run["num_steps"], Tolerance):
        run = {**run, "seed": resolve_seed(run["seed"])}  # one seed for the search and the run
        search = {k: v for k, v in run.items() if k != "num_steps"}
        chosen = curve_search(model, x, run["num_steps"], **grid, **search,
                              what=f"{what}(num_steps=Tolerance)", stacklevel=5)
        run["num_steps"] = chosen.num_steps
    require_steps(run["num_steps"], run["schedule"], "base annealing steps, e.g. 1000")
    return run, chosen


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
    grid_arg: dict[str, Any] = {"sigmas": sigmas} if sigmas is not None else {"betas": betas}
    if sigmas is not None:
        grid, _ = grid_from_sigmas(sigmas)
        keys, name = sigma_of(grid), "sigma"
    else:
        assert betas is not None
        grid = keys = grid_from_betas(betas)
        name = "beta"
    labels = [f"{name} {float(k):g}" for k in keys]
    n, m = x.shape[0], len(grid)
    # simulated_size shared among the points, at least 16 each (a gap's standard error needs them)
    marked, per_example, num_pt, sim_args = simulation_arguments(
        model_args, model_kwargs, n, max(16, simulated_size(n) // m))
    # one run of the model on x first: a non-Gaussian observed site (or x that does not fit the
    # model) is named as it is without a Tolerance, not as a failed simulation
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
                f"a Tolerance chooses num_steps by BDMC on data simulated from the model at every "
                f"grid point, and this model cannot be simulated ({err}). Pass num_steps= instead, "
                f"and check it with pyrolik.distortion_bdmc(model, {{{name}: (x, latents)}}, "
                f"{name}s=..., ...) on data you simulate yourself") from err
    pilot_steps = getattr(as_smc(kernel).move.adaptation, "pilot_steps", None)
    grid_b = grid / grid[-1]
    grid_b[-1] = 1.0

    def pilot_length(steps: int) -> int | None:  # a pass whose pilot is as long reuses a table
        return (None if pilot_steps is None
                else pilot_steps(int(merge_grid(grid_b, schedule, steps)[1][-1])))

    def sandwich_at(steps: int, seed: int, given: Any) -> Sandwich:
        b = distortion_bdmc(model, data, **grid_arg, num_steps=steps, num_chains=num_chains,
                            schedule=schedule, kernel=kernel, model_args=sim_args[0],
                            model_kwargs=sim_args[1], seed=seed, batch_size=batch_size,
                            progress=progress, step_sizes=given)
        lower = b.log_likelihood_bounds()[0] if name == "sigma" else b.lower
        evals = sum(gradient_evals(res.lower, legs=2, pilot=given is None) for res in b.results)
        return Sandwich(b.gap, b.gap_stderr, lower.mean(-1), evals, b.step_sizes)

    def estimate_at(steps: int, x_sub: Tensor, args: tuple, kwargs: dict, *,
                    seed: int) -> tuple[Tensor, float]:
        c = gaussian_curve(model, x_sub, sigmas=sigmas, betas=betas, num_steps=steps,
                           num_chains=num_chains, schedule=schedule, kernel=kernel,
                           model_args=args, model_kwargs=kwargs, seed=seed,
                           batch_size=batch_size, progress=progress)
        return c.log_z, gradient_evals(c.ais)  # (m, n): log p_sigma too

    return search_steps(tolerance, x, marked=marked, per_example=per_example,
                        num_simulated=num_pt * m, seed=seed, sandwich_at=sandwich_at,
                        estimate_at=estimate_at, pilot_length=pilot_length, labels=labels,
                        progress=progress, what=what, stacklevel=stacklevel,
                        cap_fix="raise max_steps or use more chains")
