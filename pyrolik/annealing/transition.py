"""The HMC transition for tempered densities, batched over rows, without its tuner."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from pyrolik.model.target import ValueAndGrad

__all__ = ["HMCTransition", "HMCState", "HMCInfo", "leapfrog", "ValueAndGradFn"]

ValueAndGradFn = Callable[[Tensor], ValueAndGrad]


class HMCState(NamedTuple):
    """What the next transition needs: the position and its split density cache, and the whitened
    momentum :math:`M^{-1/2} p` when the transition keeps it (``None``: drawn afresh)."""

    z: Tensor  # (rows, d)
    log_init: Tensor  # (rows,)
    log_ratio: Tensor  # (rows,)
    grad_init: Tensor  # (rows, d)
    grad_ratio: Tensor  # (rows, d)
    momentum: Tensor | None = None  # (rows, d), with momentum_persistence > 0 after a transition

    def log_density(self, beta: Tensor | float) -> Tensor:
        return self.log_init + beta * self.log_ratio

    def grad(self, beta: Tensor | float) -> Tensor:
        r""":math:`\nabla \log f_\beta = \nabla \log f_0 + \beta \nabla r`, one fused operation."""
        if not isinstance(beta, Tensor):
            return torch.add(self.grad_init, self.grad_ratio, alpha=beta)
        return torch.addcmul(self.grad_init, beta.unsqueeze(-1) if beta.dim() else beta,
                             self.grad_ratio)


class HMCInfo(NamedTuple):
    """Diagnostics of one transition, per row; never fed back into the chain."""

    acceptance_rate: Tensor  # (rows,) min(1, exp(-energy error)), 0 when divergent
    is_accepted: Tensor  # (rows,) bool
    is_divergent: Tensor  # (rows,) bool
    energy_error: Tensor  # (rows,)


def _state(z: Tensor, vg: ValueAndGrad) -> HMCState:
    return HMCState(z, vg.log_init, vg.log_ratio, vg.grad_init, vg.grad_ratio)


def leapfrog(state: HMCState, p: Tensor, fn: ValueAndGradFn, beta: Tensor, step_size: Tensor,
             inv_mass: Tensor | float, num_leapfrog: int) -> tuple[HMCState, Tensor]:
    """``num_leapfrog`` leapfrog steps from ``(state.z, p)``; one evaluation of ``fn`` per step.

    Parameters
    ----------
    state, p : HMCState, torch.Tensor of shape ``(rows, d)``
        The start position with its density cache, and the start momentum.
    fn : callable
        ``fn(z)``: the split log density and its gradients at ``z``.
    beta, step_size : torch.Tensor, shape ``(rows,)``
        Each row's inverse temperature and step size.
    inv_mass : torch.Tensor or float
        Inverse mass, ``(rows, d)`` or a scalar.
    num_leapfrog : int
        Leapfrog steps.
    """
    eps = step_size.unsqueeze(-1)
    half_eps = 0.5 * eps
    drift = eps * inv_mass  # (rows, 1) or (rows, d)
    p = torch.addcmul(p, half_eps, state.grad(beta))
    z = state.z
    for i in range(num_leapfrog):
        z = torch.addcmul(z, drift, p)
        state = _state(z, fn(z))
        p = torch.addcmul(p, half_eps if i == num_leapfrog - 1 else eps, state.grad(beta))
    return state, p


def _kinetic(p: Tensor, inv_mass: Tensor | None) -> Tensor:
    r""":math:`p^\top M^{-1} p` per row."""
    return (p * p).sum(-1) if inv_mass is None else (inv_mass * p * p).sum(-1)


@dataclass(frozen=True)
class HMCTransition:
    r"""One HMC trajectory of ``num_leapfrog`` steps that leaves :math:`f_\beta` invariant."""

    num_leapfrog: int = 10
    max_energy_error: float = 1000.0
    step_jitter: float = 0.5
    momentum_persistence: float = 0.0

    def init(self, z: Tensor, fn: ValueAndGradFn) -> HMCState:
        """The state at ``z``: one evaluation of ``fn``."""
        return _state(z.detach(), fn(z))

    def step(self, state: HMCState, fn: ValueAndGradFn, beta: Tensor, step_size: Tensor,
             generator: torch.Generator | None, inv_mass: Tensor | None = None
             ) -> tuple[HMCState, HMCInfo]:
        r"""One HMC transition leaving :math:`f_\beta` invariant, for every row at once.

        ``beta`` and ``step_size``: ``(rows,)``; ``inv_mass``: ``(rows, d)`` or ``None``.
        """
        z = state.z
        if self.step_jitter:
            jitter = torch.rand(step_size.shape, generator=generator, dtype=z.dtype, device=z.device)
            step_size = step_size * torch.add(1.0 - self.step_jitter, jitter,
                                              alpha=2 * self.step_jitter)
        noise = torch.randn(z.shape, generator=generator, dtype=z.dtype, device=z.device)
        alpha = self.momentum_persistence
        if alpha and state.momentum is not None:  # noise becomes the partially refreshed momentum
            noise = torch.add(alpha * state.momentum, noise, alpha=math.sqrt(1.0 - alpha * alpha))
        inv_m: Tensor | float = 1.0 if inv_mass is None else inv_mass
        p0 = noise if inv_mass is None else noise * inv_mass.rsqrt()
        h0 = -state.log_density(beta) + 0.5 * _kinetic(p0, inv_mass)
        proposal, p1 = leapfrog(state, p0, fn, beta, step_size, inv_m, self.num_leapfrog)
        h1 = -proposal.log_density(beta) + 0.5 * _kinetic(p1, inv_mass)
        energy_error = h1 - h0
        # a non-finite gradient makes p1, hence h1, non-finite: the energy check covers it
        finite = torch.isfinite(energy_error) & torch.isfinite(proposal.z).all(-1)
        divergent = ~finite | (energy_error > self.max_energy_error)
        log_accept = torch.where(divergent, torch.full_like(energy_error, -torch.inf),
                                 -energy_error).clamp_max(0.0)
        coin = torch.rand(log_accept.shape, generator=generator, dtype=z.dtype, device=z.device)
        accepted = torch.log(coin) < log_accept
        keep = accepted.unsqueeze(-1)
        momentum = None
        if alpha:  # accepted: the end of the trajectory (whitened); rejected: flipped
            whitened = p1 if inv_mass is None else p1 * inv_mass.sqrt()
            momentum = torch.where(keep, whitened, -noise)
        new = HMCState(torch.where(keep, proposal.z, z),
                       torch.where(accepted, proposal.log_init, state.log_init),
                       torch.where(accepted, proposal.log_ratio, state.log_ratio),
                       torch.where(keep, proposal.grad_init, state.grad_init),
                       torch.where(keep, proposal.grad_ratio, state.grad_ratio), momentum)
        return new, HMCInfo(log_accept.exp(), accepted, divergent, energy_error)
