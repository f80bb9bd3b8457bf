"""Per-example arguments: tensors among ``model_args``/``model_kwargs`` that follow their rows.

A tensor whose leading dimension is ``N`` is repeated over chains and sliced with batches, as ``x`` is;
:func:`per_example`/:func:`shared` settle ambiguous cases (``docs/idioms.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

from torch import Tensor

__all__ = ["ModelFn", "PerExample", "Shared", "describe_arguments", "fit_rows", "has_per_example",
           "mark_arguments", "per_example", "repeat_arguments", "shared", "slice_arguments", "take_rows",
           "unwrap"]

ModelFn: TypeAlias = Callable[..., Any]  # a Pyro program (model or guide): x first, then its arguments


@dataclass(frozen=True)
class PerExample:
    """A tensor argument with one row per example (leading dimension ``N``)."""

    value: Tensor
    explicit: bool = True  # marked by the user (pyrolik.model.per_example), not by the leading-dim rule


@dataclass(frozen=True)
class Shared:
    """An argument that is the same for every example: passed as it is, never repeated or sliced."""

    value: Any


def per_example(value: Tensor) -> PerExample:
    """Mark a tensor argument as per example: repeated across chains and sliced with the batches.

    Where the leading-dimension rule is ambiguous, e.g. ``model_kwargs={"y": per_example(labels)}``.

    Parameters
    ----------
    value : torch.Tensor, shape ``(N, ...)``
        One row per example.
    """
    if isinstance(value, PerExample):
        return value
    if not isinstance(value, Tensor) or value.dim() < 1:
        raise TypeError(f"per_example takes a tensor with one row per example, got "
                        f"{type(value).__name__}{'' if not isinstance(value, Tensor) else ' of 0 dims'}")
    return PerExample(value, explicit=True)


def shared(value: Any) -> Shared:
    """Mark an argument as the same for every example, even if its leading dimension is ``N``.

    Parameters
    ----------
    value : object
        Any model argument; passed to the model as it is.
    """
    return value if isinstance(value, Shared) else Shared(value)


def _items(args: tuple, kwargs: dict) -> Iterator[tuple[str, Any]]:
    for i, v in enumerate(args):
        yield f"model_args[{i}]", v
    for k, v in kwargs.items():
        yield f"model_kwargs[{k!r}]", v


def _rebuild(args: tuple, kwargs: dict, fn) -> tuple[tuple, dict]:
    return (tuple(fn(f"model_args[{i}]", v) for i, v in enumerate(args)),
            {k: fn(f"model_kwargs[{k!r}]", v) for k, v in kwargs.items()})


def mark_arguments(args: tuple, kwargs: dict | None, num_examples: int) -> tuple[tuple, dict]:
    """Each tensor argument as :class:`PerExample` or :class:`Shared` (wrapped ones checked)."""

    def mark(name: str, v: Any) -> Any:
        if isinstance(v, PerExample):
            if v.value.shape[0] != num_examples:
                raise ValueError(
                    f"{name} is marked per example but has {v.value.shape[0]} rows, and x has "
                    f"{num_examples} examples: give it one row per example of x (slice it as x "
                    "is sliced), or mark it pyrolik.model.shared(...) if it is the same for all")
            return v
        if isinstance(v, Shared) or not isinstance(v, Tensor):
            return v
        per_row = v.dim() >= 1 and v.shape[0] == num_examples  # the leading-dimension rule
        return PerExample(v, explicit=False) if per_row else Shared(v)

    return _rebuild(tuple(args), dict(kwargs or {}), mark)


def slice_arguments(args: tuple, kwargs: dict | None, start: int, stop: int) -> tuple[tuple, dict]:
    """The arguments of examples ``start:stop``: per-example tensors sliced, the rest as is."""

    def cut(name: str, v: Any) -> Any:
        return PerExample(v.value[start:stop], v.explicit) if isinstance(v, PerExample) else v

    return _rebuild(tuple(args), dict(kwargs or {}), cut)


def repeat_arguments(args: tuple, kwargs: dict, num_chains: int) -> tuple[tuple, dict]:
    """Plain arguments for ``num_chains`` chain-major copies of the examples (row ``k * N + n``)."""

    def run(name: str, v: Any) -> Any:
        if isinstance(v, PerExample):
            t = v.value
            return t.repeat((num_chains,) + (1,) * (t.dim() - 1)) if num_chains > 1 else t
        return v.value if isinstance(v, Shared) else v

    return _rebuild(args, kwargs, run)


def take_rows(args: tuple, kwargs: dict, num_chains: int, index: Tensor) -> tuple[tuple, dict]:
    """Marked arguments for the rows ``index`` of ``num_chains`` chain-major copies of the examples,
    as one copy of ``len(index)`` examples: per-example tensors repeated, then indexed."""

    def take(name: str, v: Any) -> Any:
        if isinstance(v, PerExample):
            t = repeat_arguments((v,), {}, num_chains)[0][0]
            return PerExample(t[index.to(t.device)], v.explicit)
        return v

    return _rebuild(tuple(args), dict(kwargs), take)


def unwrap(args: tuple, kwargs: dict | None) -> tuple[tuple, dict]:
    """The plain values of marked arguments (one copy of the examples)."""
    return repeat_arguments(tuple(args), dict(kwargs or {}), 1)


def fit_rows(args: tuple, kwargs: dict | None, rows: int) -> tuple[tuple, dict]:
    """Plain arguments for a run on ``rows`` rows made of whole chain-major copies of the examples:
    per-example tensors of ``n`` rows are repeated ``rows // n`` times (``rows`` a multiple of ``n``)."""

    def run(name: str, v: Any) -> Any:
        if isinstance(v, PerExample):
            n = v.value.shape[0]
            if rows % n:
                raise ValueError(f"{name} has {n} rows (one per example) but the model runs on "
                                 f"{rows} rows, not a whole number of copies of the examples")
            return repeat_arguments((v,), {}, rows // n)[0][0]
        return v.value if isinstance(v, Shared) else v

    return _rebuild(tuple(args), dict(kwargs or {}), run)


def describe_arguments(args: tuple, kwargs: dict | None) -> str:
    """How the tensor arguments were read, for an error message ('' if there are none)."""
    parts = []
    for name, v in _items(tuple(args), dict(kwargs or {})):
        if isinstance(v, PerExample):
            how = "marked per example" if v.explicit else (
                "per example: its leading dimension is the number of examples")
            parts.append(f"{name} of shape {tuple(v.value.shape)} ({how})")
        elif isinstance(v, Shared) and isinstance(v.value, Tensor):
            parts.append(f"{name} of shape {tuple(v.value.shape)} (shared by all examples)")
    return ("; tensor arguments: " + ", ".join(parts) + " (say which are per example with "
            "pyrolik.model.per_example(t) / pyrolik.model.shared(t))") if parts else ""


def has_per_example(args: tuple, kwargs: dict | None) -> list[str]:
    """The names of the per-example arguments among marked ones."""
    return [name for name, v in _items(tuple(args), dict(kwargs or {}))
            if isinstance(v, PerExample)]

