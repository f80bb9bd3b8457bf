"""Every figure pyrolik draws is readable: no two pieces of text overlap, none is cut off, and the
figure fits a documentation page (at most 10 inches wide).

Each public plot function draws on a small real result; matplotlib's Agg renderer then measures the
window extent of every title, axis label, visible tick label, offset text, text annotation, legend
and suptitle. Two boxes overlapping by more than a pixel each way fail the test with their texts.
"""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import pyrolik  # noqa: E402
from pyrolik import curves  # noqa: E402
from pyrolik.diagnostics import plots  # noqa: E402
from pyrolik.distortion import plot_optimal_sigma, plot_rate_distortion, plot_sigma_curve  # noqa: E402
from tests.export_cases import LG  # noqa: E402

MAX_WIDTH_INCHES = 10.0  # a documentation page's column is about 900 px: 10 in at 100 dpi at most
EXAMPLES = 24  # enough examples for crowded tick labels


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _visible_tick_labels(axis) -> list:
    lo, hi = sorted(axis.get_view_interval())
    out = []
    for tick in axis.get_major_ticks() + axis.get_minor_ticks():
        loc = tick.get_loc()
        if loc is None or not (lo - 1e-12 * abs(lo) <= loc <= hi + 1e-12 * abs(hi)):
            continue
        out += [label for label in (tick.label1, tick.label2) if label.get_visible()]
    return out


