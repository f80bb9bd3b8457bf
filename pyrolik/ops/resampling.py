"""Resampling: systematic (Kitagawa 1996), the one implementation behind the annealing loop's SMC
step, the export's equally weighted draws and :func:`pyrolik.infer.posterior_samples`; and the
sampling-importance-resampling of IWAE's draws as they stream in chunks, in bounded memory."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pyrolik.ops.stats import DEFAULT_BLOCKS, num_blocks

__all__ = ["systematic", "StreamingResampler", "MAX_DRAWS_PER_BLOCK", "RESAMPLING_STREAM"]

#: Resampled draws kept per block and example at most (``D = min(M, this)``).
MAX_DRAWS_PER_BLOCK = 256
#: Mixed with a seed: the resampling's own random stream (IWAE's draws, the export's).
RESAMPLING_STREAM = 20240


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


class StreamingResampler:
    """``D`` resampled draws per block of ``M`` samples, from chunks ``(k, N)`` in sample order."""

    def __init__(self, num_samples: int, num_examples: int, generator: torch.Generator,
                 blocks: int = DEFAULT_BLOCKS):
        self.c = num_blocks(num_samples, blocks)
        self.m = num_samples // self.c
        self.d = min(self.m, MAX_DRAWS_PER_BLOCK)
        self.n = num_examples
        self.generator = generator
        self.total: Tensor | None = None  # (C, N) log of each block's weight so far
        self.index: Tensor | None = None  # (C, D, N) sample index held by each slot
        self.log_weight: Tensor | None = None  # (C, D, N)
        self.values: dict[str, Tensor] = {}  # site -> (C, D, N, *site)

    def update(self, log_weights: Tensor, values: dict[str, Tensor], start: int) -> None:
        """Take samples ``start .. start + k`` (``log_weights`` ``(k, N)``, ``values`` by site
        ``(k, N, *site)``)."""
        k, n = log_weights.shape
        lw = log_weights.detach().double()
        if self.total is None:
            self.total = lw.new_full((self.c, n), -math.inf)
            self.index = torch.zeros(self.c, self.d, n, dtype=torch.long, device=lw.device)
            self.log_weight = lw.new_full((self.c, self.d, n), -math.inf)
            self.values = {s: v.new_zeros((self.c, self.d) + v.shape[1:])
                           for s, v in values.items()}
        total_all, index, log_weight = self.total, self.index, self.log_weight
        assert total_all is not None and index is not None and log_weight is not None
        cols = torch.arange(n, device=lw.device)
        for c in range(start // self.m, (start + k - 1) // self.m + 1):  # the few blocks touched
            lo, hi = max(start, c * self.m) - start, min(start + k, (c + 1) * self.m) - start
            part = lw[lo:hi]
            mass = torch.logsumexp(part, 0)
            total = torch.logaddexp(total_all[c], mass)
            share = torch.where(torch.isfinite(total), torch.exp(mass - total),
                                torch.ones_like(total))
            u = torch.rand((self.d, n), generator=self.generator, dtype=lw.dtype,
                           device=lw.device)
            replace = u < share  # (D, N)
            safe = torch.where(torch.isfinite(part).any(0), part, torch.zeros_like(part))
            probs = torch.softmax(torch.nan_to_num(safe, nan=-math.inf), 0).T  # (N, hi - lo)
            pick = torch.multinomial(probs, self.d, replacement=True,
                                     generator=self.generator).T  # (D, N)
            index[c] = torch.where(replace, pick + lo + start, index[c])
            log_weight[c] = torch.where(replace, part[pick, cols], log_weight[c])
            for s, v in values.items():
                new = v[lo:hi][pick, cols]
                mask = replace.reshape(replace.shape + (1,) * (new.dim() - 2))
                self.values[s][c] = torch.where(mask, new, self.values[s][c])
            total_all[c] = total

    def result(self) -> dict[str, Tensor]:
        """``{"draw_index", "draw_log_weight", "draw:<site>"}``, each ``(C, D, N, ...)``, slots
        sorted by sample index within each block."""
        assert self.index is not None and self.log_weight is not None, "no samples were given"
        order = torch.argsort(self.index, dim=1, stable=True)
        out = {"draw_index": torch.gather(self.index, 1, order),
               "draw_log_weight": torch.gather(self.log_weight, 1, order)}
        for s, v in self.values.items():
            idx = order.reshape(order.shape + (1,) * (v.dim() - 3)).expand_as(v)
            out[f"draw:{s}"] = torch.gather(v, 1, idx)
        return out
