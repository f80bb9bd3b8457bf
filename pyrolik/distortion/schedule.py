r"""Schedules along the distortion path that pass exactly through a grid of inverse temperatures.

The annealing runs in the wrapped model's path parameter :math:`b \in [0, 1]`
(:mod:`pyrolik.model.distortion`): :math:`\beta = b\,\beta_{\max}`, and in Gaussian mode
:math:`\sigma = \sigma_{\min}/\sqrt b`. A grid of betas (or sigmas) becomes grid points :math:`b_j`,
merged into a base schedule so that the running log-weights can be read off exactly there.

The default base schedule is geometric in :math:`b` (log-spaced from ``b_min`` to 1, after 0): for a
posterior that narrows like a Gaussian, :math:`\mathrm{Var}_{q_\beta}[d] \approx d_z / (2\beta^2)`, so
equal steps in :math:`\log\beta` are equal steps of thermodynamic length, which is what makes the
AIS variance spread evenly (Grosse, Maddison & Salakhutdinov 2013); equal steps in :math:`\log\beta`
are equal steps in :math:`\log\sigma`. ``pyrolik.ais``'s default ``schedule="auto"`` (a schedule
built per batch from the pilot run's variances) is refused here: the grid betas must sit at fixed
steps of one schedule shared by every batch, and the geometric base already spaces the steps by
thermodynamic length on this path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from pyrolik.mcmc import schedules

__all__ = ["grid_from_sigmas", "grid_from_betas", "merge_grid", "sigma_of", "log_normal_constant"]


def _as_grid(values: Sequence[float] | Tensor, name: str) -> Tensor:
    t = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if t.numel() == 0 or not torch.isfinite(t).all() or (t <= 0).any():
        raise ValueError(f"{name} must be a non-empty list of positive finite numbers, got "
                         f"{values!r}")
    if len(torch.unique(t)) != len(t):
        raise ValueError(f"{name} must not repeat a value, got {t.tolist()}")
    return t


def grid_from_sigmas(sigmas: Sequence[float] | Tensor) -> tuple[Tensor, float]:
    r"""``(betas, sigma_min)``: :math:`\beta_j = 1/(2\sigma_j^2)`, increasing (sigmas decreasing)."""
    s = torch.sort(_as_grid(sigmas, "sigmas"), descending=True).values
    return 0.5 / s**2, float(s[-1])


def grid_from_betas(betas: Sequence[float] | Tensor) -> Tensor:
    """The betas, sorted increasing."""
    return torch.sort(_as_grid(betas, "betas")).values


def merge_grid(grid_b: Tensor, schedule: str | Tensor, num_steps: int | None
               ) -> tuple[Tensor, Tensor]:
    r"""A schedule in :math:`b` from 0 to 1 containing every grid point, and their step indices.

    Parameters
    ----------
    grid_b : torch.Tensor
        Grid points in :math:`(0, 1]`, increasing; the last one must be exactly 1.
    schedule : {"geometric", "sigmoid", "linear"} or torch.Tensor
        The base schedule: a name (with ``num_steps``) or betas from exactly 0 to exactly 1. The
        geometric schedule starts at ``min(1e-4, grid_b[0] / 100)``.
    num_steps : int or None
        Steps of the base schedule (the merged one has up to ``len(grid_b) - 1`` more).

    Returns
    -------
    (schedule, steps)
        ``schedule`` (T + 1,) float64 strictly increasing from 0 to 1; ``steps`` (m,) long with
        ``schedule[steps] == grid_b``.
    """
    if isinstance(schedule, str) and schedule in schedules.PILOT_NAMES:
        raise ValueError(
            f"schedule={schedule!r} is not available on the distortion path: a schedule built from "
            "the pilot run differs from batch to batch, and the curve needs its grid betas at the "
            "same steps of one schedule; use 'geometric' (the default here: equal steps in log "
            "sigma), 'sigmoid', 'linear' or a tensor of betas from 0 to 1")
    if schedule == "geometric":
        if num_steps is None:
            raise ValueError("num_steps is required with a named schedule")
        base = schedules.geometric(num_steps, beta_min=min(1e-4, float(grid_b[0]) / 100))
    else:
        base = schedules.resolve(schedule, num_steps)
    if float(grid_b[-1]) != 1.0 or float(grid_b[0]) <= 0:
        raise ValueError("grid points must lie in (0, 1] with the last at exactly 1")
    merged = torch.unique(torch.cat([base, grid_b.to(torch.float64)]))  # sorted
    # betas that differ only by rounding would make a zero-length step: drop the base's copy
    keep = torch.ones_like(merged, dtype=torch.bool)
    for b in grid_b.tolist():
        near = (merged - b).abs() <= 1e-12 * max(b, 1e-300)
        near &= merged != b
        keep &= ~near
    merged = merged[keep]
    steps = torch.searchsorted(merged, grid_b.to(torch.float64))
    assert torch.equal(merged[steps], grid_b.to(torch.float64))
    return merged, steps


def sigma_of(beta: Tensor) -> Tensor:
    r""":math:`\sigma = 1/\sqrt{2\beta}`."""
    return 1.0 / torch.sqrt(2.0 * beta)


def log_normal_constant(beta: Tensor, num_values: int) -> Tensor:
    r""":math:`-\tfrac D2 \log(2\pi\sigma^2) = \tfrac D2 \log(\beta/\pi)`: ``log p_sigma = log Z_beta + this``."""
    return 0.5 * num_values * torch.log(beta / math.pi)
