"""Reductions of importance log-weights per example: log-mean-exp, ESS, MCSE, k-hat."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["log_mean_exp", "effective_sample_size", "ancestor_log_weights", "chain_statistics",
           "lognormal_bias", "mcse_log_mean_exp", "khat_threshold", "pareto_khat",
           "pareto_tail_size", "RunningLogWeights", "num_blocks", "check_blocks", "DEFAULT_BLOCKS"]


def log_mean_exp(log_weights: Tensor, dim: int = 0) -> Tensor:
    r""":math:`\log \frac1K \sum_k \exp(a_k)`, stable; ``-inf`` entries count as zero weights."""
    return torch.logsumexp(log_weights, dim=dim) - math.log(log_weights.shape[dim])


def effective_sample_size(log_weights: Tensor, dim: int = 0) -> Tensor:
    r"""Kish's effective sample size :math:`(\sum w)^2 / \sum w^2`, per example."""
    return torch.exp(2 * torch.logsumexp(log_weights, dim) - torch.logsumexp(2 * log_weights, dim))


def ancestor_log_weights(log_weights: Tensor, ancestor: Tensor | None) -> Tensor:
    r"""``(K, N)``: :math:`\log \sum_{k:\,a_k = j} w_k` for each starting chain ``j`` (``-inf`` for
    one that left no descendant); ``log_weights`` themselves when ``ancestor`` is ``None``. The ESS,
    MCSE and k-hat of a resampled run are those of these sums (Chan & Lai 2013)."""
    if ancestor is None:
        return log_weights
    top = log_weights.max(0, keepdim=True).values
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    summed = torch.zeros_like(log_weights).scatter_add_(0, ancestor, torch.exp(log_weights - top))
    return torch.log(summed) + top


