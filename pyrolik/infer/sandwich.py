"""Bidirectional Monte Carlo: simulate from the model, then sandwich log p(x) between AIS bounds."""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pandas as pd
import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count, shared_params
from pyrolik.annealing.driver import run
from pyrolik.annealing.step_sizes import StepSizes
from pyrolik.exceptions import PyrolikWarning
from pyrolik.execution.batches import Execution, warn_failed
from pyrolik.execution.distributed import main_result
from pyrolik.model.simulation import draw_joint
from pyrolik.model.target import Target
from pyrolik.results import BDMCResult

__all__ = ["Simulated", "simulate", "bdmc", "sandwich", "bdmc_convergence", "plot_bdmc_convergence"]


class Simulated(NamedTuple):
    """Data drawn from a model's joint and the latents that produced them (exact posterior draws)."""

    x: Tensor  # (N, *data_shape)
    latents: dict[str, Tensor]  # {site: (N, *site)}, constrained


@shared_params
def simulate(model: Callable[..., Any], num_examples: int, *,
             data_shape: tuple[int, ...] | torch.Size, model_args: tuple = (),
             model_kwargs: dict | None = None, seed: int | None = None,
             dtype: torch.dtype | None = None,
             device: torch.device | str | None = None) -> Simulated:
    r"""Draw ``(x, latents)`` from the model's joint :math:`p(z)\,p(x \mid z)`.

    ``latents`` are exact posterior samples for ``x`` (:func:`pyrolik.model.simulation.draw_joint`);
    entries of ``x`` that no observed site scores are **0**.

    Parameters
    ----------
    num_examples : int
        Examples to draw (the rows of per-example model arguments).

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models.oracles.linear_gaussian import LinearGaussian
    >>> model = LinearGaussian.random(data_dim=5, latent_dim=2, seed=0)   # exact log p(x) known
    >>> x = model.sample(4, torch.Generator().manual_seed(0))
    >>> sim = pyrolik.simulate(model, 3, data_shape=(5,), seed=0)
    >>> sim.x.shape, sim.latents["z"].shape
    (torch.Size([3, 5]), torch.Size([3, 2]))
    """
    check_count("num_examples", num_examples)
    data_shape = (data_shape,) if isinstance(data_shape, int) else tuple(data_shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in data_shape):
        raise ValueError(f"data_shape must be a tuple of positive ints, got {data_shape!r}")
    placeholder = torch.zeros((num_examples, *data_shape), dtype=dtype or torch.get_default_dtype(),
                              device=device)
    x, latents = draw_joint(model, placeholder, resolve_seed(seed), model_args, model_kwargs)
    return Simulated(x, latents)


def _check_posterior_start(target: Target, starts: list[Tensor], finals: list[Tensor]) -> None:
    """Warn when user latents explain x far worse than forward AIS's final states do."""
    k, d = target.layout.num_chains, target.layout.latent_dim
    log_obs = target.program.log_prior_and_obs
    lo_start, lo_final = log_obs(starts[1])[1], log_obs(finals[0])[1]
    start = lo_start.reshape(k, -1).mean(0)
    fwd = lo_final.reshape(k, -1)
    slack = 5 * fwd.std(0) + d + 5.0 if k > 1 else torch.full_like(start, d + 5.0)
    bad = int((start < fwd.mean(0) - slack).sum())
    if bad:
        warnings.warn(
            f"for {bad} examples the given latents explain x far worse than forward AIS's final "
            "states do: they do not look like exact posterior samples, and the reverse estimate is "
            "then NOT an upper bound. Pass (x, latents) simulated from the model (pyrolik.simulate).",
            PyrolikWarning, stacklevel=7,
        )


