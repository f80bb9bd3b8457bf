"""Faults during a run: examples whose estimate failed, out-of-memory on a batch."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch

from pyrolik.exceptions import FailedExamplesWarning

__all__ = ["FailedExamplesWarning", "warn_failed", "oom_advice", "is_out_of_memory"]


def warn_failed(result, what: str | None = None, stacklevel: int = 3) -> None:
    """Warn when ``result`` has failed examples (see :attr:`EstimateResult.failed`)."""
    failed = result.failed
    num = int(failed.sum())
    if not num:
        return
    if num == len(failed):
        warnings.warn(
            f"{what or result.method}: all {num} examples failed (their estimate is NaN or inf): the "
            "model's log-density is not finite; check the model, e.g. run it once under "
            "pyro.validation_enabled() on a few examples", FailedExamplesWarning,
            stacklevel=stacklevel)
        return
    idx = failed.nonzero().flatten().tolist()
    shown = ", ".join(map(str, idx[:10])) + (", ..." if num > 10 else "")
    warnings.warn(
        f"{what or result.method}: {num} of {len(failed)} examples failed (their estimate is NaN or "
        f"inf: the model's log-density was not finite for them): examples [{shown}]. They are marked "
        "in result.failed and left out of mean and stderr; check the model and these examples",
        FailedExamplesWarning, stacklevel=stacklevel,
    )


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is torch's (CUDA, MPS or CPU allocator) out-of-memory error."""
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    if oom_types and isinstance(err, oom_types):
        return True
    msg = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in msg
                                              or "can't allocate memory" in msg
                                              or "cannot allocate memory" in msg)


@contextlib.contextmanager
def oom_advice(start: int, stop: int, rows_per_example: int, batch_size: int | None
               ) -> Iterator[None]:
    """Re-raise an out-of-memory error inside the block as a MemoryError suggesting ``batch_size``."""
    try:
        yield
    except (RuntimeError, MemoryError) as err:
        if not (isinstance(err, MemoryError) or is_out_of_memory(err)) \
                or str(err).startswith("out of memory on examples"):
            raise
        n = stop - start
        suggest = max(1, n // 4)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise MemoryError(
            f"out of memory on examples [{start}:{stop}] ({n} examples x {rows_per_example} "
            f"chains/samples = {n * rows_per_example} model rows per pass, batch_size="
            f"{batch_size}): pass a smaller batch_size (e.g. batch_size={suggest}); results depend "
            f"on it only through Monte Carlo noise. ({first})"
        ) from err
