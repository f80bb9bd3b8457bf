"""Splitting examples into batches, each with its own random stream, and the progress bar.

Batch ``[start, stop)`` draws from a generator seeded with ``SeedSequence([seed, start])``: an
example's result depends on the seed and on its batch, never on how many batches ran before it or
on which process ran them (so sharding whole batches across processes is bit-identical).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch
from tqdm import tqdm

from pyrolik._random import generator_for
from pyrolik._validate import check_count

__all__ = ["Batch", "batches", "progress_bar"]


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
