"""Annealing schedules: betas from exactly 0 to exactly 1 (``schedule=`` of the annealing
estimators)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["linear", "geometric", "sigmoid", "adaptive", "resolve", "validate", "PILOT_NAMES"]

# names resolved after the pilot run (the driver builds them from the pilot's table)
PILOT_NAMES = ("adaptive", "auto", "adaptive_per_example")


def _check(num_steps: int) -> int:
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps must be a positive integer, got {num_steps!r}")
    return num_steps


def linear(num_steps: int) -> Tensor:
    """Evenly spaced betas, ``num_steps + 1`` of them.

    Parameters
    ----------
    num_steps : int
        Annealing steps T.
    """
    return torch.linspace(0.0, 1.0, _check(num_steps) + 1, dtype=torch.float64)


def geometric(num_steps: int, beta_min: float = 1e-4) -> Tensor:
    r"""0, then ``num_steps`` betas evenly spaced in log from ``beta_min`` to 1.

    Parameters
    ----------
    num_steps : int
        Annealing steps T.
    beta_min : float
        The first positive beta, in (0, 1).
    """
    _check(num_steps)
    if not 0.0 < beta_min < 1.0:
        raise ValueError(f"beta_min must be in (0, 1), got {beta_min}")
    tail = torch.logspace(math.log10(beta_min), 0.0, num_steps, dtype=torch.float64)
    out = torch.cat([tail.new_zeros(1), tail])
    out[-1] = 1.0
    return out


def sigmoid(num_steps: int, delta: float = 4.0) -> Tensor:
    r"""Grosse et al.'s sigmoid schedule: :math:`\sigma(\delta(2t/T - 1))`, rescaled to [0, 1].

    Larger ``delta`` puts more steps near both ends.

    Parameters
    ----------
    num_steps : int
        Annealing steps T.
    delta : float
        The sigmoid's half-width (positive).
    """
    _check(num_steps)
    if not delta > 0:
        raise ValueError(f"delta must be positive, got {delta}")
    s = torch.sigmoid(torch.linspace(-delta, delta, num_steps + 1, dtype=torch.float64))
    out = (s - s[0]) / (s[-1] - s[0])
    out[0], out[-1] = 0.0, 1.0
    if not (out[1:] > out[:-1]).all():
        raise ValueError(f"sigmoid(num_steps={num_steps}, delta={delta}) has ends so flat that "
                         "consecutive betas coincide in float64; use a smaller delta (e.g. 4)")
    return out


def adaptive(num_steps: int, betas: Tensor, log_ratio_var: Tensor, floor: float = 0.01) -> Tensor:
    r"""``num_steps + 1`` betas from 0 to 1 at constant thermodynamic speed (``docs/kernel.md``).

    The step density is proportional to the standard deviation of :math:`r = \log f_1 - \log f_0`.
    Float64, ``(T + 1,)`` or ``(T + 1, N)``.

    Parameters
    ----------
    num_steps : int
        Annealing steps T.
    betas : torch.Tensor, shape ``(P,)``
        The grid the variances were measured on, a valid schedule.
    log_ratio_var : torch.Tensor, shape ``(P,)`` or ``(P, N)``
        :math:`\mathrm{Var}_\beta[r]` on the grid ``betas`` (``(P, N)``: one schedule per example).
    floor : float
        The fraction of steps spread evenly, in (0, 1].
    """
    _check(num_steps)
    if not 0 < floor <= 1:
        raise ValueError(f"floor must be in (0, 1], got {floor}")
    grid = validate(betas)
    var = log_ratio_var.detach().to(torch.float64).cpu()
    if var.shape[0] != len(grid) or var.dim() not in (1, 2):
        raise ValueError(f"log_ratio_var must have shape (P,) or (P, N) with P = {len(grid)} "
                         f"(the grid), got {tuple(var.shape)}")
    sd = torch.nan_to_num(var, nan=0.0, posinf=0.0).clamp_min(0.0).sqrt()
    cols = sd.reshape(len(grid), -1)
    width = (grid[1:] - grid[:-1]).unsqueeze(-1)
    seg = 0.5 * (cols[1:] + cols[:-1]) * width  # (P-1, M)
    length = seg.sum(0, keepdim=True)
    # density: (1 - floor) * sd / Lambda + floor (uniform); where Lambda = 0 only the floor counts
    # (float64 throughout, whatever the default dtype: results must not depend on it)
    spread = torch.where(length > 0, torch.full_like(length, floor), torch.ones_like(length))
    mass = torch.where(length > 0, (1 - floor) * seg / length.clamp_min(1e-300),
                       torch.zeros_like(seg)) + spread * width
    cum = torch.cat([torch.zeros_like(mass[:1]), mass.cumsum(0)])
    cum = cum / cum[-1:]
    c = cum.T.contiguous()  # (M, P): one cumulative per column, inverted piecewise linearly
    u = torch.linspace(0.0, 1.0, num_steps + 1, dtype=torch.float64).expand(c.shape[0], -1)
    hi = torch.searchsorted(c, u.contiguous(), right=True).clamp(1, len(grid) - 1)
    c_lo, c_hi = c.gather(1, hi - 1), c.gather(1, hi)
    w = ((u - c_lo) / (c_hi - c_lo)).clamp(0.0, 1.0)
    out = (grid[hi - 1] + w * (grid[hi] - grid[hi - 1])).T.contiguous()  # (T + 1, M)
    out[0], out[-1] = 0.0, 1.0
    if not (out[1:] > out[:-1]).all():
        raise ValueError(f"adaptive(num_steps={num_steps}) gives coinciding betas in float64; "
                         "use fewer steps or a larger floor")
    return out[:, 0] if var.dim() == 1 else out


_BY_NAME = {"linear": linear, "geometric": geometric, "sigmoid": sigmoid}


def validate(schedule: Tensor) -> Tensor:
    """Check a user schedule: 1-D, finite, strictly increasing from exactly 0 to exactly 1.

    Parameters
    ----------
    schedule : torch.Tensor
        The betas; returned as float64 on the CPU.
    """
    if not isinstance(schedule, Tensor):
        raise TypeError(f"schedule must be a name {sorted(_BY_NAME) + list(PILOT_NAMES)} or a 1-D "
                        f"tensor, got {type(schedule).__name__}")
    s = schedule.detach().to(torch.float64).cpu()
    if s.dim() != 1 or len(s) < 2:
        raise ValueError(f"schedule must be a 1-D tensor of at least 2 betas, got shape "
                         f"{tuple(schedule.shape)}")
    if not torch.isfinite(s).all():
        raise ValueError("schedule contains NaN or inf")
    if s[0] != 0.0 or s[-1] != 1.0:
        raise ValueError(f"schedule must start at exactly 0 and end at exactly 1, got "
                         f"{float(s[0])} ... {float(s[-1])}")
    if not (s[1:] > s[:-1]).all():
        i = int((s[1:] <= s[:-1]).nonzero()[0])
        raise ValueError(f"schedule must be strictly increasing; betas {i} and {i + 1} are "
                         f"{float(s[i])} and {float(s[i + 1])}")
    return s


def resolve(schedule: str | Tensor, num_steps: int | None) -> Tensor:
    """A schedule by name (with ``num_steps``) or a validated tensor (whose length must agree).

    Parameters
    ----------
    schedule : {"linear", "geometric", "sigmoid"} or torch.Tensor
        A fixed schedule's name, or its betas.
    num_steps : int or None
        Annealing steps T; required with a name, optional with a tensor.
    """
    if isinstance(schedule, str):
        if schedule not in _BY_NAME:
            raise ValueError(f"unknown schedule {schedule!r}; choose one of "
                             f"{sorted(_BY_NAME) + list(PILOT_NAMES)} or pass a tensor of betas")
        if num_steps is None:
            raise ValueError("num_steps is required with a named schedule")
        return _BY_NAME[schedule](num_steps)
    s = validate(schedule)
    if num_steps is not None and len(s) != num_steps + 1:
        raise ValueError(f"the schedule has {len(s)} betas but num_steps={num_steps} needs "
                         f"{num_steps + 1}; pass num_steps=None or a matching schedule")
    return s
