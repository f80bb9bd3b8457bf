"""How the demo and the command line show warnings: what to act on in full, remarks in one line."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from typing import NamedTuple

from pyrolik.exceptions import REMARK, severity

__all__ = ["Grouped", "group", "remarks_line", "warning_lines", "stderr_lines"]

_LEGS = ("forward", "reverse")


class Grouped(NamedTuple):
    """Each distinct message once, with the labels of the estimates it concerns, in the order the
    messages first came: those to act on, and the remarks."""

    act: dict[str, list[str]]
    remarks: dict[str, list[str]]


def group(notes: Iterable[tuple[str, str]]) -> Grouped:
    """Sort ``(label, message)`` pairs by the message's severity, each distinct message once.

    BDMC's ``"forward: ..."`` and ``"reverse: ..."`` messages name their leg in the label instead
    (``"VAE BDMC forward"``), so that the same words about both legs or several runs group.
    """
    out = Grouped({}, {})
    for label, message in notes:
        kind = severity(message)  # read before the prefix is cut off (a slice is a plain str)
        text = str(message)
        for leg in _LEGS:
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
    """The demo's warnings under its table, wrapped to ``width``: those to act on, one item each
    with the estimates it concerns, then the remarks in one line pointing to ``where`` (all of
    them, marked as remarks, with ``show_all``). Empty when there is nothing to say."""
    grouped = group(notes)
    lines: list[str] = []

    def item(message: str, labels: list[str], mark: str = "- ") -> None:
        lines.extend(_wrap(f"{', '.join(labels)}: {message}", width, mark))

    if grouped.act:
        lines.append(f"Warnings to act on ({len(grouped.act)}):")
        for message, labels in grouped.act.items():
            item(message, labels)
    if grouped.remarks and show_all:
        lines.append(f"Remarks ({len(grouped.remarks)}: Monte Carlo noise or standing caveats):")
        for message, labels in grouped.remarks.items():
            item(message, labels)
    elif grouped.remarks:
        lines += _wrap(remarks_line(len(grouped.remarks), where), width, "+ ")
    return lines


def _wrap(text: str, width: int, mark: str) -> list[str]:
    """``text`` as an item marked ``mark``, wrapped at spaces only: a path or a command in it
    (``pyrolik-demo-output/*.nc``) stays whole, to be copied."""
    return textwrap.wrap(text, width, initial_indent=mark, subsequent_indent="  ",
                         break_on_hyphens=False, break_long_words=False)


def stderr_lines(messages: Iterable[str], *, where: str, show_all: bool = False) -> list[str]:
    """One result's warnings as the ``pyrolik`` commands print them on stderr, one line each:
    ``pyrolik: warning: ...`` for those to act on, then one ``pyrolik: note: ...`` line for the
    remarks (each as ``pyrolik: remark: ...`` with ``show_all``)."""
    grouped = group(("", m) for m in messages)
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
