"""Argument checks at the public boundary: one function per kind of argument, one wording each.

Every estimator validates what the user passed here, before any work, and raises ``ValueError`` or
``TypeError`` with a message that names the argument and the fix (nothing is silently coerced). Internals assume valid input.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["validate_data", "check_count", "check_optional_count", "check_model", "check_guide"]


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


def check_model(model: Any, name: str = "model") -> Any:
    """Raise unless ``model`` is callable (a Pyro model)."""
    if not callable(model):
        raise TypeError(f"{name} must be a callable Pyro model, got {type(model).__name__}")
    return model


def check_guide(guide: Any, name: str = "guide", optional: bool = False) -> Any:
    """Raise unless ``guide`` is a callable Pyro guide (or ``None`` when ``optional``)."""
    if guide is None and optional:
        return None
    if not callable(guide):
        allowed = " or None" if optional else ""
        raise TypeError(f"{name} must be a callable Pyro guide{allowed}, got "
                        f"{type(guide).__name__}")
    return guide


def check_optional_count(name: str, value: Any) -> int | None:
    """Raise unless ``value`` is ``None`` or a positive integer."""
    return None if value is None else check_count(name, value)
