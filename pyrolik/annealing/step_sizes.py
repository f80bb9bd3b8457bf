"""The parameters of an HMC transition, and a frozen table of them over temperatures."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["HMCParams", "StepSizes", "rows_of"]


def rows_of(per_chain: Tensor, num_chains: int, num_examples: int) -> Tensor:
    """Per-chain values ``(C,)`` (C = 1 or K) -> per-row ``(K * N,)``; per-row ones as they are."""
    if per_chain.shape[0] == num_chains * num_examples:
        return per_chain
    return per_chain.expand(num_chains).repeat_interleave(num_examples)


class HMCParams(NamedTuple):
    """What one HMC transition takes besides the state: per-row step sizes and inverse masses."""

    step_size: Tensor  # (rows,)
    inv_mass: Tensor | None = None  # (rows, d) diagonal inverse mass matrix, or None for identity


class StepSizes(NamedTuple):
    r"""Frozen per-example step sizes (and inverse masses) on a grid of betas, with the pilot's
    across-chain variance of :math:`r = \log f_1 - \log f_0` (NaN where the pilot ran one chain)."""

    betas: Tensor  # (P,) increasing from 0 to 1
    log_step_size: Tensor  # (P, N)
    inv_mass: Tensor | None = None  # (P, N, d)
    log_ratio_var: Tensor | None = None  # (P, N)

    def _lerp(self, values: Tensor, beta: Tensor) -> Tensor:
        """The grid's ``values`` ``(P, N, ...)`` interpolated at betas ``(C, N)`` or ``(C,)``."""
        if beta.dim() == 1:
            beta = beta.unsqueeze(-1).expand(-1, self.log_step_size.shape[1])
        b = beta.to(self.betas).contiguous()
        hi = torch.searchsorted(self.betas, b).clamp(1, len(self.betas) - 1)
        lo = hi - 1
        w = ((b - self.betas[lo]) / (self.betas[hi] - self.betas[lo])).clamp(0.0, 1.0)
        trailing = (1,) * (values.dim() - 2)

        def rows(i: Tensor) -> Tensor:
            return i.reshape(*i.shape, *trailing).expand(*i.shape, *values.shape[2:])

        w = w.reshape(*w.shape, *trailing)
        return (1 - w) * values.gather(0, rows(lo)) + w * values.gather(0, rows(hi))

    def at(self, beta: Tensor) -> tuple[Tensor, Tensor | None]:
        """Step sizes ``(C, N)`` and inverse masses ``(C, N, d)`` at betas ``(C,)`` or ``(C, N)``,
        interpolated linearly in beta on the log scale."""
        eps = self._lerp(self.log_step_size, beta).exp()
        return eps, None if self.inv_mass is None else self._lerp(self.inv_mass.log(), beta).exp()

    def cut(self, beta: float) -> StepSizes:
        """The table on ``[0, beta]``: its temperatures below ``beta``, then a last row at ``beta``
        interpolated as :meth:`at` reads it (the variances linearly)."""
        at = torch.tensor([beta], dtype=self.betas.dtype)
        below = self.betas < at
        eps, inv_mass = self.at(at)
        var = self.log_ratio_var
        if var is not None:
            var = torch.cat([var[below], self._lerp(var, at).to(var)])
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
