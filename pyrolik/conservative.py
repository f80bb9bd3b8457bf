r"""Conservative sampling-based log-likelihood (CSL) and its biased variant (Bengio et al. 2014).

CSL needs only the conditional :math:`P(x \mid h)` and latent samples :math:`h` from a Markov
chain of the model; it never needs :math:`P(h)`. See ``docs/csl.md``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from pyrolik import _pyro
from pyrolik.chains import Latents, as_chain, sample_chain

__all__ = ["CSLResult", "csl", "biased_csl"]

_LN2 = math.log(2.0)
LogObsFn = Callable[[Tensor, Latents], Tensor]


@dataclass
class CSLResult:
    r"""Per-example CSL estimates of :math:`\log p(x)` in nats.

    Attributes
    ----------
    log_likelihood : Tensor, shape (N,)
        :math:`\log \frac1S \sum_s P(x_n \mid h_s)`.
    bound : {"lower", None}
        ``"lower"`` for CSL, a stochastic lower bound
        (:math:`\mathbb E[\text{estimate}] \le \log f(x)`); ``None`` for biased CSL, which tends
        to over-estimate.
    method : str
        ``"csl"`` or ``"biased_csl"``.
    num_samples : int
        Latent samples per example (S).
    ess : Tensor, shape (N,)
        :math:`(\sum_s w_s)^2 / \sum_s w_s^2` with :math:`w_s = P(x_n \mid h_s)`.
    mcse : Tensor, shape (N,)
        :math:`\sqrt{1/\text{ESS} - 1/S}`, the delta-method standard error of ``log_likelihood``
        for independent samples; correlated chain samples make the real error larger.
    log_weights : Tensor or None, shape (S, N)
        :math:`\log P(x_n \mid h_s)`, kept only with ``keep_log_weights=True``.
    """

    log_likelihood: Tensor
    bound: str | None
    method: str
    num_samples: int
    ess: Tensor
    mcse: Tensor
    log_weights: Tensor | None = None
    name: str | None = None

    @property
    def mean(self) -> float:
        """Average of ``log_likelihood`` over examples (nats)."""
        return float(self.log_likelihood.mean())

    @property
    def stderr(self) -> float:
        """Standard error of :attr:`mean` over examples (sample std / sqrt(N))."""
        n = self.log_likelihood.numel()
        return float(self.log_likelihood.std() / math.sqrt(n)) if n > 1 else float("nan")

    def summary(self, num_dims: int | None = None) -> pd.DataFrame:
        """One-row table: mean, stderr, counts, median ESS; NLL in bits/dim given ``num_dims``."""
        row: dict[str, Any] = {
            "method": self.method,
            "bound": self.bound,
            "mean_nats": self.mean,
            "stderr_nats": self.stderr,
            "num_examples": self.log_likelihood.numel(),
            "num_samples": self.num_samples,
            "median_ess": float(self.ess.median()),
        }
        if num_dims is not None:
            # bits/dim of the negative log-likelihood, see pyrolik.units.nats_to_bits_per_dim
            row["nll_bits_per_dim"] = -self.mean / (num_dims * _LN2)
        return pd.DataFrame([row], index=[self.name or self.method])


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


def _check_finite(name: str, t: Tensor) -> None:
    if not torch.is_tensor(t):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or inf; remove or impute those entries first")


def csl(
    log_obs_fn_or_model: Any,
    x: Tensor,
    latents: Latents | Iterable[Latents],
    *,
    per_example: bool = False,
    chunk_size: int = 1024,
    model_args: tuple = (),
    model_kwargs: dict[str, Any] | None = None,
    keep_log_weights: bool = False,
    progress: bool = False,
    name: str | None = None,
) -> CSLResult:
    r"""Conservative sampling-based log-likelihood, Algorithm 1 of [1]_.

    .. math:: \log \hat f_S(x) = \log \frac{1}{|S|} \sum_{h \in S} P(x \mid h)

    for each test example, with :math:`S` latent states collected from a Markov chain of the model
    (every k-th state of one or more chains). By Jensen's inequality
    :math:`\mathbb E_S[\log \hat f_S(x)] \le \log \mathbb E_h[P(x \mid h)] = \log f(x)`, where
    :math:`f` is the data marginal of the chain's stationary distribution: a **stochastic lower
    bound** that becomes exact as :math:`|S| \to \infty` (Propositions 1 and 2 of [1]_). For a
    fixed :math:`|S|` a chain that mixes slowly gives a lower estimate, so CSL measures the
    sampler's mixing as well as the model. With i.i.d. prior samples it is likelihood weighting.

    The sum over samples streams over chunks with a running log-sum-exp, so latents may be a
    generator of chunks (:func:`pyrolik.chains.iterate_chain`) and are never all in memory.

    Parameters
    ----------
    log_obs_fn_or_model : callable or object
        One of: ``log_obs_fn(x, h) -> (S, N)``, the matrix :math:`\log P(x_n \mid h_s)`;
        an object with such a ``log_obs`` method (e.g. ``models.rbm.RBM``); or a Pyro model
        following the API convention, recognised by ``latents`` being ``{site: tensor}`` dicts.
    x : Tensor, shape (N, *event_shape)
        Test examples.
    latents : Tensor, dict of Tensors, or an iterable of either (chunks)
        Samples of shape ``(S, *latent_shape)`` shared by all examples, or with
        ``per_example=True`` ``(S, N, *latent_shape)``: samples of example ``n`` only.
    per_example : bool
        Latents are per example (the layout of :func:`biased_csl`); a function must then
        return :math:`\log P(x_n \mid h_{s,n})` of shape (S, N).
    chunk_size : int
        Samples per pass when ``latents`` is a tensor or dict.
    keep_log_weights : bool
        Keep the full ``(S, N)`` matrix as ``log_weights``.

    Returns
    -------
    CSLResult
        ``log_likelihood`` (N,), ``bound="lower"``, ``ess``, ``mcse``.

    References
    ----------
    .. [1] Y. Bengio, L. Yao, K. Cho. Bounding the test log-likelihood of generative models.
       arXiv:1311.6184, 2014.
    """
    _check_finite("x", x)
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int; got {chunk_size!r}")
    chunks = iter(_chunks(latents, chunk_size))
    first = next(chunks, None)
    if first is None:
        raise ValueError("latents hold no samples; pass at least one")
    chunks = itertools.chain([first], chunks)
    fn = _resolve(
        log_obs_fn_or_model, isinstance(first, Mapping), model_args, model_kwargs, per_example
    )
    n = x.shape[0]
    lse = x.new_full((n,), -math.inf)
    lse2 = x.new_full((n,), -math.inf)
    total = 0
    kept = []
    if progress:
        from tqdm.auto import tqdm

        chunks = tqdm(chunks, desc="csl", unit="chunk")
    with torch.no_grad():
        for h in chunks:
            s = _num(h)
            if per_example:
                first = next(iter(h.values())) if isinstance(h, Mapping) else h
                if first.dim() < 2 or first.shape[1] != n:
                    raise ValueError(
                        f"per_example latents must have shape (S, N={n}, ...); got "
                        f"{tuple(first.shape)}"
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
            lse = torch.logaddexp(lse, torch.logsumexp(log_w, 0))
            lse2 = torch.logaddexp(lse2, torch.logsumexp(2 * log_w, 0))
            total += s
            if keep_log_weights:
                kept.append(log_w)
    if total == 0:
        raise ValueError("latents hold no samples; pass at least one")
    log_likelihood = lse - math.log(total)
    ess = torch.exp(2 * lse - lse2)
    mcse = torch.sqrt((1 / ess - 1 / total).clamp(min=0))
    return CSLResult(
        log_likelihood=log_likelihood,
        bound="lower",
        method="csl",
        num_samples=total,
        ess=ess,
        mcse=mcse,
        log_weights=torch.cat(kept) if keep_log_weights else None,
        name=name,
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
    name: str | None = None,
) -> CSLResult:
    r"""Biased CSL for model comparison, section 6 of [1]_.

    For each test example :math:`x`, run ``num_chains`` short alternating chains **started at**
    :math:`x` and keep their ``num_steps`` consecutive latent states :math:`S_x` (the first is
    :math:`h_1 \sim P(h \mid x)`); then :math:`\log \frac{1}{|S_x|} \sum_{h \in S_x} P(x \mid h)`.

    The samples are local to :math:`x`, so the estimate is reliable with few samples but is **not
    a bound**: it tends to **over-estimate** :math:`\log p(x)` (``bound=None``). The paper finds
    that it nonetheless orders models like the exact log-likelihood; use it to rank, not to report.

    Parameters
    ----------
    chain : AlternatingChain or RBM-like
        :func:`pyrolik.chains.block_gibbs` (an RBM object is accepted directly) or
        :func:`pyrolik.chains.encoder_decoder`.
    num_chains, num_steps : int
        Chains per example and latent states kept per chain (``|S_x| = num_chains * num_steps``).

    Returns
    -------
    CSLResult
        ``bound=None``, ``method="biased_csl"``.

    References
    ----------
    .. [1] Y. Bengio, L. Yao, K. Cho. Bounding the test log-likelihood of generative models.
       arXiv:1311.6184, 2014.
    """
    _check_finite("x", x)
    for label, v in (("num_chains", num_chains), ("num_steps", num_steps)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{label} must be a positive int; got {v!r}")
    n = x.shape[0]
    x0 = x.unsqueeze(0).expand(num_chains, *x.shape).reshape(num_chains * n, *x.shape[1:])
    h = sample_chain(as_chain(chain), x0, num_samples=num_steps, seed=seed)  # (T, C*N, ...)

    def per_example(v: Tensor) -> Tensor:
        return v.reshape(num_steps * num_chains, n, *v.shape[2:])

    h = {k: per_example(v) for k, v in h.items()} if isinstance(h, Mapping) else per_example(h)
    result = csl(
        log_obs_fn_or_model, x, h, per_example=True, chunk_size=chunk_size,
        model_args=model_args, model_kwargs=model_kwargs, name=name,
    )
    result.bound = None
    result.method = "biased_csl"
    return result

