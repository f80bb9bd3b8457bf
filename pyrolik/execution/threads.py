"""How many CPU threads torch uses for pyrolik's work: one, unless told otherwise.

Measured in ``benchmarks/bench_threads.py`` (figures in ``benchmarks/RESULTS.md``): the networks
pyrolik evaluates run one small matrix product after another, and every operation split over two
threads waits for both. On a 2-core machine shared with other work, two threads made AIS on the
digits models 10 to 15 times slower than one thread; on a quiet machine two threads gained little
for them. The command line and the demo therefore run with one thread by default, and
``PYROLIK_NUM_THREADS`` (or ``--threads``) chooses another count. The library itself leaves torch's
setting alone unless :func:`set_threads` is called.
"""

from __future__ import annotations

import os

import torch

__all__ = ["set_threads", "default_threads", "ENV"]

#: Environment variable naming the thread count that :func:`set_threads` uses by default.
ENV = "PYROLIK_NUM_THREADS"


def default_threads() -> int:
    """``$PYROLIK_NUM_THREADS`` when set, else 1."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return 1
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{ENV}={text!r} is not a positive integer: set it to a thread count such "
                         f"as 1 or 4, or unset it (the default is 1)")
    return value


def set_threads(num_threads: int | None = None) -> int:
    """Set the number of CPU threads torch uses (``torch.set_num_threads``); return the old count.

    Parameters
    ----------
    num_threads : int, optional
        Threads for the operations that follow. ``None`` (default): ``$PYROLIK_NUM_THREADS`` if
        set, else 1, the fastest for small networks and on any machine shared with other work.
        More threads pay off only on a quiet machine with large decoders and large batches
        (``benchmarks/RESULTS.md``, "Threads").

    Returns
    -------
    int
        The previous thread count, so that ``pyrolik.execution.set_threads(old)`` restores it.
    """
    if num_threads is None:
        num_threads = default_threads()
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive integer or None, got {num_threads!r}")
    old = torch.get_num_threads()
    if num_threads != old:
        torch.set_num_threads(num_threads)
    return old
