"""The printed form of a result's summary: a fixed-width table, transposed (one line per quantity),
whose columns that do not fit go to further blocks, never elided."""

from __future__ import annotations

import math
import textwrap
from typing import Any

import pandas as pd

__all__ = ["Summary", "render", "format_value", "WIDTH"]

#: Width the printed tables fit in: a default terminal, and a log file read in one.
WIDTH = 80
#: Quantities that count things: printed as integers even when a missing entry made them float.
COUNTS = frozenset({"examples", "failed", "divergences", "chains", "samples", "num_examples"})
_HEADER = 18  # the widest an estimate's column name may be before it wraps onto more lines


def format_value(value: Any, *, count: bool = False) -> str:
    """One cell: integers as integers, floats with 3 decimals (4 significant digits when tiny or
    huge), missing values as ``-``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or (count and isinstance(value, float) and value.is_integer()):
        return str(int(value))
    if isinstance(value, float):
        if value == 0 or math.isinf(value):
            return "0" if value == 0 else str(value)  # "inf", "-inf"
        return f"{value:.4g}" if abs(value) < 1e-2 or abs(value) >= 1e7 else f"{value:.3f}"
    return str(value)


def _python(value: Any) -> Any:
    """numpy / pandas scalars as plain Python values."""
    try:
        return value.item() if hasattr(value, "item") and not isinstance(value, str) else value
    except (ValueError, AttributeError):
        return value


def _header(label: Any) -> list[str]:
    """An estimate's name as column header lines: long names break before a parenthesis."""
    text = str(label)
    if len(text) <= _HEADER:
        return [text]
    name, paren, rest = text.partition(" (")
    return _wrap(name) + (_wrap("(" + rest) if paren else [])


def _wrap(text: str) -> list[str]:
    """Lines of at most ``_HEADER`` characters, never splitting a word (a method name)."""
    return textwrap.wrap(text, _HEADER, break_long_words=False, break_on_hyphens=False) or [""]


def render(frame: pd.DataFrame, *, width: int = WIDTH) -> str:
    """``frame`` (rows: estimates, columns: quantities) transposed as fixed-width text, wrapped into
    blocks of ``width`` characters (never elided)."""
    fields = [str(c) for c in frame.columns]
    label_width = max([len(f) for f in fields] + [len(str(frame.index.name or ""))] + [1])
    columns = []
    for label, row in zip(frame.index, frame.itertuples(index=False), strict=True):
        cells = [format_value(_python(v), count=f in COUNTS or str(frame[f].dtype)[:3] in
                              ("int", "uin")) for f, v in zip(fields, row, strict=True)]
        head = _header(label)
        columns.append((head, cells, max([len(h) for h in head] + [len(c) for c in cells])))
    sep, blocks = 2, _blocks(columns, label_width, width, 2)
    if len(_blocks(columns, label_width, width, 1)) < len(blocks):
        sep = 1  # a long quantity name: one space between columns keeps the table in one block
        blocks = _blocks(columns, label_width, width, sep)
    gap = " " * sep
    lines: list[str] = []
    for b, block in enumerate(blocks):
        if b:
            lines.append("")
        depth = max(len(head) for head, _, _ in block) if block else 1
        for i in range(depth):
            name = str(frame.index.name or "") if i == depth - 1 else ""
            parts = [name.ljust(label_width)]
            for head, _, w in block:
                text = head[i - (depth - len(head))] if i >= depth - len(head) else ""
                parts.append(text.rjust(w))
            lines.append(gap.join(parts).rstrip())
        for j, field in enumerate(fields):
            parts = [field.ljust(label_width)] + [cells[j].rjust(w) for _, cells, w in block]
            lines.append(gap.join(parts).rstrip())
    return "\n".join(lines)


def _blocks(columns: list, label_width: int, width: int, sep: int) -> list[list]:
    """Columns grouped into blocks that fit ``width`` after the quantity names."""
    blocks: list[list] = [[]]
    used = label_width
    for col in columns:
        if blocks[-1] and used + sep + col[2] > width:
            blocks.append([])
            used = label_width
        blocks[-1].append(col)
        used += sep + col[2]
    return blocks


class Summary(pd.DataFrame):
    """A result's summary: a :class:`pandas.DataFrame` (a row per estimate) printed by :func:`render`;
    derived tables are plain DataFrames."""

    @property
    def _constructor(self):
        return pd.DataFrame

    def __repr__(self) -> str:
        return render(self)

    __str__ = __repr__