@shared_params
def bdmc(model: Callable[..., Any], num_examples: int | tuple[Tensor, dict[str, Tensor] | Tensor], *,
         data_shape: tuple[int, ...] | None = None, num_steps: int | None, num_chains: int,
         schedule: str | Tensor = "auto", kernel=None, init: Callable[..., Any] | None = None,
         model_args: tuple = (), model_kwargs: dict | None = None, seed: int | None = None,
         batch_size: int | None = None, progress: bool = True) -> BDMCResult | None:
    r"""Bidirectional Monte Carlo: forward and reverse AIS on data simulated from the model.

    For :math:`(x, z) \sim p(z)\,p(x \mid z)`, :math:`z` is an exact posterior draw, so forward AIS and
    reverse AIS started at :math:`z` sandwich the log-likelihood [1]_:

    .. math:: \mathbb E[\log \hat p_{\rm fwd}(x)] \le \log p(x) \le \mathbb E[-\log \hat w_{\rm rev}^{-1}]

    Both legs share one pass, schedule, kernel and step sizes; the gap bounds either estimate's
    error on data like the model's, validating the settings [2]_. ``init=guide`` anneals along the
    encoder path.

    Returns
    -------
    BDMCResult
        ``.lower``, ``.upper`` (AIS results), ``.gap`` (mean upper - lower, nats), ``.x``, ``.latents``.

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models.oracles.linear_gaussian import LinearGaussian
    >>> model = LinearGaussian.random(data_dim=5, latent_dim=2, seed=0)   # exact log p(x) known
    >>> x = model.sample(4, torch.Generator().manual_seed(0))
    >>> sandwich = pyrolik.bdmc(model, 4, data_shape=(5,), num_steps=50, num_chains=8, seed=0,
    ...                         progress=False)
    >>> sandwich.lower.bound, sandwich.upper.bound
    ('lower', 'upper')
    >>> bool(0 <= sandwich.gap < 1.0)   # nats: a small gap says 50 steps suffice on this model
    True

    References
    ----------
    .. [1] R. Grosse, Z. Ghahramani, R. Adams. Sandwiching the marginal likelihood using
       bidirectional Monte Carlo. arXiv:1511.02543, 2015.
    .. [2] Y. Wu et al. On the quantitative analysis of decoder-based generative models. ICLR, 2017,
       section 5.3.1.
    """
    return sandwich(model, num_examples, data_shape=data_shape, num_steps=num_steps,
                    num_chains=num_chains, schedule=schedule, kernel=kernel, init=init,
                    model_args=model_args, model_kwargs=model_kwargs, seed=seed,
                    batch_size=batch_size, progress=progress)


def sandwich(model: Callable[..., Any], data: Any, *, data_shape: tuple[int, ...] | None = None,
             num_steps: int | None, num_chains: int, schedule: str | Tensor = "auto",
             kernel=None, init: Callable[..., Any] | None = None, model_args: tuple = (),
             model_kwargs: dict | None = None, seed: int | None = None,
             batch_size: int | None = None, progress: bool = True,
             step_sizes: StepSizes | None = None) -> BDMCResult | None:
    """:func:`bdmc`, optionally with the pilot table of an earlier run on the same data."""
    start = time.perf_counter()
    execution = Execution.create(seed=seed, batch_size=batch_size, progress=progress, desc="BDMC")
    user_data = not isinstance(data, (int, Simulated))
    data = _simulated(model, data, data_shape, execution.seed, model_args, model_kwargs)
    if not (isinstance(data, tuple) and len(data) == 2):
        raise TypeError("num_examples must be an int, or data simulated from the model: a pair "
                        "(x, latents), e.g. the output of pyrolik.simulate")
    x, latents = data
    problem, results = run("bdmc", model, x, directions=("forward", "reverse"), num_steps=num_steps,
                           num_chains=num_chains, schedule=schedule, kernel=kernel, init=init,
                           latents=latents, model_args=model_args, model_kwargs=model_kwargs,
                           seed=execution.seed, batch_size=batch_size, progress=progress,
                           execution=execution, step_sizes=step_sizes,
                           check=_check_posterior_start if user_data else None)
    if results is None:
        return None
    wall = time.perf_counter() - start
    lower, upper = (dataclasses.replace(r, wall_time=wall) for r in results)
    reverse = problem.legs[1].latents
    assert reverse is not None  # describe gives the reverse leg its latents
    simulated = {name: v[0] for name, v in reverse.items()}
    result = BDMCResult(lower=lower, upper=upper, x=problem.x, latents=simulated, wall_time=wall)
    warn_failed(result, "bdmc")
    return result


