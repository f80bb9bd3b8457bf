"""Examples in batches, each with its own random stream, and the progress bar."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from tqdm import tqdm

from pyrolik._random import generator_for, resolve_seed
from pyrolik._validate import check_count, check_optional_count
from pyrolik.execution.checkpoint import Checkpoint
from pyrolik.execution.distributed import Shard, broadcast_seed, current_shard, gather_batches
from pyrolik.execution.faults import oom_advice

__all__ = ["Batch", "batches", "progress_bar", "Execution", "run_batches", "Work"]


class Batch(NamedTuple):
    start: int
    stop: int
    generator: torch.Generator


def batches(num_examples: int, batch_size: int | None, seed: int,
            device: torch.device | str = "cpu") -> Iterator[Batch]:
    """Consecutive batches of at most ``batch_size`` examples (all at once when ``None``)."""
    size = num_examples if batch_size is None else check_count("batch_size", batch_size)
    for start in range(0, num_examples, size):
        stop = min(start + size, num_examples)
        yield Batch(start, stop, generator_for(seed, start, device))


def progress_bar(total: int, desc: str, enabled: bool) -> tqdm:
    """A tqdm bar on stderr, off when ``enabled`` is false."""
    return tqdm(total=total, desc=desc, disable=not enabled, leave=False, dynamic_ncols=True)



@dataclass(frozen=True)
class Execution:
    """The execution options of one run: the resolved ``seed`` every process agrees on, ``batch_size``,
    the progress bar's ``desc``, the ``checkpoint`` path (or ``None``) and ``checkpoint_every``."""

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
