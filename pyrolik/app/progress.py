"""One progress display for a run made of several stages (the demo): not one bar per estimator."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TextIO

__all__ = ["StageProgress"]


class StageProgress:
    """Progress over ``stages``, a sequence of ``(label, weight)`` run in that order.

    Use ``with progress.stage(): ...`` once per stage, in order, and :meth:`close` at the end.
    """

    def __init__(self, stages: Sequence[tuple[str, float]], *, enabled: bool = True,
                 name: str = "pyrolik", stream: TextIO | None = None, tick: float = 1.0):
        self.stages = list(stages)
        self.total = float(sum(w for _, w in self.stages)) or 1.0
        self.enabled = enabled
        self.name = name
        self.stream = sys.stderr if stream is None else stream
        self.done = 0.0
        self.index = 0
        self.start = time.perf_counter()
        self._bar = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        isatty = getattr(self.stream, "isatty", None)
        if enabled and callable(isatty) and isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=1000, file=self.stream, leave=False, dynamic_ncols=True,
                             desc=name, bar_format="{desc}: {percentage:3.0f}%|{bar}| "
                                                   "{elapsed}<{remaining}{postfix}")
            self._ticker = threading.Thread(target=self._tick, args=(tick,), daemon=True)
            self._ticker.start()

    def _tick(self, every: float) -> None:
        while not self._stop.wait(every):
            bar = self._bar
            if bar is not None:
                bar.refresh()

    @contextlib.contextmanager
    def stage(self) -> Iterator[None]:
        """The next stage: shown when it starts, counted as done when the block ends."""
        if self.index >= len(self.stages):
            raise RuntimeError(f"all {len(self.stages)} stages are done")
        label, weight = self.stages[self.index]
        self.index += 1
        if self._bar is not None:
            self._bar.set_postfix_str(f"[{self.index}/{len(self.stages)}] {label}", refresh=True)
        elif self.enabled:
            elapsed = time.perf_counter() - self.start
            print(f"{self.name}: [{self.index}/{len(self.stages)}] {label} "
                  f"({elapsed:.0f} s elapsed)", file=self.stream, flush=True)
        yield
        self.done += weight
        if self._bar is not None:
            self._bar.update(round(1000 * self.done / self.total) - self._bar.n)

    def close(self) -> None:
        """Stop the clock and erase the bar (idempotent)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None
