"""How an estimator's run is carried out, apart from what it computes.

One frozen :class:`Execution` holds the options every estimator shares (the recorded seed, this
process's shard of the batches, the batch size, the progress bar, the checkpoint file), checked
once where a front end builds it. The kernel and the maths never see them: NumPyro's
``infer/mcmc.py::MCMC`` keeps its execution options on the driver in the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count, check_optional_count
from pyrolik.execution.distributed import Shard, broadcast_seed, current_shard

__all__ = ["Execution"]


@dataclass(frozen=True)
class Execution:
    """The execution options of one run (see the module docstring).

    ``seed`` is the resolved seed every process agrees on (rank 0's, broadcast); ``desc`` labels
    the progress bar; ``checkpoint`` is a file path or ``None`` (not checkpointed), written every
    ``checkpoint_every`` steps.
    """

    seed: int
    shard: Shard = Shard()
    batch_size: int | None = None
    progress: bool = True
    desc: str = ""
    checkpoint: str | os.PathLike | None = None
    checkpoint_every: int = 100

    @classmethod
    def create(cls, *, seed: int | None, distributed: bool = False, batch_size: int | None = None,
               progress: bool = True, desc: str = "", checkpoint: str | os.PathLike | None = None,
               checkpoint_every: int = 100) -> Execution:
        """Check the options and resolve the seed (drawn when ``None``) and the shard."""
        check_optional_count("batch_size", batch_size)
        check_count("checkpoint_every", checkpoint_every)
        if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
            raise TypeError(f"checkpoint must be a file path, got {type(checkpoint).__name__}")
        shard = current_shard(distributed)
        return cls(broadcast_seed(resolve_seed(seed), shard), shard, batch_size, progress, desc,
                   checkpoint, checkpoint_every)
