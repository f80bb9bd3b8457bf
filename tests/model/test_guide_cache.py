"""Mean-field Normal guides kept between evaluations (AIS+encoder): same numbers, fewer guide runs."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from torch import nn

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from pyrolik.model.target import make_target
from tests.oracles import alias


class CountingGuide:
    """An amortised Gaussian encoder guide that counts how often it runs."""

    def __init__(self, data_dim: int, latent_dim: int, dropout: float = 0.0, seed: int = 0):
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(data_dim, 8), nn.Tanh(), nn.Dropout(dropout),
                                 nn.Linear(8, 2 * latent_dim))
        self.latent_dim, self.calls = latent_dim, 0

    def __call__(self, x):
        self.calls += 1
        net = pyro.module("encoder", self.net)
        with pyro.plate("data", x.shape[0]):
            h = net(x)
            loc, scale = h[..., : self.latent_dim], nn.functional.softplus(h[..., self.latent_dim :])
            pyro.sample("z", dist.Normal(loc, scale + 0.1).to_event(1))


def _reference(t, u):
    """The guide-path value and gradients by plain autograd, the guide rerun (the contract)."""
    u = u.detach().requires_grad_(True)
    lp, lo = t.program.log_prior_and_obs(u)
    lq = t.program.log_guide(u)
    ratio = lp + lo - lq
    (g_init,) = torch.autograd.grad(lq.sum(), u, retain_graph=True)
    (g_ratio,) = torch.autograd.grad(ratio.sum(), u)
    return lq.detach(), ratio.detach(), g_init, g_ratio


lg = alias("lg_small")


def _target(lg, guide):
    pyro.clear_param_store()
    x = lg.sample(3, torch.Generator().manual_seed(1))
    # replay off: these tests count the guide's runs by the eager path (tests/model/test_replay.py: replay)
    t = make_target(lg, x, num_chains=5, guide=guide, replay=False)
    u = torch.randn(t.layout.rows, t.layout.latent_dim, generator=torch.Generator().manual_seed(2))
    return t, u


def test_an_amortised_guide_is_run_once_and_gives_the_same_numbers(lg):
    guide = CountingGuide(lg.data_dim, lg.latent_dim)
    t, u = _target(lg, guide)
    first = t.value_and_grad(u, "guide")
    assert t.kept_guide.cached is not False  # the guide qualified
    calls = guide.calls
    for step in range(3):
        got = t.value_and_grad(u + 0.1 * step, "guide")
    assert guide.calls == calls  # not run again
    for a, b in zip(got, _reference(t, u + 0.2), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    for a, b in zip(first, _reference(t, u), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_a_parameter_changed_in_place_is_seen(lg):
    guide = CountingGuide(lg.data_dim, lg.latent_dim)
    t, u = _target(lg, guide)
    t.value_and_grad(u, "guide")
    with torch.no_grad():
        guide.net[0].weight.mul_(1.5)
    got = t.value_and_grad(u, "guide")
    for a, b in zip(got, _reference(t, u), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_a_guide_in_training_mode_is_kept_in_eval_mode_and_latent_dependent_ones_rerun(lg):
    noisy = CountingGuide(lg.data_dim, lg.latent_dim, dropout=0.5)  # training mode: dropout on
    with pytest.warns(pyrolik.IdiomWarning, match=r"guide calls modules in training mode \(Dropout"):
        t, u = _target(lg, noisy)
    got = t.value_and_grad(u, "guide")
    assert t.kept_guide.cached is not False and noisy.net.training  # the user's flag is kept
    noisy.net.eval()
    for a, b in zip(got, _reference(t, u), strict=True):  # the numbers of the guide in eval mode
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)

    def chained(x):  # w's location depends on the value of z
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
            pyro.sample("w", dist.Normal(z.sum(-1), 0.5))

    def hidden(x):  # the same dependence, behind detach: autograd cannot see it, a rerun does
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
            pyro.sample("w", dist.Normal(z.detach().sum(-1), 0.5))

    def model(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
            w = pyro.sample("w", dist.Normal(z.sum(-1), 1.0))
            pyro.sample("x", dist.Normal(w.unsqueeze(-1), 1.0).to_event(1), obs=x)

    x = torch.randn(3, 1, generator=torch.Generator().manual_seed(0))
    for guide in (chained, hidden):
        t = make_target(model, x, num_chains=2, guide=guide)
        u = torch.randn(t.layout.rows, t.layout.latent_dim,
                        generator=torch.Generator().manual_seed(1))
        got = t.value_and_grad(u, "guide")
        assert t.kept_guide.cached is False
        if guide is chained:  # (with detach the guide's own gradient is not the density's)
            for a, b in zip(got, _reference(t, u), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_ais_with_a_kept_exact_mean_field_guide_is_exact():
    """A 1-latent linear-Gaussian model: the exact posterior is a Normal guide, which is kept."""
    lg = LinearGaussian.random(data_dim=3, latent_dim=1, s=0.7, seed=3)
    x = lg.sample(4, torch.Generator().manual_seed(4))

    def exact(x):
        post = lg.exact_posterior(x)
        with pyro.plate("data", x.shape[0]):
            sd = post.covariance_matrix.diagonal(dim1=-2, dim2=-1).sqrt()
            pyro.sample("z", dist.Normal(post.loc, sd).to_event(1))

    r = pyrolik.ais(lg, x, num_steps=6, num_chains=5, init=exact, seed=0, progress=False)
    truth = lg.exact_log_marginal(x)
    torch.testing.assert_close(r.log_weights, truth.expand(5, -1), rtol=1e-9, atol=1e-9)
