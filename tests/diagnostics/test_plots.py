"""Plots render with the Agg backend for every estimator, and draw the result's numbers."""

from __future__ import annotations

import dataclasses
import types
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numpy.testing import assert_allclose  # noqa: E402

import pyrolik  # noqa: E402
from pyrolik.diagnostics import checks as diagnostics
from pyrolik.diagnostics import plots  # noqa: E402
from pyrolik.ops.stats import log_mean_exp  # noqa: E402
from tests.export_cases import ESTIMATORS  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def n(t):
    return t.detach().cpu().double().numpy()


def png(fig, path):
    fig.savefig(path, dpi=60)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", ESTIMATORS)
def test_overview_renders_for_every_estimator(results, name, tmp_path):
    fig = plots.plot_diagnostics(results[name])
    png(fig, tmp_path / f"{name}.png")


@pytest.mark.parametrize("name", ESTIMATORS)
def test_overview_renders_after_reloading(results, name, tmp_path):
    back = pyrolik.load(pyrolik.save(results[name], tmp_path / "r.nc"))
    png(plots.plot_diagnostics(back), tmp_path / "reloaded.png")


def test_log_weights_are_the_centred_weights(results):
    r = results["likelihood_weighting"]
    ax = plots.plot_log_weights(r)
    dots = [line for line in ax.lines if line.get_marker() == "."]
    centred = n(r.log_weights - log_mean_exp(r.log_weights))
    assert len(dots) == r.num_examples
    for j, line in enumerate(dots):
        assert_allclose(line.get_ydata(), centred[:, j])
    sub = plots.plot_log_weights(r, examples=[2, 0])
    assert [t.get_text() for t in sub.get_xticklabels()] == ["2", "0"]


def test_ess_is_the_fraction_of_weights(results):
    b = results["bdmc"]
    ax = plots.plot_ess(b)
    k = b.lower.log_weights.shape[0]
    assert_allclose(ax.lines[0].get_ydata(), n(b.lower.ess) / k)
    assert_allclose(ax.lines[1].get_ydata(), n(b.upper.ess) / k)


def test_khat_points_are_the_khat(results):
    r = results["likelihood_weighting"]  # 40 samples: PSIS can fit a tail
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ArviZ FutureWarning (it was ignored only in pytest)
        ax = plots.plot_khat(r)
    points = ax.collections[0].get_offsets()
    assert_allclose(points[:, 1], n(r.khat))
    assert "0.7" in ax.get_title()


def test_khat_panel_with_few_chains_shows_the_largest_weight(results):
    """8 chains: no k-hat; the panel says why and shows max_k w_k / sum_j w_j instead."""
    r = results["ais"]
    ax = plots.plot_khat(r)
    k = r.log_weights.shape[0]
    w = np.exp(n(r.log_weights) - n(r.log_weights).max(0))
    assert_allclose(ax.lines[0].get_ydata(), w.max(0) / w.sum(0))
    assert "25" in ax.get_title() and f"got {k}" in ax.get_title()
    b = plots.plot_khat(results["bdmc"])  # forward and reverse
    assert len([ln for ln in b.lines if ln.get_marker() == "o"]) == 2


def test_log_weights_panel_says_which_examples(results):
    r = results["likelihood_weighting"]
    n_ex = r.num_examples
    assert f"all {n_ex} examples" in plots.plot_log_weights(r).get_title()
    assert f"examples 0-1 of {n_ex}" in plots.plot_log_weights(r, max_examples=2).get_title()
    assert f"2 of {n_ex} examples" in plots.plot_log_weights(r, examples=[2, 0]).get_title()


@pytest.mark.parametrize("name", ["ais", "reverse_ais"])
def test_annealing_traces_against_beta(results, name):
    r = results[name]
    axes = plots.plot_annealing(r)
    trace = diagnostics.temperature_trace(r)
    for ax, col in zip(axes, ("acceptance_rate", "step_size", "log_normalizer"), strict=True):
        assert_allclose(ax.lines[0].get_xdata(), trace["beta"])
        assert_allclose(ax.lines[0].get_ydata(), trace[col])


def test_bdmc_bounds_per_example(results):
    b = results["bdmc"]
    ax = plots.plot_bdmc(b)
    order = np.argsort(n(b.per_example_gap))
    segments = np.array(ax.collections[0].get_segments())  # (N, 2 points, xy)
    assert_allclose(segments[:, 0, 1], n(b.lower.log_likelihood)[order])
    assert_allclose(segments[:, 1, 1], n(b.upper.log_likelihood)[order])
    assert [int(t.get_text()) for t in ax.get_xticklabels()] == order.tolist()
    assert f"{b.gap:.3f}" in ax.get_title()
    axes = plots.plot_annealing(b)  # forward and reverse on the same axes
    assert len(axes[0].lines) >= 2


def test_kde_bandwidth(results, tmp_path):
    r = results["kde"]
    ax = plots.plot_bandwidth(r)
    assert_allclose(ax.lines[0].get_ydata(), r.settings["validation_log_likelihood"])


def test_kde_bandwidth_ticks_are_short_and_apart():
    """A 12-point log grid (0.0101321...) gets round, non-overlapping tick labels."""
    import torch

    x = torch.rand(30, 4, generator=torch.Generator().manual_seed(0))
    grid = torch.logspace(np.log10(0.0101321), np.log10(0.5), 12).tolist()
    r = pyrolik.kde(x[:20], x[20:25], bandwidth=grid, validation=x[25:], progress=False)
    ax = plots.plot_bandwidth(r)
    ax.figure.canvas.draw()
    lo, hi = ax.get_xlim()
    labels = [(t.get_position()[0], t.get_text()) for t in ax.get_xticklabels()
              if t.get_text() and lo <= t.get_position()[0] <= hi]
    assert 2 <= len(labels) <= 8 and all(len(text) <= 5 for _, text in labels), labels
    boxes = [t.get_window_extent() for t in ax.get_xticklabels()
             if t.get_text() and lo <= t.get_position()[0] <= hi]
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False))  # no overlap


def test_plots_refuse_what_they_cannot_draw(results):
    with pytest.raises(ValueError, match="kept no log-weights"):
        plots.plot_log_weights(results["kde"])
    with pytest.raises(TypeError, match="AIS or BDMC"):
        plots.plot_annealing(results["iwae"])
    with pytest.raises(TypeError, match="BDMCResult"):
        plots.plot_bdmc(results["ais"])
    with pytest.raises(ValueError, match="kde result"):
        plots.plot_bandwidth(results["ais"])
    with pytest.raises(TypeError, match="the result of pyrolik.kde, got BDMCResult"):
        plots.plot_bandwidth(results["bdmc"])
    with pytest.raises(ValueError, match="must index"):
        plots.plot_log_weights(results["ais"], examples=[7])
    no_grid = dataclasses.replace(results["kde"], settings={"bandwidth": 1.0})
    with pytest.raises(ValueError, match="bandwidth grid"):
        plots.plot_bandwidth(no_grid)
    # the overview of any estimator's result: one bandwidth has nothing to diagnose, and says so
    assert "no weights to diagnose" in plots.plot_diagnostics(no_grid).texts[0].get_text()
    curve = types.SimpleNamespace()  # a curve or any other object: named, with the plots to use
    for plot in (plots.plot_log_weights, plots.plot_ess, plots.plot_khat):
        with pytest.raises(TypeError, match=rf"{plot.__name__} needs an estimator's result.*"
                                            "plot_sigma_curve"):
            plot(curve)
