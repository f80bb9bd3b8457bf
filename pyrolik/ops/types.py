"""Type aliases shared across layers: what a model, a log-density and latents are to pyrolik."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from torch import Tensor

__all__ = ["ModelFn", "LogDensityFn", "Latents"]

ModelFn: TypeAlias = Callable[..., Any]
"""A Pyro program (model or guide) whose first positional argument is the data ``x``."""

LogDensityFn: TypeAlias = Callable[[Tensor], Tensor]
"""``z -> log density`` per row (sign +: never a potential)."""

Latents: TypeAlias = "Tensor | Mapping[str, Tensor]"
"""Latent values: one flat tensor, or constrained values by site name."""
