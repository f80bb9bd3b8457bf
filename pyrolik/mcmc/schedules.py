r"""Annealing schedules: 1-D tensors of inverse temperatures from exactly 0 to exactly 1.

Every schedule has ``num_steps + 1`` entries :math:`0 = \beta_0 < \beta_1 < \dots < \beta_T = 1`;
AIS makes one weight update and one transition per step.

- :func:`linear`: evenly spaced.
- :func:`geometric`: :math:`\beta_t` evenly spaced in :math:`\log\beta` from ``beta_min`` to 1 (after 0),
  spending steps where the posterior narrows fastest for Gaussian-like likelihoods.
- :func:`sigmoid`: the schedule of Grosse, Ghahramani & Adams (2015), section 6,
  :math:`\tilde\beta_t = \sigma(\delta (2t/T - 1))`, rescaled so that it runs from 0 to 1.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["linear", "geometric", "sigmoid", "resolve", "validate"]


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


_BY_NAME = {"linear": linear, "geometric": geometric, "sigmoid": sigmoid}


def validate(schedule: Tensor) -> Tensor:
    """Check a user schedule: 1-D, finite, strictly increasing from exactly 0 to exactly 1."""
    if not isinstance(schedule, Tensor):
        raise TypeError(f"schedule must be a name {sorted(_BY_NAME)} or a 1-D tensor, "
                        f"got {type(schedule).__name__}")
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
            raise ValueError(f"unknown schedule {schedule!r}; choose one of {sorted(_BY_NAME)} or "
                             "pass a tensor of betas")
        if num_steps is None:
            raise ValueError("num_steps is required with a named schedule")
        return _BY_NAME[schedule](num_steps)
    s = validate(schedule)
    if num_steps is not None and len(s) != num_steps + 1:
        raise ValueError(f"the schedule has {len(s)} betas but num_steps={num_steps} needs "
                         f"{num_steps + 1}; pass num_steps=None or a matching schedule")
    return s
