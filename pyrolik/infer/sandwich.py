r"""Bidirectional Monte Carlo: simulate from the model, then sandwich log p(x) between AIS bounds.

For data simulated from the model, :math:`(x, z) \sim p(z) p(x \mid z)`, the latent :math:`z` is an
exact posterior sample for :math:`x`. Forward AIS gives a stochastic lower bound and reverse AIS
started at :math:`z` a stochastic upper bound (Grosse, Ghahramani & Adams 2015):

.. math:: \mathbb E[\log \hat p_{\rm fwd}(x)] \le \log p(x) \le \mathbb E[-\log \hat w_{\rm rev}^{-1}]

so the BDMC gap (upper minus lower, averaged over examples) bounds the error of either estimate on
simulated data. Wu et al. (2017, section 5.3.1) use it to validate AIS on decoder models before
trusting it on real data: if the gap is small with a given schedule and kernel, so (on data like the
model's) is the error of forward AIS with them.

Forward and reverse chains run in *one* batched pass (rows of both directions stacked), with the same
frozen per-temperature step sizes from one pilot run, visited in opposite orders.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count
from pyrolik.exceptions import PyrolikWarning
from pyrolik.execution.faults import warn_failed
from pyrolik.execution.options import Execution
from pyrolik.infer.driver import drive
from pyrolik.infer.run import Recording, describe
from pyrolik.mcmc.step_sizes import StepSizes
from pyrolik.model.simulation import draw_joint
from pyrolik.model.target import Target
from pyrolik.results import BDMCResult

__all__ = ["Simulated", "simulate", "bdmc"]


class Simulated(NamedTuple):
    """Data drawn from a model's joint and the latents that produced them (exact posterior draws)."""

    x: Tensor  # (N, *data_shape)
    latents: dict[str, Tensor]  # {site: (N, *site)}, constrained


def simulate(
    model: Callable[..., Any],
    num_examples: int,
    *,
    data_shape: tuple[int, ...] | torch.Size,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    seed: int | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Simulated:
    r"""Draw ``(x, latents)`` from the model's joint :math:`p(z)\,p(x \mid z)`.

    As Pyro users expect (:func:`pyrolik.model.simulation.draw_joint`): the model runs with
    ``x=None`` (the ``obs=x`` idiom samples the observed sites), or else on a placeholder ``x`` of
    shape ``(num_examples, *data_shape)`` with its observed sites released
    (``pyro.poutine.uncondition``); ``latents`` are exact posterior samples for the returned ``x``,
    which is what :func:`reverse_ais` and :func:`bdmc` need. ``x`` is put together from the observed
    sites' draws where the model reads them (:mod:`pyrolik.model.readmap`): one site holding all of
    ``x``, one per time step (``obs=x[:, t]``), a gathered ``obs=x[:, idx]``; entries no observed
    site scores (masked out, or not read) are **0**. Per-example arguments have ``num_examples``
    rows. When the model cannot be simulated so (its structure reads the data, or an observed site
    computes on ``x``), the error says why and points to ``bdmc(model, data=(x, latents))``.
    """
    check_count("num_examples", num_examples)
    data_shape = tuple(data_shape)
    if not all(isinstance(d, int) and d > 0 for d in data_shape):
        raise ValueError(f"data_shape must be a tuple of positive ints, got {data_shape!r}")
    placeholder = torch.zeros((num_examples, *data_shape), dtype=dtype or torch.get_default_dtype(),
                              device=device)
    x, latents = draw_joint(model, placeholder, resolve_seed(seed), model_args, model_kwargs)
    return Simulated(x, latents)


def _check_posterior_start(target: Target, starts: list[Tensor], finals: list[Tensor]) -> None:
    """Warn when user latents explain x far worse than forward AIS's final states do.

    Under the posterior, log p(x | z) spreads by about sqrt(d / 2) nats (Gaussian case); a start more
    than ``5 sd + d + 5`` nats below the forward chains is not a posterior draw. ``target`` holds
    the forward leg's K chains; ``starts`` and ``finals`` are the legs' rows (forward, reverse).
    """
    k, d = target.num_chains, target.latent_dim
    lo_start, lo_final = target.log_obs(starts[1]), target.log_obs(finals[0])
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


def bdmc(
    model: Callable[..., Any],
    num_examples: int | None = None,
    *,
    data_shape: tuple[int, ...] | None = None,
    num_steps: int | None,
    num_chains: int,
    schedule: str | Tensor = "auto",
    kernel=None,
    init: Callable[..., Any] | None = None,
    data: tuple[Tensor, dict[str, Tensor] | Tensor] | None = None,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    record_every: int | None = None,
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 100,
    distributed: bool = False,
    step_sizes: StepSizes | None = None,
) -> BDMCResult | None:
    r"""Bidirectional Monte Carlo: forward and reverse AIS on data simulated from the model.

    Simulates ``num_examples`` examples (or takes ``data=(x, latents)`` that *were* simulated from
    the model), then runs forward AIS (stochastic lower bound) and reverse AIS from the simulated
    latents (stochastic upper bound) with the same schedule, kernel and frozen step sizes, in one
    batched pass. ``init=guide`` runs both along the encoder path
    :math:`q(z \mid x)^{1-\beta} p(x, z)^\beta`, a much shorter path: the gap closes with far
    fewer steps. ``checkpoint``, ``checkpoint_every`` and ``distributed`` work as in
    :func:`pyrolik.ais` (the simulated data are drawn again from ``seed`` on resume, and checked).
    ``step_sizes``: a pilot table for these examples (``result.lower.step_sizes`` of an earlier
    run on the same data) instead of a new pilot; its chains were independent of this run's, so
    both bounds stay exact.

    Returns
    -------
    BDMCResult
        ``.lower`` and ``.upper`` (AIS results), ``.gap`` (mean upper - lower, nats),
        ``.per_example_gap``, ``.gap_stderr``, ``.x``, ``.latents``, ``.summary()``.

    References
    ----------
    .. [1] R. Grosse, Z. Ghahramani, R. Adams. Sandwiching the marginal likelihood using
       bidirectional Monte Carlo. arXiv:1511.02543, 2015.
    .. [2] Y. Wu et al. On the quantitative analysis of decoder-based generative models. ICLR, 2017.
    """
    start = time.perf_counter()
    execution = Execution.create(seed=seed, distributed=distributed, batch_size=batch_size,
                                 progress=progress, desc="BDMC", checkpoint=checkpoint,
                                 checkpoint_every=checkpoint_every)
    user_data = data is not None and not isinstance(data, Simulated)
    if data is None:
        if num_examples is None or data_shape is None:
            raise ValueError("pass num_examples= and data_shape= to simulate data, or "
                             "data=(x, latents) simulated from the model")
        data = simulate(model, num_examples, data_shape=data_shape, model_args=model_args,
                        model_kwargs=model_kwargs, seed=execution.seed)
    if not (isinstance(data, tuple) and len(data) == 2):
        raise TypeError("data must be a pair (x, latents), e.g. the output of pyrolik.simulate")
    x, latents = data
    problem = describe(model, x, directions=("forward", "reverse"), num_steps=num_steps,
                       num_chains=num_chains, schedule=schedule, kernel=kernel, init=init,
                       latents=latents, model_args=model_args, model_kwargs=model_kwargs,
                       step_sizes=step_sizes, record_every=record_every,
                       check=_check_posterior_start if user_data else None)
    results = drive("bdmc", problem, execution, Recording(record_every))
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
