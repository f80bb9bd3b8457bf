"""TrainingMonitor: evaluation of log p(x) inside a training loop (Wu et al. 2017, figure 3)."""

from __future__ import annotations

import math
import random

import matplotlib
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import SVI, Trace_ELBO

import pyrolik
from pyrolik.training import TrainingMonitor

matplotlib.use("Agg")
FAST = pyrolik.HMC(num_leapfrog=2, adapt=None)  # the estimators' accuracy is tested elsewhere


class Linear(torch.nn.Module):
    """z ~ N(0, I_2), x | z ~ N(W z, s^2 I_4) with a trainable W; the guide is the exact posterior."""

    def __init__(self, seed: int = 0, dropout: float = 0.0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.W = torch.nn.Parameter(torch.randn(4, 2, generator=g))
        self.s = 0.5
        self.drop = torch.nn.Dropout(dropout)
        self.modes: list[bool] = []

    def forward(self, x):
        self.modes.append(self.training)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(self.drop(z) @ self.W.T, self.s).to_event(1), obs=x)

    def guide(self, x):
        prec = torch.eye(2) + self.W.T @ self.W / self.s**2
        cov = torch.linalg.inv(prec)
        mean = (x @ self.W / self.s**2) @ cov.T
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(mean, covariance_matrix=cov))

    def exact(self, x):
        cov = self.W @ self.W.T + self.s**2 * torch.eye(4)
        return dist.MultivariateNormal(torch.zeros(4), covariance_matrix=cov).log_prob(x)


def _data(n, seed):
    return torch.randn(n, 4, generator=torch.Generator().manual_seed(seed)) * 1.5


def test_it_evaluates_the_current_parameters_exactly():
    """With the exact posterior as guide, AIS+encoder and IWAE are exact (zero variance) at every
    evaluated epoch of a plain torch training loop: the monitor sees the parameters as they are."""
    model = Linear()
    x_train, x_test = _data(30, 1), _data(7, 2)
    monitor = TrainingMonitor(model, x_train[:6], x_test, guide=model.guide, every=2,
                              methods=("ais", "iwae"), num_steps=3, num_chains=2, num_samples=5,
                              kernel=FAST)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    exact = []
    for epoch in range(5):
        opt.zero_grad()
        loss = -model.exact(x_train).mean()
        loss.backward()
        opt.step()
        if epoch % 2 == 0:
            with torch.no_grad():
                exact.append({"train": model.exact(x_train[:6]), "test": model.exact(x_test)})
        monitor(epoch, loss=loss.item())
    assert monitor.epochs == [0, 2, 4]
    ds = monitor.to_dataset()
    for i, truth in enumerate(exact):
        for subset in ("train", "test"):
            n = len(truth[subset])
            for method in ("ais", "iwae"):
                got = torch.as_tensor(ds[method].sel(subset=subset).values[i, :n])
                torch.testing.assert_close(got, truth[subset].double(), rtol=0, atol=1e-8)
    # the exact values changed between epochs, so a monitor stuck on the first parameters would fail
    assert (exact[0]["train"] - exact[-1]["train"]).abs().max() > 0.1
    # test subset (7) and train subset (6) share the example dim: the train row is NaN-padded
    assert np.isnan(ds["ais"].sel(subset="train").values[:, 6]).all()
    np.testing.assert_allclose(ds["ais_mean"].sel(subset="test").values,
                               [float(t["test"].mean()) for t in exact], atol=1e-8)
    assert ds["loss"].values.shape == (3,) and np.isfinite(ds["loss"].values).all()


