"""Pyro's Gaussian AutoGuides fitted on the evaluated examples as proposals; the others refused."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import autoguide
from torch import nn

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from tests.helpers import assert_unbiased
from tests.idiom_helpers import exact_iwae


# -- AutoGuides -------------------------------------------------------------------------------------
def _coupled_mvn(lg, x):
    """An AutoMultivariateNormal whose joint couples the examples but whose per-example marginals
    are the exact posteriors: every importance weight is p(x)."""
    guide = autoguide.AutoMultivariateNormal(lg)
    guide(x)
    post = lg.exact_posterior(x)
    blocks = torch.block_diag(*post.scale_tril)
    d = blocks.shape[0]
    couple = torch.eye(d) + 0.1 * (torch.ones(d, d) - torch.block_diag(*[torch.ones(2, 2)] * len(x)))
    tril = torch.linalg.cholesky(blocks @ couple @ blocks.T)
    guide.loc = nn.Parameter(post.loc.reshape(-1).clone())
    guide.scale = torch.diagonal(tril).clone()
    guide.scale_tril = tril / torch.diagonal(tril)[:, None]
    return guide


def _exact_autonormal(lg1, x, cls):
    """A 1-latent linear Gaussian's exact posterior (a Normal) as an AutoNormal / AutoDiagonalNormal /
    AutoLowRankMultivariateNormal, parameters set by hand."""
    guide = cls(lg1)
    guide(x)
    post = lg1.exact_posterior(x)
    loc, sd = post.loc.reshape(-1), post.covariance_matrix.reshape(-1).sqrt()
    if cls is autoguide.AutoNormal:
        guide.locs.z = loc.reshape(-1, 1).clone()
        guide.scales.z = sd.reshape(-1, 1).clone()
    elif cls is autoguide.AutoDiagonalNormal:
        guide.loc = nn.Parameter(loc.clone())
        guide.scale = sd.clone()
    else:
        guide.loc = nn.Parameter(loc.clone())
        guide.cov_factor = nn.Parameter(torch.zeros(len(loc), guide.rank))
        guide.scale = sd.clone()
    return guide


@pytest.mark.parametrize("cls", [autoguide.AutoNormal, autoguide.AutoDiagonalNormal,
                                 autoguide.AutoLowRankMultivariateNormal,
                                 autoguide.AutoMultivariateNormal])
def test_autoguides_fitted_on_these_examples_are_proposals(cls):
    lg = LinearGaussian.random(data_dim=3, latent_dim=2 if cls is autoguide.AutoMultivariateNormal
                               else 1, s=0.7, seed=3)
    x = lg.sample(4, torch.Generator().manual_seed(4))
    truth = lg.exact_log_marginal(x)
    guide = _coupled_mvn(lg, x) if cls is autoguide.AutoMultivariateNormal \
        else _exact_autonormal(lg, x, cls)
    for batch_size in (None, 3):
        exact_iwae(lg, x, guide, truth, batch_size=batch_size)
    for batch_size in (None, 3):
        r = pyrolik.ais(lg, x, num_steps=5, num_chains=3, init=guide, batch_size=batch_size,
                        seed=0, progress=False)
        torch.testing.assert_close(r.log_weights, truth.expand(3, -1), rtol=1e-9, atol=1e-9)


def test_an_autoguide_list_and_a_fitted_autoguide():
    lg = LinearGaussian.random(data_dim=3, latent_dim=1, s=0.7, seed=3)
    x = lg.sample(5, torch.Generator().manual_seed(4))
    truth = lg.exact_log_marginal(x)

    def two_sites(x):  # z and an unused w ~ LogNormal(0, 1): p(x) is lg's
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(1), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)
            pyro.sample("w", dist.LogNormal(0.0, 1.0))

    guides = autoguide.AutoGuideList(two_sites)
    exact = _exact_autonormal(lg, x, autoguide.AutoDiagonalNormal)
    guides.append(autoguide.AutoDiagonalNormal(poutine.block(two_sites, expose=["z"])))
    guides.append(autoguide.AutoNormal(poutine.block(two_sites, expose=["w"])))
    guides(x)
    guides[0].loc, guides[0].scale = exact.loc, exact.scale.detach().clone()
    guides[1].locs.w = torch.zeros(5)
    guides[1].scales.w = torch.ones(5)  # log w ~ N(0, 1): the prior of w, exactly
    exact_iwae(two_sites, x, guides, truth)
    pyro.clear_param_store()
    fitted = autoguide.AutoMultivariateNormal(lg)
    svi = pyro.infer.SVI(lg, fitted, pyro.optim.Adam({"lr": 0.05}), pyro.infer.Trace_ELBO())
    for _ in range(200):
        svi.step(x)
    r = pyrolik.iwae(lg, x, fitted, num_samples=2000, seed=0, progress=False)
    assert_unbiased(r.log_weights, truth)


def test_autoguides_pyrolik_cannot_use_are_refused(lg, x):
    fitted = autoguide.AutoNormal(lg)
    fitted(x[:3])  # fitted on three examples, not these four
    with pytest.raises(ValueError, match=r"AutoGuide was fitted on other examples: its site 'z' has "
                       r"shape \(3, 2\) \(plate 'data' of size 3\), and x has 4 examples"):
        pyrolik.iwae(lg, x, fitted, num_samples=2, progress=False)
    with pytest.raises(ValueError, match="has not been fitted"):
        pyrolik.iwae(lg, x, autoguide.AutoNormal(lg), num_samples=2, progress=False)
    delta = autoguide.AutoDelta(lg)
    delta(x)
    with pytest.raises(TypeError, match="AutoDelta is not a Gaussian AutoGuide"):
        pyrolik.iwae(lg, x, delta, num_samples=2, progress=False)
