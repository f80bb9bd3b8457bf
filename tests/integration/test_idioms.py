"""Pyro programs as people write them: every construct evaluated exactly, or refused in words.

One case per construct of ``docs/idioms.md``. Exact answers come from the linear-Gaussian oracle
(``x ~ N(b, W W^T + s^2 I)``) and its restrictions: an estimator whose proposal is the exact posterior
has zero variance, so its log-weights equal ``log p(x)`` to rounding; densities are compared with the
plain model's at the same latent values. Per-example arguments, AutoGuides, simulation and the errors
by cause have their own files (``test_arguments.py``, ``test_autoguides.py``, ``test_simulation.py``,
``test_hints.py``).
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from torch import nn

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from pyrolik.model.target import make_target
from tests.helpers import assert_unbiased
from tests.idiom_helpers import exact_guide, exact_iwae, lg_body, linear, net_model, same_density


# -- subsampling plates ------------------------------------------------------------------------------
def test_a_minibatch_plate_over_the_data_is_the_full_plate_of_the_given_rows(lg, x):
    def minibatch(x):  # as written for SVI on minibatches of a 60000-example data set
        lg_body(lg, x, pyro.plate("data", 60000, subsample_size=x.shape[0]))

    same_density(minibatch, lg, x)
    exact_iwae(minibatch, x, exact_guide(lg), lg.exact_log_marginal(x))
    r = pyrolik.likelihood_weighting(minibatch, x, num_samples=4000, seed=0, progress=False)
    assert_unbiased(r.log_weights, lg.exact_log_marginal(x), min_ess_frac=0.01)


def test_subsampling_that_pyrolik_cannot_evaluate_is_refused(lg, x):
    def reads_indices(x):
        loc = torch.zeros(60000, lg.latent_dim)
        with pyro.plate("data", 60000, subsample_size=x.shape[0]) as idx:
            z = pyro.sample("z", dist.Normal(loc[idx] + idx.unsqueeze(-1) * 1e-3, 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    with pytest.raises(ValueError, match=r"model reads the subsample indices of pyro.plate\('data', "
                       r"60000.*site 'z'.*pyro.plate\('data', 60000, subsample=idx\) with idx a "
                       r"per-example argument"):
        make_target(reads_indices, x, 2)

    def subsamples_examples(x):
        with pyro.plate("data", x.shape[0], subsample_size=2) as idx:
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x[idx])

    with pytest.raises(ValueError, match=r"pyro.plate\('data', ..., subsample_size=2\) draws 2 of "
                       r"the examples.*subsample_size=None"):
        make_target(subsamples_examples, x, 2)

    def subsamples_pixels(x):
        with pyro.plate("data", x.shape[0], dim=-2):
            z = pyro.sample("z", dist.Normal(x.new_zeros(1, 2), 1.0).to_event(1))
            loc = (z @ lg.W.T + lg.b).squeeze(-2)
            with pyro.plate("pixels", 3, subsample_size=2, dim=-1) as j:
                pyro.sample("x", dist.Normal(loc[:, j], lg.s), obs=x[:, j])

    with pytest.raises(ValueError, match=r"pyro.plate\('pixels', 3, subsample_size=2\) subsamples "
                       "inside each example"):
        make_target(subsamples_pixels, x, 2)


# -- scale ------------------------------------------------------------------------------------------
def test_poutine_scale_is_left_out_with_a_warning(lg, x):
    def kl_annealed(x, annealing=0.1):
        with poutine.scale(scale=1.0 / (x.shape[0] * 3)):  # a 1/(N D) normaliser of the ELBO
            d = lg.latent_dim
            with pyro.plate("data", x.shape[0]):
                with poutine.scale(scale=annealing):
                    z = pyro.sample("z", dist.Normal(x.new_zeros(d), 1.0).to_event(1))
                pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    # the sites without their factors: on pyrolik's stacked rows a 1/N factor is not the user's
    with pytest.warns(pyrolik.IdiomWarning, match=r"evaluates the model unscaled: site\(s\) 'z', "
                      r"'x' carry a scale from poutine.scale"):
        same_density(kl_annealed, lg, x)
    with pytest.warns(pyrolik.IdiomWarning):
        exact_iwae(kl_annealed, x, exact_guide(lg), lg.exact_log_marginal(x))


def test_a_scale_of_one_warns_nothing(lg, x):
    def scaled_by_one(x):
        with poutine.scale(scale=1.0):
            lg(x)

    same_density(scaled_by_one, lg, x)  # pytest turns any warning into an error


# -- factor, block, point masses, improper priors ---------------------------------------------------
def test_pyro_factor_is_refused(lg, x):
    def with_factor(x):
        lg(x)
        pyro.factor("penalty", -(x**2).sum(-1))

    with pytest.raises(ValueError, match=r"pyro.factor\('penalty', ...\) adds an unnormalised term.*"
                       r"pyro.sample\('penalty', SomeDistribution\(...\), obs=x\)"):
        make_target(with_factor, x)


def test_poutine_block_hiding_a_sample_site_is_refused(lg, x):
    def hides_obs(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            with poutine.block(hide=["x"]):
                pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)
            pyro.sample("x0", dist.Normal(z.sum(-1), 1.0), obs=x[:, 0])

    with pytest.raises(ValueError, match=r"poutine.block hides the observed sample site 'x' of the "
                       "model.*left out of log p\\(x\\)"):
        make_target(hides_obs, x)

    def hides_latent(x):
        with pyro.plate("data", x.shape[0]):
            with poutine.block(hide=["w"]):
                w = pyro.sample("w", dist.Normal(0.0, 1.0))
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b + w.unsqueeze(-1), lg.s).to_event(1),
                        obs=x)

    with pytest.raises(ValueError, match=r"hides the latent sample site 'w'.*new value at every"):
        make_target(hides_latent, x)

    def hides_params(x):
        with poutine.block(hide_types=["param"]):
            lg(x)

    same_density(hides_params, lg, x)


def test_point_mass_and_improper_latents_are_refused(lg, x):
    def point_mass(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Delta(x.new_zeros(2)).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)
            pyro.sample("w", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match=r"latent site 'z' of the model is a point mass.*"
                       r"pyro.deterministic\('z', value\)"):
        make_target(point_mass, x)

    def improper(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.ImproperUniform(dist.constraints.real, (), (2,)))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    with pytest.raises(ValueError, match="improper prior.*give the latent a proper prior"):
        make_target(improper, x)


# -- masks ------------------------------------------------------------------------------------------
OBSERVED = torch.tensor([True, False, True])  # the second coordinate of every example is missing


def _restricted(lg):
    return LinearGaussian(lg.W[OBSERVED], lg.b[OBSERVED], lg.s)


def test_a_masked_observation_is_not_observed(lg, x):
    sub = _restricted(lg)
    truth = sub.exact_log_marginal(x[:, OBSERVED])

    def guide(x):
        exact_guide(sub)(x[:, OBSERVED])

    def poutine_masked(x):
        with pyro.plate("data", x.shape[0], dim=-2):
            z = pyro.sample("z", dist.Normal(x.new_zeros(1, 2), 1.0).to_event(1))
            with pyro.plate("d", 3, dim=-1), poutine.mask(mask=OBSERVED):
                pyro.sample("x", dist.Normal((z @ lg.W.T + lg.b).squeeze(-2), lg.s), obs=x)

    def guide_2(x):
        post = sub.exact_posterior(x[:, OBSERVED])
        with pyro.plate("data", x.shape[0], dim=-2):
            pyro.sample("z", dist.MultivariateNormal(post.loc.unsqueeze(-2),
                                                     scale_tril=post.scale_tril.unsqueeze(-3)))

    def dist_masked(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).mask(OBSERVED).to_event(1), obs=x)

    exact_iwae(poutine_masked, x, guide_2, truth)
    exact_iwae(dist_masked, x, guide, truth)


def test_obs_mask_integrates_the_missing_entries_as_latents(lg, x):
    mask = OBSERVED.expand(x.shape[0], 3)

    def imputing(x, mask):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            with pyro.plate("d", 3):
                pyro.sample("x", dist.Normal((z @ lg.W.T + lg.b).T, lg.s), obs=x.T,
                            obs_mask=mask.T)

    sub = _restricted(lg)
    truth = sub.exact_log_marginal(x[:, OBSERVED])

    def guide(x, mask):  # the exact posterior of z, the missing entries from p(x_j | z)
        post = sub.exact_posterior(x[:, OBSERVED])
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.MultivariateNormal(post.loc, scale_tril=post.scale_tril))
            with pyro.plate("d", 3):
                pyro.sample("x_unobserved", dist.Normal((z @ lg.W.T + lg.b).T, lg.s))

    t = make_target(imputing, x, 2, model_args=(mask,))
    assert [s.name for s in t.layout.sites] == ["z", "x_unobserved"]
    assert t.layout.observed == ("x_observed",)
    exact_iwae(imputing, x, guide, truth, model_args=(mask,))
    r = pyrolik.ais(imputing, x, num_steps=10, num_chains=3, init=guide, model_args=(mask,),
                    seed=0, progress=False)
    torch.testing.assert_close(r.log_weights, truth.expand(3, -1), rtol=1e-8, atol=1e-8)


def test_a_masked_latent_is_refused_when_its_masked_entries_matter(lg, x):
    def flat_prior(x):  # the mask makes z's prior improper, and z explains x
        with pyro.plate("data", x.shape[0]):
            with poutine.mask(mask=False):
                z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    with pytest.raises(ValueError, match=r"hides part of the prior density of latent site 'z'.*"
                       "improper"):
        make_target(flat_prior, x)

    def padded(x):  # a masked latent that nothing reads: integrated against its own prior
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)
            with poutine.mask(mask=False):
                pyro.sample("pad", dist.Normal(0.0, 1.0))

    t = make_target(padded, x, 2)
    u = torch.randn(t.layout.rows, 3, generator=torch.Generator().manual_seed(0))
    lp, lo = t.program.log_prior_and_obs(u)
    ref_lp, ref_lo = make_target(lg, x, 2).program.log_prior_and_obs(u[:, :2])
    torch.testing.assert_close(lp, ref_lp + dist.Normal(0.0, 1.0).log_prob(u[:, 2]))
    torch.testing.assert_close(lo, ref_lo)


# -- markov, deterministic, reparameterisation, do, plates without a size ---------------------------
def test_pyro_markov_without_enumeration_is_the_plain_chain():
    """z1 ~ N(0, 1), z2 | z1 ~ N(z1, 1), x | z2 ~ N(w z2 + b, s^2 I): a 2-latent linear Gaussian."""
    w, b, s = torch.tensor([1.0, -0.5, 2.0]), torch.tensor([0.3, 0.0, -1.0]), 0.6

    def chain(x):
        with pyro.plate("data", x.shape[0]):
            z = x.new_zeros(x.shape[0])
            for t in pyro.markov(range(2)):
                z = pyro.sample(f"z{t}", dist.Normal(z, 1.0))
            pyro.sample("x", dist.Normal(z.unsqueeze(-1) * w + b, s).to_event(1), obs=x)

    prior_cov = torch.tensor([[1.0, 1.0], [1.0, 2.0]])
    W = torch.stack([torch.zeros(3), w], -1)  # x = W (z1, z2) + b + noise
    marginal = dist.MultivariateNormal(b, W @ prior_cov @ W.T + s**2 * torch.eye(3))
    x = marginal.sample((4,))
    prec = torch.linalg.inv(prior_cov) + W.T @ W / s**2
    cov = torch.linalg.inv(prec)

    def guide(x):  # the exact posterior, z1 then z2 | z1
        mean = (x - b) @ W / s**2 @ cov
        with pyro.plate("data", x.shape[0]):
            z1 = pyro.sample("z0", dist.Normal(mean[:, 0], cov[0, 0].sqrt()))
            cond = mean[:, 1] + cov[1, 0] / cov[0, 0] * (z1 - mean[:, 0])
            pyro.sample("z1", dist.Normal(cond, (cov[1, 1] - cov[1, 0] ** 2 / cov[0, 0]).sqrt()))

    exact_iwae(chain, x, guide, marginal.log_prob(x))


def test_deterministic_sites_and_reparameterised_latents_carry_no_density(lg, x):
    def with_deterministic(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            loc = pyro.deterministic("loc", z @ lg.W.T + lg.b, event_dim=1)
            pyro.sample("x", dist.Normal(loc, lg.s).to_event(1), obs=x)

    t = same_density(with_deterministic, lg, x)
    assert t.layout.observed == ("x",) and [s.name for s in t.layout.sites] == ["z"]

    from pyro.infer.reparam import LocScaleReparam

    def decentered(x):  # z = 0 + 1 * z_decentered: the same prior, reparameterised
        with pyro.plate("data", x.shape[0]), poutine.reparam(config={"z": LocScaleReparam(0.0)}):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    t = make_target(decentered, x, 2)
    assert t.layout.observed == ("x",) and [s.name for s in t.layout.sites] == ["z_decentered"]
    def guide(x):
        post = lg.exact_posterior(x)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z_decentered", dist.MultivariateNormal(post.loc,
                                                                scale_tril=post.scale_tril))

    exact_iwae(decentered, x, guide, lg.exact_log_marginal(x))


def test_poutine_do_fixes_a_site_without_scoring_it(lg, x):
    def with_offset(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            shift = pyro.sample("shift", dist.Normal(x.new_zeros(3), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b + shift, lg.s).to_event(1), obs=x)

    intervened = poutine.do(with_offset, data={"shift": torch.zeros(3)})

    def guide(x):  # z from its exact posterior, the counterfactual shift from its prior
        post = lg.exact_posterior(x)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(post.loc, scale_tril=post.scale_tril))
            pyro.sample("shift", dist.Normal(x.new_zeros(3), 1.0).to_event(1))

    exact_iwae(intervened, x, guide, lg.exact_log_marginal(x))


def test_a_plate_without_a_size_follows_the_data(lg, x):
    def unsized(x):  # pyro.plate("data") as in Pyro's cvae example: the batch shapes give the size
        with pyro.plate("data"):
            z = pyro.sample("z", dist.Normal(x.new_zeros(x.shape[0], 2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    same_density(unsized, lg, x)


# -- PyroModule / PyroSample -------------------------------------------------------------------------
class _Decoder(pyro.nn.PyroModule):
    def __init__(self, lg):
        super().__init__()
        self.lg = lg
        self.linear = nn.Linear(lg.latent_dim, lg.data_dim)
        with torch.no_grad():
            self.linear.weight.copy_(lg.W)
            self.linear.bias.copy_(lg.b)

    def forward(self, x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(self.linear(z), self.lg.s).to_event(1), obs=x)


class _Encoder(pyro.nn.PyroModule):
    """An amortised encoder whose linear maps give the exact posterior."""

    def __init__(self, lg):
        super().__init__()
        post = lg.exact_posterior(torch.zeros(1, lg.data_dim))
        cov = post.covariance_matrix[0]
        self.mean = nn.Linear(lg.data_dim, lg.latent_dim)
        with torch.no_grad():
            self.mean.weight.copy_((lg.W / lg.s**2 @ cov).T)
            self.mean.bias.copy_(-(lg.b @ lg.W / lg.s**2 @ cov))
        self.tril = torch.linalg.cholesky(cov)

    def forward(self, x):
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(self.mean(x), scale_tril=self.tril))


class _PriorModule(pyro.nn.PyroModule):
    """The prior as a PyroSample attribute, sampled inside the data plate."""

    def __init__(self, lg):
        super().__init__()
        self.lg = lg
        self.z = pyro.nn.PyroSample(lambda self: dist.Normal(torch.zeros(2), 1.0).to_event(1))

    def forward(self, x):
        with pyro.plate("data", x.shape[0]):
            z = self.z
            pyro.sample("x", dist.Normal(z @ self.lg.W.T + self.lg.b, self.lg.s).to_event(1), obs=x)


def test_pyro_modules_and_pyro_samples(lg, x):
    truth = lg.exact_log_marginal(x)
    model, encoder = _Decoder(lg), _Encoder(lg)
    exact_iwae(model, x, encoder, truth)
    r = pyrolik.ais(model, x, num_steps=5, num_chains=3, init=encoder, seed=0, progress=False)
    torch.testing.assert_close(r.log_weights, truth.expand(3, -1), rtol=1e-9, atol=1e-9)
    prior_module = _PriorModule(lg)
    assert [s.name for s in make_target(prior_module, x).layout.sites] == ["z"]
    exact_iwae(prior_module, x, encoder, truth)
    assert model.training and encoder.training  # left as they were


# -- enumerated discrete latents ---------------------------------------------------------------------
class _Mixture:
    """c ~ Cat(pi), z ~ N(0, I), x | z, c ~ N(W_c z + b_c, s^2 I): p(x) = sum_c pi_c N(b_c, W_c W_c^T + s^2 I)."""

    def __init__(self):
        self.parts = [LinearGaussian.random(3, 2, 0.6, seed=i) for i in (10, 11)]
        self.pi = torch.tensor([0.3, 0.7])
        self.W = torch.stack([p.W for p in self.parts])
        self.b = torch.stack([p.b for p in self.parts])

    def __call__(self, x, enumerate="parallel"):
        with pyro.plate("data", x.shape[0]):
            c = pyro.sample("c", dist.Categorical(self.pi), infer={"enumerate": enumerate})
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            loc = (self.W[c] @ z.unsqueeze(-1)).squeeze(-1) + self.b[c]
            pyro.sample("x", dist.Normal(loc, 0.6).to_event(1), obs=x)

    def log_marginal(self, x):
        return torch.stack([p.exact_log_marginal(x) for p in self.parts]).add(
            self.pi.log().unsqueeze(-1)).logsumexp(0)

    def guide(self, x, enumerate=None):  # the exact posterior of z: a mixture of Gaussians
        log_post_c = torch.stack([p.exact_log_marginal(x) for p in self.parts], -1) + self.pi.log()
        posts = [p.exact_posterior(x) for p in self.parts]
        comp = dist.MultivariateNormal(torch.stack([q.loc for q in posts], -2),
                                       scale_tril=torch.stack([q.scale_tril for q in posts], -3))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MixtureSameFamily(dist.Categorical(logits=log_post_c), comp))


def test_enumerated_discrete_latents_are_summed_out_exactly():
    mix = _Mixture()
    x = torch.cat([mix.parts[0].sample(2, torch.Generator().manual_seed(0)),
                   mix.parts[1].sample(2, torch.Generator().manual_seed(1))])
    truth = mix.log_marginal(x)
    t = make_target(mix, x, 3)
    assert [s.name for s in t.layout.sites] == ["z"] and t.layout.enumerated == ("c",)
    exact_iwae(mix, x, mix.guide, truth)
    r = pyrolik.ais(mix, x, num_steps=5, num_chains=3, init=mix.guide, seed=0, progress=False)
    torch.testing.assert_close(r.log_weights, truth.expand(3, -1), rtol=1e-9, atol=1e-9)
    r = pyrolik.likelihood_weighting(mix, x, num_samples=3000, seed=0, progress=False)
    assert_unbiased(r.log_weights, truth, min_ess_frac=0.01)


def test_discrete_latents_pyrolik_cannot_sum_are_refused():
    mix = _Mixture()
    x = mix.parts[0].sample(3, torch.Generator().manual_seed(0))
    with pytest.raises(TypeError, match=r"latent site 'c' is discrete \(Categorical\).*"
                       r"infer=\{'enumerate': 'parallel'\}"):
        make_target(mix, x, model_kwargs={"enumerate": None})

    def in_markov(x):
        with pyro.plate("data", x.shape[0]):
            for t in pyro.markov(range(1)):
                c = pyro.sample(f"c{t}", dist.Categorical(mix.pi), infer={"enumerate": "parallel"})
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            loc = (mix.W[c] @ z.unsqueeze(-1)).squeeze(-1) + mix.b[c]
            pyro.sample("x", dist.Normal(loc, 0.6).to_event(1), obs=x)

    with pytest.raises(ValueError, match="enumerated site 'c0' is inside pyro.markov"):
        make_target(in_markov, x)

    def samples_c(x, enumerate=None):
        with pyro.plate("data", x.shape[0]):
            pyro.sample("c", dist.Categorical(mix.pi))
            pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))

    def continuous_c(x, enumerate=None):
        with pyro.plate("data", x.shape[0]):
            pyro.sample("c", dist.Normal(0.0, 1.0))
            pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))

    # a guide that samples the summed-out label is a mixture proposal (tests/test_mixture_guides.py);
    # one that gives it a continuous density is refused
    assert make_target(mix, x, guide=samples_c).program.guide_enum_dims == 1
    with pytest.raises(ValueError, match=r"the guide samples \['c'\] from a continuous "
                       r"distribution, where the model sums them out"):
        make_target(mix, x, guide=continuous_c)


class _ReadsTrainingFlag(nn.Module):
    def forward(self, h):
        return h + 1.0 if self.training else h


@pytest.mark.parametrize("make, names", [(lambda: nn.Dropout(0.5), "Dropout"),
                                         (lambda: nn.BatchNorm1d(3), "BatchNorm1d"),
                                         (_ReadsTrainingFlag, "Linear, Sequential, "
                                                              "_ReadsTrainingFlag")])
def test_modules_in_training_mode_are_evaluated_in_eval_mode(lg, x, make, names):
    extra = make()
    net = nn.Sequential(linear(lg), extra)
    if isinstance(extra, nn.BatchNorm1d):  # eval mode: the identity
        extra.running_var.fill_(1.0 - extra.eps)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    model = net_model(lg, net)
    with pytest.warns(pyrolik.IdiomWarning, match=rf"model calls modules in training mode \({names}\)"
                      r".*evaluates them in eval mode"):
        exact_iwae(model, x, exact_guide(lg), lg.exact_log_marginal(x))
    assert net.training and all(m.training for m in net.modules())  # flags as they were
    for k, v in net.state_dict().items():  # batch-norm statistics untouched
        torch.testing.assert_close(v, before[k])


def test_an_evaluation_that_is_random_at_a_fixed_latent_is_refused(lg, x):
    def noisy(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            loc = z @ lg.W.T + lg.b + 0.1 * torch.randn(3)
            pyro.sample("x", dist.Normal(loc, lg.s).to_event(1), obs=x)

    with pytest.raises(ValueError, match=r"model's log density at a fixed latent changed from one "
                       r"evaluation to the next.*torch.randn"):
        make_target(noisy, x, 2)



def test_grey_levels_scored_by_a_bernoulli_as_pyros_vae_example_does(lg):
    def relaxed(x):  # examples/vae/vae.py: "score against actual images (with relaxed Bernoulli values)"
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            probs = torch.sigmoid(z @ lg.W.T)
            pyro.sample("x", dist.Bernoulli(probs, validate_args=False).to_event(1), obs=x)

    grey = torch.rand(4, 3, generator=torch.Generator().manual_seed(0))
    with pytest.warns(pyrolik.IdiomWarning, match=r"observed site 'x' has support .* and x holds "
                      r"values outside it.*ContinuousBernoulli"):
        t = make_target(relaxed, grey, 2)
    u = torch.randn(t.layout.rows, 2, generator=torch.Generator().manual_seed(1))
    probs = torch.sigmoid(u @ lg.W.T)
    want = (grey.repeat(2, 1) * probs.log() + (1 - grey.repeat(2, 1)) * (1 - probs).log()).sum(-1)
    torch.testing.assert_close(t.program.log_prior_and_obs(u)[1], want)  # the model's density as written


def test_a_minibatch_plate_smaller_than_the_rows_of_all_chains(lg, x):
    def minibatch(x):  # 4 examples x 3 chains = 12 rows, more than the plate's 10
        lg_body(lg, x, pyro.plate("data", 10, subsample_size=x.shape[0]))

    same_density(minibatch, lg, x, k=3)
    exact_iwae(minibatch, x, exact_guide(lg), lg.exact_log_marginal(x))


def test_a_sequential_plate_over_the_examples_is_refused(lg, x):
    def sequential(x):
        for i in pyro.plate("data", x.shape[0]):
            z = pyro.sample(f"z_{i}", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample(f"x_{i}", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x[i])

    with pytest.raises(ValueError, match=r"the plate 'data' over the examples is sequential.*"
                       r"with pyro.plate\('data', x.shape\[0\]\)"):
        make_target(sequential, x, 2)
