"""The public AIS kernel :class:`HMC`: an HMC transition and its step-size tuning."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pyrolik.annealing.resampling import Resampling
from pyrolik.annealing.transition import HMCInfo, HMCState, HMCTransition, ValueAndGradFn, leapfrog
from pyrolik.annealing.tuning import Adaptation, from_settings

__all__ = ["HMC", "HMCTransition", "HMCState", "HMCInfo", "leapfrog"]


@dataclass(frozen=True, init=False, repr=False)
class HMC:
    r"""The AIS transition kernel: one HMC trajectory of ``num_leapfrog`` steps per annealing step.

    ``transition`` (:class:`~pyrolik.annealing.transition.HMCTransition`) plus ``adaptation``, the
    step-size strategy (:func:`pyrolik.annealing.tuning.from_settings`), and ``resampling`` (SMC) or
    ``None``; defaults: ``docs/kernel.md``.

    Parameters
    ----------
    num_leapfrog : int
        Leapfrog steps per trajectory; cost ~ ``num_steps * num_leapfrog`` gradients per chain.
    step_size : float
        Initial step size (``adapt="pilot"`` / ``"online"``) or the fixed one (``adapt=None``).
    target_accept : float, optional
        Acceptance rate the adaptation aims for; default 0.9 for the pilot, 0.65 online.
    adapt : {"pilot", "online", None} or an adaptation strategy
        ``"pilot"``: a pilot AIS run tunes a frozen step size per example and temperature (exact;
        shared by BDMC's reverse run). ``"online"``: per-chain adaptation (cheaper, slightly biased).
        ``None``: ``step_size`` throughout. A strategy object is used as it is.
    pilot_fraction : float
        Pilot steps as a fraction of ``num_steps`` (at least ``min_pilot_steps``).
    pilot_chains : int, optional
        Chains per example the pilot runs, at most the run's; ``None``: all.
    mass_matrix : bool
        With ``adapt="pilot"``: a diagonal mass matrix per example and temperature from the pilot.
    adapt_gain : float
        Gain of the update :math:`\log\epsilon \mathrel{+}= g(a - a^*)`.
    max_energy_error : float
        Energy errors above this count as divergences.
    step_jitter : float
        Step sizes times a fresh :math:`U(1 - j, 1 + j)` per transition (breaks resonance).
    momentum_persistence : float
        :math:`\alpha`: partial refreshment :math:`u \leftarrow \alpha u + \sqrt{1 - \alpha^2}\,\xi`,
        flipped on rejection (Horowitz 1991; Neal 2011, section 5.3); ``0``: fresh momentum.
    resample : float, optional
        Resample an example's chains when their effective sample size falls below this fraction of
        them (sequential Monte Carlo; :mod:`pyrolik.annealing.resampling`); ``None``: plain AIS.
    """

    transition: HMCTransition
    adaptation: Adaptation
    resampling: Resampling | None

    def __init__(self, num_leapfrog: int = 3, step_size: float = 0.1,
                 target_accept: float | None = None,
                 adapt: str | Adaptation | None = "pilot", pilot_fraction: float = 0.2,
                 min_pilot_steps: int = 20, pilot_chains: int | None = 4,
                 mass_matrix: bool = False, adapt_gain: float = 1.0,
                 max_energy_error: float = 1000.0, step_jitter: float = 0.5,
                 momentum_persistence: float = 0.5, resample: float | None = None):
        if isinstance(num_leapfrog, bool) or not isinstance(num_leapfrog, int) or num_leapfrog < 1:
            raise ValueError(f"num_leapfrog must be a positive integer, got {num_leapfrog!r}")
        if isinstance(step_jitter, bool) or not isinstance(step_jitter, (int, float)) \
                or not 0 <= step_jitter < 1:
            raise ValueError(f"step_jitter must be a number in [0, 1) (0: no jitter), got "
                             f"{step_jitter!r}")
        if isinstance(momentum_persistence, bool) \
                or not isinstance(momentum_persistence, (int, float)) \
                or not 0 <= momentum_persistence < 1:
            raise ValueError(f"momentum_persistence must be a number in [0, 1) (0: a fresh momentum "
                             f"at every transition, e.g. 0.8 to keep most of it), got "
                             f"{momentum_persistence!r}")
        adaptation = from_settings(
            adapt, step_size=step_size, target_accept=target_accept, pilot_fraction=pilot_fraction,
            min_pilot_steps=min_pilot_steps, pilot_chains=pilot_chains, mass_matrix=mass_matrix,
            adapt_gain=adapt_gain)
        object.__setattr__(self, "transition", HMCTransition(
            num_leapfrog, float(max_energy_error), float(step_jitter), float(momentum_persistence)))
        object.__setattr__(self, "adaptation", adaptation)
        object.__setattr__(self, "resampling", None if resample is None else Resampling(resample))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"HMC({args})"

    def to_dict(self) -> dict:
        """The constructor arguments that rebuild this kernel (what results and files record)."""
        return {"num_leapfrog": self.num_leapfrog, **self.adaptation.settings(),
                "max_energy_error": self.max_energy_error, "step_jitter": self.step_jitter,
                "momentum_persistence": self.momentum_persistence, "resample": self.resample}

    # the transition's and the adaptation's settings, by the names of the constructor
    @property
    def num_leapfrog(self) -> int:
        return self.transition.num_leapfrog

    @property
    def max_energy_error(self) -> float:
        return self.transition.max_energy_error

    @property
    def step_jitter(self) -> float:
        return self.transition.step_jitter

    @property
    def momentum_persistence(self) -> float:
        return self.transition.momentum_persistence

    @property
    def resample(self) -> float | None:
        return None if self.resampling is None else self.resampling.threshold

    @property
    def adapt(self) -> str | None:
        return self.adaptation.name

    @property
    def step_size(self) -> float:
        return self.adaptation.step_size

    @property
    def target_accept(self) -> float | None:
        return self.adaptation.target_accept

    @property
    def mass_matrix(self) -> bool:
        return bool(getattr(self.adaptation, "mass_matrix", False))

    @property
    def pilot_chains(self) -> int | None:
        return getattr(self.adaptation, "chains", None)

    def init(self, z: Tensor, fn: ValueAndGradFn) -> HMCState:
        """The state at ``z`` (:meth:`HMCTransition.init`)."""
        return self.transition.init(z, fn)

    def step(self, state: HMCState, fn: ValueAndGradFn, beta: Tensor, step_size: Tensor,
             generator: torch.Generator | None, inv_mass: Tensor | None = None
             ) -> tuple[HMCState, HMCInfo]:
        """One transition with the given step sizes (:meth:`HMCTransition.step`)."""
        return self.transition.step(state, fn, beta, step_size, generator, inv_mass)