def text_boxes(fig) -> list[tuple[str, object]]:
    """``(description, window extent)`` of every visible, non-empty piece of text in ``fig``."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes: list[tuple[str, object]] = []

    def add(where: str, artist) -> None:
        if artist is None or not artist.get_visible():
            return
        text = artist.get_text().strip() if hasattr(artist, "get_text") else "legend"
        if not text:
            return
        box = artist.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            boxes.append((f"{where} {text!r}", box))

    add("suptitle", fig._suptitle)
    for t in fig.texts:
        if t is not fig._suptitle:
            add("figure text", t)
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        for name in ("title", "_left_title", "_right_title"):
            add(f"axes {i} title", getattr(ax, name))
        add(f"axes {i} x label", ax.xaxis.label)
        add(f"axes {i} y label", ax.yaxis.label)
        add(f"axes {i} x offset", ax.xaxis.get_offset_text())
        add(f"axes {i} y offset", ax.yaxis.get_offset_text())
        for t in _visible_tick_labels(ax.xaxis):
            add(f"axes {i} x tick", t)
        for t in _visible_tick_labels(ax.yaxis):
            add(f"axes {i} y tick", t)
        for t in ax.texts:
            add(f"axes {i} text", t)
        add(f"axes {i} legend", ax.get_legend())
    return boxes


def layout_problems(fig) -> list[str]:
    """Overlapping text boxes, text outside the figure, and a figure too wide for a page."""
    boxes = text_boxes(fig)
    problems = []
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        w = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
        h = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        if w > 1 and h > 1:
            problems.append(f"{a} overlaps {b}")
    frame = fig.bbox
    for a, box in boxes:
        if box.x0 < frame.x0 - 1 or box.y0 < frame.y0 - 1 or box.x1 > frame.x1 + 1 \
                or box.y1 > frame.y1 + 1:
            problems.append(f"{a} is cut off by the figure's edge")
    if fig.get_figwidth() > MAX_WIDTH_INCHES:
        problems.append(f"the figure is {fig.get_figwidth():.1f} in wide (> {MAX_WIDTH_INCHES})")
    return problems


def figure_of(drawn):
    if isinstance(drawn, matplotlib.figure.Figure):
        return drawn
    if isinstance(drawn, np.ndarray | list | tuple):
        return np.asarray(drawn).flat[0].figure
    return drawn.figure


# ------------------------------------------------------------------------------ small real results
@pytest.fixture(scope="module")
def runs():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        g = torch.Generator().manual_seed(0)
        x = LG.sample(EXAMPLES, g)
        kernel = pyrolik.HMC(num_leapfrog=3)
        ais = pyrolik.ais(LG, x, num_steps=12, num_chains=8, kernel=kernel, seed=0, progress=False)
        bdmc = pyrolik.bdmc(LG, EXAMPLES, data_shape=(5,), num_steps=12, num_chains=8,
                            kernel=kernel, seed=0, progress=False)
        lw = pyrolik.likelihood_weighting(LG, x, num_samples=30, seed=0, progress=False,
                                          keep_weights=True)
        lw_few = pyrolik.likelihood_weighting(LG, x, num_samples=6, seed=0, progress=False,
                                              keep_weights=True)
        samples = LG.sample(200, g)
        kde = pyrolik.kde(samples, x, bandwidth=[0.03, 0.1, 0.3, 1.0, 3.0],
                          validation=LG.sample(50, g))
        convergence = pyrolik.infer.bdmc_convergence(LG, 6, data_shape=(5,), num_steps=[4, 8, 16],
                                                     num_chains=4, seed=0, progress=False)
        sigma = pyrolik.sigma_curve(LG, x[:6], [0.1, 0.2, 0.3, 0.5, 1.0], num_steps=20,
                                    num_chains=8, seed=0, progress=False)
        rd = pyrolik.rate_distortion(LG, x[:6], [0.5, 1.0, 2.0, 5.0], num_steps=20,
                                     num_chains=8, seed=0, progress=False)
    finally:
        torch.set_default_dtype(old)
    return {"x": x, "ais": ais, "bdmc": bdmc, "lw": lw, "lw_few": lw_few, "kde": kde,
            "convergence": convergence, "sigma": sigma, "rd": rd}


@pytest.fixture(scope="module")
def loss_data():
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.as_tensor(data.data[:600] / 16.0, dtype=torch.float32)
    y = torch.as_tensor(data.target[:600])
    train, valid = curves.train_valid_split(x, y, valid_size=0.25, seed=0)
    reps = {"raw": curves.raw(), "pca8": curves.pca(train[0], 8)}
    lc = curves.evaluate_representations(reps, train, valid, sizes=[20, 60, 150, 400],
                                         num_seeds=2, num_steps=40)
    return lc, curves.epsilon_from_baseline(lc["raw"], slack=0.1)


PLOTS = {
    "plot_diagnostics(ais)": lambda r: plots.plot_diagnostics(r["ais"]),
    "plot_diagnostics(bdmc)": lambda r: plots.plot_diagnostics(r["bdmc"]),
    "plot_diagnostics(likelihood_weighting)": lambda r: plots.plot_diagnostics(r["lw"]),
    "plot_diagnostics(kde)": lambda r: plots.plot_diagnostics(r["kde"]),
    "plot_log_weights(ais)": lambda r: plots.plot_log_weights(r["ais"]),
    "plot_log_weights(bdmc)": lambda r: plots.plot_log_weights(r["bdmc"]),
    "plot_ess(bdmc)": lambda r: plots.plot_ess(r["bdmc"]),
    "plot_khat(likelihood_weighting)": lambda r: plots.plot_khat(r["lw"]),
    "plot_khat(few weights)": lambda r: plots.plot_khat(r["lw_few"]),
    "plot_annealing(bdmc)": lambda r: plots.plot_annealing(r["bdmc"]),
    "plot_bdmc": lambda r: plots.plot_bdmc(r["bdmc"]),
    "plot_bandwidth": lambda r: plots.plot_bandwidth(r["kde"]),
    "plot_bdmc_convergence": lambda r: plots.plot_bdmc_convergence(r["convergence"]),
    "plot_posterior_decodings": lambda r: plots.plot_posterior_decodings(
        r["ais"], lambda z: z["z"] @ LG.W.T + LG.b, image_shape=(1, 5)),
    "plot_sigma_curve": lambda r: plot_sigma_curve(r["sigma"]),
    "plot_optimal_sigma": lambda r: plot_optimal_sigma(r["sigma"], 0.3),
    "plot_rate_distortion": lambda r: plot_rate_distortion(r["rd"]),
}


@pytest.mark.parametrize("name", PLOTS)
def test_no_text_overlaps(runs, name):
    problems = layout_problems(figure_of(PLOTS[name](runs)))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", ["plot_loss_data", "plot_curves"])
def test_no_text_overlaps_in_loss_data_curves(loss_data, name):
    lc, eps = loss_data
    drawn = curves.plot_loss_data(lc, epsilon=eps) if name == "plot_loss_data" else \
        curves.plot_curves(lc, eps)
    problems = layout_problems(figure_of(drawn))
    assert not problems, "\n".join(problems)


def test_no_text_overlaps_in_training_curves():
    from tests.training.test_monitor import FAST, Linear, _data

    monitor = pyrolik.training.TrainingMonitor(Linear(), _data(3, 1), _data(3, 2), every=1,
                                               num_steps=2, num_chains=2, kernel=FAST)
    for epoch in range(3):
        monitor(epoch)
    problems = layout_problems(figure_of(monitor.plot()))
    assert not problems, "\n".join(problems)


def test_every_public_plot_function_is_checked():
    """A new plot function gets a case here (the names are read off the packages' ``__all__``)."""
    import inspect

    from pyrolik import distortion

    public = {name for module in (plots, curves, distortion) for name in module.__all__
              if name.startswith("plot_") and inspect.isfunction(getattr(module, name))}
    checked = {key.split("(")[0] for key in PLOTS} | {"plot_loss_data", "plot_curves"}
    assert public <= checked, public - checked


def test_the_check_sees_an_overlap():
    """The check can fail: two long titles side by side in a narrow figure run into each other."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(4, 2))
    a.set_title("a long title that runs on and on")
    b.set_title("and another one beside it")
    problems = layout_problems(fig)
    assert any("overlaps" in p and "title" in p for p in problems), problems
    fig, ax = plt.subplots(figsize=(12, 2))
    ax.set_xticks(np.arange(200), [str(i * 1000) for i in range(200)])
    assert any("x tick" in p for p in layout_problems(fig))
