"""The annealing machine: the HMC transition and its tuning, the run's resolved schedule, the
engine that runs examples x chains as one tensor, and the driver that batches, checkpoints and cuts
the results (the schedules themselves: :mod:`pyrolik.schedules`)."""

from pyrolik.annealing import engine
from pyrolik.annealing.driver import drive
from pyrolik.annealing.kernel import HMC, SMC
from pyrolik.annealing.run import Recording, describe
from pyrolik.annealing.step_sizes import StepSizes
from pyrolik.annealing.transition import HMCTransition, leapfrog

__all__ = ["HMC", "SMC", "HMCTransition", "Recording", "StepSizes", "engine", "leapfrog",
           "describe", "drive"]
