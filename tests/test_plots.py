"""Plots render with the Agg backend for every estimator, and draw the result's numbers."""

from __future__ import annotations

import dataclasses

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numpy.testing import assert_allclose  # noqa: E402

import pyrolik  # noqa: E402
from pyrolik.diagnostics import checks as diagnostics
from pyrolik.diagnostics import plots  # noqa: E402
from pyrolik.diagnostics.stats import log_mean_exp  # noqa: E402
from tests.export_cases import ESTIMATORS, build  # noqa: E402


@pytest.fixture(scope="module")
def results():
    return build()


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


def test_khat_goes_through_arviz(results):
    r = results["likelihood_weighting"]  # 40 samples: PSIS can fit a tail
    ax = plots.plot_khat(r)
    points = ax.collections[0].get_offsets()
    assert_allclose(points[:, 1], n(r.khat))
    few = plots.plot_khat(results["ais"])  # 6 chains: no k-hat, and the plot says so
    assert "unavailable" in few.texts[0].get_text()


def test_khat_without_arviz_plot_khat(results, monkeypatch):
    """ArviZ 1.x has no plot_khat: the same panel is drawn with matplotlib."""
    import arviz

    monkeypatch.delattr(arviz, "plot_khat")
    r = results["likelihood_weighting"]
    ax = plots.plot_khat(r)
    assert_allclose(ax.lines[0].get_ydata(), n(r.khat))


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


def test_kde_bandwidth(results):
    r = results["kde"]
    ax = plots.plot_bandwidth(r)
    assert_allclose(ax.lines[0].get_ydata(), r.settings["validation_log_likelihood"])


def test_plots_refuse_what_they_cannot_draw(results):
    with pytest.raises(ValueError, match="kept no log-weights"):
        plots.plot_log_weights(results["kde"])
    with pytest.raises(TypeError, match="AIS or BDMC"):
        plots.plot_annealing(results["iwae"])
    with pytest.raises(TypeError, match="BDMCResult"):
        plots.plot_bdmc(results["ais"])
    with pytest.raises(ValueError, match="kde result"):
        plots.plot_bandwidth(results["ais"])
    with pytest.raises(ValueError, match="must index"):
        plots.plot_log_weights(results["ais"], examples=[7])
    no_grid = dataclasses.replace(results["kde"], settings={"bandwidth": 1.0})
    with pytest.raises(ValueError, match="bandwidth grid"):
        plots.plot_diagnostics(no_grid)
