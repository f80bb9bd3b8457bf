"""Sampling-importance-resampling of draws streaming in chunks, in bounded memory."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pyrolik.ops.stats import DEFAULT_BLOCKS, num_blocks

__all__ = ["StreamingResampler", "MAX_DRAWS_PER_BLOCK", "RESAMPLING_STREAM"]

#: Resampled draws kept per block and example at most (``D = min(M, this)``).
MAX_DRAWS_PER_BLOCK = 256
#: Mixed with the seed and the batch: the resampling's own random stream.
RESAMPLING_STREAM = 20240


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
