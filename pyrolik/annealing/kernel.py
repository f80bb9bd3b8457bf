"""The public kernels: :class:`HMC`, the move (a transition and its step-size tuning), and
:class:`SMC`, how an example's chains anneal together (the move, and resampling within islands)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from pyrolik._validate import check_count
from pyrolik.annealing.transition import HMCInfo, HMCState, HMCTransition, leapfrog
from pyrolik.annealing.tuning import Adaptation, from_settings
from pyrolik.ops.stats import num_blocks

__all__ = ["HMC", "SMC", "Kernel", "as_smc", "HMCTransition", "HMCState", "HMCInfo", "leapfrog"]


@dataclass(frozen=True, repr=False)
class HMC:
    r"""The AIS transition kernel: one HMC trajectory of ``num_leapfrog`` steps per annealing step.

    ``transition`` (:class:`~pyrolik.annealing.transition.HMCTransition`) plus ``adaptation``, the
    step-size strategy; defaults: ``docs/kernel.md``. The estimators run it inside :class:`SMC`.

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
    """

    num_leapfrog: int = 3
    step_size: float = 0.1
    target_accept: float | None = None
    adapt: str | Adaptation | None = "pilot"
    pilot_fraction: float = 0.2
    min_pilot_steps: int = 20
    pilot_chains: int | None = 4
    mass_matrix: bool = False
    adapt_gain: float = 1.0
    max_energy_error: float = 1000.0
    step_jitter: float = 0.5
    momentum_persistence: float = 0.5
    transition: HMCTransition = field(init=False, compare=False)
    adaptation: Adaptation = field(init=False, compare=False)

    def __post_init__(self):
        n, j, a = self.num_leapfrog, self.step_jitter, self.momentum_persistence
        check_count("num_leapfrog", n)
        e = self.max_energy_error
        if isinstance(e, bool) or not isinstance(e, int | float) or not e > 0:
            raise ValueError(f"max_energy_error must be a positive number (energy errors above it "
                             f"count as divergences; inf: none do), got {e!r}")
        if isinstance(j, bool) or not isinstance(j, int | float) or not 0 <= j < 1:
            raise ValueError(f"step_jitter must be a number in [0, 1) (0: no jitter), got {j!r}")
        if isinstance(a, bool) or not isinstance(a, int | float) or not 0 <= a < 1:
            raise ValueError(f"momentum_persistence must be a number in [0, 1) (0: a fresh momentum "
                             f"at every transition, e.g. 0.8 to keep most of it), got {a!r}")
        object.__setattr__(self, "adaptation", from_settings(
            self.adapt, step_size=self.step_size, target_accept=self.target_accept,
            pilot_fraction=self.pilot_fraction, min_pilot_steps=self.min_pilot_steps,
            pilot_chains=self.pilot_chains, mass_matrix=self.mass_matrix,
            adapt_gain=self.adapt_gain))
        object.__setattr__(self, "transition", HMCTransition(
            n, float(self.max_energy_error), float(j), float(a)))
        names = {f.name for f in fields(self) if f.init}
        for k, v in self.adaptation.settings().items():  # the fields say what the strategy resolved
            if k in names:
                object.__setattr__(self, k, v)

    def __repr__(self) -> str:
        return "HMC(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + ")"

    def to_dict(self) -> dict:
        """The constructor arguments that rebuild this kernel (what results and files record)."""
        t = self.transition
        return {"num_leapfrog": t.num_leapfrog, **self.adaptation.settings(),
                "max_energy_error": t.max_energy_error, "step_jitter": t.step_jitter,
                "momentum_persistence": t.momentum_persistence}


@dataclass(frozen=True)
class SMC:
    r"""How an example's chains anneal together: the ``move`` and resampling within islands.

    At every step the weights are updated, the chains of each *island* (a fixed group of an
    example's chains) are resampled when their ESS is low, then the move transports every chain;
    the estimate stays unbiased and islands never exchange chains (``docs/kernel.md``).

    Parameters
    ----------
    move : HMC
        The transition that moves each chain (default ``HMC()``).
    resample : float or None
        Resample an island when its ESS falls below this fraction of its chains (``1``: at every
        step); ``None``: plain AIS.
    islands : int or None
        Islands per example, a divisor of ``num_chains`` with at least 2 chains each; ``None``:
        :func:`default_islands` (2 to 4 islands of 4 or more chains; plain AIS where no such split
        exists: below 8 chains, and 9, 11, 13, ...).
    """

    move: HMC = field(default_factory=HMC)
    resample: float | None = 1.0
    islands: int | None = None

    def __post_init__(self):
        if not isinstance(self.move, HMC):
            raise TypeError(f"move must be a pyrolik.HMC, got {type(self.move).__name__}")
        t = self.resample
        if t is not None and (isinstance(t, bool) or not isinstance(t, int | float)
                              or not 0 < t <= 1):
            raise ValueError(f"resample must be a fraction in (0, 1] of an island's chains "
                             f"(resample when its ESS falls below it; 1: at every step), or None "
                             f"for plain AIS; got {t!r}")
        b = self.islands
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
            raise ValueError(f"islands must be a positive integer (a divisor of num_chains) or "
                             f"None for the default, got {b!r}")
        if b is not None and t is None:
            raise ValueError(f"islands={b} groups an example's chains for resampling, and "
                             "resample=None (plain AIS) never resamples: drop islands, or give "
                             "resample a fraction")

    def islands_for(self, num_chains: int) -> int | None:
        """Islands per example with ``num_chains`` chains; ``None``: no resampling (plain AIS)."""
        if self.resample is None:
            return None
        if self.islands is None:
            return default_islands(num_chains)
        if num_chains % self.islands or num_chains // self.islands < 2:
            raise ValueError(f"islands={self.islands} does not split num_chains={num_chains} into "
                             f"equal islands of at least 2 chains; pass a divisor of {num_chains} "
                             f"(e.g. islands={default_islands(num_chains) or 1}), or islands=None")
        return self.islands

    def to_dict(self) -> dict:
        """The constructor arguments that rebuild this kernel (what results and files record)."""
        return {**self.move.to_dict(), "resample": self.resample, "islands": self.islands}

    @classmethod
    def from_dict(cls, settings: dict) -> SMC:
        """The kernel :meth:`to_dict` recorded (a file from before SMC: its HMC's settings, with
        ``resample`` when it had one, else plain AIS)."""
        settings = dict(settings)
        smc = {"resample": settings.pop("resample", None), "islands": settings.pop("islands", None)}
        smc["islands"] = None if smc["resample"] is None else smc["islands"]  # it never acted
        return cls(HMC(**settings), **smc)

    def __repr__(self) -> str:
        return f"SMC({self.move!r}, resample={self.resample!r}, islands={self.islands!r})"


def default_islands(num_chains: int) -> int | None:
    """The export's blocks (:func:`pyrolik.ops.stats.num_blocks`) when there are 2 or more, else
    ``None``, plain AIS: islands of 2 or 3 chains widened the BDMC gap (``benchmarks/RESULTS.md``)."""
    blocks = num_blocks(num_chains)
    return blocks if blocks >= 2 else None


Kernel = HMC | SMC


def as_smc(kernel: Kernel | None) -> SMC:
    """The :class:`SMC` an estimator runs: ``SMC()``, ``SMC(hmc)``, an SMC; others refused."""
    if kernel is None:
        return SMC()
    if isinstance(kernel, HMC):
        return SMC(kernel)
    if isinstance(kernel, SMC):
        return kernel
    raise TypeError(f"kernel must be a pyrolik.HMC or pyrolik.SMC, got {type(kernel).__name__}")
