"""The distortion-path wrapper (pyrolik.distortion.path) and the linear-Gaussian oracle it is tested with."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyrolik_models import build

import pyrolik
from pyrolik.distortion.path import distortion_model, squared_error
from pyrolik.model.target import make_target
from tests.oracles import alias

lg = alias("lg_medium")


def _sq(lg, x, u):
    f = u @ lg.W.T + lg.b
    return ((x - f) ** 2).sum(-1)


def test_gaussian_mode_is_the_scaled_squared_error(lg):
    x = lg.sample(3, torch.Generator().manual_seed(1))
    s = 0.1
    dm = distortion_model(lg, sigma=s)
    assert dm.beta_max == pytest.approx(1 / (2 * s * s))
    assert dm.num_values(x) == 5
    t = make_target(dm, x, 2)
    u = torch.randn(6, 2, generator=torch.Generator().manual_seed(2))
    log_prior, log_obs = t.program.log_prior_and_obs(u)
    d = _sq(lg, x.repeat(2, 1), u)
    expected = -dm.beta_max * d + 5 * dm.offset
    torch.testing.assert_close(log_obs, expected, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(log_obs, -d / (2 * s * s) - 2.5 * math.log(2 * math.pi * s * s))
    # the prior is untouched, and the gradient is the closed form -beta_max * grad d
    torch.testing.assert_close(log_prior, dist.Normal(0.0, 1.0).log_prob(u).sum(-1))
    vg = t.value_and_grad(u)
    resid = x.repeat(2, 1) - (u @ lg.W.T + lg.b)
    torch.testing.assert_close(vg.grad_ratio, dm.beta_max * 2 * resid @ lg.W)


def test_user_distortion_mode(lg):
    x = lg.sample(4, torch.Generator().manual_seed(1))
    u = torch.randn(4, 2, generator=torch.Generator().manual_seed(3))
    d = _sq(lg, x, u)
    for fn in (squared_error, lambda a, b: ((a - b) ** 2).sum(-1)):  # per element or per example
        dm = distortion_model(lg, distortion=fn, beta_max=7.0)
        assert dm.offset == 0.0 and dm.beta_max == 7.0
        torch.testing.assert_close(make_target(dm, x, 1).program.log_prior_and_obs(u)[1], -7.0 * d)
    bad = distortion_model(lg, distortion=lambda a, b: (a - b).sum(), beta_max=1.0)
    with pytest.raises(ValueError, match="returned shape"):
        make_target(bad, x, 1)


def test_user_distortion_on_a_bernoulli_decoder():
    """Any observation site works in user mode: the distortion compares x with the site's mean."""
    model = build("digits-iwae")
    x = torch.bernoulli(torch.full((3, 64), 0.3), generator=torch.Generator().manual_seed(0))
    dm = distortion_model(model, distortion=squared_error, beta_max=2.0)
    t = make_target(dm, x, 1)
    u = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        probs = model.decode(u)
    torch.testing.assert_close(t.program.log_prior_and_obs(u)[1], -2.0 * ((x - probs) ** 2).sum(-1))


def test_refusals_name_the_site_and_the_fix(lg):
    model = build("digits-iwae")
    x = torch.zeros(2, 64)
    with pytest.raises(ValueError, match=r"'x' is Bernoulli, not Normal.*distortion="):
        make_target(distortion_model(model, sigma=0.1), x, 1)

    def masked(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
            pyro.sample("x", dist.Normal(z, 1.0).mask(x > 0), obs=x)

    with pytest.raises(ValueError, match="'x' is masked"):
        make_target(distortion_model(masked, sigma=0.1), torch.ones(2), 1)
    with pytest.raises(ValueError, match="exactly one of sigma"):
        distortion_model(lg)
    with pytest.raises(ValueError, match="exactly one of sigma"):
        distortion_model(lg, sigma=0.1, distortion=squared_error)
    with pytest.raises(ValueError, match="needs beta_max"):
        distortion_model(lg, distortion=squared_error)
    with pytest.raises(ValueError, match="sigma must be a positive"):
        distortion_model(lg, sigma=-1.0)
    with pytest.raises(ValueError, match="beta_max is 1 / \\(2 sigma"):
        distortion_model(lg, sigma=0.1, beta_max=3.0)
    with pytest.raises(TypeError, match="callable"):
        distortion_model(lg, distortion="mse", beta_max=1.0)


@pytest.mark.statistical
def test_simulating_from_the_gaussian_mode_uses_the_new_scale(lg, seed):
    """Data simulated from the wrapped model have noise sd sigma: its latents are exact draws of q_beta."""
    s = 0.05
    sim = pyrolik.simulate(distortion_model(lg, sigma=s), 4000, data_shape=(5,), seed=seed)
    resid = sim.x - (sim.latents["z"] @ lg.W.T + lg.b)
    var = resid.pow(2).mean()
    se = s * s * math.sqrt(2 / resid.numel())  # sd of a mean of chi-square(1) * s^2 terms
    assert abs(float(var) - s * s) < 4 * se
    # simulate wraps the refusal in its own ValueError, which keeps the site's message
    with pytest.raises(ValueError, match="site 'x' carries a user distortion.*cannot be simulated"):
        pyrolik.simulate(distortion_model(lg, distortion=squared_error, beta_max=1.0), 3,
                         data_shape=(5,), seed=seed)


def test_linear_gaussian_rate_distortion_oracle(lg):
    """The closed forms agree with each other: R = -beta D - log Z, and log Z at beta = 1/(2 s^2)
    is log p(x) + (D/2) log(2 pi s^2)."""
    x = lg.sample(6, torch.Generator().manual_seed(4))
    for beta in (0.05, 1.0, 2.0, 80.0):
        rate, distortion = lg.rate_distortion(x, beta)
        torch.testing.assert_close(rate, -beta * distortion - lg.log_normalizer(x, beta))
        assert (rate >= 0).all() and (distortion >= 0).all()
    beta = 1 / (2 * lg.s**2)
    torch.testing.assert_close(lg.log_normalizer(x, beta),
                               lg.exact_log_marginal(x) + 2.5 * math.log(2 * math.pi * lg.s**2))
    # rate falls and distortion rises as beta falls: a decreasing curve
    r = torch.stack([lg.rate_distortion(x, b)[0].mean() for b in (0.1, 1.0, 10.0)])
    d = torch.stack([lg.rate_distortion(x, b)[1].mean() for b in (0.1, 1.0, 10.0)])
    assert (r[1:] > r[:-1]).all() and (d[1:] < d[:-1]).all()


@pytest.mark.statistical
def test_log_normalizer_matches_monte_carlo(lg):
    """log Z_beta against prior Monte Carlo (an independent check of the closed form)."""
    x = lg.sample(3, torch.Generator().manual_seed(1))
    z = torch.randn(200_000, 2, generator=torch.Generator().manual_seed(5))
    f = z @ lg.W.T + lg.b
    for beta in (0.1, 1.0):
        w = torch.exp(-beta * ((x[:, None, :] - f) ** 2).sum(-1))  # (3, S)
        est, se = w.mean(-1), w.std(-1) / math.sqrt(z.shape[0])
        exact = lg.log_normalizer(x, beta).exp()
        assert ((est - exact).abs() < 4 * se).all()
