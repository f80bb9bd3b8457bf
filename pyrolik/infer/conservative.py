"""Conservative sampling-based log-likelihood (CSL) and its biased variant (``docs/csl.md``)."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count, validate_data
from pyrolik.execution.batches import progress_bar
from pyrolik.infer.chains import Latents, as_chain, sample_chain
from pyrolik.model import sampling as _pyro
from pyrolik.model.target import make_target
from pyrolik.ops.stats import RunningLogWeights
from pyrolik.results import EstimateResult

__all__ = ["csl", "biased_csl"]

LogObsFn = Callable[[Tensor, Latents], Tensor]


def _resolve(fn: Any, is_dict: bool, model_args: tuple, model_kwargs: dict | None,
             per_example: bool) -> LogObsFn:
    """Turn the first argument of :func:`csl` into ``log_obs(x, h) -> (S, N)``."""
    if callable(getattr(fn, "log_obs", None)):
        return fn.log_obs
    if not callable(fn):
        raise TypeError(
            "csl needs a log_obs_fn(x, h) -> (S, N), an object with such a log_obs method, or a "
            f"Pyro model; got {type(fn).__name__}"
        )
    if is_dict:
        log_obs = _pyro.model_log_obs(fn, model_args, model_kwargs)
        return lambda x, h: log_obs(x, h, per_example)
    return fn


def _is_pyro_model(fn: Any, first: Latents) -> bool:
    """Whether :func:`_resolve` read ``fn`` as a Pyro model (latents by site, no ``log_obs``)."""
    return isinstance(first, Mapping) and not callable(getattr(fn, "log_obs", None))


def _chunks(latents: Latents | Iterable[Latents], chunk_size: int):
    if isinstance(latents, Tensor):
        yield from latents.split(chunk_size)
    elif isinstance(latents, Mapping):
        keys = list(latents)
        parts = [latents[k].split(chunk_size) for k in keys]
        for pieces in zip(*parts, strict=True):
            yield dict(zip(keys, pieces, strict=True))
    else:
        yield from latents


def _num(h: Latents) -> int:
    return (next(iter(h.values())) if isinstance(h, Mapping) else h).shape[0]


def _count(latents: Any) -> int | None:
    """Number of samples when it is known before streaming (tensor, dict, list of chunks)."""
    if isinstance(latents, (Tensor, Mapping)):
        return _num(latents)
    if isinstance(latents, (list, tuple)):
        return sum(_num(h) for h in latents)
    return None


def csl(
    log_obs_fn_or_model: Any,
    x: Tensor,
    latents: Latents | Iterable[Latents],
    *,
    per_example: bool = False,
    chunk_size: int = 1024,
    model_args: tuple = (),
    model_kwargs: dict[str, Any] | None = None,
    keep_weights: bool = False,
    khat: bool = True,
    progress: bool = False,
) -> EstimateResult:
    r"""Conservative sampling-based log-likelihood, Algorithm 1 of [1]_.

    .. math:: \log \hat f_S(x) = \log \frac{1}{|S|} \sum_{h \in S} P(x \mid h)

    over latent states :math:`S` of a Markov chain: by Jensen, a stochastic lower bound on the
    chain's stationary data marginal, exact as :math:`|S| \to \infty` [1]_ (``docs/csl.md``).

    Parameters
    ----------
    log_obs_fn_or_model : callable or object
        ``log_obs_fn(x, h) -> (S, N)``, :math:`\log P(x_n \mid h_s)`; an object with such a
        ``log_obs`` method; or a Pyro model (``latents`` then ``{site: tensor}``).
    latents : Tensor, dict of Tensors, or an iterable of either (chunks)
        ``(S, *latent_shape)``, or ``(S, N, *latent_shape)`` with ``per_example=True``; chunks
        from a generator (:func:`pyrolik.infer.chains.iterate_chain`) stream.
    chunk_size : int
        Samples per pass when ``latents`` is a tensor or dict.
    keep_weights, khat, progress : bool
        Keep the ``(S, N)`` log-weights; compute Pareto k-hat (off for large test sets); show a bar.

    Returns
    -------
    EstimateResult
        ``bound="lower"``, ``method="csl"``; ``ess``, ``mcse``, ``khat`` treat the samples as
        independent (correlated states make the real error larger).

    References
    ----------
    .. [1] Y. Bengio, L. Yao, K. Cho. Bounding the test log-likelihood of generative models.
       arXiv:1311.6184, 2014.
    """
    x = validate_data(x)
    check_count("chunk_size", chunk_size)
    start_time = time.perf_counter()
    known = _count(latents)
    chunks = iter(_chunks(latents, chunk_size))
    first = next(chunks, None)
    if first is None or known == 0:
        raise ValueError("latents hold no samples; pass at least one")
    chunks = itertools.chain([first], chunks)
    fn = _resolve(
        log_obs_fn_or_model, isinstance(first, Mapping), model_args, model_kwargs, per_example
    )
    n = x.shape[0]
    running = RunningLogWeights(known or 1, keep_weights)
    bar = progress_bar(-(-known // chunk_size) if known else 0, "csl", progress)
    with torch.no_grad():
        for h in chunks:
            s = _num(h)
            if per_example:
                lead = next(iter(h.values())) if isinstance(h, Mapping) else h
                if lead.dim() < 2 or lead.shape[1] != n:
                    raise ValueError(
                        f"per_example latents must have shape (S, N={n}, ...); got "
                        f"{tuple(lead.shape)}"
                    )
            try:
                log_w = fn(x, h)
            except TypeError as e:
                raise TypeError(
                    f"calling log_obs(x, h) failed ({e}); a Pyro model needs latents as "
                    "{site: tensor} dicts, a function must take (x, h)"
                ) from e
            if not torch.is_tensor(log_w) or tuple(log_w.shape) != (s, n):
                got = tuple(log_w.shape) if torch.is_tensor(log_w) else type(log_w).__name__
                raise ValueError(
                    f"log_obs returned {got}, expected (S={s}, N={n}): log P(x_n | h_s) for every "
                    "sample and example (for a Pyro model pass latents as {site: tensor})"
                )
            if torch.isnan(log_w).any():
                raise ValueError("log_obs returned NaN; check the latents and the model")
            running.update(log_w.detach())
            bar.update(1)
    bar.close()
    # k-hat needs the sample count up front (its tail size) or every weight
    if khat and (known is not None or keep_weights):
        khat_values = running.khat()
    else:
        khat_values = torch.full_like(running.log_mean, float("nan"))
    # a Pyro model: bits/dim divides by the entries it observes (masks included)
    num_observed = (make_target(log_obs_fn_or_model, x, 1, model_args=model_args,
                                model_kwargs=model_kwargs).num_observed
                    if _is_pyro_model(log_obs_fn_or_model, first) else None)
    return EstimateResult(
        method="csl", num_observed=num_observed, log_likelihood=running.log_mean, bound="lower",
        log_weights=running.log_weights, ess=running.ess, mcse=running.mcse, khat=khat_values, x=x,
        settings={"num_samples": running.count, "chunk_size": chunk_size,
                  "per_example": per_example},
        wall_time=time.perf_counter() - start_time,
    )


def biased_csl(
    log_obs_fn_or_model: Any,
    x: Tensor,
    chain: Any,
    *,
    num_chains: int = 10,
    num_steps: int = 1,
    seed: int | None = None,
    chunk_size: int = 1024,
    model_args: tuple = (),
    model_kwargs: dict[str, Any] | None = None,
    keep_weights: bool = False,
) -> EstimateResult:
    r"""Biased CSL for model comparison, section 6 of [1]_.

    :func:`csl` on the states of ``num_chains`` short chains **started at** each :math:`x`. **Not a
    bound** (tends to over-estimate, ``bound=None``), yet it orders models: rank with it, don't report.

    Parameters
    ----------
    log_obs_fn_or_model : callable or object
        As in :func:`csl`; a function receives per-example latents ``(S, N, *latent_shape)``.
    chain : AlternatingChain or RBM-like
        :func:`pyrolik.infer.chains.block_gibbs` (or an RBM) or
        :func:`pyrolik.infer.chains.encoder_decoder`.
    seed : int, optional
        Seeds the chains; recorded in the result.

    References
    ----------
    .. [1] Y. Bengio, L. Yao, K. Cho. Bounding the test log-likelihood of generative models.
       arXiv:1311.6184, 2014.
    """
    x = validate_data(x)
    check_count("num_chains", num_chains)
    check_count("num_steps", num_steps)
    seed = resolve_seed(seed)
    start_time = time.perf_counter()
    n = x.shape[0]
    x0 = x.unsqueeze(0).expand(num_chains, *x.shape).reshape(num_chains * n, *x.shape[1:])
    h = sample_chain(as_chain(chain), x0, num_samples=num_steps, seed=seed)  # (T, C*N, ...)

    def per_example(v: Tensor) -> Tensor:
        return v.reshape(num_steps * num_chains, n, *v.shape[2:])

    h = {k: per_example(v) for k, v in h.items()} if isinstance(h, Mapping) else per_example(h)
    result = csl(
        log_obs_fn_or_model, x, h, per_example=True, chunk_size=chunk_size,
        model_args=model_args, model_kwargs=model_kwargs, keep_weights=keep_weights,
        khat=False,  # a handful of local, correlated samples: no importance-sampling tail to fit
    )
    return dataclasses.replace(
        result, method="biased_csl", bound=None, seed=seed, wall_time=time.perf_counter() - start_time,
        settings={**result.settings, "num_chains": num_chains, "num_steps": num_steps})
