"""A run's annealing schedule, resolved once where the run is described.

The ``schedule=`` argument (a name, ``"auto"``, or a tensor) becomes one :class:`Schedule`: either
fixed betas, or (``"adaptive"``, and ``"auto"`` with a pilot of at least 2 chains) a schedule that
each batch builds from its pilot's variances of :math:`r = \\log f_1 - \\log f_0` at constant
thermodynamic speed (:func:`pyrolik.mcmc.schedules.adaptive`), on the grid of a base sigmoid: from
the variances pooled over the batch's examples, or (``"adaptive_per_example"``) one schedule per
example from its own. The driver asks it for a batch's betas with :meth:`Schedule.for_batch`;
nothing else reads the name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pyrolik.mcmc import schedules
from pyrolik.mcmc.hmc import HMC
from pyrolik.mcmc.step_sizes import StepSizes

__all__ = ["Schedule", "resolve_schedule", "adaptive_of"]


@dataclass(frozen=True)
class Schedule:
    """Fixed betas, or a schedule built per batch from the pilot on the grid of ``betas``.

    ``name`` is what results record (``settings["schedule"]``): ``"adaptive"``, a schedule's name,
    or ``"custom"`` for a tensor; ``betas`` ``(T + 1,)`` are the fixed betas, or for an adaptive
    schedule the base whose coarse copy the pilot visits.
    """

    name: str
    betas: Tensor
    adaptive: bool = False
    per_example: bool = False  # adaptive: one schedule per example, not one pooled for the batch

    @property
    def num_steps(self) -> int:
        return len(self.betas) - 1

    def for_batch(self, table: StepSizes | None) -> Tensor:
        """The forward betas a batch anneals along: the fixed betas, or (adaptive) the schedule at
        constant thermodynamic speed from the pilot's variances of the batch's examples, pooled
        (the mean over examples: one schedule ``(T + 1,)`` for the batch), or with ``per_example``
        one per example from its own variances, ``(T + 1, n)``. Independent of the estimating
        chains."""
        if not self.adaptive:
            return self.betas
        if table is None or table.log_ratio_var is None:
            raise ValueError("schedule='adaptive' needs the pilot's variances of log p(x | z) "
                             "(StepSizes.log_ratio_var); the given step_sizes table has none: pass "
                             "a table from a pilot of this version, or schedule='sigmoid'")
        if self.per_example:  # a failed example's NaN variances leave it the floor's even steps
            return schedules.adaptive(self.num_steps, table.betas,
                                      table.log_ratio_var).to(self.betas)
        # examples whose density failed (NaN/inf, marked failed later) take no part in the pooling
        finite = torch.isfinite(table.log_ratio_var).all(0)
        if not finite.any():
            return self.betas
        return schedules.adaptive(self.num_steps, table.betas,
                                  table.log_ratio_var[:, finite].mean(1)).to(self.betas)


def adaptive_of(schedule: str | Tensor, kernel: HMC, num_chains: int) -> bool:
    """Whether the run's schedule is built from its pilot (:func:`pyrolik.mcmc.schedules.adaptive`):
    ``"adaptive"`` and ``"adaptive_per_example"``, or ``"auto"`` with a pilot of at least 2 chains
    per example (else the sigmoid).
    """
    if not isinstance(schedule, str) or schedule not in schedules.PILOT_NAMES:
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
    """The :class:`Schedule` named by ``schedule=`` and ``num_steps`` for ``kernel`` running
    ``num_chains`` chains per example (checked here: unknown names, bad tensors, a tensor whose
    length contradicts ``num_steps``, ``"adaptive"`` without a pilot)."""
    adaptive = adaptive_of(schedule, kernel, num_chains)
    if isinstance(schedule, str) and schedule in schedules.PILOT_NAMES:
        # a schedule built from the pilot starts from the sigmoid: the pilot's grid is taken from it
        per_example = schedule == "adaptive_per_example"
        name = schedule if per_example else "adaptive" if adaptive else "sigmoid"
        return Schedule(name, schedules.resolve("sigmoid", num_steps), adaptive, per_example)
    betas = schedules.resolve(schedule, num_steps)
    return Schedule(schedule if isinstance(schedule, str) else "custom", betas)
