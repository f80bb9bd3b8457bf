"""Argument checks at the public boundary: one function per kind of argument, one wording each.

Every estimator validates what the user passed here, before any work, and raises ``ValueError`` or
``TypeError`` with a message that names the argument and the fix (nothing is silently coerced). Internals assume valid input.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["validate_data", "check_count"]


def validate_data(x: Any) -> Tensor:
    """Check the observations at the public boundary; return them unchanged."""
    if not isinstance(x, Tensor):
        raise TypeError(
            f"x must be a torch.Tensor of shape (N, *event_shape), got {type(x).__name__}; "
            "convert with torch.as_tensor(x, dtype=torch.float32)"
        )
    if x.dim() < 1 or x.shape[0] < 1:
        raise ValueError(f"x must have at least one example along dim 0, got shape {tuple(x.shape)}")
    if x.is_floating_point() and not torch.isfinite(x).all():
        bad = (~torch.isfinite(x)).reshape(x.shape[0], -1).any(-1).nonzero().flatten().tolist()
        raise ValueError(
            f"x contains NaN or inf in examples {bad[:10]}{'...' if len(bad) > 10 else ''}; "
            "remove or impute them before estimating log-likelihoods"
        )
    return x


def check_count(name: str, value: Any) -> int:
    """Raise unless ``value`` is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value
