r"""Reductions of importance log-weights: log-mean-exp, effective sample size, MCSE, Pareto k-hat.

All functions reduce over dim 0 (chains or samples) and keep the example dims, so every diagnostic
is per example (unlike whole-dataset weights, ``PEERS.md``).

For weights :math:`w_k = \exp(\log w_k)`, :math:`k = 1..K`:

.. math::
    \hat Z = \tfrac1K \sum_k w_k, \qquad
    \mathrm{ESS} = \frac{(\sum_k w_k)^2}{\sum_k w_k^2}, \qquad
    \mathrm{se}(\log \hat Z) \approx \frac{\mathrm{sd}(w)}{\sqrt K\, \bar w}
    = \sqrt{1/\mathrm{ESS} - 1/K}

(the last by the delta method). Pareto :math:`\hat k` comes from ArviZ's PSIS (Vehtari et al. 2024);
above 0.7 the estimate of :math:`\log Z` is unreliable.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "log_mean_exp",
    "effective_sample_size",
    "mcse_log_mean_exp",
    "pareto_khat",
    "pareto_tail_size",
    "pareto_khat_from_tail",
    "RunningLogWeights",
]


def log_mean_exp(log_weights: Tensor, dim: int = 0) -> Tensor:
    r""":math:`\log \frac1K \sum_k \exp(a_k)`, stable; ``-inf`` entries count as zero weights."""
    return torch.logsumexp(log_weights, dim=dim) - math.log(log_weights.shape[dim])


def effective_sample_size(log_weights: Tensor, dim: int = 0) -> Tensor:
    r"""Kish's effective sample size :math:`(\sum w)^2 / \sum w^2`, per example."""
    return torch.exp(2 * torch.logsumexp(log_weights, dim) - torch.logsumexp(2 * log_weights, dim))


def mcse_log_mean_exp(log_weights: Tensor, dim: int = 0) -> Tensor:
    r"""Delta-method standard error of :math:`\log \hat Z`: :math:`\sqrt{1/\mathrm{ESS} - 1/K}`."""
    k = log_weights.shape[dim]
    ess = effective_sample_size(log_weights, dim)
    return torch.sqrt(torch.clamp(1.0 / ess - 1.0 / k, min=0.0))


def pareto_tail_size(num_samples: int) -> int:
    """Number of largest weights PSIS fits (ArviZ's rule with ``reff=1``)."""
    return int(math.ceil(min(0.2 * num_samples, 3 * math.sqrt(num_samples))))


def pareto_khat(log_weights: Tensor, dim: int = 0) -> Tensor:
    r"""Pareto :math:`\hat k` of the importance weights per example, by ArviZ's ``psislw``.

    Returns NaN where k-hat cannot be estimated: fewer than 5 weights in the Pareto tail (fewer
    than 25 samples), fewer than 5 finite weights, or a degenerate tail (e.g. all weights equal).
    """
    import arviz as az

    lw = log_weights.movedim(dim, -1).detach().cpu().double().numpy()
    flat = lw.reshape(-1, lw.shape[-1])
    out = np.full(flat.shape[0], np.nan)
    if pareto_tail_size(flat.shape[-1]) >= 5:
        finite = np.isfinite(flat).sum(-1) >= 5
        if finite.any():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ArviZ warns when k-hat is large: we report it
                _, khat = az.psislw(np.where(np.isfinite(flat[finite]), flat[finite], -1e300),
                                    reff=1.0)
            khat = np.asarray(khat, dtype=float)
            out[finite] = np.where(np.isfinite(khat), khat, np.nan)
    return torch.as_tensor(out.reshape(lw.shape[:-1]), dtype=log_weights.dtype)


def pareto_khat_from_tail(tail: Tensor, num_samples: int) -> Tensor:
    """k-hat from the ``pareto_tail_size(num_samples) + 1`` largest log-weights per example.

    PSIS only looks at the largest ``M`` weights and the ``(M+1)``-th as threshold, so padding the
    tail with copies of the threshold up to ``num_samples`` gives ArviZ the same fit as the full set.
    ``tail`` has shape ``(M + 1, N)`` (any order along dim 0).
    """
    m = pareto_tail_size(num_samples)
    if tail.shape[0] != m + 1:
        raise ValueError(f"tail must hold {m + 1} values per example, got {tail.shape[0]}")
    threshold = tail.min(dim=0).values
    out = []
    for start in range(0, tail.shape[1], 64):  # bounded memory: 64 examples x num_samples at once
        sl = slice(start, start + 64)
        pad = threshold[sl].expand(num_samples - m - 1, -1)
        out.append(pareto_khat(torch.cat([tail[:, sl], pad], dim=0)))
    return torch.cat(out)


class RunningLogWeights:
    """Streaming reduction of log-weights arriving in chunks of shape ``(k, N)``.

    Keeps :math:`\\log\\sum w`, :math:`\\log\\sum w^2` and the top ``M + 1`` log-weights (for k-hat):
    memory ``O(N * sqrt(num_samples))`` whatever the number of chunks. Optionally keeps every weight.
    """

    def __init__(self, num_samples: int, keep: bool):
        self.num_samples = num_samples
        self.keep = keep
        self.tail_size = pareto_tail_size(num_samples) + 1
        self.count = 0
        self.lse: Tensor | None = None
        self.lse2: Tensor | None = None
        self.tail: Tensor | None = None
        self.kept: list[Tensor] = []

    def update(self, log_weights: Tensor) -> None:
        lse, lse2 = torch.logsumexp(log_weights, 0), torch.logsumexp(2 * log_weights, 0)
        if self.lse is None:
            self.lse, self.lse2, tail = lse, lse2, log_weights
        else:
            self.lse = torch.logaddexp(self.lse, lse)
            self.lse2 = torch.logaddexp(self.lse2, lse2)
            tail = torch.cat([self.tail, log_weights], dim=0)
        k = min(self.tail_size, tail.shape[0])
        self.tail = torch.topk(tail, k, dim=0).values
        self.count += log_weights.shape[0]
        if self.keep:
            self.kept.append(log_weights)

    @property
    def log_mean(self) -> Tensor:
        return self.lse - math.log(self.count)

    @property
    def ess(self) -> Tensor:
        return torch.exp(2 * self.lse - self.lse2)

    @property
    def mcse(self) -> Tensor:
        return torch.sqrt(torch.clamp(1.0 / self.ess - 1.0 / self.count, min=0.0))

    @property
    def log_weights(self) -> Tensor | None:
        return torch.cat(self.kept, dim=0) if self.keep else None

    def khat(self) -> Tensor:
        if self.keep:
            return pareto_khat(self.log_weights)
        if self.tail.shape[0] < self.tail_size:
            return torch.full_like(self.lse, float("nan"))
        return pareto_khat_from_tail(self.tail, self.count)
