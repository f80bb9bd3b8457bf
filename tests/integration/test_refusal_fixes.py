"""Every refusal that suggests a rewrite: the suggestion, applied as the message words it, gives the
exact answer.

Each case builds the refused model (or call), checks the message names the fix, applies that fix and
compares with an oracle: the linear-Gaussian model's closed form (zero-variance IWAE with its exact
posterior where the fixed model keeps the latent ``z``), the closed-form mixture-prior model, or a
quadrature over a 1-D latent (likelihood weighting, tolerance from the standard error). Only the
public top-level API is used. Refusals that suggest no rewrite (bad counts, shapes) are tested where
they are raised.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO, autoguide
from pyro.infer.reparam import ProjectedNormalReparam
from pyrolik_models.oracles import (
    GlobalLinearGaussian,
    LinearGaussian,
    MixturePriorLinearGaussian,
)
from torch.distributions import biject_to

import pyrolik
from tests.helpers import assert_lower_bound, assert_unbiased, plain
from tests.idiom_helpers import exact_guide, exact_iwae


@dataclass
class Case:
    refused: Callable[[], object]  # the refused call
    match: str  # the message, naming the fix
    fixed: Callable[[], None]  # the fix applied as the message says it; asserts the exact answer
    error: type = ValueError
    warns: bool = False  # a warning that suggests a rewrite, not an error


CASES: dict[str, Callable[..., Case]] = {}


def case(fn: Callable[..., Case]) -> Callable[..., Case]:
    CASES[fn.__name__] = fn
    return fn


def lw(model, x, **kw):
    """A cheap call that builds the model's target (and so runs every check on it)."""
    return pyrolik.likelihood_weighting(model, x, num_samples=2, seed=0, progress=False, **kw)


def lw_unbiased(model, x, truth, num_samples=4000, **kw):
    r = pyrolik.likelihood_weighting(model, x, num_samples=num_samples, seed=0, progress=False,
                                     **kw)
    assert_unbiased(r.log_weights, truth, min_ess_frac=0.01)


def quadrature(log_prior, log_lik, grid):
    """``log int p(z) p(x | z) dz`` per example on a 1-D grid (trapezoid rule): ``(N,)``."""
    lj = log_prior(grid).unsqueeze(-1) + log_lik(grid)  # (G, N)
    return torch.log(torch.trapezoid(lj.exp(), grid, dim=0))


def lg_model(lg, plate=None, observe=None):
    """The linear-Gaussian model with its data plate or observation written otherwise."""

    def model(x):
        with plate(x) if plate else pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(lg.latent_dim), 1.0).to_event(1))
            loc = z @ lg.W.T + lg.b
            if observe:
                observe(loc, x)
            else:
                pyro.sample("x", dist.Normal(loc, lg.s).to_event(1), obs=x)

    return model


def exact(lg, model, x, **kw):
    exact_iwae(model, x, exact_guide(lg), lg.exact_log_marginal(x), **kw)


X1 = torch.tensor([[0.3], [1.5], [-2.0], [0.0]], dtype=torch.float64)  # four 1-D observations


# -- the model's constructs (pyrolik.model.modules, discovery, supports) ----------------------------
@case
def factor(lg, x):
    refused = lg_model(lg, observe=lambda loc, x: pyro.factor(
        "x", dist.Normal(loc, lg.s).to_event(1).log_prob(x)))
    fixed = lg_model(lg, observe=lambda loc, x: pyro.sample(
        "x", dist.Normal(loc, lg.s).to_event(1), obs=x))  # as the message words it
    return Case(lambda: lw(refused, x),
                r"pyro.factor\('x', \.\.\.\).*write it as an observed site, "
                r"pyro.sample\('x', SomeDistribution\(\.\.\.\), obs=x\)",
                lambda: exact(lg, fixed, x))


