"""How the demo and the command line report: warnings to act on in full, remarks in one line, and
one progress display for a run of several stages."""

from __future__ import annotations

import contextlib
import sys
import textwrap
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, TextIO

from pyrolik.exceptions import REMARK, severity

__all__ = ["Grouped", "group", "remarks_line", "warning_lines", "stderr_lines", "StageProgress",
           "SHOWN"]

#: The warnings the command line printed while it ran (on one line each): not printed again after it.
SHOWN: set[str] = set()


class Grouped(NamedTuple):
    """Each distinct message once, in first-come order, with the labels of the estimates it concerns."""

    act: dict[str, list[str]]
    remarks: dict[str, list[str]]


def group(notes: Iterable[tuple[str, str]]) -> Grouped:
    """``(label, message)`` by severity; ``forward: `` moves to the label, so both legs group."""
    out = Grouped({}, {})
    for label, message in notes:
        kind = severity(message)  # read before the prefix is cut off (a slice is a plain str)
        text = str(message)
        for leg in ("forward", "reverse"):
            if text.startswith(f"{leg}: "):
                label, text = f"{label} {leg}", text[len(leg) + 2:]
        (out.remarks if kind == REMARK else out.act).setdefault(text, []).append(label)
    return out


def remarks_line(count: int, where: str) -> str:
    """The one line that stands for ``count`` remarks: how many, what they are, where to read them."""
    return (f"{count} remark{'s' if count != 1 else ''} at the level of Monte Carlo noise or "
            f"standing caveats of the settings (nothing to act on): see {where}")


def warning_lines(notes: Iterable[tuple[str, str]], width: int = 80, *, where: str,
                  show_all: bool = False) -> list[str]:
    """The warnings to act on, then the remarks in one line (each with ``show_all``), wrapped."""
    act, remarks = group(notes)
    lines: list[str] = []
    for title, items in ((f"Warnings to act on ({len(act)}):", act),
                         (f"Remarks ({len(remarks)}: Monte Carlo noise or standing caveats):",
                          remarks if show_all else {})):
        if items:
            lines.append(title)
        for message, labels in items.items():
            lines += _wrap(f"{', '.join(labels)}: {message}", width, "- ")
    if remarks and not show_all:
        lines += _wrap(remarks_line(len(remarks), where), width, "+ ")
    return lines


def _wrap(text: str, width: int, mark: str) -> list[str]:
    """``text`` as an item marked ``mark``, wrapped at spaces only (a path stays whole, to copy)."""
    return textwrap.wrap(text, width, initial_indent=mark, subsequent_indent="  ",
                         break_on_hyphens=False, break_long_words=False)


def stderr_lines(messages: Iterable[str], *, where: str, show_all: bool = False) -> list[str]:
    """``pyrolik: warning:`` lines, then one ``note:`` for the remarks (each with ``show_all``)."""
    grouped = group(("", m) for m in messages
                    if not any(s == line or s.endswith(": " + line) for s in SHOWN
                               for line in [" ".join(str(m).split())]))
    lines = [f"pyrolik: warning: {_one_line(m, labels)}" for m, labels in grouped.act.items()]
    if show_all:
        lines += [f"pyrolik: remark: {_one_line(m, labels)}" for m, labels in grouped.remarks.items()]
    elif grouped.remarks:
        lines.append(f"pyrolik: note: {remarks_line(len(grouped.remarks), where)}")
    return lines


def _one_line(message: str, labels: list[str]) -> str:
    """A message on one line; a BDMC leg it concerns goes back in front (``forward: ...``)."""
    legs = [label.strip() for label in labels if label.strip()]
    return (f"{', '.join(legs)}: " if legs else "") + " ".join(message.split())


class StageProgress:
    """Progress over ``(label, weight)`` stages: ``with progress.stage():`` each, then close."""

    def __init__(self, stages: Sequence[tuple[str, float]], *, enabled: bool = True,
                 name: str = "pyrolik", stream: TextIO | None = None, tick: float = 1.0):
        self.stages = list(stages)
        self.total = float(sum(w for _, w in self.stages)) or 1.0
        self.enabled, self.name = enabled, name
        self.stream = sys.stderr if stream is None else stream
        self.done, self.index = 0.0, 0
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