def test_training_is_left_alone():
    """Eval mode during the evaluation and the caller's mode after; no random stream advanced;
    no parameter gradient accumulated."""
    model = Linear(dropout=0.5).train()
    monitor = TrainingMonitor(model, _data(4, 1), _data(4, 2), guide=model.guide, num_steps=2,
                              num_chains=2, methods=("ais", "iwae"), num_samples=3)
    torch_state, py_state = torch.get_rng_state(), random.getstate()
    np_state = np.random.get_state()[1].copy()
    model.modes.clear()
    monitor(0)
    assert model.modes and not any(model.modes)  # every evaluation pass ran in eval() mode
    assert model.training
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert random.getstate() == py_state
    assert np.array_equal(np.random.get_state()[1], np_state)
    assert model.W.grad is None


def test_schedule_of_evaluations_force_and_cost():
    model = Linear()
    monitor = TrainingMonitor(model, _data(3, 1), _data(3, 2), every=3, num_steps=2, num_chains=2,
                              kernel=FAST)
    rows = [monitor(epoch) for epoch in range(7)]
    assert [r is not None for r in rows] == [True, False, False, True, False, False, True]
    assert monitor(6, force=True) is None  # already evaluated at this epoch
    assert monitor(7, force=True) is not None
    assert monitor.epochs == [0, 3, 6, 7]
    with pytest.raises(ValueError, match="epochs must increase"):  # a counter that restarts
        monitor(0)
    assert set(rows[0]) == {"ais/train", "ais/test"}
    cost = monitor.cost
    assert cost["eval_seconds"] > 0 and cost["epoch_seconds"] > 0
    assert cost["overhead_per_epoch"] == pytest.approx(cost["epochs_per_evaluation"] / 3)
    assert "training epochs" in monitor.describe_cost()
    ds = monitor.to_dataset()
    assert math.isnan(ds["train_seconds_per_epoch"].values[0])  # nothing trained before epoch 0
    assert ds.attrs["pyrolik_result"] == "TrainingMonitor" and "cost_in_words" in ds.attrs
    ax = monitor.plot()
    assert len(ax.lines) == 2  # AIS train and test


def test_pyro_svi_loop_on_a_digits_vae():
    """The callback inside an ordinary Pyro SVI loop (the shipped digits VAE, two short epochs)."""
    from pyrolik_models import load

    from models.training.train_digits import digits_split  # the package pyrolik_models is, in tests

    vae = load("vae")
    split = digits_split(dtype=torch.float32)
    monitor = TrainingMonitor(vae, split.train[:5], split.test[:5], guide=vae.guide,
                              methods=("ais", "iwae"), num_steps=3, num_chains=2, num_samples=4)
    with pyro.get_param_store().scope():
        svi = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": 1e-4}), Trace_ELBO())
        vae.train()
        for epoch in range(2):
            loss = sum(svi.step(b) for b in split.train[:40].split(20))
            monitor(epoch, loss=loss / 40)
    vae.eval()
    ds = monitor.to_dataset()
    assert ds["ais"].shape == (2, 2, 5) and np.isfinite(ds["ais"].values).all()
    assert np.isfinite(ds["iwae_mean"].values).all()


def test_bad_arguments():
    model = Linear()
    x = _data(3, 1)
    with pytest.raises(ValueError, match="IWAE bound needs the guide"):
        TrainingMonitor(model, x, x, methods=("iwae",))
    with pytest.raises(ValueError, match="methods must be"):
        TrainingMonitor(model, x, x, methods=("kde",))
    with pytest.raises(ValueError, match="every must be a positive integer"):
        TrainingMonitor(model, x, x, every=0)
    with pytest.raises(ValueError, match="same event shape"):
        TrainingMonitor(model, x, torch.zeros(3, 5))
    with pytest.raises(ValueError, match="NaN"):
        TrainingMonitor(model, x, x.clone().fill_(float("nan")))
    with pytest.raises(TypeError, match="module must be"):
        TrainingMonitor(lambda x: None, x, x, module=3)
    monitor = TrainingMonitor(model, x, x, num_steps=2, num_chains=2)
    with pytest.raises(ValueError, match="epoch must be"):
        monitor(-1)
    assert pyrolik.training.TrainingMonitor is TrainingMonitor
