"""Representation-quality measures read off loss-data curves, and plots (``docs/curves.md``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from pyrolik.curves.curve import LossDataCurve
from pyrolik.diagnostics.plots import plain_log_axis

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["validation_loss", "validation_accuracy", "mi_proxy", "mdl", "sdl",
           "epsilon_sample_complexity", "epsilon_from_baseline", "measures_table",
           "best_representation", "plot_loss_data", "plot_curves"]

RULES = ("right", "left")


def _check_curve(curve) -> LossDataCurve:
    if not isinstance(curve, LossDataCurve):
        raise TypeError(f"expected a LossDataCurve (from loss_data_curve or built from arrays); "
                        f"got {type(curve).__name__}")
    return curve


def _upto(curve: LossDataCurve, n: int | None) -> LossDataCurve:
    """The curve seen by an evaluation with ``n`` points; ``n`` must be a grid size."""
    curve = _check_curve(curve)
    if n is None:
        return curve
    if int(n) not in curve.sizes:
        raise ValueError(f"n={n} is not a size of the curve {curve.name!r}; use one of "
                         f"{curve.sizes.tolist()}")
    return curve.truncate(int(n))


def _check_epsilon(epsilon) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.floating):
        raise TypeError(f"epsilon must be a number (nats); got {type(epsilon).__name__}")
    if not math.isfinite(epsilon) or epsilon < 0:
        raise ValueError(f"epsilon must be finite and >= 0 (a loss in nats); got {epsilon}")
    return float(epsilon)


def validation_loss(curve: LossDataCurve, n: int) -> float:
    r"""VA: the seed-averaged validation loss :math:`\hat L(n)` (nats) at grid size ``n``.

    Parameters
    ----------
    curve : LossDataCurve
        The curve of one representation (:func:`loss_data_curve`).
    n : int
        A size of the curve's grid.

    Returns
    -------
    float
    """
    return float(_upto(curve, n).mean_loss[-1])


def validation_accuracy(curve: LossDataCurve, n: int) -> float:
    """VA: the seed-averaged validation accuracy at grid size ``n``.

    Parameters
    ----------
    curve, n
        As in :func:`validation_loss`.

    Returns
    -------
    float
    """
    c = _upto(curve, n)
    mean = c.mean_accuracy
    if mean is None:
        raise ValueError(f"curve {c.name!r} has no accuracy; build it with accuracy=")
    return float(mean[-1])


def mi_proxy(curve: LossDataCurve) -> float:
    r"""MI proxy: the loss at the largest size, :math:`\hat L(n_m)` (:math:`H(Y) - \hat L(n_m)`
    lower-bounds :math:`I(\phi(X); Y)` up to validation noise).

    Parameters
    ----------
    curve : LossDataCurve
        The curve of one representation (:func:`loss_data_curve`).

    Returns
    -------
    float
    """
    return float(_check_curve(curve).mean_loss[-1])


def _area(curve: LossDataCurve, epsilon: float, rule: str, loss_at_zero: float | None) -> float:
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}; got {rule!r}")
    loss = curve.mean_loss
    widths = np.diff(curve.sizes, prepend=0)
    if rule == "left":
        if loss_at_zero is None:
            if curve.num_classes is None:
                raise ValueError("rule='left' needs the loss with no data: pass loss_at_zero= or "
                                 "build the curve with num_classes= (then log K is used)")
            loss_at_zero = math.log(curve.num_classes)
        loss = np.concatenate([[float(loss_at_zero)], loss[:-1]])
    return float(np.sum(widths * np.clip(loss - epsilon, 0.0, None)))


def mdl(curve: LossDataCurve, n: int | None = None, *, rule: str = "right",
        loss_at_zero: float | None = None) -> float:
    r"""MDL: the prequential (online) code length of ``n`` labels in nats,
    :math:`\sum_{n_j \le n} (n_j - n_{j-1})\,\hat L_{j}` (Whitney et al. 2020; ``docs/curves.md``).

    Parameters
    ----------
    curve : LossDataCurve
        The curve of one representation (:func:`loss_data_curve`).
    n : int, optional
        The evaluation size: only the curve up to ``n`` (a size of its grid) is used; default all.
    rule : {"right", "left"}
        Charge each interval the loss at its right end, or at its left (Voita & Titov's block
        code); the two bracket the sum.
    loss_at_zero : float, optional
        :math:`\hat L_0` for ``rule="left"`` (default :math:`\log K`).

    Returns
    -------
    float
    """
    return _area(_upto(curve, n), 0.0, rule, loss_at_zero)


def sdl(curve: LossDataCurve, epsilon: float, n: int | None = None, *, rule: str = "right",
        loss_at_zero: float | None = None) -> float:
    r"""epsilon-SDL: the surplus description length above the loss threshold ``epsilon`` (nats),
    :math:`\sum_{j} (n_j - n_{j-1})\,[\hat L_j - \varepsilon]_+`; ``inf`` until the last loss used
    is :math:`\le \varepsilon`.

    Parameters
    ----------
    curve, n, rule, loss_at_zero
        As in :func:`mdl`.
    epsilon : float
        The loss threshold (nats), e.g. :func:`epsilon_from_baseline`.

    Returns
    -------
    float
    """
    c = _upto(curve, n)
    epsilon = _check_epsilon(epsilon)
    if c.mean_loss[-1] > epsilon:
        return math.inf
    return _area(c, epsilon, rule, loss_at_zero)


def epsilon_sample_complexity(curve: LossDataCurve, epsilon: float, n: int | None = None, *,
                              interpolate: bool = False) -> float:
    r"""epsilon sample complexity: the smallest size whose expected loss is at most ``epsilon``
    (``inf`` if no size up to ``n`` reaches it; on the grid, an upper bound on the crossing).

    Parameters
    ----------
    curve, epsilon, n
        As in :func:`sdl`.
    interpolate : bool
        Interpolate the crossing between grid sizes (linear in :math:`\log n`).

    Returns
    -------
    float
    """
    c = _upto(curve, n)
    epsilon = _check_epsilon(epsilon)
    loss = c.mean_loss
    below = np.flatnonzero(loss <= epsilon)
    if len(below) == 0:
        return math.inf
    j = int(below[0])
    if not interpolate or j == 0:
        return float(c.sizes[j])
    a, b = math.log(c.sizes[j - 1]), math.log(c.sizes[j])
    t = (loss[j - 1] - epsilon) / (loss[j - 1] - loss[j])
    return float(math.exp(a + t * (b - a)))


def epsilon_from_baseline(baseline: LossDataCurve | float, slack: float = 0.1) -> float:
    r"""Set :math:`\varepsilon` from a baseline: the raw representation's loss at its largest size
    plus a slack, so that :math:`\varepsilon > H(Y \mid X)`.

    Parameters
    ----------
    baseline : LossDataCurve or float
        The raw representation's curve (its loss at the largest size is used), or that loss.
    slack : float
        Added to the baseline's loss (nats).

    Returns
    -------
    float
    """
    if isinstance(baseline, LossDataCurve):
        base = mi_proxy(baseline)
    elif isinstance(baseline, int | float | np.floating) and not isinstance(baseline, bool):
        base = _check_epsilon(baseline)
    else:
        raise TypeError(f"baseline must be a LossDataCurve or a loss in nats; got "
                        f"{type(baseline).__name__}")
    if not isinstance(slack, int | float | np.floating) or not 0 <= slack < math.inf:
        raise ValueError(f"slack must be a finite number >= 0 (nats); got {slack!r}")
    return base + float(slack)


def _as_mapping(curves) -> dict[str, LossDataCurve]:
    if isinstance(curves, LossDataCurve):
        curves = [curves]
    if isinstance(curves, Mapping):
        out = {str(k): _check_curve(v) for k, v in curves.items()}
    elif isinstance(curves, Sequence) and not isinstance(curves, str):
        out = {_check_curve(c).name or f"curve {i}": c for i, c in enumerate(curves)}
    else:
        raise TypeError("curves must be a dict of name -> LossDataCurve or a list of curves")
    if not out:
        raise ValueError("no curves given")
    return out


def measures_table(curves: Mapping[str, LossDataCurve] | Sequence[LossDataCurve], epsilon: float,
                   ns: Sequence[int] | None = None, *, rule: str = "right") -> pd.DataFrame:
    """The measures of several representations, as evaluated with ``n`` points, for each ``n``:
    ``va_loss``, ``va_accuracy``, ``mdl``, ``sdl``, ``sdl_partial`` (a lower bound on an
    undetermined SDL) and ``eps_sc``, indexed by ``(n, representation)``.

    Parameters
    ----------
    curves : dict of LossDataCurve, or a sequence of them
        The curves, by representation name (a sequence is named by each curve's ``name``).
    epsilon : float
        The loss threshold (nats), e.g. :func:`epsilon_from_baseline`.
    ns : sequence of int, optional
        Evaluation sizes, on the grid the curves share (default: all of it); the grids must agree
        up to the smallest largest size.
    rule : {"right", "left"}
        The rule of MDL and SDL (:func:`mdl`).

    Returns
    -------
    pandas.DataFrame
    """
    import pandas as pd

    curves = _as_mapping(curves)
    epsilon = _check_epsilon(epsilon)
    top = min(c.sizes[-1] for c in curves.values())
    grids = {name: c.sizes[c.sizes <= top].tolist() for name, c in curves.items()}
    shared = next(iter(grids.values()))
    if any(g != shared for g in grids.values()):
        raise ValueError(f"the curves' size grids differ up to n={top}: {grids}; measures compare "
                         "curves at the same sizes: pass the same sizes= to loss_data_curve")
    ns = [int(n) for n in (shared if ns is None else ns)]
    missing = [n for n in ns if n not in shared]
    if missing or not ns:
        raise ValueError(f"ns {missing or ns} are not sizes of every curve; shared sizes: {shared}")
    rows = [{"n": n, "representation": name, "va_loss": validation_loss(c, n),
             "va_accuracy": math.nan if c.accuracy is None else validation_accuracy(c, n),
             "mdl": mdl(c, n, rule=rule), "sdl": sdl(c, epsilon, n, rule=rule),
             "sdl_partial": _area(c.truncate(n), epsilon, rule, None),
             "eps_sc": epsilon_sample_complexity(c, epsilon, n)}
            for n in ns for name, c in curves.items()]
    table = pd.DataFrame(rows).set_index(["n", "representation"])
    table.attrs.update(epsilon=epsilon, rule=rule)
    return table


def _best(values: pd.Series) -> str:
    """Name of the smallest value; exact ties (common for eps-SC on a grid) joined by ' = '."""
    best = values.min()
    return " = ".join(str(k) for k in values.index[values == best])


def best_representation(table: pd.DataFrame) -> pd.DataFrame:
    """The verdict of each measure at each evaluation size: the best representation's name (ties
    joined by ``" = "``), or ``None`` while the data do not decide it.

    Parameters
    ----------
    table : pandas.DataFrame
        The table of :func:`measures_table`.

    Returns
    -------
    pandas.DataFrame
    """
    import pandas as pd

    if not isinstance(table, pd.DataFrame) or table.index.names != ["n", "representation"]:
        raise TypeError("best_representation expects the DataFrame returned by measures_table")
    out = {}
    for n, rows in table.groupby(level="n", sort=False):
        rows = rows.droplevel("n")
        verdict: dict[str, str | None] = {
            "va_loss": _best(rows["va_loss"]), "mdl": _best(rows["mdl"]),
            "va_accuracy": None if rows["va_accuracy"].isna().all() else _best(-rows["va_accuracy"])}
        sc = rows["eps_sc"][np.isfinite(rows["eps_sc"])]
        verdict["eps_sc"] = _best(sc) if len(sc) else None
        done = np.isfinite(rows["sdl"])
        verdict["sdl"] = None
        if done.any():
            best = rows["sdl"][done].min()
            if (rows["sdl_partial"][~done] > best).all():
                verdict["sdl"] = _best(rows["sdl"][done])
        out[n] = verdict
    result = pd.DataFrame.from_dict(out, orient="index", dtype=object).rename_axis("n")
    return result[["va_loss", "va_accuracy", "mdl", "sdl", "eps_sc"]]


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
    ns_all = table.index.get_level_values("n").unique().to_numpy()
    plot_loss_data(curves, epsilon=epsilon, ns=ns_all, ax=axes[0])
    axes[0].get_legend().remove()
    panels = (("va_loss", "VA: validation loss (nats)"), ("mdl", "MDL (nats)"),
              ("sdl", f"SDL, epsilon = {epsilon:.3g} (nats)"),
              ("eps_sc", f"eps-SC, epsilon = {epsilon:.3g}"))
    for ax, (col, title) in zip(axes[1:], panels, strict=True):
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
    axes[4].plot(ns_all, ns_all, ":", color="0.6", lw=1, label="not determined: > n")
    axes[3].set_xlabel("evaluation size n\n(hollow: not determined, lower bound)")
    handles, labels = axes[0].get_legend_handles_labels()
    more, more_labels = axes[4].get_legend_handles_labels()
    key.axis("off")
    key.legend(handles + more[-1:], labels + more_labels[-1:], loc="center", frameon=False,
               title="representation")
    return fig
