"""Sharding whole batches across the processes of a ``torch.distributed`` group."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import torch

__all__ = ["Shard", "current_shard", "broadcast_seed", "gather_batches", "init_from_env",
           "map_tensors", "main_result", "set_threads", "ENV"]

_R = TypeVar("_R")


class Shard(NamedTuple):
    """This process's share of the batches: batch ``j`` belongs to rank ``j mod world_size``."""

    rank: int = 0
    world_size: int = 1

    def owns(self, batch_index: int) -> bool:
        return batch_index % self.world_size == self.rank

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def current_shard(distributed: bool) -> Shard:
    """``Shard(rank, world_size)`` of the initialised default group, or ``Shard(0, 1)``."""
    if not distributed:
        return Shard()
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("pyrolik.distributed() needs an initialised torch.distributed process "
                         "group: launch with torchrun and call "
                         "torch.distributed.init_process_group() first (the pyrolik command line "
                         "does both), or call the estimator outside the block")
    return Shard(dist.get_rank(), dist.get_world_size())


def broadcast_seed(seed: int, shard: Shard) -> int:
    """Rank 0's seed on every rank."""
    if shard.world_size == 1:
        return seed
    box = [seed]
    torch.distributed.broadcast_object_list(box, src=0)
    return int(box[0])


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``fn`` to every tensor inside nested dicts, lists and tuples."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(map_tensors(v, fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(v, fn) for v in obj)
    return obj


def gather_batches(parts: dict[int, Any], shard: Shard, device: torch.device) -> list[Any] | None:
    """Per-batch outputs ``{first example: payload}`` of all ranks in order on rank 0, else None."""
    if shard.world_size == 1:
        return [parts[k] for k in sorted(parts)]
    cpu = {k: map_tensors(v, lambda t: t.detach().cpu()) for k, v in parts.items()}
    out: list[Any] | None = [None] * shard.world_size if shard.is_main else None
    torch.distributed.gather_object(cpu, out, dst=0)
    if out is None:  # not rank 0
        return None
    merged: dict[int, Any] = {k: v for d in out for k, v in d.items()}
    return [map_tensors(merged[k], lambda t: t.to(device)) for k in sorted(merged)]


def init_from_env(device: str | torch.device, backend: str = "auto") -> tuple[Shard, torch.device]:
    """Start the default process group from torchrun's environment (``backend="auto"``: NCCL for
    CUDA, each rank on GPU ``LOCAL_RANK``, else gloo); the shard (``Shard(0, 1)`` without torchrun)
    and device."""
    device = torch.device(device)
    if not all(v in os.environ for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return Shard(), device  # not started by torchrun
    dist = torch.distributed
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend=backend, **kwargs)
    return Shard(dist.get_rank(), dist.get_world_size()), device


def main_result(result: _R | None, estimator: str) -> _R:
    """The result of an estimator run in one process (or on rank 0); a ``None`` raises."""
    if result is None:
        raise RuntimeError(f"{estimator} returned None, which only the non-zero ranks of a "
                           "pyrolik.distributed() block do: run it outside the block, or use the "
                           "result on rank 0")
    return result


#: Environment variable naming the thread count that :func:`set_threads` uses by default.
ENV = "PYROLIK_NUM_THREADS"


def set_threads(num_threads: int | None = None) -> int:
    """Set torch's CPU threads (``None``: ``$PYROLIK_NUM_THREADS``, else 1, the fastest for small
    networks and on a shared machine; ``docs/design.md``); returns the old count.

    Parameters
    ----------
    num_threads : int, optional
        The number of threads.

    Returns
    -------
    int
        The previous count, to restore it with ``set_threads(previous)``.
    """
    if num_threads is None:  # $PYROLIK_NUM_THREADS when set, else 1
        text = os.environ.get(ENV, "").strip()
        try:
            num_threads = int(text) if text else 1
        except ValueError:
            num_threads = 0
        if num_threads < 1:
            raise ValueError(f"{ENV}={text!r} is not a positive integer: set it to a thread count "
                             "such as 1 or 4, or unset it (the default is 1)")
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive integer or None, got {num_threads!r}")
    old = torch.get_num_threads()
    if num_threads != old:
        torch.set_num_threads(num_threads)
    return old
