"""The linear-Gaussian oracle's tempered moments of log p(x | z) and perfect-transition AIS bias,
checked against Monte Carlo with tolerances from the Monte Carlo standard error."""

from __future__ import annotations

import math

import pytest
import torch
from pyrolik_models import LinearGaussian

from pyrolik import schedules


def log_obs(lg, x, z):
    """log p(x | z) for z (K, N, d): (K, N)."""
    return torch.distributions.Normal(z @ lg.W.T + lg.b, lg.s).log_prob(x).sum(-1)


@pytest.fixture
def lg():
    return LinearGaussian.random(data_dim=8, latent_dim=3, s=0.3, seed=2)


@pytest.mark.parametrize("beta", [0.0, 0.02, 0.3, 1.0])
def test_log_obs_moments_match_monte_carlo(lg, beta, seed):
    x = lg.sample(4, torch.Generator().manual_seed(seed))
    k = 40000
    z = lg.tempered_posterior(x, beta).sample((k,))
    r = log_obs(lg, x, z)
    mean, var = lg.log_obs_moments(x, beta)
    assert mean.shape == var.shape == (1, 4)
    se_mean = r.std(0) / math.sqrt(k)
    assert ((r.mean(0) - mean[0]).abs() <= 4 * se_mean).all()
    # the standard error of a sample variance: sqrt((m4 - var^2) / k)
    c = r - r.mean(0)
    se_var = ((c**4).mean(0) - c.var(0) ** 2).sqrt() / math.sqrt(k)
    assert ((c.var(0) - var[0]).abs() <= 4 * se_var).all()


def test_log_obs_variance_is_the_derivative_of_the_mean(lg, seed):
    x = lg.sample(3, torch.Generator().manual_seed(seed))
    betas = torch.tensor([0.01, 0.2, 0.9])
    h = 1e-6
    up, _ = lg.log_obs_moments(x, betas + h)
    down, _ = lg.log_obs_moments(x, betas - h)
    _, var = lg.log_obs_moments(x, betas)
    torch.testing.assert_close((up - down) / (2 * h), var, rtol=1e-6, atol=0)


def test_perfect_transition_bias_matches_simulated_perfect_ais(lg, seed):
    """Draw every z_t exactly from f_{beta_t}: E[log w] is log p(x) minus the closed-form bias,
    and Var[log w] the closed-form variance."""
    x = lg.sample(3, torch.Generator().manual_seed(seed))
    betas = schedules.sigmoid(30)
    bias, var = lg.perfect_transition_bias(x, betas)
    k = 20000
    log_w = torch.zeros(k, 3)
    for t in range(30):
        z = lg.tempered_posterior(x, float(betas[t])).sample((k,))
        log_w += (betas[t + 1] - betas[t]) * log_obs(lg, x, z)
    gap = lg.exact_log_marginal(x) - log_w.mean(0)
    assert ((gap - bias).abs() <= 4 * log_w.std(0) / math.sqrt(k)).all()
    assert (bias > 0).all()
    c = log_w - log_w.mean(0)
    se_var = ((c**4).mean(0) - c.var(0) ** 2).sqrt() / math.sqrt(k)
    assert ((c.var(0) - var).abs() <= 4 * se_var).all()


def test_perfect_transition_bias_of_one_step_is_the_kl_from_prior_to_posterior(lg):
    """Schedule [0, 1]: likelihood weighting, whose bias is KL(p(z) || p(z | x))."""
    x = lg.sample(2, torch.Generator().manual_seed(0))
    bias, _ = lg.perfect_transition_bias(x, torch.tensor([0.0, 1.0]))
    prior = torch.distributions.MultivariateNormal(torch.zeros(3), torch.eye(3))
    post = lg.exact_posterior(x)
    expected = torch.distributions.kl_divergence(prior.expand((2,)), post)
    torch.testing.assert_close(bias, expected)