@case
def point_mass(lg, x):
    def refused(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            loc = pyro.sample("loc", dist.Delta(z @ lg.W.T + lg.b, event_dim=1))
            pyro.sample("x", dist.Normal(loc, lg.s).to_event(1), obs=x)

    def fixed(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            loc = pyro.deterministic("loc", z @ lg.W.T + lg.b, event_dim=1)
            pyro.sample("x", dist.Normal(loc, lg.s).to_event(1), obs=x)

    return Case(lambda: lw(refused, x),
                r"'loc' of the model is a point mass \(Delta\).*pyro.deterministic\('loc', value\)",
                lambda: exact(lg, fixed, x))


@case
def block(lg, x):
    def observe(hide_types):
        def obs(loc, x):
            with poutine.block(hide_types=hide_types):
                pyro.param("unused", torch.zeros(()))
                pyro.sample("x", dist.Normal(loc, lg.s).to_event(1), obs=x)

        return obs

    return Case(lambda: lw(lg_model(lg, observe=observe(None)), x),
                r"poutine.block hides the observed sample site 'x'.*remove the block around it "
                r"\(hiding params is fine: poutine.block\(hide_types=\['param'\]\)\)",
                lambda: exact(lg, lg_model(lg, observe=observe(["param"])), x))


@case
def subsampled_examples(lg, x):
    def model(x, subsample_size=None):
        with pyro.plate("data", x.shape[0], subsample_size=subsample_size) as idx:
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x[idx])

    return Case(lambda: lw(model, x, model_kwargs={"subsample_size": 2}),
                r"draws 2 of the examples.*subsample_size=None; e.g. make it an argument of the "
                r"model and pass model_kwargs",
                lambda: exact(lg, model, x, model_kwargs={"subsample_size": None}))


@case
def subsampled_inside_an_example(lg, x):
    def model(x, subsample_size=2):
        with pyro.plate("data", x.shape[0], dim=-2):
            z = pyro.sample("z", dist.Normal(x.new_zeros(1, 2), 1.0).to_event(1))
            loc = (z @ lg.W.T + lg.b).squeeze(-2)
            with pyro.plate("pixels", 3, subsample_size=subsample_size, dim=-1) as j:
                pyro.sample("x", dist.Normal(loc[:, j], lg.s), obs=x[:, j])

    def guide(x, subsample_size=None):  # the exact posterior, its site shaped as the model's
        post = lg.exact_posterior(x)
        with pyro.plate("data", x.shape[0], dim=-2):
            pyro.sample("z", dist.MultivariateNormal(post.loc.unsqueeze(-2),
                                                     scale_tril=post.scale_tril.unsqueeze(-3)))

    return Case(lambda: lw(model, x),
                r"pyro.plate\('pixels', 3, subsample_size=2\) subsamples inside each example.*"
                r"set subsample_size=None when evaluating",
                lambda: exact_iwae(model, x, guide, lg.exact_log_marginal(x),
                                   model_kwargs={"subsample_size": None}))


@case
def reads_subsample_indices(lg, x):
    offsets = torch.linspace(-1.0, 1.0, 60000, dtype=x.dtype)  # a per-datapoint prior mean

    def refused(x):
        with pyro.plate("data", 60000, subsample_size=x.shape[0]) as idx:
            z = pyro.sample("z", dist.Normal(offsets[idx].unsqueeze(-1).expand(-1, 2), 1.0)
                            .to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    def fixed(x, idx):  # "pass the rows' indices explicitly: subsample=idx, a per-example argument"
        with pyro.plate("data", 60000, subsample=idx):
            z = pyro.sample("z", dist.Normal(offsets[idx].unsqueeze(-1).expand(-1, 2), 1.0)
                            .to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    def plate_over_x(x):  # the fix the message used to offer first: it numbers pyrolik's rows
        with pyro.plate("data", len(x)) as idx:
            z = pyro.sample("z", dist.Normal(offsets[idx].unsqueeze(-1).expand(-1, 2), 1.0)
                            .to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    def refuse_plate_over_x():
        with pytest.raises(ValueError, match="depends on the other rows of its batch"):
            lw(plate_over_x, x)

    idx = torch.tensor([5, 17000, 42000, 59999])
    mean = offsets[idx].unsqueeze(-1).expand(-1, 2)
    truth = lg.exact_log_marginal(x - mean @ lg.W.T)  # z = mean + z', z' ~ N(0, I)

    def guide(x, idx):  # the exact posterior, per row of the chains x examples
        m = offsets[idx].unsqueeze(-1).expand(-1, 2)
        post = lg.exact_posterior(x - m @ lg.W.T)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(post.loc + m, scale_tril=post.scale_tril))

    return Case(lambda: lw(refused, x),
                r"reads the subsample indices.*Pass the rows' indices explicitly: "
                r"pyro.plate\('data', 60000, subsample=idx\) with idx a per-example argument",
                lambda: (exact_iwae(fixed, x, guide, truth, model_args=(idx,)),
                         refuse_plate_over_x()))


@case
def masked_latent(lg, x):
    keep = torch.tensor([True, False])

    def refused(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).mask(keep).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    return Case(lambda: lw(refused, x),
                r"hides part of the prior density of latent site 'z'.*give the latent its full "
                r"prior", lambda: exact(lg, lg, x))


@case
def moving_support(lg, x):
    def refused(x):  # u | z ~ Uniform(z - 1, z + 1)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(()), 1.0))
            u = pyro.sample("u", dist.Uniform(z - 1.0, z + 1.0))
            pyro.sample("x", dist.Normal(u.unsqueeze(-1), 0.5).to_event(1), obs=x)

    def fixed(x):  # u = low + (high - low) * pyro.sample("u_unit", dist.Uniform(0., 1.))
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(()), 1.0))
            low, high = z - 1.0, z + 1.0
            u = low + (high - low) * pyro.sample("u_unit", dist.Uniform(0., 1.))
            pyro.sample("x", dist.Normal(u.unsqueeze(-1), 0.5).to_event(1), obs=x)

    # x = z + v + noise, v ~ U(-1, 1): p(x) = (Phi((x + 1) / c) - Phi((x - 1) / c)) / 2, c^2 = 1.25
    c = math.sqrt(1.25)
    norm = dist.Normal(0.0, 1.0)
    truth = ((norm.cdf((X1[:, 0] + 1) / c) - norm.cdf((X1[:, 0] - 1) / c)) / 2).log()
    return Case(lambda: lw(refused, X1),
                r"depends on the values of other latents.*u = low \+ \(high - low\) \* "
                r"pyro.sample\('u_unit', dist.Uniform\(0., 1.\)\)",
                lambda: lw_unbiased(fixed, X1, truth))


def _sphere(x, reparam):
    config = {"z": ProjectedNormalReparam()} if reparam else {}
    with pyro.plate("data", x.shape[0]), poutine.reparam(config=config):
        z = pyro.sample("z", dist.ProjectedNormal(x.new_zeros(2)))  # a uniform angle
        pyro.sample("x", dist.Normal(z[..., :1], 0.5).to_event(1), obs=x)


def _sphere_truth():
    grid = torch.linspace(-math.pi, math.pi, 20001, dtype=torch.float64)
    return quadrature(lambda a: torch.full_like(a, -math.log(2 * math.pi)),
                      lambda a: dist.Normal(torch.cos(a)[:, None], 0.5).log_prob(X1[:, 0]), grid)


@case
def sphere(lg, x):
    def fixed():
        truth = _sphere_truth()
        lw_unbiased(_sphere, X1, truth, model_kwargs={"reparam": True})
        r = pyrolik.ais(_sphere, X1, num_steps=20, num_chains=32, model_kwargs={"reparam": True},
                        seed=0, progress=False, kernel=plain())
        assert_lower_bound(r.log_likelihood, truth, r.log_weights)

    return Case(lambda: lw(_sphere, X1, model_kwargs={"reparam": False}),
                r"\(ProjectedNormal\) has support Sphere.*"
                r"poutine.reparam\(config=\{'z': ProjectedNormalReparam\(\)\}\)", fixed)


def _von_mises(x):
    with pyro.plate("data", x.shape[0]):
        a = pyro.sample("z", dist.VonMises(x.new_zeros(()), 2.0))
        pyro.sample("x", dist.Normal(torch.cos(a).unsqueeze(-1), 0.5).to_event(1), obs=x)


def _von_mises_truth():
    grid = torch.linspace(-math.pi, math.pi, 20001, dtype=torch.float64)
    return quadrature(dist.VonMises(0.0, 2.0).log_prob,
                      lambda a: dist.Normal(torch.cos(a)[:, None], 0.5).log_prob(X1[:, 0]), grid)


@case
def circular_annealed(lg, x):
    def fixed():  # importance sampling (its draws stay on one turn); or the angle on the circle
        lw_unbiased(_von_mises, X1, _von_mises_truth())
        r = pyrolik.iwae(_von_mises, X1, _von_mises_guide, num_samples=2000, seed=0,
                         progress=False)
        assert_unbiased(r.log_weights, _von_mises_truth())
        r = pyrolik.ais(_sphere, X1, num_steps=20, num_chains=32, model_kwargs={"reparam": True},
                        seed=0, progress=False, kernel=plain())  # a ProjectedNormal latent, reparameterised
        assert_lower_bound(r.log_likelihood, _sphere_truth(), r.log_weights)

    return Case(lambda: pyrolik.ais(_von_mises, X1, num_steps=3, num_chains=2, seed=0,
                                    progress=False),
                r"'z' is circular.*pyrolik.iwae or pyrolik.likelihood_weighting.*a ProjectedNormal "
                r"latent with poutine.reparam\(config=\{'z': ProjectedNormalReparam\(\)\}\)", fixed)


def _von_mises_guide(x):
    with pyro.plate("data", x.shape[0]):
        pyro.sample("z", dist.VonMises(x[:, 0].clamp(-1.0, 1.0).acos(), 1.0))


@case
def circular_guide(lg, x):
    def line_guide(x):
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.Normal(x[:, 0], 1.0))

    def fixed():
        r = pyrolik.iwae(_von_mises, X1, _von_mises_guide, num_samples=2000, seed=0,
                         progress=False)
        assert_unbiased(r.log_weights, _von_mises_truth())

    return Case(lambda: pyrolik.iwae(_von_mises, X1, line_guide, num_samples=2, progress=False),
                r"the guide samples 'z' from Normal.*circular.*Sample it in the guide from a "
                r"circular distribution \(dist.VonMises\)", fixed)


