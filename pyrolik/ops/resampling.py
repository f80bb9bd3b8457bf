"""Systematic resampling (Kitagawa 1996): the one implementation behind the annealing loop's SMC
step, the export's equally weighted draws and :func:`pyrolik.infer.posterior_samples`."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["systematic"]


def systematic(log_weights: Tensor, num: int | None = None, *,
               generator: torch.Generator | None = None) -> Tensor:
    r"""``(num, *batch)`` sorted indices into dim 0 of ``log_weights`` ``(K, *batch)``, drawn with
    probabilities :math:`W_k \propto e^{a_k}` by one uniform per column.

    Draw ``j`` takes the chain whose cumulative weight first exceeds :math:`(u + j) / \mathrm{num}`,
    so each chain is drawn :math:`\lfloor \mathrm{num}\, W_k \rfloor` or one more times and a chain of
    weight zero never is. ``num`` defaults to ``K``. A column without a finite positive weight keeps
    its chains in order (``j mod K``). No host synchronisation.
    """
    k = log_weights.shape[0]
    num = k if num is None else num
    lw = log_weights.reshape(k, -1).T.double()  # (columns, K)
    lse = torch.logsumexp(lw, 1, keepdim=True)
    ok = torch.isfinite(lse)
    cdf = torch.exp(lw - torch.where(ok, lse, torch.zeros_like(lse))).nan_to_num(0.0).cumsum(1)
    cdf = cdf / torch.where(ok, cdf[:, -1:], torch.ones_like(lse))  # the last is exactly 1
    u = torch.rand(lw.shape[0], 1, generator=generator, dtype=lw.dtype, device=lw.device)
    points = (u + torch.arange(num, dtype=lw.dtype, device=lw.device)) / num  # each < 1
    pick = torch.searchsorted(cdf, points, right=True).clamp_max(k - 1)
    pick = torch.where(ok, pick, torch.arange(num, device=lw.device) % k)  # no weight: in order
    return pick.T.reshape(num, *log_weights.shape[1:])