def _simulated(model: Callable[..., Any], data: Any, data_shape: tuple[int, ...] | None,
               seed: int | None, model_args: tuple, model_kwargs: dict | None) -> Any:
    """``data``, or as many examples simulated from the model when it is a number."""
    if not isinstance(data, int):
        return data
    if data_shape is None:
        raise ValueError("pass data_shape= (the shape of one example) to simulate data, or data "
                         "simulated from the model in place of num_examples: "
                         "pyrolik.bdmc(model, pyrolik.simulate(model, ...), ...)")
    return simulate(model, data, data_shape=data_shape, model_args=model_args,
                    model_kwargs=model_kwargs, seed=seed)


@shared_params
def bdmc_convergence(model: Callable[..., Any],
                     num_examples: int | tuple[Tensor, dict[str, Tensor] | Tensor], *,
                     num_steps: Sequence[int], data_shape: tuple[int, ...] | None = None,
                     num_chains: int, seed: int | None = 0, **bdmc_kwargs: Any) -> pd.DataFrame:
    """BDMC at each ``num_steps`` on the same simulated data: one row per entry (a DataFrame).

    Columns: ``num_steps``, ``lower``, ``upper``, ``gap`` (means over examples) with ``_se``
    standard errors, ``seconds`` and ``gradient_evals`` (per chain and example, pilot included).

    Parameters
    ----------
    num_steps : sequence of int
        The budgets to compare.
    **bdmc_kwargs
        Further keywords of :func:`pyrolik.bdmc`.
    """
    steps = [check_count("num_steps entries", s) for s in num_steps]
    if not steps:
        raise ValueError("num_steps must list at least one number of annealing steps")
    data = _simulated(model, num_examples, data_shape, seed, bdmc_kwargs.get("model_args", ()),
                      bdmc_kwargs.get("model_kwargs"))
    rows = []
    for s in sorted(steps):
        r = main_result(bdmc(model, data, num_steps=s, num_chains=num_chains, seed=seed,
                             **bdmc_kwargs), "bdmc")
        assert r.lower.mcse is not None and r.upper.mcse is not None  # AIS reports its MCSE
        kern = r.lower.kernel
        strategy = kern.move.adaptation  # its pilot runs pilot_chains (default K) of the 2K chains
        pilot = (strategy.pilot_transitions(s) * strategy.pilot_chains(num_chains)
                 / (2 * num_chains))
        n = len(r.x)
        rows.append({"num_steps": s, "lower": r.lower.mean,
                     "lower_se": float(r.lower.mcse.pow(2).sum().sqrt() / n), "upper": r.upper.mean,
                     "upper_se": float(r.upper.mcse.pow(2).sum().sqrt() / n), "gap": r.gap,
                     "gap_se": r.gap_stderr, "seconds": r.wall_time,
                     "gradient_evals": (s + pilot) * kern.move.num_leapfrog})
    return pd.DataFrame(rows)


def plot_bdmc_convergence(table: pd.DataFrame, x: str = "num_steps", ax=None, title: str = ""):
    """Lower and upper bounds against ``x`` ("num_steps" or "seconds"), log scale; returns the axes.

    Parameters
    ----------
    table : pandas.DataFrame
        The table of :func:`pyrolik.infer.bdmc_convergence`.
    x : {"num_steps", "seconds", "gradient_evals"}
        The column to draw the bounds against.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure when None.
    title : str
        The axes' title (default: the final gap).

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    if x not in ("num_steps", "seconds", "gradient_evals"):
        raise ValueError(f"x must be 'num_steps', 'seconds' or 'gradient_evals', got {x!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
    t = table.sort_values(x)
    for name, color in (("upper", "tab:red"), ("lower", "tab:blue")):
        direction = "reverse" if name == "upper" else "forward"
        ax.plot(t[x], t[name], "o-", color=color, label=f"{name} bound ({direction} AIS)")
        se = t[f"{name}_se"].to_numpy()
        ax.fill_between(t[x], t[name] - 2 * se, t[name] + 2 * se, color=color, alpha=0.2)
    ax.set_xscale("log")
    ax.set_xlabel({"num_steps": "annealing steps", "seconds": "wall time [s]",
                   "gradient_evals": "gradient evaluations per chain"}[x])
    ax.set_ylabel("average log p(x) [nats]")
    ax.set_title(title or f"BDMC: final gap {t['gap'].iloc[-1]:.2f} nats")
    ax.legend(frameon=False)
    return ax