@case
def guide_support(lg, x):
    def log_normal(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.LogNormal(x.new_zeros(()), 0.5))
            pyro.sample("x", dist.Normal(z.unsqueeze(-1), 0.5).to_event(1), obs=x)

    def on_the_line(x):
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.Normal(x.new_ones(x.shape[0]), 0.5))

    def same_map(x):  # dist.TransformedDistribution(dist.Normal(loc, scale), biject_to(support))
        support = dist.LogNormal(0.0, 1.0).support
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.TransformedDistribution(
                dist.Normal(x.new_zeros(x.shape[0]), 0.8), biject_to(support)))

    def fixed():
        grid = torch.linspace(1e-6, 20.0, 40001, dtype=torch.float64)
        truth = quadrature(dist.LogNormal(0.0, 0.5).log_prob,
                           lambda g: dist.Normal(g[:, None], 0.5).log_prob(X1[:, 0]), grid)
        r = pyrolik.iwae(log_normal, X1, same_map, num_samples=2000, seed=0, progress=False)
        assert_unbiased(r.log_weights, truth)

    return Case(lambda: pyrolik.iwae(log_normal, X1, on_the_line, num_samples=2, progress=False),
                r"the guide samples 'z' from Normal with support Real\(\), where the model's 'z' "
                r"has support GreaterThan.*dist.TransformedDistribution\(dist.Normal\(loc, scale\), "
                r"biject_to\(support\)\)", fixed)


# -- discrete latents --------------------------------------------------------------------------------
MIX = MixturePriorLinearGaussian.random(data_dim=3, latent_dim=2, num_components=3, seed=0,
                                        dtype=torch.float64)


def labelled(enumerate=None, markov=False):
    """The mixture-prior model with its component drawn as a discrete latent ``c``."""

    def model(x):
        with pyro.plate("data", x.shape[0]):
            for _ in pyro.markov(range(1)) if markov else [0]:
                c = pyro.sample("c", dist.Categorical(MIX.weights.to(x)),
                                infer={"enumerate": enumerate} if enumerate else {})
            z = pyro.sample("z", dist.Normal(MIX.means.to(x)[c],
                                             MIX.scales.to(x)[c].unsqueeze(-1)).to_event(1))
            pyro.sample("x", dist.Normal(z @ MIX.W.T + MIX.b, MIX.sigma).to_event(1), obs=x)

    return model


