r"""Plots of an evaluation: log-weights, ESS and k-hat per example, annealing traces, BDMC bounds.

Each takes a result (fresh or loaded), draws on ``ax`` when given and returns the axes; ``docs/export.md``.
"""

from __future__ import annotations

import math

import numpy as np
from torch import Tensor

from pyrolik.advice import KHAT_WARN
from pyrolik.advice import MIN_WEIGHTS as KHAT_MIN_WEIGHTS
from pyrolik.diagnostics.checks import temperature_trace
from pyrolik.infer.annealing import plot_posterior_decodings
from pyrolik.infer.sandwich import plot_bdmc_convergence
from pyrolik.ops.stats import log_mean_exp
from pyrolik.results import AISResult, BDMCResult, EstimateResult

__all__ = ["plot_log_weights", "plot_ess", "plot_khat", "plot_annealing", "plot_bdmc",
           "plot_bandwidth", "plot_diagnostics", "plot_bdmc_convergence", "plot_posterior_decodings"]

FORWARD, REVERSE = "C0", "C3"
MAX_WIDTH = 10.0  # inches: a figure this wide is read at a documentation page's width


def _axes(ax, ncols: int = 1, width: float = 6.0):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    width = min(width, MAX_WIDTH / ncols)
    _, axes = plt.subplots(1, ncols, figsize=(width * ncols, 3.5), squeeze=False,
                           layout="constrained")
    return axes[0, 0] if ncols == 1 else axes[0]


def plain_log_axis(ax, which: str = "x") -> None:
    """Put ``ax``'s ``which`` axis ("x" or "y") on a log scale labelled with plain numbers (``20``,
    ``50``, not matplotlib's overlapping ``2x10^1``), fewer per decade as the span grows."""
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


