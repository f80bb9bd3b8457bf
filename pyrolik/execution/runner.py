"""Drive an estimator over its batches: sharding, checkpoints, out-of-memory advice, gathering.

``work(batch, resume, save)`` computes one batch and returns its *payload* (nested dicts of tensors,
the unit that is checkpointed and gathered). ``resume`` is the saved state of that batch when a
checkpoint holds it in progress (else ``None``); ``save(state)`` records such a state (``None`` when
the run is not checkpointed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from pyrolik.execution.batches import Batch, batches
from pyrolik.execution.checkpoint import Checkpoint
from pyrolik.execution.distributed import Shard, gather_batches
from pyrolik.execution.faults import oom_advice

__all__ = ["run_batches", "Work"]

Work = Callable[[Batch, Any, Callable[[Any], None] | None], Any]


def run_batches(
    num_examples: int,
    batch_size: int | None,
    seed: int,
    device: torch.device,
    work: Work,
    *,
    shard: Shard,
    rows_per_example: int,
    checkpoint: Checkpoint | None = None,
) -> list[Any] | None:
    """Run this process's batches; return every batch's payload in order (``None`` off rank 0)."""
    parts: dict[int, Any] = {}
    for i, batch in enumerate(batches(num_examples, batch_size, seed, device)):
        if not shard.owns(i):
            continue
        stored = checkpoint.completed(batch.start) if checkpoint is not None else None
        if stored is not None:
            parts[batch.start] = stored
            continue
        resume = checkpoint.resume_state(batch.start) if checkpoint is not None else None
        save = None if checkpoint is None else functools.partial(checkpoint.save_progress,
                                                                 batch.start)
        with oom_advice(batch.start, batch.stop, rows_per_example, batch_size):
            payload = work(batch, resume, save)
        if checkpoint is not None:
            checkpoint.complete(batch.start, payload)
        parts[batch.start] = payload
    return gather_batches(parts, shard, device)
