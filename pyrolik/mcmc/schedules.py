r"""Annealing schedules: 1-D tensors of inverse temperatures from exactly 0 to exactly 1.

Every schedule has ``num_steps + 1`` entries :math:`0 = \beta_0 < \beta_1 < \dots < \beta_T = 1`;
AIS makes one weight update and one transition per step.

- :func:`linear`: evenly spaced.
- :func:`geometric`: :math:`\beta_t` evenly spaced in :math:`\log\beta` from ``beta_min`` to 1 (after 0),
  spending steps where the posterior narrows fastest for Gaussian-like likelihoods.
- :func:`sigmoid`: the schedule of Grosse, Ghahramani & Adams (2015), section 6,
  :math:`\tilde\beta_t = \sigma(\delta (2t/T - 1))`, rescaled so that it runs from 0 to 1.
- :func:`adaptive`: steps at constant thermodynamic speed, from a pilot's estimates of the variance
  of :math:`r = \log f_1 - \log f_0` along :math:`\beta` (``schedule="adaptive"`` builds it from the
  pilot run of :class:`pyrolik.mcmc.adaptation.Pilot`).
"""

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
    """Evenly spaced betas, ``num_steps + 1`` of them."""
    return torch.linspace(0.0, 1.0, _check(num_steps) + 1, dtype=torch.float64)


def geometric(num_steps: int, beta_min: float = 1e-4) -> Tensor:
    r"""0, then ``num_steps`` betas evenly spaced in log from ``beta_min`` to 1."""
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
    """
    _check(num_steps)
    if not delta > 0:
        raise ValueError(f"delta must be positive, got {delta}")
    t = torch.linspace(-delta, delta, num_steps + 1, dtype=torch.float64)
    s = torch.sigmoid(t)
    out = (s - s[0]) / (s[-1] - s[0])
    out[0], out[-1] = 0.0, 1.0
    if not (out[1:] > out[:-1]).all():
        raise ValueError(f"sigmoid(num_steps={num_steps}, delta={delta}) has ends so flat that "
                         "consecutive betas coincide in float64; use a smaller delta (e.g. 4)")
    return out


def adaptive(num_steps: int, betas: Tensor, log_ratio_var: Tensor, floor: float = 0.01) -> Tensor:
    r"""Betas at constant thermodynamic speed: step density proportional to the standard deviation
    of :math:`r = \log f_1 - \log f_0` under :math:`f_\beta`.

    With perfect transitions, AIS along :math:`\beta_0 < \dots < \beta_T` has
    :math:`\log Z - \mathbb E[\log w] = \sum_t \mathrm{KL}(f_{\beta_t} \| f_{\beta_{t+1}})
    \approx \tfrac12 \sum_t \Delta_t^2\, \mathrm{Var}_{\beta_t}[r]`; under
    :math:`\sum_t \Delta_t = 1` that is smallest when :math:`\Delta_t \propto 1/\mathrm{sd}_{\beta_t}[r]`,
    i.e. for betas evenly spaced in the thermodynamic length
    :math:`\Lambda(\beta) = \int_0^\beta \mathrm{sd}_b[r]\, db`, where the bias is about
    :math:`\Lambda(1)^2 / 2T` (Gelman & Meng 1998; Grosse, Maddison & Salakhutdinov 2013; Syed et al.
    2024). The sigmoid schedule spends half its steps above :math:`\beta = 0.6`, where a decoder
    model's :math:`r` barely varies.

    Parameters
    ----------
    num_steps : int
        T; the schedule has T + 1 betas.
    betas : torch.Tensor, shape (P,)
        The grid the variances were estimated on, increasing from 0 to 1.
    log_ratio_var : torch.Tensor, shape (P,) or (P, N)
        :math:`\mathrm{Var}_\beta[r]` at the grid (per example: one schedule per example).
        Between grid points the standard deviation is taken constant, at the mean of its two ends.
    floor : float
        Fraction of the steps spread evenly over [0, 1] whatever the variances say (a guard against
        an estimate of zero; it keeps the betas strictly increasing).

    Returns
    -------
    torch.Tensor
        ``(T + 1,)`` (or ``(T + 1, N)``) float64 betas from exactly 0 to exactly 1.
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
    seg = 0.5 * (cols[1:] + cols[:-1]) * (grid[1:] - grid[:-1]).unsqueeze(-1)  # (P-1, M)
    length = seg.sum(0, keepdim=True)
    width = (grid[1:] - grid[:-1]).unsqueeze(-1)
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
    """Check a user schedule: 1-D, finite, strictly increasing from exactly 0 to exactly 1."""
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
    """A schedule by name (with ``num_steps``) or a validated tensor (whose length must agree)."""
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