def chain_statistics(log_weights: Tensor, ancestor: Tensor | None = None,
                     islands: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``(ess, mcse, khat)`` per example of ``K`` chains' log-weights ``(K, N)``. Resampled chains
    (``ancestor``: the starting chain each descends from) have the ESS and k-hat of their ancestors'
    summed weights (Chan & Lai 2013); resampled in ``islands`` (equal, consecutive groups of
    chains), the MCSE is the jackknife over the islands' summed weights, independent runs; in one
    island, over the ancestors, NaN where one lineage is left (its spread cannot be told)."""
    families = ancestor_log_weights(log_weights, ancestor)
    if ancestor is not None and islands is not None and islands > 1:
        n = log_weights.shape[1]
        mcse = mcse_log_mean_exp(torch.logsumexp(log_weights.reshape(islands, -1, n), 1))
    else:
        mcse = mcse_log_mean_exp(families)
        if ancestor is not None:
            mcse = torch.where(torch.isfinite(families).sum(0) < 2, torch.nan, mcse)
    return effective_sample_size(families), mcse, pareto_khat(families)


def lognormal_bias(num_weights: int, variance: float, draws: int = 20_000) -> float:
    r""":math:`\log \mathbb E[w] - \mathbb E\,\log\frac1K\sum_k w_k` for ``num_weights`` independent
    log-normal weights whose logs have ``variance``: the downward bias of a log-mean-exp estimate.
    AIS log-weights are close to normal with a variance that falls as 1/steps; with the variance
    the chains show, this predicts the BDMC gap of every split of a budget between chains and steps
    (``benchmarks/RESULTS.md``). Monte Carlo on a fixed stream: the same inputs give the same value."""
    g = torch.Generator().manual_seed(20_240)
    z = torch.randn(draws, num_weights, generator=g, dtype=torch.float64)
    log_w = z * math.sqrt(variance) - variance / 2  # E[w] = 1
    return float(-(torch.logsumexp(log_w, 1) - math.log(num_weights)).mean())


def _log1mexp(x: Tensor) -> Tensor:
    r""":math:`\log(1 - e^x)` for :math:`x \le 0`, accurate on the whole range (Maechler 2012)."""
    return torch.where(x > -math.log(2.0), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def _mcse_from_top(top: Tensor, lse: Tensor, log_power_sums: dict[int, Tensor], count: int
                   ) -> Tensor:
    """Jackknife MCSE from the ``top`` log-weights and the power sums of the rest (a series)."""
    dt = top.dtype
    top, lse = top.double(), lse.double()
    r_log = top - lse  # log r_i of the largest weights
    # the largest weight: log(1 - r_1) as the log of the others' share, which keeps its precision
    # when the others are far below it (then 1 - r_1 rounds to 0)
    r = torch.exp(r_log)
    rest = torch.clamp(1.0 - r.sum(0), min=0.0) if count > top.shape[0] else torch.zeros_like(lse)
    a_first = torch.logaddexp(torch.logsumexp(r_log[1:], 0), torch.log(rest))
    a = torch.cat([a_first.unsqueeze(0), _log1mexp(r_log[1:])], dim=0)
    a = torch.where(torch.isneginf(top), torch.zeros_like(a), a)  # zero weights: a_i = log 1
    sum_a, sum_a2 = a.sum(0), (a * a).sum(0)
    if count > top.shape[0]:  # the series for the weights below the top T
        p = {1: rest}
        for m in (2, 3, 4):
            p[m] = torch.clamp(torch.exp(log_power_sums[m].double() - m * lse) - (r**m).sum(0),
                               min=0.0)
        sum_a = sum_a - (p[1] + p[2] / 2 + p[3] / 3 + p[4] / 4)
        sum_a2 = sum_a2 + p[2] + p[3] + 11.0 / 12.0 * p[4]
    # the jackknife's sqrt((K - 1) / K * sum_i (a_i - mean a)^2) from the sums of a_i and a_i^2
    se = torch.sqrt((count - 1) / count * torch.clamp(sum_a2 - sum_a**2 / count, min=0.0))
    # one weight holds all the mass (a leave-one-out sum is zero): the spread is unbounded
    se = torch.where(torch.isneginf(a_first), torch.full_like(se, math.inf), se)
    if count < 2:
        se = torch.full_like(se, math.nan)  # one draw says nothing about the spread
    return torch.where(torch.isfinite(lse), se, torch.full_like(se, math.nan)).to(dt)


def mcse_log_mean_exp(log_weights: Tensor, dim: int = 0, method: str = "jackknife") -> Tensor:
    r"""Monte Carlo standard error of :math:`\log \hat Z = \log \frac1K \sum_k w_k`, per example.

    ``method="jackknife"`` (the default, what results report):

    .. math:: \mathrm{se}_J = \sqrt{\tfrac{K-1}{K} \textstyle\sum_i
              \big(\log \hat Z_{(i)} - \overline{\log \hat Z_{(\cdot)}}\big)^2}

    over the K leave-one-out estimates [2]_, biased upwards [1]_ (``docs/export.md``).
    ``method="delta"``: :math:`\sqrt{1/\mathrm{ESS} - 1/K}`. Neither sees an unsampled tail:
    check :func:`pareto_khat`.

    References
    ----------
    .. [1] B. Efron, C. Stein. The jackknife estimate of variance. Annals of Statistics, 1981.
    .. [2] B. Efron. The Jackknife, the Bootstrap and Other Resampling Plans. SIAM, 1982.
    """
    if method == "delta":
        ess = effective_sample_size(log_weights, dim)
        return torch.sqrt(torch.clamp(1.0 / ess - 1.0 / log_weights.shape[dim], min=0.0))
    if method != "jackknife":
        raise ValueError(f"method must be 'jackknife' or 'delta', got {method!r}")
    lw = log_weights.movedim(dim, 0)
    top = torch.sort(lw, dim=0, descending=True).values
    return _mcse_from_top(top, torch.logsumexp(lw, 0), {}, lw.shape[0])


def khat_threshold(num_samples: int) -> float:
    r"""The largest Pareto :math:`\hat k` at which K weights give a reliable estimate and MCSE:
    :math:`\min(1 - 1/\log_{10} K,\ 0.7)` (Vehtari et al. 2024, sec. 3.2.4)."""
    return -math.inf if num_samples <= 10 else min(1.0 - 1.0 / math.log10(num_samples), 0.7)


def pareto_tail_size(num_samples: int) -> int:
    """Number of largest weights PSIS fits (ArviZ's rule with ``reff=1``)."""
    return int(math.ceil(min(0.2 * num_samples, 3 * math.sqrt(num_samples))))


def pareto_khat(log_weights: Tensor, dim: int = 0) -> Tensor:
    r"""Pareto :math:`\hat k` of the importance weights per example, by ArviZ's ``psislw`` (Vehtari et al.
    2024); NaN with fewer than 25 samples, 5 finite weights, or a degenerate tail."""
    import arviz as az

    lw = log_weights.movedim(dim, -1).detach().cpu().double().numpy()
    flat = lw.reshape(-1, lw.shape[-1])
    out = np.full(flat.shape[0], np.nan)
    finite = np.isfinite(flat).sum(-1) >= 5
    if pareto_tail_size(flat.shape[-1]) >= 5 and finite.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ArviZ warns when k-hat is large: we report it
            _, khat = az.psislw(np.where(np.isfinite(flat[finite]), flat[finite], -1e300), reff=1.0)
        khat = np.asarray(khat, dtype=float)
        out[finite] = np.where(np.isfinite(khat), khat, np.nan)
    return torch.as_tensor(out.reshape(lw.shape[:-1]), dtype=log_weights.dtype)


class RunningLogWeights:
    r"""Streaming reduction of log-weights arriving in chunks of shape ``(k, N)``."""

    EXACT_TOP = 64  # the jackknife is exact up to this many weights, a 4-term series beyond

    def __init__(self, num_samples: int, keep: bool):
        self.keep, self.count = keep, 0
        self.tail_size = pareto_tail_size(num_samples) + 1
        self.top_size = max(self.tail_size, self.EXACT_TOP)
        self.lse: Tensor | None = None
        self.lse_pow: dict[int, Tensor] = {}
        self.tail: Tensor | None = None  # the largest log-weights, largest first
        self.kept: list[Tensor] = []

    def update(self, log_weights: Tensor) -> None:
        lse = torch.logsumexp(log_weights, 0)
        powers = {m: torch.logsumexp(m * log_weights, 0) for m in (2, 3, 4)}
        if self.lse is None or self.tail is None:
            self.lse, self.lse_pow, tail = lse, powers, log_weights
        else:
            self.lse = torch.logaddexp(self.lse, lse)
            self.lse_pow = {m: torch.logaddexp(self.lse_pow[m], v) for m, v in powers.items()}
            tail = torch.cat([self.tail, log_weights], dim=0)
        self.tail = torch.topk(tail, min(self.top_size, tail.shape[0]), dim=0).values
        self.count += log_weights.shape[0]
        if self.keep:
            self.kept.append(log_weights)

    def _sums(self) -> tuple[Tensor, Tensor, Tensor]:
        if self.lse is None or self.tail is None:
            raise ValueError("no log-weights yet: call update(log_weights) first")
        return self.lse, self.lse_pow[2], self.tail

    @property
    def log_mean(self) -> Tensor:
        return self._sums()[0] - math.log(self.count)

    @property
    def ess(self) -> Tensor:
        lse, lse2, _ = self._sums()
        return torch.exp(2 * lse - lse2)

    @property
    def mcse(self) -> Tensor:
        """The jackknife MCSE of :attr:`log_mean` (see :func:`mcse_log_mean_exp`)."""
        lse, _, tail = self._sums()
        return _mcse_from_top(tail, lse, self.lse_pow, self.count)

    @property
    def log_weights(self) -> Tensor | None:
        return torch.cat(self.kept, dim=0) if self.keep else None

    def khat(self) -> Tensor:
        lse, _, tail = self._sums()
        if self.keep:
            return pareto_khat(torch.cat(self.kept, dim=0))
        if tail.shape[0] < self.tail_size:
            return torch.full_like(lse, float("nan"))
        # the tail_size largest, padded with the smallest of them up to count: ArviZ fits the same
        # tail as on the full set; 64 examples x count at once bound the memory
        tail = tail[: self.tail_size]
        pad = tail.min(dim=0).values.expand(self.count - self.tail_size, -1)
        return torch.cat([pareto_khat(torch.cat([tail[:, i : i + 64], pad[:, i : i + 64]]))
                          for i in range(0, tail.shape[1], 64)])


#: Blocks (ArviZ chains) of the export by default, as ``chains=4`` elsewhere in ArviZ.
DEFAULT_BLOCKS = 4
#: Fewest chains per block: ArviZ's diagnostics need at least 4 draws per chain.
MIN_DRAWS = 4


def check_blocks(requested: Any) -> None:
    """Refuse a ``num_blocks`` that is not a positive int, naming the fix."""
    if isinstance(requested, bool) or not isinstance(requested, int | np.integer):
        raise TypeError(f"num_blocks must be an int (the number of ArviZ chains), got "
                        f"{type(requested).__name__}; pass e.g. num_blocks=4")
    if requested < 1:
        raise ValueError(f"num_blocks must be at least 1 (the number of ArviZ chains), got "
                         f"{requested}; pass e.g. num_blocks=4")


def num_blocks(num_chains: int, requested: int = DEFAULT_BLOCKS, islands: int | None = None) -> int:
    """The blocks ``num_chains`` are split into: whole ``islands`` (SMC), to stay independent."""
    check_blocks(requested)
    return max(c for c in range(1, max(1, min(requested, num_chains // MIN_DRAWS)) + 1)
               if num_chains % c == 0 and (islands is None or islands % c == 0))


