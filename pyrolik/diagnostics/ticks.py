"""Tick labels that do not run into each other: a log axis labelled with plain numbers."""

from __future__ import annotations

import math

__all__ = ["plain_log_axis"]


def plain_log_axis(ax, which: str = "x") -> None:
    """Put ``ax``'s ``which`` axis ("x" or "y") on a log scale labelled with plain numbers.

    matplotlib labels the minor ticks of an axis spanning one or two decades (``2x10^1``,
    ``3x10^1``, ...), and the labels overlap. Here the labels are plain (``20``, ``50``, ``100``)
    and thinned with the span: 1, 2, 3, 5 per decade up to 1.6 decades, 1, 2, 5 up to 2.5,
    1, 2 up to 3.5, then one per decade.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The axes to change.
    which : {"x", "y"}
        The axis to put on the log scale.
    """
    from matplotlib.ticker import Formatter

    if which not in ("x", "y"):
        raise ValueError(f"which must be 'x' or 'y', got {which!r}")

    class PlainLog(Formatter):
        def __call__(self, x, pos=None):
            lo, hi = sorted(abs(v) for v in self.axis.get_view_interval())
            decades = math.log10(hi / lo) if lo > 0 else math.inf
            keep = (1, 2, 3, 5) if decades <= 1.6 else (1, 2, 5) if decades <= 2.5 else \
                (1, 2) if decades <= 3.5 else (1,)
            if not x > 0:
                return ""
            mantissa = round(x / 10 ** math.floor(math.log10(x) + 1e-9), 6)
            return f"{x:g}" if mantissa in keep else ""

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis.set_major_formatter(PlainLog())
    axis.set_minor_formatter(PlainLog())
