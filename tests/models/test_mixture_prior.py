"""The mixture-prior oracle's closed forms: its marginal against quadrature, its posterior against
Bayes' rule at any latent, its draws against the marginal's moments."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyrolik_models.oracles import MixturePriorLinearGaussian


@pytest.fixture
def mix() -> MixturePriorLinearGaussian:
    return MixturePriorLinearGaussian.random(data_dim=3, latent_dim=2, num_components=3, seed=0)


def log_joint(mix, x, z):
    """log p(z) + log p(x | z) by running the model, for z (N, d)."""
    tr = pyro.poutine.trace(pyro.poutine.condition(mix, data={"z": z})).get_trace(x)
    return tr.nodes["z"]["fn"].log_prob(z) + tr.nodes["x"]["fn"].log_prob(x)


def test_the_model_samples_a_mixture_prior(mix):
    x = mix.sample(4, torch.Generator().manual_seed(0))
    tr = pyro.poutine.trace(mix).get_trace(x)
    assert isinstance(tr.nodes["z"]["fn"], dist.MixtureSameFamily)
    assert tr.nodes["z"]["value"].shape == (4, 2) and tr.nodes["x"]["is_observed"]


def test_marginal_matches_quadrature_over_the_latent(mix):
    x = mix.sample(3, torch.Generator().manual_seed(1))
    h = 0.05  # the integrand is smooth: a Riemann sum at this step is exact to ~1e-10
    grid = torch.arange(-8.0, 8.0 + h / 2, h)
    z = torch.cartesian_prod(grid, grid)  # (G, 2)
    log_p = torch.stack([log_joint(mix, xn.expand(len(z), -1), z) for xn in x])  # (N, G)
    quad = log_p.logsumexp(-1) + 2 * math.log(h)
    torch.testing.assert_close(quad, mix.exact_log_marginal(x), rtol=0, atol=1e-6)


def test_posterior_is_bayes_rule_at_any_latent(mix):
    x = mix.sample(5, torch.Generator().manual_seed(2))
    post = mix.exact_posterior(x)
    for z in (torch.randn(5, 2, generator=torch.Generator().manual_seed(3)) * 3,
              post.sample()):
        torch.testing.assert_close(post.log_prob(z) + mix.exact_log_marginal(x),
                                   log_joint(mix, x, z), rtol=0, atol=1e-10)


def test_draws_have_the_marginal_moments(mix, seed):
    n = 20000
    x = mix.sample(n, torch.Generator().manual_seed(seed))
    marginal = mix.marginal()
    se = marginal.variance.sqrt() / math.sqrt(n)
    assert ((x.mean(0) - marginal.mean).abs() <= 4 * se).all()