def _integer_ticks(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _titles(ax, xlabel: str, ylabel: str, title: str, legend: bool = True) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if legend:
        ax.legend(loc="best", fontsize="small")
    ax.set_title(title, fontsize="medium")


def _parts(result: EstimateResult | BDMCResult, what: str = "this plot") -> list:
    """A BDMC result's two runs, or the result itself (refusing what is neither)."""
    if not isinstance(result, EstimateResult | BDMCResult):
        raise TypeError(f"{what} needs an estimator's result or a BDMC result, got "
                        f"{type(result).__name__} (a curve: pyrolik.distortion.plot_sigma_curve, "
                        "plot_rate_distortion; its run: plot_diagnostics(curve.ais))")
    return [result.lower, result.upper] if isinstance(result, BDMCResult) else [result]


def _weights_of(result: EstimateResult) -> Tensor:
    if result.log_weights is None:
        raise ValueError(f"the {result.method} result kept no log-weights (KDE has none; IWAE and "
                         "likelihood weighting keep them with keep_weights=True)")
    return result.log_weights.detach().cpu().double()


def _examples(n: int, examples, max_examples: int) -> np.ndarray:
    if examples is None:
        return np.arange(min(n, max_examples))
    idx = np.asarray(examples).reshape(-1)
    if idx.size == 0 or idx.min() < -n or idx.max() >= n:
        raise ValueError(f"examples must index the {n} examples, got {idx.tolist()}")
    return idx % n


def plot_log_weights(result: EstimateResult | BDMCResult, *, examples=None, max_examples: int = 30,
                     ax=None):
    """Centred log-weights :math:`\\log w_k - \\log\\frac1K\\sum_j w_j` per example.

    Parameters
    ----------
    result : EstimateResult or BDMCResult
        A result that kept its weights, fresh or loaded; a BDMC result draws both bounds.
    examples : sequence of int, optional
        The examples to show (default: the first ``max_examples``).
    max_examples : int
        How many examples to show when ``examples`` is None.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure when None.

    Returns
    -------
    matplotlib.axes.Axes
        The axes, or a pair of them (lower, upper) for a BDMC result.
    """
    if isinstance(result, BDMCResult):
        axes = _axes(ax, 2)
        for part, part_ax in zip(_parts(result), axes, strict=True):
            plot_log_weights(part, examples=examples, max_examples=max_examples, ax=part_ax)
        return axes
    lw = _weights_of(_parts(result, "plot_log_weights")[0])
    idx = _examples(lw.shape[1], examples, max_examples)
    centred = (lw - log_mean_exp(lw)).numpy()[:, idx]
    ax = _axes(ax)
    finite = [c[np.isfinite(c)] for c in centred.T]
    ax.boxplot(finite, positions=np.arange(len(idx)), widths=0.6, showfliers=False,
               medianprops={"color": "0.3"})
    rng = np.random.default_rng(0)
    khat = None if result.khat is None else result.khat.numpy()[idx]
    for j, c in enumerate(finite):
        bad = khat is not None and np.isfinite(khat[j]) and khat[j] > KHAT_WARN
        ax.plot(j + rng.uniform(-0.2, 0.2, c.size), c, ".", ms=3, alpha=0.6,
                color="C3" if bad else "C0")
    ax.axhline(0.0, color="0.5", lw=0.8, ls=":")
    ax.set_xticks(np.arange(len(idx)), [str(i) for i in idx], rotation=90 if len(idx) > 15 else 0)
    n = lw.shape[1]
    shown = (f"examples {idx[0]}-{idx[-1]} of {n}" if len(idx) < n and np.array_equal(
        idx, np.arange(idx[0], idx[0] + len(idx))) else f"{len(idx)} of {n} examples"
        if len(idx) < n else f"all {n} examples")
    _titles(ax, "example", "log w - log mean w",
            f"{_label(result)}: centred log-weights\n{lw.shape[0]} per example, {shown}", False)
    return ax


def _label(result: EstimateResult) -> str:
    return f"{result.direction} AIS" if isinstance(result, AISResult) else result.method


def plot_ess(result: EstimateResult | BDMCResult, *, ax=None):
    """Effective sample size per example as a fraction of the chains or samples.

    Parameters
    ----------
    result, ax
        As in :func:`plot_log_weights`.

    Returns
    -------
    matplotlib.axes.Axes
    """
    ax = _axes(ax)
    for part, color in zip(_parts(result, "plot_ess"), (FORWARD, REVERSE), strict=False):
        if part.ess is None:
            raise ValueError(f"the {part.method} result has no ESS (KDE has no weights)")
        k = _weights_of(part).shape[0] if part.log_weights is not None else part.settings.get(
            "num_samples", part.settings.get("num_chains"))
        frac = part.ess.double().numpy() / k
        ax.plot(np.arange(len(frac)), frac, "o", ms=4, color=color,
                label=f"{_label(part)} (of {k})")
    ax.set_ylim(0, 1.05)
    _integer_ticks(ax)
    _titles(ax, "example", "ESS / number of weights", "ESS of the importance weights")
    return ax


def plot_khat(result: EstimateResult | BDMCResult, *, ax=None):
    r"""Pareto k-hat per example, with lines at 0.5, 0.7 (unreliable above) and 1; with fewer than
    25 weights per example (too few for PSIS), the largest normalised weight instead.

    Parameters
    ----------
    result, ax
        As in :func:`plot_log_weights`.

    Returns
    -------
    matplotlib.axes.Axes
    """
    ax = _axes(ax)
    parts = _parts(result, "plot_khat")
    khats = []
    for part in parts:
        if part.khat is None:
            raise ValueError(f"the {part.method} result has no k-hat (KDE has no weights)")
        khats.append(part.khat.double().numpy())
    if any(np.isfinite(khat).any() for khat in khats):
        for part, khat, color in zip(parts, khats, (FORWARD, REVERSE), strict=False):
            ax.scatter(np.arange(len(khat)), np.where(np.isfinite(khat), khat, np.nan),
                       marker="+", color=color, label=_label(part))
        for level, style in ((0.5, ":"), (KHAT_WARN, "-."), (1.0, "--")):
            ax.axhline(level, color="C1", ls=style, lw=1)
        _integer_ticks(ax)
        _titles(ax, "example", "Pareto k-hat", f"Pareto k-hat (unreliable above {KHAT_WARN})")
        return ax
    if any(part.log_weights is None for part in parts):
        ax.text(0.5, 0.5, f"k-hat unavailable: PSIS needs at least {KHAT_MIN_WEIGHTS} weights\n"
                "per example, and the weights were not kept", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_title("Pareto k-hat", fontsize="medium")
        return ax
    for part, color in zip(parts, (FORWARD, REVERSE), strict=False):
        lw = _weights_of(part)
        share = (lw.max(0).values - (log_mean_exp(lw) + np.log(lw.shape[0]))).exp().numpy()
        ax.plot(np.arange(len(share)), share, "o", ms=3, color=color, label=_label(part))
    k = _weights_of(parts[0]).shape[0]
    ax.axhline(1.0 / k, color="0.5", ls=":", lw=1, label=f"1/{k}: weights equal")
    ax.axhline(0.5, color="C1", ls="-.", lw=1, label="one chain carries half")
    ax.set_ylim(0, 1.05)
    _integer_ticks(ax)
    _titles(ax, "example", "largest weight / sum of weights", f"largest normalised weight\n"
            f"(k-hat needs >= {KHAT_MIN_WEIGHTS} weights per example, got {k})")
    return ax


def plot_annealing(result: AISResult | BDMCResult, *, axes=None):
    """Acceptance rate, step size and the running estimate of :math:`\\log Z_\\beta` against beta.

    Parameters
    ----------
    result : AISResult or BDMCResult
        A result with its trace (recorded by default; ``record=`` sets the stride).
    axes : sequence of three matplotlib.axes.Axes, optional
        Where to draw the three panels; a new 10-inch figure when None.

    Returns
    -------
    sequence of matplotlib.axes.Axes
    """
    axes = _axes(axes, 3, width=3.3)
    if not isinstance(result, AISResult | BDMCResult):
        raise TypeError(f"plot_annealing needs an AIS or BDMC result, got {type(result).__name__}")
    for run in _parts(result):
        color = FORWARD if run.direction == "forward" else REVERSE
        df = temperature_trace(run)
        tr = run.trace
        assert tr is not None  # temperature_trace raised otherwise
        beta = df["beta"].to_numpy()
        acc = tr["acceptance_rate"].double().mean(1).numpy()  # (R, N)
        eps = tr["step_size"].double().mean(1).numpy()
        label = _label(run)
        for ax, band, mean in ((axes[0], acc, df["acceptance_rate"]),
                               (axes[1], eps, df["step_size"])):
            ax.fill_between(beta, band.min(-1), band.max(-1), color=color, alpha=0.2, lw=0)
            ax.plot(beta, mean.to_numpy(), color=color, label=label)
        axes[2].plot(beta, df["log_normalizer"].to_numpy(), color=color, label=label)
        move = getattr(run.kernel, "move", run.kernel)  # the SMC's HMC (a loaded file: either)
        target = getattr(move, "target_accept", None)  # None without adaptation
        if target is not None:
            axes[0].axhline(target, color="0.5", ls=":", lw=0.8)
    axes[0].set_ylim(0, 1.02)
    plain_log_axis(axes[1], "y")
    labels = (("acceptance rate", "HMC acceptance"), ("step size", "step size"),
              ("log Z_beta (mean over examples)", "running estimate of log Z_beta"))
    for ax, (ylabel, title) in zip(axes, labels, strict=False):
        _titles(ax, "beta", ylabel, title, legend=False)
    axes[0].legend(loc="lower left", fontsize="small")
    return axes


def plot_bdmc(result: BDMCResult, *, ax=None):
    """BDMC bounds per example, lower to upper, sorted by gap (ticks: example indices).

    Parameters
    ----------
    result : BDMCResult
        The result of :func:`pyrolik.bdmc`.
    ax
        As in :func:`plot_log_weights`.

    Returns
    -------
    matplotlib.axes.Axes
    """
    if not isinstance(result, BDMCResult):
        raise TypeError(f"plot_bdmc needs a BDMCResult, got {type(result).__name__}")
    ax = _axes(ax)
    lo = result.lower.log_likelihood.double().numpy()
    hi = result.upper.log_likelihood.double().numpy()
    order = np.argsort(hi - lo)
    pos = np.arange(len(lo))
    ax.vlines(pos, lo[order], hi[order], color="0.6", lw=2)
    ax.set_xticks(pos, [str(i) for i in order], rotation=90 if len(pos) > 15 else 0)
    ax.plot(pos, lo[order], "^", color=FORWARD, label="lower (forward AIS)")
    ax.plot(pos, hi[order], "v", color=REVERSE, label="upper (reverse AIS)")
    _titles(ax, "example (sorted by gap)", "log p(x) [nats]",
            f"BDMC sandwich: mean gap {result.gap:.3f} +- {result.gap_stderr:.3f} nats")
    return ax


def plot_bandwidth(result: EstimateResult, *, ax=None):
    """KDE: the validation log-likelihood of each candidate bandwidth, the chosen one marked.

    Parameters
    ----------
    result : EstimateResult
        The result of :func:`pyrolik.kde` with a grid of bandwidths and validation data.
    ax
        As in :func:`plot_log_weights`.

    Returns
    -------
    matplotlib.axes.Axes
    """
    if not isinstance(result, EstimateResult):
        raise TypeError(f"plot_bandwidth needs the result of pyrolik.kde, got {type(result).__name__}")
    grid = result.settings.get("bandwidth_grid")
    scores = result.settings.get("validation_log_likelihood")
    if result.method != "kde" or scores is None:
        raise ValueError("plot_bandwidth needs a kde result chosen on a bandwidth grid")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax = _axes(ax)
    ax.plot(grid, scores, "o-", color=FORWARD)
    chosen = result.settings["bandwidth"]
    ax.axvline(chosen, color="0.5", ls=":", label=f"chosen: {chosen:.3g}")
    ax.set_xscale("log")
    # round ticks (0.02, 0.05, 0.1, ...), not the grid's own values (0.0101321...), which overlap
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    _titles(ax, "bandwidth h", "mean validation log-likelihood",
            "KDE bandwidth chosen on validation data")
    return ax


def plot_diagnostics(result: EstimateResult | BDMCResult):
    """A one-figure overview: the log-weights (or the BDMC bounds) per example, ESS and k-hat, and
    the annealing traces of AIS and BDMC results; a KDE result shows its bandwidth choice.

    Parameters
    ----------
    result : EstimateResult or BDMCResult
        A result of any estimator, fresh or loaded (:func:`pyrolik.load`).

    Returns
    -------
    matplotlib.figure.Figure
        The figure; its axes are ``figure.axes``.
    """
    import matplotlib.pyplot as plt

    if not isinstance(result, EstimateResult | BDMCResult):
        raise TypeError(f"expected a pyrolik result, got {type(result).__name__}")
    if isinstance(result, EstimateResult) and result.ess is None:  # KDE: no weights
        if result.settings.get("validation_log_likelihood") is not None:
            return plot_bandwidth(result).figure
        fig = plt.figure(figsize=(MAX_WIDTH / 2, 2))
        fig.text(0.5, 0.5, f"{result.method}: no weights to diagnose (one bandwidth, no grid)",
                 ha="center", va="center")
        return fig
    is_ais = isinstance(result, BDMCResult) or (isinstance(result, AISResult) and bool(result.trace))
    rows = 3 if is_ais else 2
    fig = plt.figure(figsize=(MAX_WIDTH, 3.4 * rows), layout="constrained")
    grid = fig.add_gridspec(rows, 6)
    first = fig.add_subplot(grid[0, :])
    if isinstance(result, BDMCResult):
        plot_bdmc(result, ax=first)
    elif result.log_weights is not None:
        plot_log_weights(result, ax=first)
    else:
        first.text(0.5, 0.5, "log-weights not kept\n(keep_weights=False)", ha="center",
                   va="center", transform=first.transAxes)
    plot_ess(result, ax=fig.add_subplot(grid[1, :3]))
    plot_khat(result, ax=fig.add_subplot(grid[1, 3:]))
    if is_ais and isinstance(result, AISResult | BDMCResult):
        plot_annealing(result, axes=[fig.add_subplot(grid[2, 2 * j:2 * j + 2]) for j in range(3)])
    return fig
