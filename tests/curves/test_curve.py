"""Loss-data curves end to end: representations, digits, MNIST-test when present, the plot."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from pyrolik import curves  # noqa: E402
from pyrolik.io.datasets import find_data_dir, load_digits, load_mnist_test  # noqa: E402

FAST = dict(num_seeds=2, num_steps=60, batch_size=64)


@pytest.fixture(scope="module")
def digits_split():
    x, y = load_digits(dtype=torch.float64)
    return curves.train_valid_split(x, y, valid_size=0.25, seed=0)


def test_representations_pca_random_projection_raw(seed):
    g = torch.Generator().manual_seed(seed)
    # data on a line in 3-D plus tiny noise: the first component is the line's direction
    t = torch.randn(200, 1, generator=g)
    direction = torch.tensor([[2.0, -1.0, 2.0]]) / 3.0
    x = 5.0 + t * direction + 1e-6 * torch.randn(200, 3, generator=g)
    z = curves.pca(x, 1)(x)
    assert torch.corrcoef(torch.cat([z.T, t.T]))[0, 1].abs() == pytest.approx(1.0, abs=1e-8)
    assert z.mean().abs() < 1e-8  # centred on the fit data's mean
    rp = curves.random_projection(4, seed=3)
    torch.testing.assert_close(rp(x), rp(x.clone()))  # same matrix on every call
    assert rp(x).shape == (200, 4)
    assert not torch.allclose(rp(x), curves.random_projection(4, seed=4)(x))
    assert curves.raw()(torch.zeros(5, 2, 3)).shape == (5, 6)
    with pytest.raises(ValueError, match="dim"):
        curves.pca(x, 4)
    with pytest.raises(ValueError, match="dim"):
        curves.random_projection(0)
    with pytest.raises(TypeError, match="Tensor"):
        curves.raw()([1.0, 2.0])


def test_three_representations_of_digits(digits_split):
    tr, va = digits_split
    reps = {"raw": curves.raw(), "pca8": curves.pca(tr[0], 8), "rp8": curves.random_projection(8)}
    sizes = [20, 100, len(tr[0])]
    lc = curves.evaluate_representations(reps, tr, va, sizes=sizes, **FAST)
    assert list(lc) == ["raw", "pca8", "rp8"]
    for name, c in lc.items():
        assert c.name == name and c.num_classes == 10
        assert c.loss.shape == c.accuracy.shape == (2, 3)
        assert c.sizes.tolist() == sizes
        assert c.info["in_dim"] == {"raw": 64, "pca8": 8, "rp8": 8}[name]
        assert c.mean_loss[-1] < c.mean_loss[0]  # more data helps
    assert lc["raw"].mean_accuracy[-1] > 0.9  # a linear probe on pixels reads digits
    eps = curves.epsilon_from_baseline(lc["raw"], slack=0.1)
    table = curves.measures_table(lc, eps)
    assert table.shape == (9, 6)
    assert curves.best_representation(table).shape == (3, 5)
    df = lc["raw"].to_frame()
    assert len(df) == 6 and set(df.columns) == {"representation", "n", "seed", "loss", "accuracy"}
    fig = curves.plot_curves(lc, eps)
    assert len(fig.axes) == 6  # five panels and the legend
    plt.close(fig)


def test_same_seed_same_curve_and_mlp_probe(digits_split):
    tr, va = digits_split
    x, y = tr[0][:300], tr[1][:300]
    kw = dict(sizes=[30, 300], probe="mlp", hidden=16, **FAST)
    a = curves.loss_data_curve(x, y, va[0], va[1], seed=1, **kw)
    b = curves.loss_data_curve(x.numpy(), y.numpy(), va[0], va[1], seed=1, **kw)
    c = curves.loss_data_curve(x, y, va[0], va[1], seed=2, **kw)
    np.testing.assert_array_equal(a.loss, b.loss)
    assert not np.array_equal(a.loss, c.loss)
    assert a.info["probe"] == "mlp" and a.info["hidden"] == 16
    assert a.info["lr"] == curves.default_lr("mlp", 64)


def test_default_lr_keeps_lr_times_dimension_fixed():
    assert curves.default_lr("linear", 64) == pytest.approx(0.5 / 64)
    assert curves.default_lr("mlp", 784) == pytest.approx(0.5 / 784)
    assert curves.default_lr("linear", 2) == 0.03 and curves.default_lr("mlp", 8) == 0.01
    with pytest.raises(ValueError, match="probe"):
        curves.default_lr("svm", 3)


def test_truncate_and_default_sizes():
    c = curves.LossDataCurve([10, 100, 1000], [[1.0, 0.5, 0.2]], name="r")
    t = c.truncate(100)
    assert t.sizes.tolist() == [10, 100] and t.name == "r"
    with pytest.raises(ValueError, match="below the smallest"):
        c.truncate(5)
    s = curves.default_sizes(1437)
    assert s[0] == 10 and s[-1] == 1437 and len(s) == 8 and np.all(np.diff(s) > 0)
    assert curves.default_sizes(5).tolist() == [5]


def _task(n=40, d=3):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, d, generator=g), torch.arange(n) % 3


@pytest.mark.parametrize(
    "change, exc, match",
    [
        ({"features": "x"}, TypeError, "numpy array"),
        ({"features": torch.full((40, 3), float("nan"))}, ValueError, "NaN"),
        ({"features": torch.zeros(40)}, ValueError, "2-D"),
        ({"labels": torch.zeros(40)}, TypeError, "integer class"),
        ({"labels": torch.zeros(39, dtype=torch.long)}, ValueError, "one label per example"),
        ({"labels": -torch.ones(40, dtype=torch.long)}, ValueError, ">= 0"),
        ({"valid_features": torch.zeros(10, 4)}, ValueError, "columns"),
        ({"sizes": [5, 50]}, ValueError, "sizes"),
        ({"sizes": [20, 10]}, ValueError, "sizes"),
        ({"probe": "svm"}, ValueError, "probe"),
        ({"num_steps": 0}, ValueError, "num_steps"),
        ({"num_seeds": 1.5}, ValueError, "num_seeds"),
        ({"lr": 0.0}, ValueError, "lr"),
        ({"weight_decay": -1.0}, ValueError, "weight_decay"),
        ({"num_classes": 2}, ValueError, "num_classes"),
    ],
)
def test_loss_data_curve_bad_input(change, exc, match):
    x, y = _task()
    args = {"features": x, "labels": y, "valid_features": x[:10], "valid_labels": y[:10],
            "num_steps": 2, "num_seeds": 1}
    args.update(change)
    with pytest.raises(exc, match=match):
        curves.loss_data_curve(**args)


def test_divergent_training_is_reported():
    x, y = _task()
    with pytest.raises(FloatingPointError, match="smaller lr"):
        curves.loss_data_curve(x * 1e300, y, x[:10] * 1e300, y[:10], sizes=[10, 40],
                               num_seeds=1, num_steps=3, lr=1e10, standardize=False)


def test_split_and_evaluate_bad_input():
    x, y = _task()
    with pytest.raises(ValueError, match="valid_size"):
        curves.train_valid_split(x, y, valid_size=40)
    for bad in (2.5, 1.0, True, "0.2"):  # 2.5 and 1.0 were counts of 2 and 1, True of 1
        with pytest.raises(ValueError, match=r"valid_size must be a fraction in \(0, 1\)"):
            curves.train_valid_split(x, y, valid_size=bad)
    with pytest.raises(ValueError, match="num_seeds must be a positive integer"):
        curves.loss_data_curve(x, y, x[:10], y[:10], sizes=[10, 20], num_seeds=True)
    with pytest.raises(ValueError, match="one label per example|examples"):
        curves.train_valid_split(x, y[:5])
    (xt, yt), (xv, yv) = curves.train_valid_split(x, y, valid_size=0.25)
    assert len(xv) == 10 and len(xt) == 30
    assert sorted(torch.cat([xt, xv])[:, 0].tolist()) == sorted(x[:, 0].tolist())
    with pytest.raises(TypeError, match="callable"):
        curves.evaluate_representations({"a": 3}, (xt, yt), (xv, yv))
    with pytest.raises(TypeError, match="non-empty dict"):
        curves.evaluate_representations({}, (xt, yt), (xv, yv))


def test_mnist_test_set_when_present():
    data_dir = find_data_dir()
    if data_dir is None:
        pytest.skip("MNIST test set not found: set PYROLIK_DATA to the folder holding it")
    images, labels = load_mnist_test(data_dir)
    x = torch.as_tensor(images[:3000], dtype=torch.float64) / 255.0
    y = torch.as_tensor(labels[:3000].astype(np.int64))
    tr, va = curves.train_valid_split(x, y, valid_size=1000, seed=0)
    reps = {"raw": curves.raw(), "pca16": curves.pca(tr[0], 16)}
    lc = curves.evaluate_representations(reps, tr, va, sizes=[50, 2000], **FAST)
    assert lc["raw"].mean_accuracy[-1] > 0.8
    assert lc["pca16"].mean_loss[-1] < lc["pca16"].mean_loss[0]
