"""Running an estimator's examples: in batches, each with its own random stream, under the
:func:`checkpoint` and :func:`distributed` blocks, with a progress bar; faults (failed examples,
out-of-memory) said."""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch
from tqdm import tqdm

from pyrolik._random import generator_for, resolve_seed
from pyrolik._validate import check_count, check_optional_count
from pyrolik.exceptions import FailedExamplesWarning
from pyrolik.execution.checkpoint import Checkpoint
from pyrolik.execution.distributed import Shard, broadcast_seed, current_shard, gather_batches

__all__ = ["Batch", "progress_bar", "Execution", "run_batches", "Work", "checkpoint",
           "distributed", "local", "scope", "refuse_scope", "Scope", "warn_failed", "failed_message",
           "oom_advice", "is_out_of_memory"]


class Batch(NamedTuple):
    start: int
    stop: int
    generator: torch.Generator


def progress_bar(total: int, desc: str, enabled: bool) -> tqdm:
    """A tqdm bar on stderr, off when ``enabled`` is false."""
    return tqdm(total=total, desc=desc, disable=not enabled, leave=False, dynamic_ncols=True)


@dataclass(frozen=True)
class Scope:
    """The execution options :func:`checkpoint` and :func:`distributed` set for a block of code."""

    checkpoint: str | os.PathLike | None = None
    checkpoint_every: int = 100
    distributed: bool = False


_SCOPE: ContextVar[Scope] = ContextVar("pyrolik_execution_scope", default=Scope())  # noqa: B039 - frozen


@contextlib.contextmanager
def _scoped(**changes: Any) -> Iterator[None]:
    token = _SCOPE.set(replace(_SCOPE.get(), **changes))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def checkpoint(path: str | os.PathLike, *, every: int = 100) -> contextlib.AbstractContextManager:
    """Checkpoint the estimator called in the ``with`` block to ``path``; resume from it if it exists.

    The run's state is saved every ``every`` annealing steps and after every batch; a rerun of the
    same call resumes bit-identically (on CPU), a file of another run raises ``ValueError``
    (``docs/scale.md``). One estimator call per file: :func:`pyrolik.ais`,
    :func:`pyrolik.reverse_ais`, :func:`pyrolik.bdmc`, :func:`pyrolik.evidence` and
    :func:`pyrolik.evidence_bdmc` checkpoint (a budget search inside runs without); the others
    refuse the block.

    Parameters
    ----------
    path : str or path
        The checkpoint file.
    every : int
        Annealing steps between checkpoints.

    Examples
    --------
    >>> import pyrolik, tempfile, os
    >>> from pyrolik_models import LinearGaussian
    >>> lg = LinearGaussian.random(data_dim=3, latent_dim=2, seed=0)
    >>> x = lg.sample(4)
    >>> path = os.path.join(tempfile.mkdtemp(), "run.pt")
    >>> with pyrolik.checkpoint(path, every=10):
    ...     first = pyrolik.ais(lg, x, num_steps=20, num_chains=4, seed=0, progress=False)
    >>> with pyrolik.checkpoint(path, every=10):   # completed: read back, not rerun
    ...     again = pyrolik.ais(lg, x, num_steps=20, num_chains=4, seed=0, progress=False)
    >>> bool((first.log_likelihood == again.log_likelihood).all())
    True
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"checkpoint must be a file path, got {type(path).__name__}")
    return _scoped(checkpoint=path, checkpoint_every=check_count("every", every))


def distributed() -> contextlib.AbstractContextManager:
    """Shard the estimators called in the ``with`` block across the ``torch.distributed`` group.

    Every process calls the estimator with the same arguments; whole batches go to the ranks in
    turn and rank 0 returns the gathered result (as one process with the same ``batch_size`` and
    ``seed``), the others ``None`` (``docs/scale.md``). Needs an initialised default process group.
    :func:`pyrolik.ais`, :func:`pyrolik.reverse_ais`, :func:`pyrolik.bdmc`, :func:`pyrolik.iwae`
    and :func:`pyrolik.likelihood_weighting` shard; the others refuse the block.

    Examples
    --------
    >>> import pyrolik
    >>> with pyrolik.distributed():   # doctest: +SKIP
    ...     result = pyrolik.ais(model, x, num_steps=500, num_chains=4, batch_size=100, seed=0)
    """
    current_shard(True)  # refuses an uninitialised group here, not at the first estimator
    return _scoped(distributed=True)


def local() -> contextlib.AbstractContextManager:
    """No checkpoint and one process for the block: an estimator's inner runs (e.g. a budget search)."""
    return _scoped(checkpoint=None, checkpoint_every=100, distributed=False)


