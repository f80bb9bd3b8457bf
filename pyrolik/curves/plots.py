"""Plots of loss-data curves and of the measures read off them (matplotlib)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from pyrolik.curves.curve import LossDataCurve
from pyrolik.curves.measures import _as_mapping, measures_table
from pyrolik.diagnostics.plots import plain_log_axis

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_loss_data", "plot_curves"]

_PANELS = (("va_loss", "VA: validation loss (nats)"), ("mdl", "MDL (nats)"),
           ("sdl", "SDL (nats)"), ("eps_sc", "eps sample complexity"))


def plot_loss_data(curves: Mapping[str, LossDataCurve] | Sequence[LossDataCurve], *,
                   epsilon: float | None = None, ns: Sequence[int] | None = None,
                   ax: Axes | None = None) -> Axes:
    """Loss-data curves of several representations on one axis (log-log): the seed mean of the
    validation loss against the training-set size, with a band of one standard error.

    Parameters
    ----------
    curves : dict of LossDataCurve, or a sequence of them
        The curves, by representation name (a sequence is named by each curve's ``name``).
    epsilon : float, optional
        A loss threshold to draw as a dashed line (the SDL and eps-SC threshold).
    ns : sequence of int, optional
        Evaluation sizes to mark with dotted vertical lines.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new 5 x 4 inch figure when None.

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    curves = _as_mapping(curves)
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4), layout="constrained")
    for name, c in curves.items():
        m, s = c.mean_loss, c.stderr_loss
        (line,) = ax.plot(c.sizes, m, "o-", ms=4, label=name)
        ax.fill_between(c.sizes, np.maximum(m - s, 1e-12), m + s, color=line.get_color(),
                        alpha=0.2, lw=0)
    if epsilon is not None:
        ax.axhline(epsilon, color="0.4", ls="--", lw=1, label=f"epsilon = {epsilon:.3g}")
    for n in () if ns is None else ns:
        ax.axvline(n, color="0.7", ls=":", lw=1)
    plain_log_axis(ax, "x")
    plain_log_axis(ax, "y")
    ax.set(xlabel="training-set size n", ylabel="validation loss (nats)", title="Loss-data curves")
    ax.legend(fontsize="small")
    return ax


def plot_curves(curves: Mapping[str, LossDataCurve] | Sequence[LossDataCurve], epsilon: float,
                ns: Sequence[int] | None = None, *, rule: str = "right") -> Figure:
    """The curves, and VA loss, MDL, SDL and eps-SC (:func:`~pyrolik.curves.measures_table`)
    against the evaluation size ``n``, in six panels; an SDL not determined yet at ``n`` is drawn
    hollow at its lower bound.

    Parameters
    ----------
    curves : dict of LossDataCurve, or a sequence of them
        As in :func:`plot_loss_data`.
    epsilon, ns, rule
        As in :func:`~pyrolik.curves.measures_table`.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    curves = _as_mapping(curves)
    table = measures_table(curves, epsilon, ns, rule=rule)
    fig, grid = plt.subplots(2, 3, figsize=(10, 6.6), layout="constrained")
    axes, key = grid.flat[:5], grid.flat[5]
    plot_loss_data(curves, epsilon=epsilon, ns=table.index.get_level_values("n").unique(),
                   ax=axes[0])
    axes[0].get_legend().remove()
    for ax, (col, title) in zip(axes[1:], _PANELS, strict=True):
        for i, name in enumerate(curves):
            rows = table.xs(name, level="representation")
            n, value = rows.index.to_numpy(), rows[col].to_numpy()
            ok = np.isfinite(value)
            ax.plot(n[ok], value[ok], "o-", ms=4, color=f"C{i}", label=name)
            if col == "sdl":  # not determined: hollow markers at the lower bound
                bound = rows["sdl_partial"].to_numpy()
                ax.plot(n[~ok], bound[~ok], "o:", ms=5, mfc="none", color=f"C{i}", lw=0.8)
        plain_log_axis(ax, "x")
        ax.set(xlabel="evaluation size n", xlim=axes[0].get_xlim())
        ax.set_title(title, fontsize="medium")
        if col in ("mdl", "eps_sc"):
            plain_log_axis(ax, "y")
        elif col == "sdl":
            ax.set_yscale("symlog", linthresh=1.0)  # SDL can be exactly 0
            ax.set_ylim(bottom=0.0)
    ns_all = table.index.get_level_values("n").unique().to_numpy()
    axes[4].plot(ns_all, ns_all, ":", color="0.6", lw=1, label="not determined: > n")
    axes[3].set_title(f"SDL, epsilon = {epsilon:.3g} (nats)", fontsize="medium")
    axes[4].set_title(f"eps-SC, epsilon = {epsilon:.3g}", fontsize="medium")
    axes[3].set_xlabel("evaluation size n\n(hollow: not determined, lower bound)")
    handles, labels = axes[0].get_legend_handles_labels()
    more, more_labels = axes[4].get_legend_handles_labels()
    key.axis("off")
    key.legend(handles + more[-1:], labels + more_labels[-1:], loc="center", frameon=False,
               title="representation")
    return fig
