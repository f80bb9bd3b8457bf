r"""ESS-triggered resampling among an example's chains: AIS becomes a sequential Monte Carlo sampler.

After the weight update of a step, the chains of an example whose effective sample size is below
``threshold`` times their number are resampled (systematic resampling, Kitagawa 1996) and each takes
the mean weight :math:`\log\frac1K\sum_k w_k`; the transition then moves them. The estimate
:math:`\frac1K\sum_k w_k` stays unbiased for :math:`Z_1/Z_0` whatever the direction (Del Moral 2004):
forward for :math:`p(x)`, reverse (started from exact posterior draws) for :math:`1/p(x)`.
Each chain remembers the chain it descends from at the start (its *ancestor*): the ESS, MCSE and
k-hat of a resampled run are those of the ancestors' summed weights (Chan & Lai 2013), which equal
the usual ones when nothing was resampled. Proofs and measurements: ``docs/kernel.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from pyrolik.ops.stats import effective_sample_size

__all__ = ["Resampling", "Resampler", "ancestor_log_weights"]


@dataclass(frozen=True)
class Resampling:
    """Resample an example's chains when their ESS falls below ``threshold`` times their number."""

    threshold: float = 0.5

    def __post_init__(self):
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t <= 1:
            raise ValueError(f"resample must be a fraction in (0, 1] of the chains (resample when "
                             f"the ESS falls below it, e.g. 0.5), or None for plain AIS; got {t!r}")

    def bind(self, groups: tuple[int, ...], num_examples: int) -> Resampler:
        """The resampler of a run whose rows are ``groups`` blocks of ``K_g * num_examples`` rows
        (chain-major), one block per leg: chains are resampled within their block and example."""
        return Resampler(float(self.threshold), tuple(groups), num_examples)


@dataclass(frozen=True)
class Resampler:
    """:class:`Resampling` bound to a run's layout of rows."""

    threshold: float
    groups: tuple[int, ...]
    num_examples: int

    def __call__(self, log_weight: Tensor, generator: torch.Generator | None
                 ) -> tuple[Tensor, Tensor, Tensor]:
        """``(source rows, log weights, resampled)``, each ``(rows,)``: row ``i`` takes the state
        of row ``source[i]`` (itself where its example was not resampled)."""
        n, sources, weights, flags, lo = self.num_examples, [], [], [], 0
        for k in self.groups:
            lw = log_weight[lo : lo + k * n].reshape(k, n)
            lse = torch.logsumexp(lw, 0)
            do = effective_sample_size(lw) < self.threshold * k  # (n,); NaN (all failed): False
            cdf = torch.exp(lw - lse).nan_to_num(0.0).cumsum(0).T.contiguous()  # (n, k)
            u = torch.rand(n, 1, generator=generator, dtype=lw.dtype, device=lw.device)
            points = (u + torch.arange(k, dtype=lw.dtype, device=lw.device)) / k  # (n, k)
            pick = torch.searchsorted(cdf, points, right=True).clamp_max(k - 1).T  # (k, n)
            chain = torch.arange(k, device=lw.device).unsqueeze(1)
            cols = torch.arange(n, device=lw.device)
            sources.append(lo + torch.where(do, pick, chain) * n + cols)
            weights.append(torch.where(do, lse - math.log(k), lw))
            flags.append(do.expand(k, n))
            lo += k * n
        return (torch.cat([s.reshape(-1) for s in sources]),
                torch.cat([w.reshape(-1) for w in weights]),
                torch.cat([f.reshape(-1) for f in flags]))


def ancestor_log_weights(log_weights: Tensor, ancestor: Tensor | None) -> Tensor:
    r"""``(K, N)``: :math:`\log \sum_{k:\,a_k = j} w_k` for each starting chain ``j`` (``-inf`` for
    one that left no descendant); ``log_weights`` themselves when ``ancestor`` is ``None``."""
    if ancestor is None:
        return log_weights
    top = log_weights.max(0, keepdim=True).values
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    summed = torch.zeros_like(log_weights).scatter_add_(0, ancestor, torch.exp(log_weights - top))
    return torch.log(summed) + top