def _mixture_exact(model):
    x = MIX.sample(4, torch.Generator().manual_seed(0))
    exact_iwae(model, x, MIX.exact_guide, MIX.exact_log_marginal(x))


@case
def discrete_latent(lg, x):
    def fixed():
        _mixture_exact(labelled("parallel"))  # infer={'enumerate': 'parallel'}
        _mixture_exact(MIX)  # marginalised by hand: dist.MixtureSameFamily

    return Case(lambda: lw(labelled(), MIX.sample(4, torch.Generator().manual_seed(0))),
                r"latent site 'c' is discrete \(Categorical\).*mark it "
                r"infer=\{'enumerate': 'parallel'\}.*or marginalise it in the model by hand",
                fixed, error=TypeError)


@case
def enumerated_in_markov(lg, x):
    return Case(lambda: lw(labelled("parallel", markov=True),
                           MIX.sample(4, torch.Generator().manual_seed(0))),
                r"the enumerated site 'c' is inside pyro.markov.*use pyro.markov only around "
                r"continuous latents", lambda: _mixture_exact(labelled("parallel")))


# -- plates and observed sites -----------------------------------------------------------------------
@case
def no_observed_site(lg, x):
    refused = lg_model(lg, observe=lambda loc, x: pyro.sample("x", dist.Normal(loc, lg.s)
                                                              .to_event(1)))
    fixed = lg_model(lg, observe=lambda loc, x: pyro.sample("x", dist.Normal(loc, lg.s)
                                                            .to_event(1), obs=x))
    return Case(lambda: lw(refused, x),
                r"the model has no observed site: condition its observation-noise site on the "
                r"data, e.g. pyro.sample\('x', dist.Normal\(decoder\(z\), sigma\).to_event\(1\), "
                r"obs=x\)", lambda: exact(lg, fixed, x))


