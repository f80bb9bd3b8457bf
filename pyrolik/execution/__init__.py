"""Running an estimator: batches with their own random streams, processes, faults, checkpoints."""

from pyrolik.execution.distributed import set_threads

__all__ = ["set_threads"]
