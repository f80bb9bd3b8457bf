r"""Targets reused between the runs of one call: the rounds of a budget search (a ``Tolerance``)."""

from __future__ import annotations

import dataclasses
from contextvars import ContextVar, Token
from typing import Any

import torch
from torch import Tensor

__all__ = ["TargetCache", "active_cache", "same_value"]

_ACTIVE: ContextVar[TargetCache | None] = ContextVar("pyrolik_target_cache", default=None)


def same_value(a: Any, b: Any) -> bool:
    """Whether two arguments are equal as a model reads them: tensors by shape, dtype, device and
    values; tuples, lists, dicts and dataclasses entry by entry; anything else by ``==``."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and a.device == b.device and bool(torch.equal(a, b)))
    if type(a) is not type(b):
        return False
    if a is b:
        return True
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_value(u, v) for u, v in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a):
        return all(same_value(getattr(a, f.name), getattr(b, f.name))
                   for f in dataclasses.fields(a))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an object that cannot say: not the same
        return False


class TargetCache:
    """The targets built while it is active (``with cache:``), found again by :meth:`find`."""

    def __init__(self) -> None:
        self._entries: list[tuple[tuple, Any]] = []
        self._tokens: list[Token] = []

    def __enter__(self) -> TargetCache:
        self._tokens.append(_ACTIVE.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.reset(self._tokens.pop())

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, key: tuple) -> Any:
        """The target stored under a key equal to ``key`` (:func:`same_value`), or ``None``."""
        return next((t for k, t in self._entries if same_value(k, key)), None)

    def add(self, key: tuple, target: Any) -> None:
        self._entries.append((key, target))


def active_cache() -> TargetCache | None:
    """The cache of the innermost ``with TargetCache():`` block, or ``None``."""
    return _ACTIVE.get()
