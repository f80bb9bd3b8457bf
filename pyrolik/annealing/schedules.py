"""Annealing schedules, a run's resolved :class:`Schedule`, the distortion path's grids."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from pyrolik.annealing.step_sizes import StepSizes

if TYPE_CHECKING:
    from pyrolik.annealing.kernel import HMC

__all__ = ["linear", "geometric", "sigmoid", "adaptive", "resolve", "validate", "PILOT_NAMES",
           "Schedule", "resolve_schedule", "adaptive_of", "grid_from_sigmas", "grid_from_betas",
           "merge_grid", "sigma_of", "log_normal_constant"]

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
    t = torch.linspace(-delta, delta, num_steps + 1, dtype=torch.float64)
    s = torch.sigmoid(t)
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



@dataclass(frozen=True)
class Schedule:
    """Fixed betas, or a schedule built per batch from the pilot on the grid of ``betas``."""

    name: str
    betas: Tensor
    adaptive: bool = False
    per_example: bool = False  # adaptive: one schedule per example, not one pooled for the batch

    @property
    def num_steps(self) -> int:
        return len(self.betas) - 1

    def for_batch(self, table: StepSizes | None) -> Tensor:
        """The forward betas a batch anneals along: the fixed ones, or from the pilot's variances pooled over
        the batch ``(T + 1,)``, or with ``per_example`` one per example ``(T + 1, n)``."""
        if not self.adaptive:
            return self.betas
        if table is None or table.log_ratio_var is None:
            raise ValueError("schedule='adaptive' needs the pilot's variances of log p(x | z) "
                             "(StepSizes.log_ratio_var); the given step_sizes table has none: pass "
                             "a table from a pilot of this version, or schedule='sigmoid'")
        if self.per_example:  # a failed example's NaN variances leave it the floor's even steps
            return adaptive(self.num_steps, table.betas,
                                      table.log_ratio_var).to(self.betas)
        # pooled at each pilot temperature over the examples that have a variance there: not those
        # whose density failed (NaN/inf, marked failed later), nor those whose pilot weights all
        # sat on one chain (NaN: no variance under the weights)
        var = table.log_ratio_var
        var = torch.where(torch.isfinite(var), var, torch.full_like(var, torch.nan))
        if var.isnan().all():
            return self.betas
        return adaptive(self.num_steps, table.betas, var.nanmean(1)).to(self.betas)


def adaptive_of(schedule: str | Tensor, kernel: HMC, num_chains: int) -> bool:
    """Whether the run's schedule is built from its pilot.

    It is for ``"adaptive"``, ``"adaptive_per_example"``, or ``"auto"`` with a pilot of at least 2
    chains per example.

    Parameters
    ----------
    schedule : str or torch.Tensor
        The ``schedule=`` of the run.
    kernel : HMC
        The run's kernel, whose pilot would build it.
    num_chains : int
        Chains per example of the run.
    """
    if not isinstance(schedule, str) or schedule not in PILOT_NAMES:
        return False
    chains = kernel.adaptation.pilot_chains(num_chains)
    if schedule == "auto":
        return kernel.adapt == "pilot" and chains >= 2
    if kernel.adapt != "pilot":
        raise ValueError(f"schedule={schedule!r} is built from the pilot run's variance of "
                         "log p(x | z): use a kernel with adapt='pilot' (the default), or "
                         "schedule='auto' (adaptive with a pilot, sigmoid without)")
    if chains < 2:
        raise ValueError(f"schedule={schedule!r} needs at least 2 pilot chains per example to estimate "
                         f"a variance; this run's pilot has {chains} (num_chains={num_chains}): "
                         "raise num_chains or pilot_chains, or pass schedule='sigmoid'")
    return True


def resolve_schedule(schedule: str | Tensor, num_steps: int | None, kernel: HMC,
                     num_chains: int) -> Schedule:
    """The checked :class:`Schedule` named by ``schedule=`` and ``num_steps``.

    Parameters
    ----------
    schedule : str or torch.Tensor
        A name (:data:`PILOT_NAMES` included) or betas.
    num_steps : int or None
        Annealing steps T; ``None`` with a tensor.
    kernel : HMC
        The run's kernel.
    num_chains : int
        Chains per example of the run.
    """
    adaptive = adaptive_of(schedule, kernel, num_chains)
    if isinstance(schedule, str) and schedule in PILOT_NAMES:
        # a schedule built from the pilot starts from the sigmoid: the pilot's grid is taken from it
        per_example = schedule == "adaptive_per_example"
        name = schedule if per_example else "adaptive" if adaptive else "sigmoid"
        return Schedule(name, resolve("sigmoid", num_steps), adaptive, per_example)
    betas = resolve(schedule, num_steps)
    return Schedule(schedule if isinstance(schedule, str) else "custom", betas)


# -- the distortion path's grids ----------------------------------------------------------------

def _as_grid(values: Sequence[float] | Tensor, name: str) -> Tensor:
    t = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if t.numel() == 0 or not torch.isfinite(t).all() or (t <= 0).any():
        raise ValueError(f"{name} must be a non-empty list of positive finite numbers, got "
                         f"{values!r}")
    if len(torch.unique(t)) != len(t):
        raise ValueError(f"{name} must not repeat a value, got {t.tolist()}")
    return t


def grid_from_sigmas(sigmas: Sequence[float] | Tensor) -> tuple[Tensor, float]:
    r"""``(betas, sigma_min)``: :math:`\beta_j = 1/(2\sigma_j^2)`, increasing (sigmas decreasing).

    Parameters
    ----------
    sigmas : sequence of float or torch.Tensor
        Positive, distinct, any order.
    """
    s = torch.sort(_as_grid(sigmas, "sigmas"), descending=True).values
    return 0.5 / s**2, float(s[-1])


def grid_from_betas(betas: Sequence[float] | Tensor) -> Tensor:
    """The betas, sorted increasing.

    Parameters
    ----------
    betas : sequence of float or torch.Tensor
        Positive, distinct, any order.
    """
    return torch.sort(_as_grid(betas, "betas")).values


def merge_grid(grid_b: Tensor, schedule: str | Tensor, num_steps: int | None
               ) -> tuple[Tensor, Tensor]:
    """A schedule in :math:`b` from 0 to 1 containing every grid point, and their step indices.

    Returns ``(schedule, steps)`` with ``schedule[steps] == grid_b``.

    Parameters
    ----------
    grid_b : torch.Tensor
        The grid points, increasing in :math:`(0, 1]`, ending at 1.
    schedule : {"geometric", "sigmoid", "linear"} or torch.Tensor
        The base schedule the grid points are merged into.
    num_steps : int or None
        The base schedule's steps; ``None`` with a tensor.
    """
    if isinstance(schedule, str) and schedule in PILOT_NAMES:
        raise ValueError(
            f"schedule={schedule!r} is not available on the distortion path: a schedule built from "
            "the pilot run differs from batch to batch, and the curve needs its grid betas at the "
            "same steps of one schedule; use 'geometric' (the default here: equal steps in log "
            "sigma), 'sigmoid', 'linear' or a tensor of betas from 0 to 1")
    if schedule == "geometric":
        if num_steps is None:
            raise ValueError("num_steps is required with a named schedule")
        base = geometric(num_steps, beta_min=min(1e-4, float(grid_b[0]) / 100))
    else:
        base = resolve(schedule, num_steps)
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
    r""":math:`\sigma = 1/\sqrt{2\beta}`.

    Parameters
    ----------
    beta : torch.Tensor
        Inverse temperatures (positive).
    """
    return 1.0 / torch.sqrt(2.0 * beta)


def log_normal_constant(beta: Tensor, num_values: int) -> Tensor:
    r""":math:`-\tfrac D2 \log(2\pi\sigma^2) = \tfrac D2 \log(\beta/\pi)`: ``log p_sigma = log Z_beta + this``.

    Parameters
    ----------
    beta : torch.Tensor
        Inverse temperatures, :math:`\beta = 1/(2\sigma^2)`.
    num_values : int
        Observed values per example (D).
    """
    return 0.5 * num_values * torch.log(beta / math.pi)