def refuse_scope(method: str, supports: tuple[str, ...] = ()) -> Scope:
    """The execution options in force, refused where ``method`` does not ``support`` them."""
    options = _SCOPE.get()
    for name, active in (("checkpoint", options.checkpoint is not None),
                         ("distributed", options.distributed)):
        if active and name not in supports:
            raise ValueError(f"{method} does not run in a pyrolik.{name}() block: call it outside "
                             "the block")
    return options


def scope() -> Scope:
    """The execution options in force."""
    return _SCOPE.get()


@dataclass(frozen=True)
class Execution:
    """The execution options of one run: the resolved ``seed`` every process agrees on, ``batch_size``,
    the progress bar's ``desc``, and the :func:`checkpoint` path (or ``None``) and its stride."""

    seed: int
    shard: Shard = Shard()
    batch_size: int | None = None
    progress: bool = True
    desc: str = ""
    checkpoint: str | os.PathLike | None = None
    checkpoint_every: int = 100

    @classmethod
    def create(cls, *, seed: int | None, batch_size: int | None = None, progress: bool = True,
               desc: str = "", method: str = "",
               supports: tuple[str, ...] = ("checkpoint", "distributed")) -> Execution:
        """Check the options, take the :func:`checkpoint` / :func:`distributed` block's (refused where
        ``method`` does not ``support`` it) and resolve the seed and the shard."""
        check_optional_count("batch_size", batch_size)
        options = refuse_scope(method or desc, supports)
        shard = current_shard(options.distributed)
        if options.checkpoint is not None and seed is None:
            raise ValueError(f"{method or desc} in a pyrolik.checkpoint() block needs seed= an int: "
                             "a resumed run must draw what the interrupted one drew")
        return cls(broadcast_seed(resolve_seed(seed), shard), shard, batch_size, progress, desc,
                   options.checkpoint, options.checkpoint_every)


Work = Callable[[Batch, Any, Callable[[Any], None] | None], Any]


def run_batches(num_examples: int, batch_size: int | None, seed: int, device: torch.device,
                work: Work, *, shard: Shard, rows_per_example: int,
                checkpoint: Checkpoint | None = None) -> list[Any] | None:
    """Run this process's batches of ``batch_size`` examples; all payloads on rank 0, else None."""
    parts: dict[int, Any] = {}
    size = num_examples if batch_size is None else check_count("batch_size", batch_size)
    for i, start in enumerate(range(0, num_examples, size)):
        if not shard.owns(i):
            continue
        batch = Batch(start, min(start + size, num_examples), generator_for(seed, start, device))
        stored = None if checkpoint is None else checkpoint.completed(start)
        if stored is None:  # not completed before
            resume = None if checkpoint is None else checkpoint.resume_state(start)
            save = (None if checkpoint is None
                    else functools.partial(checkpoint.save_progress, start))
            with oom_advice(start, batch.stop, rows_per_example, batch_size):
                stored = work(batch, resume, save)
            if checkpoint is not None:
                checkpoint.complete(start, stored)
        parts[start] = stored
    return gather_batches(parts, shard, device)


def failed_message(failed: torch.Tensor) -> str:
    """The warning for the ``failed`` examples (a bool ``(N,)``, some true): also a result's own."""
    num = int(failed.sum())
    if num == len(failed):
        return (f"all {num} examples failed (their estimate is NaN or inf): the model's "
                "log-density is not finite; check the model, e.g. run it once under "
                "pyro.validation_enabled() on a few examples")
    idx = failed.nonzero().flatten().tolist()
    shown = ", ".join(map(str, idx[:10])) + (", ..." if num > 10 else "")
    return (f"{num} of {len(failed)} examples failed (their estimate is NaN or inf: the model's "
            f"log-density was not finite for them): examples [{shown}]. They are marked in "
            "result.failed and left out of mean and stderr; check the model and these examples")


def warn_failed(result, what: str | None = None, stacklevel: int = 3) -> None:
    """Warn when ``result`` has failed examples (see :attr:`EstimateResult.failed`)."""
    if result.failed.any():
        warnings.warn(f"{what or result.method}: {failed_message(result.failed)}",
                      FailedExamplesWarning, stacklevel=stacklevel)


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is torch's (CUDA, MPS or CPU allocator) out-of-memory error."""
    if isinstance(err, torch.cuda.OutOfMemoryError):  # torch.OutOfMemoryError too (torch >= 2.5)
        return True
    msg = str(err).lower()
    return isinstance(err, RuntimeError) and any(
        s in msg for s in ("out of memory", "can't allocate memory", "cannot allocate memory"))


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
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise MemoryError(f"out of memory on examples [{start}:{stop}] ({n} examples x "
                          f"{rows_per_example} chains/samples = {n * rows_per_example} model rows "
                          f"per pass, batch_size={batch_size}): pass a smaller batch_size (e.g. "
                          f"batch_size={max(1, n // 4)}); results depend on it only through Monte "
                          f"Carlo noise. ({first})") from err
