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

import os
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import pyro
import torch
from torch import Tensor

from pyrolik._random import fork_rng_from, resolve_seed
from pyrolik._validate import check_count
from pyrolik.execution.distributed import broadcast_seed, current_shard
from pyrolik.execution.faults import warn_failed
from pyrolik.execution.runner import run_batches
from pyrolik.infer._assembly import (
    finish,
    initial_draw,
    open_checkpoint,
    payload,
    prepare,
    settings_of,
    table_of,
)
from pyrolik.infer.annealing import AnnealOutput, anneal, expand_latents, latents_to_flat
from pyrolik.mcmc.adaptation import pilot
from pyrolik.model.target import make_target
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

    The model runs once with its observed site released (``pyro.poutine.uncondition``) on a
    placeholder ``x`` of shape ``(num_examples, *data_shape)``; ``latents`` are exact posterior
    samples for the returned ``x``, which is what :func:`reverse_ais` and :func:`bdmc` need.
    The model must have a single observed site whose value is all of ``x``.
    """
    check_count("num_examples", num_examples)
    data_shape = tuple(data_shape)
    if not all(isinstance(d, int) and d > 0 for d in data_shape):
        raise ValueError(f"data_shape must be a tuple of positive ints, got {data_shape!r}")
    placeholder = torch.zeros((num_examples, *data_shape), dtype=dtype or torch.get_default_dtype(),
                              device=device)
    target = make_target(model, placeholder, 1, model_args=model_args, model_kwargs=model_kwargs)
    if len(target.observed) != 1:
        raise ValueError(f"simulate needs a model with one observed site holding all of x; this one "
                         f"has {list(target.observed)}: simulate (x, latents) yourself and pass "
                         "data=(x, latents) to bdmc")
    seed = resolve_seed(seed)
    generator = torch.Generator(device=placeholder.device).manual_seed(seed)
    with fork_rng_from(generator, placeholder.device), torch.no_grad(), \
            pyro.validation_enabled(False):
        tr = pyro.poutine.trace(pyro.poutine.uncondition(model)).get_trace(
            placeholder, *model_args, **(model_kwargs or {}))
    x = tr.nodes[target.observed[0]]["value"].detach()
    if tuple(x.shape) != tuple(placeholder.shape):
        raise ValueError(f"the observed site {target.observed[0]!r} draws values of shape "
                         f"{tuple(x.shape)}, not (num_examples, *data_shape) = "
                         f"{tuple(placeholder.shape)}")
    latents = {s.name: tr.nodes[s.name]["value"].detach().movedim(s.plate_index, 0)
               for s in target.sites}
    return Simulated(x, latents)


def _split(out: AnnealOutput, k: int, n: int) -> tuple[AnnealOutput, AnnealOutput]:
    """A 2K-chain pass -> (forward chains :K, reverse chains K:)."""
    kn = k * n

    def rows(t: Tensor, lo: bool) -> Tensor:
        return t[:kn] if lo else t[kn:]

    def traced(name: str, t: Tensor, lo: bool) -> Tensor:
        if name == "beta":
            return t[:, :k] if lo else t[:, k:]
        return t[:, :kn] if lo else t[:, kn:]

    halves = []
    for lo in (True, False):
        st = out.state
        state = type(st)(*(rows(v, lo) for v in st))
        halves.append(AnnealOutput(
            rows(out.log_weight, lo), state, rows(out.acceptance_rate, lo),
            rows(out.num_divergent, lo),
            {name: traced(name, v, lo) for name, v in out.trace.items()}, out.trace_steps))
    return halves[0], halves[1]


def _check_posterior_start(lo_start: Tensor, lo_final: Tensor, k: int, d: int) -> None:
    """Warn when user latents explain x far worse than forward AIS's final states do.

    Under the posterior, log p(x | z) spreads by about sqrt(d / 2) nats (Gaussian case); a start more
    than ``5 sd + d + 5`` nats below the forward chains is not a posterior draw.
    """
    start = lo_start.reshape(k, -1).mean(0)
    fwd = lo_final.reshape(k, -1)
    slack = 5 * fwd.std(0) + d + 5.0 if k > 1 else torch.full_like(start, d + 5.0)
    bad = int((start < fwd.mean(0) - slack).sum())
    if bad:
        warnings.warn(
            f"for {bad} examples the given latents explain x far worse than forward AIS's final "
            "states do: they do not look like exact posterior samples, and the reverse estimate is "
            "then NOT an upper bound. Pass (x, latents) simulated from the model (pyrolik.simulate).",
            stacklevel=3,
        )


def bdmc(
    model: Callable[..., Any],
    num_examples: int | None = None,
    *,
    data_shape: tuple[int, ...] | None = None,
    num_steps: int | None,
    num_chains: int,
    schedule: str | Tensor = "sigmoid",
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
) -> BDMCResult | None:
    r"""Bidirectional Monte Carlo: forward and reverse AIS on data simulated from the model.

    Simulates ``num_examples`` examples (or takes ``data=(x, latents)`` that *were* simulated from
    the model), then runs forward AIS (stochastic lower bound) and reverse AIS from the simulated
    latents (stochastic upper bound) with the same schedule, kernel and frozen step sizes, in one
    batched pass. ``init=guide`` runs both along the encoder path
    :math:`q(z \mid x)^{1-\beta} p(x, z)^\beta`, a much shorter path: the gap closes with far
    fewer steps. ``checkpoint``, ``checkpoint_every`` and ``distributed`` work as in
    :func:`pyrolik.ais` (the simulated data are drawn again from ``seed`` on resume, and checked).

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
    shard = current_shard(distributed)
    seed = broadcast_seed(resolve_seed(seed), shard)
    user_data = data is not None and not isinstance(data, Simulated)
    if data is None:
        if num_examples is None or data_shape is None:
            raise ValueError("pass num_examples= and data_shape= to simulate data, or "
                             "data=(x, latents) simulated from the model")
        data = simulate(model, num_examples, data_shape=data_shape, model_args=model_args,
                        model_kwargs=model_kwargs, seed=seed)
    if not (isinstance(data, tuple) and len(data) == 2):
        raise TypeError("data must be a pair (x, latents), e.g. the output of pyrolik.simulate")
    x, latents = data
    x, betas, kernel = prepare(model, x, num_steps, num_chains, schedule, kernel, init,
                               record_every)
    k, path = num_chains, ("prior" if init is None else "guide")
    probe = make_target(model, x[:1], k, model_args=model_args, model_kwargs=model_kwargs)
    latents = expand_latents(probe, latents, x.shape[0])
    both = torch.cat([betas.unsqueeze(1).expand(-1, k), betas.flip(0).unsqueeze(1).expand(-1, k)], 1)
    settings = settings_of(num_steps or len(betas) - 1, k, schedule, kernel, batch_size, init)
    ckpt = open_checkpoint(
        "bdmc", checkpoint, checkpoint_every, model=model, x=x, seed=seed, guide=init,
        settings={**settings, "kernel": kernel, "path": path, "record_every": record_every},
        model_args=model_args, model_kwargs=model_kwargs, shard=shard,
        extra={"schedule": betas, **{f"latents.{n}": v for n, v in latents.items()}})

    def work(batch, resume, save):
        sl = slice(batch.start, batch.stop)
        n = batch.stop - batch.start
        target = make_target(model, x[sl], 2 * k, model_args=model_args,
                             model_kwargs=model_kwargs, guide=init)
        half = make_target(model, x[sl], k, model_args=model_args, model_kwargs=model_kwargs)
        z0 = loop = None
        z_rev = latents_to_flat(half, {name: v[:, sl] for name, v in latents.items()})
        if resume is None:
            table = None
            if kernel.adapt == "pilot":  # tuned on the forward half's K chains, as in ais
                forward = target.first_chains(k)
                table = pilot(forward, path, initial_draw(forward, path, batch.generator), kernel,
                              betas, batch.generator)
            z_fwd = initial_draw(target, path, batch.generator)[: k * n]
            z0 = torch.cat([z_fwd, z_rev])
        else:
            table, loop = table_of(resume["table"]), resume["loop"]
        keep = None if save is None else (lambda state: save({"table": tuple(table) if table
                                                               else None, "loop": state}))
        out = anneal(target, path, z0, both, kernel, batch.generator, step_sizes=table,
                     record_every=record_every, progress=progress,
                     desc=f"BDMC [{batch.start}:{batch.stop}]", resume=loop, checkpoint_fn=keep,
                     checkpoint_every=checkpoint_every)
        fwd, rev = _split(out, k, n)
        if user_data:
            _check_posterior_start(half.log_obs(z_rev), half.log_obs(fwd.state.z), k,
                                   half.latent_dim)
        how = target.evaluation(path)
        return {"forward": payload(fwd, k, n, table, half.unravel(fwd.state.z), how),
                "reverse": payload(rev, k, n, table, half.unravel(rev.state.z), how)}

    parts = run_batches(x.shape[0], batch_size, seed, x.device, work, shard=shard,
                        rows_per_example=2 * k, checkpoint=ckpt)
    if parts is None:
        return None
    lower = finish("ais", "forward", path, x, [p["forward"] for p in parts], betas, kernel, seed,
                   settings, start, k)
    upper = finish("reverse_ais", "reverse", path, x, [p["reverse"] for p in parts],
                   betas.flip(0), kernel, seed, settings, start, k)
    wall = time.perf_counter() - start
    lower.wall_time = upper.wall_time = wall
    simulated = {name: v[0] for name, v in latents.items()}
    result = BDMCResult(lower=lower, upper=upper, x=x, latents=simulated, wall_time=wall)
    warn_failed(result, "bdmc")
    return result
