"""Mixture priors (``dist.MixtureSameFamily``: mixture-of-Gaussians priors, GMVAE- and VampPrior-style
VAEs) are evaluated exactly: the latent is moved on its components' support and scored by the
mixture's density. Checked against the closed form of a mixture prior with a linear-Gaussian
decoder (``pyrolik_models.oracles.MixturePriorLinearGaussian``) and, for constrained components, by
quadrature; Monte Carlo tolerances from the standard error, fixed seeds."""

from __future__ import annotations

import functools
import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyrolik_models.oracles import MixturePriorLinearGaussian

import pyrolik
from tests.export_cases import summary_where_defined
from tests.helpers import assert_lower_bound, assert_unbiased, assert_upper_bound, plain

MIX = MixturePriorLinearGaussian.random(data_dim=3, latent_dim=2, num_components=3, sigma=0.5,
                                        seed=0, dtype=torch.float64)
KERNEL = plain(pyrolik.HMC(num_leapfrog=5))  # the chains' weights are read one by one


def data(n: int, seed: int) -> torch.Tensor:
    return MIX.sample(n, torch.Generator().manual_seed(seed))


@functools.cache
def sandwich(seed: int):
    """One BDMC run on data simulated from the mixture model (shared by the tests below)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return pyrolik.bdmc(MIX, 4, data_shape=(3,), num_steps=50, num_chains=100, kernel=KERNEL,
                            seed=seed, progress=False)
    finally:
        torch.set_default_dtype(old)


def test_the_exact_posterior_as_proposal_gives_the_exact_value_every_time(seed):
    """The mixture's own density is what pyrolik scores: with the exact posterior (a mixture too)
    as proposal every importance weight is p(x) exactly."""
    x = data(4, seed)
    exact = MIX.exact_log_marginal(x)
    r = pyrolik.iwae(MIX, x, MIX.exact_guide, num_samples=5, seed=seed, progress=False)
    torch.testing.assert_close(r.log_weights, exact.expand(5, -1), rtol=0, atol=1e-9)
    r = pyrolik.ais(MIX, x, num_steps=3, num_chains=4, init=MIX.exact_guide, seed=seed,
                    kernel=pyrolik.HMC(num_leapfrog=2), progress=False)
    torch.testing.assert_close(r.log_weights, exact.expand(4, -1), rtol=0, atol=1e-9)


@pytest.mark.statistical
def test_forward_ais_is_unbiased(seed):
    x = data(4, seed)
    exact = MIX.exact_log_marginal(x)
    r = pyrolik.ais(MIX, x, num_steps=50, num_chains=200, kernel=KERNEL, seed=seed, progress=False)
    assert r.bound == "lower"
    assert_unbiased(r.log_weights, exact)
    assert_lower_bound(r.log_likelihood, exact, r.log_weights)


@pytest.mark.statistical
def test_reverse_ais_from_exact_posterior_draws_is_an_upper_bound(seed):
    x = data(4, seed)
    exact = MIX.exact_log_marginal(x)
    z = MIX.exact_posterior(x).sample(torch.Size([200]))  # (K, N, d): one exact draw per chain
    r = pyrolik.reverse_ais(MIX, x, {"z": z}, num_steps=50, num_chains=200, kernel=KERNEL,
                            seed=seed, progress=False)
    assert r.bound == "upper"
    # E[w_rev] = 1 / p(x) holds too, but HMC does not cross between the prior's modes: near
    # beta = 0 the reverse weights are heavy-tailed (rare chains in a mode the others miss), their
    # sample mean falls short of 1 / p(x) by more than its naive standard error, and the upper
    # bound is loose; it is an upper bound within its MCSE, which is what is checked
    assert_upper_bound(r.log_likelihood, exact, r.log_weights)


@pytest.mark.statistical
def test_bdmc_sandwiches_the_exact_value(seed):
    b = sandwich(seed)
    exact = MIX.exact_log_marginal(b.x)
    assert_lower_bound(b.lower.log_likelihood, exact, b.lower.log_weights)
    assert_upper_bound(b.upper.log_likelihood, exact, b.upper.log_weights)
    assert b.latents["z"].shape == (4, 2)


def test_simulate_draws_the_latent_from_the_mixture_prior(seed):
    n = 4000
    sim = pyrolik.simulate(MIX, n, data_shape=(3,), seed=seed)
    z = sim.latents["z"]
    prior = MIX.prior()
    se = prior.variance.sqrt() / math.sqrt(n)
    assert ((z.mean(0) - prior.mean).abs() <= 4 * se).all()
    resid = sim.x - z @ MIX.W.T - MIX.b  # x | z ~ N(Wz + b, sigma^2 I)
    assert abs(float(resid.std()) - MIX.sigma) < 4 * MIX.sigma / math.sqrt(2 * resid.numel())


@pytest.mark.filterwarnings("ignore:Your data appears to have a single value")  # a collapsed block
def test_the_arviz_export_holds_the_mixture_latent(seed):
    b = sandwich(seed)
    for r, group in ((b.lower, "posterior"), (b.upper, "prior")):
        idata = r.to_inference_data()
        z = idata[group]["z"]  # (chain blocks, draws, examples, d): the 100 chains, resampled
        assert z.shape[0] * z.shape[1] == 100 and z.shape[2:] == (4, 2)
        # the components' support is the real line: the unconstrained draws are the draws
        assert (idata[f"unconstrained_{group}"]["u"].values == idata[group]["z"].values).all()
        torch.testing.assert_close(  # evidence is one draw: (chain, draw, examples) of 1 x 1 x N
            torch.as_tensor(idata.evidence.log_marginal_likelihood.values).reshape(-1),
            r.log_likelihood)
        summary_where_defined(idata, group)
    idata = b.to_inference_data()
    assert (idata.simulated["z"].values == b.latents["z"].numpy()).all()


# -- constrained components: a mixture of LogNormals per coordinate, under .expand().to_event() ---
WEIGHTS, LOCS, SCALES, NOISE = torch.tensor([0.3, 0.7]), torch.tensor([-1.0, 0.8]), \
    torch.tensor([0.4, 0.3]), 0.4


def positive_mixture(x):
    """z_j ~ 0.3 LogNormal(-1, 0.4) + 0.7 LogNormal(0.8, 0.3) independently, x_j | z_j ~ N(z_j, 0.4^2)."""
    prior = dist.MixtureSameFamily(dist.Categorical(WEIGHTS.to(x)),
                                   dist.LogNormal(LOCS.to(x), SCALES.to(x)))
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", prior.expand([x.shape[0], x.shape[1]]).to_event(1))
        pyro.sample("x", dist.Normal(z, NOISE).to_event(1), obs=x)


def positive_log_marginal(x):
    """log p(x) by quadrature over each coordinate's z in (0, 30]: (N,)."""
    h = 1e-3
    z = torch.arange(h, 30.0, h, dtype=x.dtype)
    prior = dist.MixtureSameFamily(dist.Categorical(WEIGHTS.to(x)),
                                   dist.LogNormal(LOCS.to(x), SCALES.to(x)))
    log_p = prior.log_prob(z) + dist.Normal(z, NOISE).log_prob(x.unsqueeze(-1))  # (N, D, G)
    return (log_p.logsumexp(-1) + math.log(h)).sum(-1)


@pytest.mark.statistical
def test_a_mixture_of_constrained_components_is_moved_on_their_support(seed):
    sim = pyrolik.simulate(positive_mixture, 3, data_shape=(2,), seed=seed)
    assert (sim.latents["z"] > 0).all()
    x = sim.x
    exact = positive_log_marginal(x)
    r = pyrolik.ais(positive_mixture, x, num_steps=50, num_chains=200, kernel=KERNEL, seed=seed,
                    progress=False)
    assert (r.latents["z"] > 0).all()
    u = r.to_inference_data().unconstrained_posterior["u"].values  # log z: the components' map
    torch.testing.assert_close(torch.as_tensor(u).exp(),
                               torch.as_tensor(r.to_inference_data().posterior["z"].values))
    assert_unbiased(r.log_weights, exact)
    assert_lower_bound(r.log_likelihood, exact, r.log_weights)
