"""Plots of one-run curves: sigma curve, per-example sigma, rate-distortion."""

from __future__ import annotations

from typing import Any

import torch

from pyrolik.diagnostics.plots import plain_log_axis
from pyrolik.distortion.bounds import DistortionBDMC
from pyrolik.distortion.curve import DistortionCurve

__all__ = ["plot_sigma_curve", "plot_optimal_sigma", "plot_rate_distortion"]


def _curve(curve: Any, what: str) -> DistortionCurve:
    """``curve`` if it is a one-run curve, else a TypeError naming what ``what`` draws."""
    if not isinstance(curve, DistortionCurve):
        hint = (" (a distortion_bdmc result is drawn beside its curve: "
                "plot_rate_distortion(curve, bdmc=result))" if isinstance(curve, DistortionBDMC)
                else "")
        raise TypeError(f"{what} draws the result of pyrolik.sigma_curve or pyrolik.rate_distortion, "
                        f"got {type(curve).__name__}{hint}")
    return curve


def _axes(ax, size=(5, 3.5)):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=size, layout="constrained")
    return ax


def plot_sigma_curve(curve: DistortionCurve, ax=None, *, label: str = "one AIS run",
                     per_sigma: dict[str, Any] | None = None):
    """Mean log p_sigma(x) over the examples against sigma, 2 standard errors as bars.

    Parameters
    ----------
    curve : DistortionCurve
        The result of :func:`pyrolik.sigma_curve`.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new 5 x 3.5 inch figure when None.
    label : str
        The legend's label of the curve.
    per_sigma : dict, optional
        A comparison ``{"sigma": [...], "mean": [...], "stderr": [...], "label": str}`` (e.g. one
        AIS run per sigma).

    Returns
    -------
    matplotlib.axes.Axes
    """
    sigmas = _curve(curve, "plot_sigma_curve").sigmas
    ax = _axes(ax)
    if sigmas is None:
        raise ValueError("a sigma curve needs the Gaussian mode (pyrolik.sigma_curve)")
    ax.errorbar(sigmas.numpy(), curve.mean_log_likelihood.numpy(), 2 * curve.stderr.numpy(),
                fmt="o-", capsize=2, label=label)
    if per_sigma is not None:
        ax.errorbar(per_sigma["sigma"], per_sigma["mean"], [2 * s for s in per_sigma["stderr"]],
                    fmt="s--", capsize=2, label=per_sigma.get("label", "per-sigma runs"))
    best = curve.best_sigma()
    ax.axvline(best.sigma, color="grey", lw=0.8, ls=":")
    plain_log_axis(ax, "x")  # plain numbers (0.3, 0.5, 1, 2): the minor labels overlap
    ax.set_xlabel("observation sigma")
    ax.set_ylabel("mean log p_sigma(x) [nats]")
    ax.set_title(f"log-likelihood against sigma (best {best.sigma:.3g})", fontsize=10)
    ax.legend(frameon=False, fontsize="small")
    return ax


def plot_optimal_sigma(curve: DistortionCurve, fixed_sigma: float | None = None, ax=None):
    """Per-example log p_sigma(x) curves (thin), the fixed sigma (dashed) and each example's best
    sigma (dots): Table 3 as a picture. The dots are not log-likelihoods of a model.

    Parameters
    ----------
    curve : DistortionCurve
        The result of :func:`pyrolik.sigma_curve`.
    fixed_sigma : float, optional
        The sigma every example shares (default: the best one for the mean).
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new 5 x 3.5 inch figure when None.

    Returns
    -------
    matplotlib.axes.Axes
    """
    opt = _curve(curve, "plot_optimal_sigma").optimal_sigma(fixed_sigma)  # Gaussian mode only
    ax = _axes(ax)
    sigmas, ll = curve.sigmas, curve.log_likelihood
    if sigmas is None or ll is None:
        raise ValueError("optimal sigmas need the Gaussian mode (pyrolik.sigma_curve)")
    s = sigmas.numpy()
    centred = (ll - opt.fixed_log_likelihood).numpy()  # relative to the fixed sigma, per example
    ax.plot(s, centred, color="tab:blue", alpha=0.25, lw=0.7)
    ax.plot(opt.sigma.numpy(), opt.improvement.numpy(), "o", color="tab:red", ms=3,
            label=f"per-example best sigma (mean gain {opt.mean_improvement:.1f} nats)")
    ax.axvline(opt.fixed_sigma, color="k", ls="--", lw=0.8, label=f"fixed sigma {opt.fixed_sigma:g}")
    plain_log_axis(ax, "x")
    ax.set_ylim(bottom=max(float(centred.min()), -3 * max(opt.mean_improvement, 1.0)))
    ax.set_xlabel("observation sigma")
    ax.set_ylabel("log p_sigma(x) - log p_fixed(x) [nats]")
    ax.set_title("sigma per example: an upper bound, not a model", fontsize=10)
    ax.legend(frameon=False, fontsize="small")
    return ax


def plot_rate_distortion(curve: DistortionCurve, ax=None, *, bdmc: Any = None,
                         analytic: tuple[Any, Any] | None = None, label: str = "AIS (upper bound)"):
    """Mean rate (nats) against mean distortion over the examples.

    Parameters
    ----------
    curve : DistortionCurve
        The result of :func:`pyrolik.rate_distortion` (or :func:`pyrolik.sigma_curve`).
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new 5 x 3.5 inch figure when None.
    bdmc : DistortionBDMC, optional
        The result of :func:`pyrolik.distortion_bdmc`, drawn as rate sandwiches.
    analytic : tuple of two arrays, optional
        ``(distortion, rate)`` of a known curve.
    label : str
        The legend's label of the AIS curve.

    Returns
    -------
    matplotlib.axes.Axes
    """
    _curve(curve, "plot_rate_distortion")
    if bdmc is not None and not isinstance(bdmc, DistortionBDMC):
        raise TypeError(f"bdmc= takes the result of pyrolik.distortion_bdmc, got {type(bdmc).__name__}")
    ax = _axes(ax)
    d, r = curve.distortion.mean(-1).numpy(), curve.rate.mean(-1).numpy()
    ax.plot(d, r, "o-", ms=3, label=label)
    if analytic is not None:
        ax.plot(*[torch.as_tensor(a).numpy() for a in analytic], "k-", lw=1, label="analytic")
    if bdmc is not None:
        dd = bdmc.distortion.mean(-1).numpy()
        lo, hi = bdmc.rate_lower.mean(-1).numpy(), bdmc.rate_upper.mean(-1).numpy()
        ax.vlines(dd, lo, hi, color="tab:red", lw=2, label="BDMC sandwich (simulated data)")
    plain_log_axis(ax, "x")
    ax.set_xlabel("distortion (mean squared error summed over values)" if curve.mode == "gaussian"
                  else "distortion")
    ax.set_ylabel("rate [nats]")
    ax.set_title("rate-distortion", fontsize=10)
    ax.legend(frameon=False, fontsize="small")
    return ax
