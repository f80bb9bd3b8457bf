"""Splitting examples into batches, each with its own random stream, and the progress bar.

Batch ``[start, stop)`` draws from a generator seeded with ``SeedSequence([seed, start])``: an
example's result depends on the seed and on its batch, never on how many batches ran before it or
on which process ran them (so sharding whole batches across processes is bit-identical).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch
from tqdm import tqdm

from pyrolik.target import check_count

__all__ = ["Batch", "resolve_seed", "batches", "generator_for", "progress_bar"]


class Batch(NamedTuple):
    start: int
    stop: int
    generator: torch.Generator


def resolve_seed(seed: int | None) -> int:
    """The seed to record: ``seed`` itself, or one drawn from torch's global RNG when ``None``."""
    if seed is None:
        return int(torch.randint(0, 2**31 - 1, (1,)))
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
    return seed


def generator_for(seed: int, start: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The generator of the batch that starts at example ``start``."""
    state = np.random.SeedSequence([seed, start]).generate_state(2, dtype=np.uint32)
    return torch.Generator(device=device).manual_seed(int(state[0]) << 31 | int(state[1]) >> 1)


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
