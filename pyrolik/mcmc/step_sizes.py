"""The parameters of an HMC transition, and a frozen table of them over temperatures."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["HMCParams", "StepSizes", "rows_of"]


def rows_of(per_chain: Tensor, num_chains: int, num_examples: int) -> Tensor:
    """Per-chain values ``(C,)`` (C = 1 or K) -> per-row ``(K * N,)``, rows chain-major; values
    already per row (C = K * N) are returned as they are."""
    if per_chain.shape[0] == num_chains * num_examples:
        return per_chain
    return per_chain.expand(num_chains).repeat_interleave(num_examples)


class HMCParams(NamedTuple):
    """What one HMC transition takes besides the state: per-row step sizes and inverse masses."""

    step_size: Tensor  # (rows,)
    inv_mass: Tensor | None = None  # (rows, d) diagonal inverse mass matrix, or None for identity


class StepSizes(NamedTuple):
    r"""Frozen per-example step sizes (and inverse masses) on a grid of betas, with the pilot's
    across-chain variance of :math:`r = \log f_1 - \log f_0` (what ``schedule="adaptive"`` reads;
    NaN where the pilot ran one chain)."""

    betas: Tensor  # (P,) increasing from 0 to 1
    log_step_size: Tensor  # (P, N)
    inv_mass: Tensor | None = None  # (P, N, d)
    log_ratio_var: Tensor | None = None  # (P, N)

    def _weights(self, beta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b = beta.to(self.betas).contiguous()
        hi = torch.searchsorted(self.betas, b).clamp(1, len(self.betas) - 1)
        lo = hi - 1
        w = ((b - self.betas[lo]) / (self.betas[hi] - self.betas[lo])).clamp(0.0, 1.0)
        return lo, hi, w

    def at(self, beta: Tensor) -> tuple[Tensor, Tensor | None]:
        """Step sizes ``(C, N)`` and inverse masses ``(C, N, d)`` at the betas ``(C,)`` of C chains,
        or at betas ``(C, N)`` of each chain and example (examples that stop at their own beta).

        Log step sizes and log inverse masses are interpolated linearly in beta.
        """
        lo, hi, w = self._weights(beta)
        if beta.dim() == 1:  # one beta per chain: every example's row of the table at it
            w1 = w.unsqueeze(-1)
            eps = torch.exp((1 - w1) * self.log_step_size[lo] + w1 * self.log_step_size[hi])
            if self.inv_mass is None:
                return eps, None
            w2 = w1.unsqueeze(-1)
            log_m = (1 - w2) * self.inv_mass[lo].log() + w2 * self.inv_mass[hi].log()
            return eps, log_m.exp()
        eps = torch.exp((1 - w) * self.log_step_size.gather(0, lo)
                        + w * self.log_step_size.gather(0, hi))
        if self.inv_mass is None:
            return eps, None
        d = self.inv_mass.shape[-1]
        lo3, hi3 = (i.unsqueeze(-1).expand(-1, -1, d) for i in (lo, hi))
        w2 = w.unsqueeze(-1)
        log_m = ((1 - w2) * self.inv_mass.gather(0, lo3).log()
                 + w2 * self.inv_mass.gather(0, hi3).log())
        return eps, log_m.exp()

    def cut(self, beta: float) -> StepSizes:
        """The table on ``[0, beta]``: its temperatures below ``beta``, then a last row at ``beta``
        interpolated as :meth:`at` reads it (the variances linearly)."""
        at = torch.tensor([beta], dtype=self.betas.dtype)
        below = self.betas < at
        lo, hi, w = self._weights(at)
        eps, inv_mass = self.at(at)
        var = None
        if self.log_ratio_var is not None:
            w1 = w.unsqueeze(-1).to(self.log_ratio_var)
            var = torch.cat([self.log_ratio_var[below],
                             (1 - w1) * self.log_ratio_var[lo] + w1 * self.log_ratio_var[hi]])
        return StepSizes(torch.cat([self.betas[below], at]),
                         torch.cat([self.log_step_size[below], eps.log()]),
                         None if self.inv_mass is None or inv_mass is None
                         else torch.cat([self.inv_mass[below], inv_mass]), var)

    def rows(self, start: int, stop: int) -> StepSizes:
        """The table of examples ``[start, stop)``."""
        return StepSizes(self.betas, self.log_step_size[:, start:stop],
                         None if self.inv_mass is None else self.inv_mass[:, start:stop],
                         None if self.log_ratio_var is None else self.log_ratio_var[:, start:stop])

    @staticmethod
    def concat(tables: list[StepSizes]) -> StepSizes:
        """The tables of consecutive batches of examples as one table (same pilot grid)."""
        def cat(name: str) -> Tensor | None:
            parts = [getattr(t, name) for t in tables]
            return None if parts[0] is None else torch.cat(parts, dim=1)

        return StepSizes(tables[0].betas, torch.cat([t.log_step_size for t in tables], dim=1),
                         cat("inv_mass"), cat("log_ratio_var"))