@case
def no_data_plate(lg, x):
    def refused(x):
        z = pyro.sample("z", dist.Normal(x.new_zeros(x.shape[0], 2), 1.0).to_event(2))
        pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(2), obs=x)

    def fixed(x):
        with pyro.plate('data', x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(x.shape[0], 2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    return Case(lambda: lw(refused, x),
                r"no plate over the examples: wrap the model's sample sites in "
                r"`with pyro.plate\('data', x.shape\[0\]\):`", lambda: exact(lg, fixed, x))


@case
def sequential_plate(lg, x):
    def refused(x):
        for i in pyro.plate("data", x.shape[0]):
            z = pyro.sample(f"z_{i}", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample(f"x_{i}", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x[i])

    return Case(lambda: lw(refused, x),
                r"the plate 'data' over the examples is sequential.*"
                r"`with pyro.plate\('data', x.shape\[0\]\):` with batched sample sites",
                lambda: exact(lg, lg, x))


@case
def observed_outside_the_plate(lg, x):
    def refused(x):
        lg(x)
        pyro.sample("offset", dist.Normal(x.new_zeros(()), 1.0), obs=x.new_tensor(0.3))

    return Case(lambda: lw(refused, x),
                r"observed site\(s\) \['offset'\] are outside the plate 'data'.*or leave the "
                r"shared one out when evaluating", lambda: exact(lg, lg, x))


@case
def global_latent(lg, x):
    glg = GlobalLinearGaussian.random(data_dim=2, latent_dim=1, s=0.5, seed=0)
    data = glg.sample(3, seed=1)

    def fixed():  # pyrolik.evidence(model, x, num_steps=..., num_chains=...)
        r = pyrolik.evidence(glg, data, num_steps=50, num_chains=64, seed=0, progress=False, kernel=plain())
        assert_unbiased(r.log_weights, glg.exact_log_evidence(data))
        # or, for a fitted quantity, a pyro.param: the linear-Gaussian model with that offset
        mu = torch.tensor([0.3, -0.2], dtype=data.dtype)
        fitted = LinearGaussian(W=glg.W, b=mu, s=glg.s)

        def param_model(x):
            m = pyro.param("mu", mu)
            with pyro.plate("data", x.shape[0]):
                z = pyro.sample("z", dist.Normal(x.new_zeros(1), 1.0).to_event(1))
                pyro.sample("x", dist.Normal(m + z @ glg.W.T, glg.s).to_event(1), obs=x)

        exact(fitted, param_model, data)

    return Case(lambda: lw(glg, data),
                r"latent site 'mu' is outside the plate 'data'.*pyrolik.evidence\(model, x, "
                r"num_steps=\.\.\., num_chains=\.\.\.\).*or make the site a pyro.param", fixed)


@case
def per_example_label_in_evidence(lg, x):
    glg = GlobalLinearGaussian.random(data_dim=2, latent_dim=1, s=0.5, seed=0)
    data = glg.sample(3, seed=1)
    W, s = glg.W, glg.s

    def labelled_global(x):  # mu is global; each example's label c says whether mu shifts it
        mu = pyro.sample("mu", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
        with pyro.plate("data", x.shape[0]):
            c = pyro.sample("c", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})
            z = pyro.sample("z", dist.Normal(x.new_zeros(1), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(mu * c.unsqueeze(-1) + z @ W.T, s).to_event(1), obs=x)

    def marginalised(x):  # "marginalise a per-example label by hand (dist.MixtureSameFamily)"
        mu = pyro.sample("mu", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(1), 1.0).to_event(1))
            loc = torch.stack([z @ W.T, mu + z @ W.T], -2)  # (..., N, 2 classes, D)
            pyro.sample("x", dist.MixtureSameFamily(dist.Categorical(x.new_full((2,), 0.5)),
                                                    dist.Normal(loc, s).to_event(1)), obs=x)

    def truth():  # a sum over the 2^N labellings of Gaussian data sets
        n, d = data.shape
        C = W @ W.T + s**2 * torch.eye(d, dtype=data.dtype)
        terms = []
        for labels in torch.cartesian_prod(*[torch.tensor([0.0, 1.0], dtype=data.dtype)] * n):
            cov = torch.kron(torch.outer(labels, labels), torch.eye(d, dtype=data.dtype)) \
                + torch.kron(torch.eye(n, dtype=data.dtype), C)
            terms.append(dist.MultivariateNormal(data.new_zeros(n * d), cov).log_prob(
                data.reshape(-1)) - n * math.log(2.0))
        return torch.stack(terms).logsumexp(0).reshape(1)

    def fixed():
        r = pyrolik.evidence(marginalised, data, num_steps=50, num_chains=64, seed=0,
                             progress=False, kernel=plain())
        assert_unbiased(r.log_weights, truth())

    return Case(lambda: pyrolik.evidence(labelled_global, data, num_steps=2, num_chains=2,
                                         progress=False),
                r"the discrete latent 'c' is inside the plate\(s\) \['data'\].*marginalise a "
                r"per-example label in the model by hand \(e.g. dist.MixtureSameFamily over its "
                r"classes\)", fixed)




# -- guides ------------------------------------------------------------------------------------------
def _post_guide(lg, name="z", plate="data", dim=-1, aux=False):
    def guide(x):
        if aux:
            pyro.sample("aux", dist.Normal(0.0, 1.0), infer={"is_auxiliary": True})
        post = lg.exact_posterior(x)
        loc, tril = post.loc, post.scale_tril
        if dim == -2:
            loc, tril = loc.unsqueeze(-2), tril.unsqueeze(-3)
        with pyro.plate(plate, x.shape[0], dim=dim):
            pyro.sample(name, dist.MultivariateNormal(loc, scale_tril=tril))

    return guide


def _iwae(model, guide, x):
    return pyrolik.iwae(model, x, guide, num_samples=2, progress=False)


@case
def guide_misses_a_site(lg, x):
    return Case(lambda: _iwae(lg, _post_guide(lg, name="w"), x),
                r"the guide misses the latent site\(s\) \['z'\]: a guide must sample every latent "
                r"site of the model, under the same name",
                lambda: exact_iwae(lg, x, _post_guide(lg, name="z"), lg.exact_log_marginal(x)))


@case
def guide_auxiliary_site(lg, x):
    return Case(lambda: _iwae(lg, _post_guide(lg, aux=True), x),
                r"marked infer=\{'is_auxiliary': True\}.*use a guide without auxiliary sites",
                lambda: exact_iwae(lg, x, _post_guide(lg), lg.exact_log_marginal(x)))


@case
def guide_outside_the_plate(lg, x):
    return Case(lambda: _iwae(lg, _post_guide(lg, plate="batch"), x),
                r"the guide samples 'z' outside the model's plate 'data'.*inside a plate of the "
                r"model's name, pyro.plate\('data', x.shape\[0\]\)",
                lambda: exact_iwae(lg, x, _post_guide(lg, plate="data"), lg.exact_log_marginal(x)))


@case
def guide_of_another_shape(lg, x):
    return Case(lambda: _iwae(lg, _post_guide(lg, dim=-2), x),
                r"the guide samples 'z' with shape .* give the guide's site the model's plate dims "
                r"and event shape",
                lambda: exact_iwae(lg, x, _post_guide(lg, dim=-1), lg.exact_log_marginal(x)))


@case
def guide_continuous_for_an_enumerated_site(lg, x):
    data = MIX.sample(4, torch.Generator().manual_seed(0))

    def continuous_c(x):
        post = MIX.exact_posterior(x)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("c", dist.Normal(x.new_zeros(x.shape[0]), 1.0))
            pyro.sample("z", post)

    return Case(lambda: _iwae(labelled("parallel"), continuous_c, data),
                r"the guide samples \['c'\] from a continuous distribution.*or remove it from the "
                r"guide", lambda: _mixture_exact(labelled("parallel")))


def _fit_auto_normal(lg, x):
    pyro.clear_param_store()
    guide = autoguide.AutoNormal(lg)
    svi = SVI(lg, guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
    for _ in range(150):
        svi.step(x)
    return guide


def _auto_normal_fixed(lg, x):
    """Fit AutoNormal by SVI on the examples evaluated: an exact (unbiased) IWAE proposal."""
    guide = _fit_auto_normal(lg, x)
    r = pyrolik.iwae(lg, x, guide, num_samples=1000, seed=0, progress=False)
    assert_unbiased(r.log_weights, lg.exact_log_marginal(x))


@case
def auto_messenger(lg, x):
    return Case(lambda: _iwae(lg, autoguide.AutoNormalMessenger(lg), x),
                r"AutoNormalMessenger is an AutoMessenger.*Fit AutoNormal .* by SVI on the "
                r"examples you evaluate instead", lambda: _auto_normal_fixed(lg, x),
                error=TypeError)


@case
def auto_delta(lg, x):
    def refused():
        guide = autoguide.AutoDelta(lg)
        guide(x)
        return _iwae(lg, guide, x)

    return Case(refused, r"AutoDelta is not a Gaussian AutoGuide .*use AutoNormal",
                lambda: _auto_normal_fixed(lg, x), error=TypeError)


@case
def auto_guide_not_fitted(lg, x):
    return Case(lambda: _iwae(lg, autoguide.AutoNormal(lg), x),
                r"the AutoNormal has not been fitted.*fit it with SVI on the examples you evaluate",
                lambda: _auto_normal_fixed(lg, x))


@case
def auto_guide_fitted_elsewhere(lg, x):
    return Case(lambda: _iwae(lg, _fit_auto_normal(lg, torch.cat([x, x])), x),
                r"the AutoGuide was fitted on other examples.*fit it by SVI on these examples",
                lambda: _auto_normal_fixed(lg, x))


# -- arguments, randomness, rows -----------------------------------------------------------------------
@case
def per_example_rows(lg, x):
    def model(x, offsets):  # offsets: rows shared by every example (their mean is the offset b)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + offsets.mean(0), lg.s).to_event(1), obs=x)

    offsets = lg.b + torch.tensor([[-1.0], [0.0], [1.0]], dtype=x.dtype)  # 3 rows, x has 4
    return Case(lambda: lw(model, x, model_args=(pyrolik.model.per_example(offsets),)),
                r"model_args\[0\] is marked per example but has 3 rows.*or mark it pyrolik.model.shared\(\.\.\.\) "
                r"if it is the same for all",
                lambda: exact(lg, model, x, model_args=(pyrolik.model.shared(offsets),)))


@case
def random_draws(lg, x):
    def refused(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            h = z + 0.5 * torch.randn(z.shape, dtype=z.dtype)
            pyro.sample("x", dist.Normal(h @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    def fixed(x):  # the draw made a pyro.sample site
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            h = pyro.sample("h", dist.Normal(z, 0.5).to_event(1))
            pyro.sample("x", dist.Normal(h @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    # h ~ N(0, 1.25 I): the linear-Gaussian model with W scaled by sqrt(1.25)
    truth = LinearGaussian(W=lg.W * math.sqrt(1.25), b=lg.b, s=lg.s).exact_log_marginal(x)
    return Case(lambda: lw(refused, x),
                r"draws random numbers outside pyro.sample.*make those draws pyro.sample sites",
                lambda: lw_unbiased(fixed, x, truth, num_samples=8000))


@case
def reads_other_rows(lg, x):
    def refused(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            centre = x.mean(0)  # a batch statistic
            pyro.sample("x", dist.Normal(z @ lg.W.T + centre, lg.s).to_event(1), obs=x)

    def fixed(x, centre):  # computed once, outside the model, passed as a shared argument
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + centre, lg.s).to_event(1), obs=x)

    centre = x.mean(0)
    oracle = LinearGaussian(W=lg.W, b=centre, s=lg.s)
    return Case(lambda: lw(refused, x),
                r"depends on the other rows of its batch.*compute such statistics once, outside "
                r"the model, and pass them as a shared argument \(pyrolik.model.shared\(t\)\)",
                lambda: exact(oracle, fixed, x, model_args=(pyrolik.model.shared(centre),)))


# -- running the model on x (pyrolik.model.hints) ----------------------------------------------------
@case
def dtype(lg, x):
    layer = torch.nn.Linear(2, 3).float()
    with torch.no_grad():
        layer.weight.copy_(lg.W)
        layer.bias.copy_(lg.b)

    def model(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(layer(z), lg.s).to_event(1), obs=x)

    def guide(x):  # the exact posterior, in x's dtype
        post = lg.exact_posterior(x)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(post.loc.to(x), scale_tril=post.scale_tril.to(x)))

    def fixed():  # x.float(): the answer to float32 rounding
        r = pyrolik.iwae(model, x.float(), guide, num_samples=5, seed=0, progress=False)
        torch.testing.assert_close(r.log_weights.double(),
                                   lg.exact_log_marginal(x).expand(5, -1), rtol=0, atol=1e-4)

    return Case(lambda: lw(model, x), r"x is float64 but the model's parameters are float32 "
                r"\(Linear.weight\): pass x.float\(\)", fixed)


@case
def event_shape(lg, x):
    refused = lg_model(lg, observe=lambda loc, x: pyro.sample("x", dist.Normal(loc, lg.s),
                                                              obs=x))
    fixed = lg_model(lg, observe=lambda loc, x: pyro.sample("x", dist.Normal(loc, lg.s)
                                                            .to_event(1), obs=x))
    return Case(lambda: lw(refused, x),
                r"declare them with .to_event, e.g. dist.Normal\(loc, scale\).to_event\(1\)",
                lambda: exact(lg, fixed, x))


@case
def conditioned_outside(lg, x):
    def unobserved(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1))

    refused = pyro.condition(unobserved, data={"x": x})
    return Case(lambda: lw(refused, x),
                r"pyro.condition\(model, data=\.\.\.\).*Observe the model's argument instead: "
                r"pyro.sample\('x', \.\.\., obs=x\)", lambda: exact(lg, lg, x))


@case
def plate_sized_elsewhere(lg, x):
    n = x.shape[0]
    return Case(lambda: lw(lg_model(lg, plate=lambda x: pyro.plate("data", n)), x),
                r"sizes its plate over the examples from something other than x.*"
                r"pyro.plate\('data', x.shape\[0\]\)",
                lambda: exact(lg, lg_model(lg, plate=lambda x: pyro.plate("data", x.shape[0])), x))


@case
def outside_the_support(lg, x):
    from pyrolik_models.oracles import BernoulliDecoder

    bern = BernoulliDecoder.random(data_dim=3)
    grey = torch.tensor([[0.2, 0.9, 0.6], [0.7, 0.1, 0.4], [0.95, 0.3, 0.8]], dtype=torch.float64)

    def fixed():
        binary = (grey > 0.5).float().double()  # binarize x, e.g. (x > 0.5).float()
        lw_unbiased(bern, binary, bern.exact_log_marginal(binary))

    return Case(lambda: lw(bern, grey), r"has support .*Boolean\(\).* but x holds values outside it.*"
                r"binarize x \(e.g. \(x > 0.5\).float\(\)\)", fixed)


@case
def integer_data(lg, x):
    counts = torch.tensor([[0, 2, 1], [3, 0, 1]])

    def model(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(3), 1.0).to_event(1))  # x.new_zeros: int
            pyro.sample("x", dist.Poisson(z.exp()).to_event(1), obs=x)

    def fixed():
        # z_j ~ N(0, 1), x_j | z_j ~ Poisson(e^z_j): p(x) is a product of 1-D integrals
        grid = torch.linspace(-9.0, 9.0, 20001, dtype=torch.float64)
        xf = counts.double()
        lj = (dist.Normal(0.0, 1.0).log_prob(grid)[:, None, None]
              + dist.Poisson(grid.exp()[:, None, None]).log_prob(xf))
        truth = torch.trapezoid(lj.exp(), grid, dim=0).log().sum(-1)
        lw_unbiased(model, counts.double(), truth)  # pass x.double(), as the message offers

    return Case(lambda: lw(model, counts), r"x is int64 and running the model on it failed.*"
                r"pass x.float\(\) \(or x.double\(\), to compute in float64\)", fixed)


@case
def improper_prior(lg, x):
    def refused(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.ImproperUniform(dist.constraints.real, (), (2,)))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    return Case(lambda: lw(refused, x), r"an improper prior \(e.g. ImproperUniform\) cannot be "
                r"evaluated: give the latent a proper prior", lambda: exact(lg, lg, x))


# -- simulation (simulate, bdmc) ---------------------------------------------------------------------
@case
def observation_computed_from_x(lg, x):
    m, s = 0.5, 2.0

    def refused(x):  # observes a computation on x
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            loc = (z @ lg.W.T + lg.b - m) / s
            pyro.sample("x", dist.Normal(loc, lg.s / s).to_event(1), obs=(x - m) / s)

    # "observe x by selection with any computation on it in the distribution": the Jacobian 1/s^D
    # of the computation is the only difference, and now x is observed as it is
    def fixed():
        sim = pyrolik.simulate(lg, 4, data_shape=(3,), seed=0)
        b = pyrolik.bdmc(lg, sim, num_steps=20, num_chains=32, seed=0, progress=False, kernel=plain())
        truth = lg.exact_log_marginal(sim.x)
        assert_lower_bound(b.lower.log_likelihood, truth, b.lower.log_weights)
        assert (b.upper.log_likelihood >= truth - 4 * b.upper.mcse).all()

    return Case(lambda: pyrolik.simulate(refused, 4, data_shape=(3,), seed=0),
                r"Observe x by selection \(obs=x, obs=x\[:, t\], obs=x\[:, idx\]\) with any "
                r"computation on it in the distribution.*pyrolik.bdmc\(model, \(x, latents\)",
                fixed)


@case
def structure_reads_the_data(lg, x):
    def refused(x):  # the number of entries above a threshold sets the noise (ProdLDA's total_count)
        scale = lg.s * (1.0 + (x > 0.0).sum(-1, keepdim=True).to(x))
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, scale).to_event(1), obs=x)

    def fixed():  # simulate (x, latents) with your own code, exact draws given x
        data = lg.sample(4, torch.Generator().manual_seed(0))
        # given x, the noise is fixed: each example is a linear-Gaussian model at its own noise
        oracles = [LinearGaussian(W=lg.W, b=lg.b, s=float(lg.s * (1.0 + (xn > 0.0).sum())))
                   for xn in data]
        truth = torch.cat([o.exact_log_marginal(xn[None]) for o, xn in zip(oracles, data,
                                                                           strict=True)])
        latents = {"z": torch.cat([o.exact_posterior(xn[None]).sample() for o, xn in
                                   zip(oracles, data, strict=True)])}
        b = pyrolik.bdmc(refused, (data, latents), num_steps=20, num_chains=32, seed=0,
                         progress=False, kernel=plain())
        assert_lower_bound(b.lower.log_likelihood, truth, b.lower.log_weights)
        assert (b.upper.log_likelihood >= truth - 4 * b.upper.mcse).all()

    return Case(lambda: pyrolik.simulate(refused, 4, data_shape=(3,), seed=0),
                r"its structure reads the data.*simulate \(x, latents\) with your own code.*"
                r"pyrolik.bdmc\(model, \(x, latents\), \.\.\.\)", fixed)


# -- curves ------------------------------------------------------------------------------------------
@case
def sigma_curve_of_another_observation(lg, x):
    def laplace(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Laplace(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    def fixed():
        # with the squared error of the site's mean, the path is the linear-Gaussian one:
        # Z_beta(x) = int p(z) exp(-beta |x - W z - b|^2) dz in closed form (LinearGaussian)
        curve = pyrolik.rate_distortion(laplace, x, [0.5, 2.0],
                                        distortion=lambda x, x_hat: ((x - x_hat) ** 2).sum(-1),
                                        num_steps=40, num_chains=64, seed=0, progress=False, kernel=plain())
        for j, beta in enumerate(curve.betas.tolist()):
            assert_unbiased(curve.log_weights[j], lg.log_normalizer(x, beta))

    # the message is the refusal itself, not buried in "running the model on x failed (...)"
    return Case(lambda: pyrolik.sigma_curve(laplace, x, [0.5], num_steps=5, num_chains=2,
                                            progress=False),
                r"^observed site 'x' is Laplace, not Normal.*pyrolik.rate_distortion\(model, x, "
                r"betas, distortion=d, \.\.\.\) with d\(x, x_hat\) a callable of the site's mean",
                fixed)


# -- warnings that suggest a rewrite ------------------------------------------------------------------
@case
def no_observed_site_reads_x(lg, x):
    A = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 0.0], [0.0, 2.0, 1.0]], dtype=x.dtype)

    def cvae(xs, ys=None):  # Pyro's CVAE call: the input as x, the observation as ys
        with pyro.plate("data", xs.shape[0]):
            z = pyro.sample("z", dist.Normal(xs.new_zeros(2), 1.0).to_event(1))
            pyro.sample("y", dist.Normal(z @ lg.W.T + xs @ A.T, lg.s).to_event(1), obs=ys)

    ys = x

    def conditioned(ys, xs):  # def conditioned(ys, xs): return model(xs, ys=ys)
        return cvae(xs, ys=ys)

    xs = torch.tensor([[0.1, -0.3, 0.2], [1.0, 0.0, 0.5], [-0.5, 0.4, 0.0], [0.0, 0.0, 1.0]],
                      dtype=x.dtype)
    # y | xs ~ N(W z + A xs, s^2 I): the linear-Gaussian model of y - A xs
    truth = lg.exact_log_marginal(ys - xs @ A.T + lg.b)

    def guide(ys, xs):
        post = lg.exact_posterior(ys - xs @ A.T + lg.b)
        with pyro.plate("data", ys.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(post.loc, scale_tril=post.scale_tril))

    def fixed():
        import warnings

        from pyrolik import IdiomWarning

        with warnings.catch_warnings():
            warnings.simplefilter("error", IdiomWarning)
            exact_iwae(conditioned, ys, guide, truth, model_kwargs={"xs": xs})

    return Case(lambda: lw(cvae, xs, model_kwargs={"ys": ys}),
                r"no observed site reads x.*def conditioned\(ys, xs\): return model\(xs, ys=ys\), "
                r"then pyrolik.ais\(conditioned, ys, model_kwargs=\{'xs': xs\}", fixed, warns=True)


@case
def scale_used_as_a_mask(lg, x):
    seen = torch.tensor([True, False, True, True])

    def model(x, seen, mask_with_scale=True):  # seen: per example, follows the rows
        scale = poutine.scale(scale=seen.to(x)) if mask_with_scale else poutine.mask(mask=seen)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            with scale:
                pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    # refused by Pyro's own validation, whose hint the message carries (pyrolik's IdiomWarning,
    # "a scale of 0 used as a mask: use poutine.mask instead", covers validation turned off)
    return Case(lambda: lw(model, x, model_args=(seen,)), r"Consider using poutine.mask\(\) instead of "
                r"poutine.scale\(\)", lambda: _masked_exact(lg, model, x, seen))


def _masked_exact(lg, model, x, seen):
    """Likelihood weighting of the masked model: exact where observed, exactly 0 where not."""
    r = pyrolik.likelihood_weighting(model, x, num_samples=4000, seed=0, progress=False,
                                     model_args=(seen,), model_kwargs={"mask_with_scale": False})
    assert (r.log_weights[:, ~seen] == 0).all()
    assert_unbiased(r.log_weights[:, seen], lg.exact_log_marginal(x)[seen], min_ess_frac=0.01)


@case
def inverted_bdmc_gap(lg, x):
    def refused():  # reverse chains started far from the posterior of x
        return pyrolik.bdmc(lg, (x, {"z": torch.full((4, 2), 6.0, dtype=x.dtype)}),
                            num_steps=20, num_chains=32, seed=0, progress=False).warnings()

    def fixed():  # pass data simulated by pyrolik.simulate
        sim = pyrolik.simulate(lg, 4, data_shape=(3,), seed=0)
        b = pyrolik.bdmc(lg, sim, num_steps=20, num_chains=32, seed=0, progress=False, kernel=plain())
        truth = lg.exact_log_marginal(sim.x)
        assert_lower_bound(b.lower.log_likelihood, truth, b.lower.log_weights)
        assert (b.upper.log_likelihood >= truth - 4 * b.upper.mcse).all()

    return Case(refused, r"beyond Monte Carlo noise.*the reverse chains did not start from exact "
                r"posterior draws of x \(pass data simulated by pyrolik.simulate\)", fixed,
                warns=True)


# fixes checked by Monte Carlo (tolerances from the standard error, fixed seeds); the others are
# checked to rounding (zero-variance IWAE with the exact posterior)
STATISTICAL = {"moving_support", "sphere", "circular_annealed", "circular_guide", "guide_support",
               "global_latent", "auto_messenger", "auto_delta", "auto_guide_not_fitted",
               "auto_guide_fitted_elsewhere", "random_draws", "outside_the_support", "integer_data",
               "observation_computed_from_x", "structure_reads_the_data",
               "per_example_label_in_evidence", "sigma_curve_of_another_observation",
               "scale_used_as_a_mask", "inverted_bdmc_gap"}
assert STATISTICAL <= set(CASES)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.statistical)
                                  if n in STATISTICAL else n for n in CASES])
def test_the_fix_a_refusal_suggests_gives_the_exact_answer(name, lg, x):
    c = CASES[name](lg, x)
    if c.warns:
        import re
        import warnings

        from pyrolik import PyrolikWarning

        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", PyrolikWarning)
            result = c.refused()
        said = [str(w.message) for w in seen if issubclass(w.category, PyrolikWarning)]
        said += [str(m) for m in result] if isinstance(result, list) else []  # result.warnings()
        assert any(re.search(c.match, m) for m in said), said
    else:
        with pytest.raises(c.error, match=c.match):
            c.refused()
    c.fixed()
