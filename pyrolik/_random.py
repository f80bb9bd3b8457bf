"""Random streams: the recorded seed, one generator per batch, and Pyro's draws seeded from it.

An example's draws depend on the seed and its batch only; the user's global torch stream is untouched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

__all__ = ["resolve_seed", "generator_for", "fork_rng_from"]


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


@contextlib.contextmanager
def fork_rng_from(generator: torch.Generator | None, device: torch.device | None = None
                  ) -> Iterator[None]:
    """Run Pyro's sampling (global torch RNG) seeded from ``generator``, leaving the user's RNG alone."""
    devices = [device] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        if generator is not None:
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
        yield
