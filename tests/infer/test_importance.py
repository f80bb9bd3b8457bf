"""Likelihood weighting and IWAE against exact marginals (closed form and quadrature)."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from models.oracles.quadrature import BernoulliDecoder, BimodalDecoder, UniformLatent
from tests.helpers import assert_lower_bound, assert_unbiased


@pytest.fixture
def lg():
    return LinearGaussian.random(data_dim=4, latent_dim=2, s=0.7, seed=0)


def test_iwae_with_exact_posterior_is_exact_with_zero_variance(lg, seed):
    x = lg.sample(5, torch.Generator().manual_seed(seed))
    r = pyrolik.iwae(lg, x, lg.exact_guide, num_samples=7, seed=seed, progress=False)
    exact = lg.exact_log_marginal(x)
    torch.testing.assert_close(r.log_likelihood, exact, rtol=0, atol=1e-10)
    assert r.log_weights.std(0).max() < 1e-10
    assert r.bound == "lower" and r.log_weights.shape == (7, 5)


@pytest.mark.statistical
@pytest.mark.parametrize(
    "make", [lambda: LinearGaussian.random(4, 2, s=0.7, seed=0), BimodalDecoder.random,
             BernoulliDecoder.random, UniformLatent.random],
    ids=["linear_gaussian", "bimodal", "bernoulli", "uniform_prior"],
)
def test_likelihood_weighting_is_unbiased_for_p_of_x(make, seed):
    model = make()
    g = torch.Generator().manual_seed(seed)
    x = model.sample(4, g) if isinstance(model, LinearGaussian) else model.sample(4, g)[0]
    exact = model.exact_log_marginal(x)
    r = pyrolik.likelihood_weighting(model, x, num_samples=20_000, seed=seed, progress=False)
    # the prior is a poor proposal: ESS of a few hundred out of 20k still gives a usable SE
    assert_unbiased(r.log_weights, exact, min_ess_frac=0.005)
    assert_lower_bound(r.log_likelihood, exact, r.log_weights)


@pytest.mark.statistical
def test_iwae_bias_shrinks_with_more_samples(lg, seed):
    """A deliberately poor guide: E[L_K] increases toward log p(x) as K grows."""
    x = lg.sample(20, torch.Generator().manual_seed(seed))

    def guide(x):  # a guide computes its proposal from the x it is given (chains x examples)
        loc = lg.exact_posterior(x).loc
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.Normal(loc + 0.5, 1.5).to_event(1))

    exact = lg.exact_log_marginal(x)
    errs = []
    for k in (1, 10, 1000):
        r = pyrolik.iwae(lg, x, guide, num_samples=k, seed=seed, progress=False)
        errs.append((r.log_likelihood - exact).mean())
    assert errs[0] < errs[1] < errs[2] <= 0.05
    assert errs[0] < -0.3  # the K=1 bound (the ELBO) is visibly loose for this guide
    r = pyrolik.iwae(lg, x, guide, num_samples=4000, seed=seed, progress=False)
    assert_unbiased(r.log_weights, exact, min_ess_frac=0.02)


def test_streaming_chunks_match_one_pass_and_keep_memory_bounded(lg, seed):
    x = lg.sample(6)
    one = pyrolik.likelihood_weighting(lg, x, num_samples=300, seed=seed, progress=False)
    chunked = pyrolik.likelihood_weighting(lg, x, num_samples=300, seed=seed, chunk_size=7,
                                           keep_weights=False, progress=False)
    assert chunked.log_weights is None
    # different random streams, same estimand: agree within Monte Carlo error
    diff = (one.log_likelihood - chunked.log_likelihood).abs()
    assert (diff <= 4 * (one.mcse**2 + chunked.mcse**2).sqrt()).all()
    # streaming k-hat equals ArviZ's on all weights when the draws are the same
    kept = pyrolik.likelihood_weighting(lg, x, num_samples=300, seed=seed, chunk_size=7,
                                        keep_weights=True, progress=False)
    torch.testing.assert_close(kept.log_likelihood, chunked.log_likelihood)
    torch.testing.assert_close(kept.khat, chunked.khat)
    torch.testing.assert_close(kept.ess, chunked.ess)


def test_same_seed_same_result_and_batch_size_only_changes_noise(lg, seed):
    x = lg.sample(6)
    a = pyrolik.likelihood_weighting(lg, x, num_samples=2000, seed=seed, progress=False)
    b = pyrolik.likelihood_weighting(lg, x, num_samples=2000, seed=seed, progress=False)
    assert torch.equal(a.log_likelihood, b.log_likelihood)
    c = pyrolik.likelihood_weighting(lg, x, num_samples=2000, seed=seed, batch_size=4,
                                     progress=False)
    diff = (a.log_likelihood - c.log_likelihood).abs()
    assert (diff <= 4 * (a.mcse**2 + c.mcse**2).sqrt()).all()
    assert not torch.equal(a.log_likelihood, c.log_likelihood)


def test_float32_works(lg, seed):
    x = lg.sample(3).float()
    r = pyrolik.iwae(lg, x, lg.exact_guide, num_samples=5, seed=seed, progress=False)
    assert r.log_likelihood.dtype == torch.float32
    torch.testing.assert_close(r.log_likelihood, lg.exact_log_marginal(x).float(), rtol=1e-4,
                               atol=1e-4)


def test_bad_counts_and_guides(lg):
    x = lg.sample(3)
    with pytest.raises(ValueError, match="num_samples must be a positive integer"):
        pyrolik.likelihood_weighting(lg, x, num_samples=0)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        pyrolik.likelihood_weighting(lg, x, num_samples=3, batch_size=-1)
    with pytest.raises(TypeError, match="guide must be a callable"):
        pyrolik.iwae(lg, x, None, num_samples=3)
    with pytest.raises(ValueError, match="seed must be"):
        pyrolik.likelihood_weighting(lg, x, num_samples=3, seed=-2)


def test_summary_is_readable(lg):
    x = lg.sample(3)
    r = pyrolik.likelihood_weighting(lg, x, num_samples=50, seed=0, progress=False)
    s = r.summary()
    assert s.loc["likelihood_weighting", "log p(x) [nats]"] == pytest.approx(r.mean)
    assert "NLL [bits/dim]" in s.columns and len(r.per_example()) == 3
