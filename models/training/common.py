"""What every trainer shares: input checks, the seeded training context, mini-batches, history.

Trainers put the model in ``train()`` mode (dropout on) while training and always hand it back in
``eval()`` mode, the mode in which the Pyro program is evaluated. With ``seed=`` they draw all their
randomness from a forked RNG, leaving the caller's global torch RNG as it was.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..zoo.base import DecoderModel

__all__ = ["TrainHistory", "check_training_args", "training_mode", "minibatches", "epochs"]


class TrainHistory(NamedTuple):
    """Per-epoch record of a training run.

    ``losses`` are mean training losses per example over each epoch (for VAEs/IWAEs the negative
    ELBO / IWAE bound in nats; for GANs the discriminator loss, i.e. minus eq. 2 of Wu et al. 2017;
    for GMMNs the square-root MMD of a batch). ``extra`` holds other per-epoch series.
    """

    objective: str
    losses: list[float]
    valid_losses: list[float]
    extra: dict[str, list[float]]
    num_steps: int
    seconds: float

    def to_meta(self) -> dict[str, Any]:
        """A plain dict (for a checkpoint's ``meta``)."""
        return {"objective": self.objective, "losses": list(self.losses),
                "valid_losses": list(self.valid_losses),
                "extra": {k: list(v) for k, v in self.extra.items()},
                "num_epochs": len(self.losses), "num_steps": self.num_steps,
                "seconds": self.seconds}


def _positive_int(value: Any, name: str, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else 'positive'}, got {value}")
    return value


def check_training_args(model: Any, data: Any, kind: tuple[type, ...], *, num_epochs: Any,
                        batch_size: Any, lr: Any) -> Tensor:
    """Validate the common arguments; returns ``data`` flattened to ``(N, data_dim)``."""
    if not isinstance(model, kind):
        names = " or ".join(k.__name__ for k in kind)
        raise TypeError(f"model must be a {names}, got {type(model).__name__}")
    assert isinstance(model, DecoderModel)
    if not isinstance(data, Tensor):
        raise TypeError(f"data must be a torch.Tensor, got {type(data).__name__}")
    model._check_x(data)
    if not torch.isfinite(data).all():
        raise ValueError("data holds NaN or inf values; remove or impute them before training")
    _positive_int(num_epochs, "num_epochs", allow_zero=True)
    _positive_int(batch_size, "batch_size")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive float, got {lr!r}")
    return data.reshape(data.shape[0], -1)


@contextmanager
def training_mode(model: DecoderModel, seed: int | None) -> Iterator[torch.Generator]:
    """Train mode and a forked, seeded RNG; yields a generator for the data order."""
    generator = torch.Generator()
    if seed is not None:
        generator.manual_seed(int(seed))
    else:
        generator.seed()
    with torch.random.fork_rng():
        if seed is not None:
            torch.manual_seed(int(seed))
        model.train()
        try:
            yield generator
        finally:
            model.eval()


def minibatches(data: Tensor, batch_size: int, generator: torch.Generator) -> Iterator[Tensor]:
    """One epoch of shuffled mini-batches (the last one may be smaller)."""
    order = torch.randperm(data.shape[0], generator=generator).to(data.device)
    for start in range(0, data.shape[0], batch_size):
        yield data[order[start:start + batch_size]]


def epochs(num_epochs: int, progress: bool, desc: str) -> Iterator[int]:
    """``range(num_epochs)``, with a tqdm bar when ``progress`` (a notebook widget only where
    ipywidgets is installed: ``tqdm.auto`` without it warns "IProgress not found")."""
    if progress:
        import importlib.util

        if importlib.util.find_spec("ipywidgets") is not None:
            from tqdm.auto import trange
        else:
            from tqdm import trange

        yield from trange(num_epochs, desc=desc)
    else:
        yield from range(num_epochs)


class Timer:
    """Wall-clock seconds since construction."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.start
