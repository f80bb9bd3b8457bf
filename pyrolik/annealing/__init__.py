"""The annealing machine: HMC transition and tuning, schedules, engine and driver."""

from pyrolik.annealing import schedules
from pyrolik.annealing.driver import drive
from pyrolik.annealing.engine import init, run, step
from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.run import describe
from pyrolik.annealing.step_sizes import StepSizes
from pyrolik.annealing.transition import HMCTransition, leapfrog

__all__ = ["HMC", "HMCTransition", "StepSizes", "schedules", "leapfrog", "init", "step", "run",
           "describe", "drive"]
