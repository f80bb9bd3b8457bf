"""simulate and bdmc beyond one observed site holding x: a site per time step (Kalman oracle), masked
ragged sequences, a gathered observation, obs_mask; the refusals and their fixes; a model that
observes no entry of x."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyrolik
from models.oracles import LinearStateSpace
from pyrolik.model.simulation import FILL

G = torch.Generator().manual_seed(2)
W = torch.randn(6, 2, generator=G, dtype=torch.float64)
S = 0.5
KEEP = torch.tensor([0, 2, 5])


@pytest.fixture
def ssm():
    return LinearStateSpace.random(data_dim=3, latent_dim=2, seed=1)


def test_kalman_filter_matches_the_joint_gaussian(ssm):
    x = torch.randn(5, 4, 3, generator=G, dtype=torch.float64)
    torch.testing.assert_close(ssm.exact_log_marginal(x), ssm.exact_joint_log_marginal(x))
    # a masked step contributes nothing: the filter of the first L steps
    lengths = torch.tensor([4, 2, 3, 1, 4])
    short = ssm.exact_log_marginal(x, lengths)
    for n, length in enumerate(lengths.tolist()):
        torch.testing.assert_close(short[n], ssm.exact_joint_log_marginal(x[n : n + 1, :length])[0])


def test_simulate_a_site_per_step_draws_from_the_joint(ssm, seed):
    sim = pyrolik.simulate(ssm, 3000, data_shape=(4, 3), seed=seed)
    assert sim.x.shape == (3000, 4, 3) and sorted(sim.latents) == [f"z_{t}" for t in range(4)]
    for t in range(4):  # x_t - C z_t - c ~ N(0, r^2): step t of x was drawn from z_t
        resid = sim.x[:, t] - sim.latents[f"z_{t}"] @ ssm.C.T - ssm.c
        assert abs(float(resid.std()) - ssm.r) < 4 * ssm.r / (2 * resid.numel()) ** 0.5
    z0, z1 = sim.latents["z_0"], sim.latents["z_1"]  # z_1 - A z_0 ~ N(0, q^2)
    assert abs(float((z1 - z0 @ ssm.A.T).std()) - ssm.q) < 4 * ssm.q / (2 * z0.numel()) ** 0.5
    assert torch.equal(sim.x, pyrolik.simulate(ssm, 3000, data_shape=(4, 3), seed=seed).x)


def test_ragged_sequences_leave_the_masked_steps_at_the_stated_value(ssm):
    lengths = torch.tensor([4, 2, 3, 1])
    sim = pyrolik.simulate(ssm, 4, data_shape=(4, 3), model_kwargs={"lengths": lengths}, seed=0)
    steps = torch.arange(4)
    masked = steps.unsqueeze(0) >= lengths.unsqueeze(1)  # (N, T)
    assert (sim.x[masked] == FILL).all() and (sim.x[~masked] != FILL).all()


@pytest.mark.statistical
def test_bdmc_brackets_the_kalman_log_marginal(ssm, seed):
    b = pyrolik.bdmc(ssm, 4, data_shape=(4, 3), num_steps=100, num_chains=25, seed=seed,
                     progress=False)
    exact = ssm.exact_log_marginal(b.x)
    lo, up = b.lower.log_likelihood - exact, b.upper.log_likelihood - exact
    assert (lo <= 4 * b.lower.mcse).all() and (up >= -4 * b.upper.mcse).all()
    assert float(lo.mean()) <= 4 * float(b.lower.mcse.pow(2).sum().sqrt()) / 4
    assert float(up.mean()) >= -4 * float(b.upper.mcse.pow(2).sum().sqrt()) / 4
    assert torch.equal(b.lower.num_observed, torch.full((4,), 12.0, dtype=torch.float64))


@pytest.mark.statistical
def test_bdmc_on_ragged_sequences_brackets_the_kalman_log_marginal(ssm, seed):
    lengths = torch.tensor([4, 2, 3, 1])
    b = pyrolik.bdmc(ssm, 4, data_shape=(4, 3), num_steps=60, num_chains=25, seed=seed,
                     model_kwargs={"lengths": lengths}, progress=False)
    exact = ssm.exact_log_marginal(b.x, lengths)
    assert ((b.lower.log_likelihood - exact) <= 4 * b.lower.mcse).all()
    assert ((b.upper.log_likelihood - exact) >= -4 * b.upper.mcse).all()
    assert torch.equal(b.lower.num_observed, 3.0 * lengths.double())


def gathered(x):  # a CVAE-style observation: the entries KEEP of each example, gathered
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
        pyro.sample("y", dist.Normal(z @ W[KEEP].T, S).to_event(1), obs=x[:, KEEP])


def _exact_kept(x):
    w = W[KEEP]
    return dist.MultivariateNormal(torch.zeros(3), w @ w.T + S**2 * torch.eye(3)).log_prob(x[:, KEEP])


def test_a_gathered_observation_is_simulated_where_it_is_read(seed):
    sim = pyrolik.simulate(gathered, 3000, data_shape=(6,), seed=seed)
    others = torch.ones(6, dtype=torch.bool).index_fill(0, KEEP, False)
    assert (sim.x[:, others] == FILL).all()
    resid = sim.x[:, KEEP] - sim.latents["z"] @ W[KEEP].T
    assert abs(float(resid.std()) - S) < 4 * S / (2 * resid.numel()) ** 0.5
    b = pyrolik.bdmc(gathered, 4, data_shape=(6,), num_steps=30, num_chains=25, seed=seed,
                     progress=False)
    exact = _exact_kept(b.x)
    assert ((b.lower.log_likelihood - exact) <= 4 * b.lower.mcse).all()
    assert ((b.upper.log_likelihood - exact) >= -4 * b.upper.mcse).all()


def test_obs_mask_simulates_the_observed_entries_and_draws_the_others_as_latents():
    mask = torch.tensor([True, False, True, True, False, True])

    def missing(x):
        with pyro.plate("data", x.shape[0], dim=-2):
            z = pyro.sample("z", dist.Normal(torch.zeros(1, 2), 1.0).to_event(1))
            with pyro.plate("features", 6, dim=-1):
                loc = (z @ W.T).reshape(x.shape[0], 6)
                pyro.sample("x", dist.Normal(loc, S), obs=x, obs_mask=mask.expand(x.shape[0], 6))

    sim = pyrolik.simulate(missing, 5, data_shape=(6,), seed=0)
    assert (sim.x[:, ~mask] == FILL).all() and (sim.x[:, mask] != FILL).all()
    assert sorted(sim.latents) == ["x_unobserved", "z"]


def test_a_site_that_computes_on_x_is_refused_with_a_fix_that_works(seed):
    def standardised(x):  # the observation is a computation on x, not a selection of it
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ W.T, S).to_event(1), obs=(x - 1.0) / 2.0)

    def shifted(x):  # a gathered subset, shifted: its entries are whole numbers in range
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ W[:3].T, S).to_event(1), obs=x[:, :3] + 1.0)

    for model in (standardised, shifted):
        with pytest.raises(ValueError, match=r"site 'x' reads x through a computation.*Observe x "
                           r"by selection.*pyrolik.bdmc\(model, \(x, latents\)"):
            pyrolik.simulate(model, 3, data_shape=(6,), seed=0)
    # the fix: data simulated by one's own code, x = 2 y + 1 with y drawn from the model
    z = torch.randn(3, 2, generator=G, dtype=torch.float64)
    x = 2.0 * (z @ W.T + S * torch.randn(3, 6, generator=G, dtype=torch.float64)) + 1.0
    b = pyrolik.bdmc(standardised, (x, {"z": z}), num_steps=5, num_chains=4, seed=seed,
                     progress=False)
    assert torch.isfinite(b.lower.log_likelihood).all() and torch.isfinite(b.upper.log_likelihood).all()


def test_a_global_latent_is_refused_without_pointing_to_data():
    def global_mean(x):
        mu = pyro.sample("mu", dist.Normal(torch.zeros(6), 1.0).to_event(1))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("x", dist.Normal(mu, 1.0).to_event(1), obs=x)

    with pytest.raises(ValueError, match="cannot simulate from this model.*'mu'") as err:
        pyrolik.simulate(global_mean, 3, data_shape=(6,), seed=0)
    assert "(x, latents)" not in str(err.value)  # that path hits the same refusal


P = torch.randn(3, 2, generator=G, dtype=torch.float64)


def cvae(xs, ys=None):  # as Pyro's examples/cvae calls it: the input first, the observation a keyword
    with pyro.plate("data", xs.shape[0]):
        z = pyro.sample("z", dist.Normal(xs @ P, 1.0).to_event(1))
        pyro.sample("y", dist.Normal(z @ W.T, S).to_event(1), obs=ys)


def test_a_model_that_observes_no_entry_of_x_is_named_with_a_fix_that_works(seed):
    xs = torch.randn(4, 3, generator=G, dtype=torch.float64)
    ys = torch.randn(4, 6, generator=G, dtype=torch.float64)
    exact = dist.MultivariateNormal(xs @ P @ W.T, W @ W.T + S**2 * torch.eye(6)).log_prob(ys)
    with pytest.warns(pyrolik.IdiomWarning, match=r"no observed site reads x: the observed site\(s\) "
                      r"\['y'\].*def conditioned\(ys, xs\): return model\(xs, ys=ys\)"):
        pyrolik.likelihood_weighting(cvae, xs, num_samples=10, model_kwargs={"ys": ys},
                                     progress=False)

    def conditioned(ys, xs):  # the fix the warning gives
        return cvae(xs, ys=ys)

    r = pyrolik.likelihood_weighting(conditioned, ys, num_samples=4000, model_kwargs={"xs": xs},
                                     seed=seed, progress=False)
    assert ((r.log_likelihood - exact).abs() <= 4 * r.mcse + 1e-3).all()
    assert r.num_dims == 6
    # simulating the model as Pyro calls it names the site too; the fixed model simulates
    with pytest.warns(pyrolik.IdiomWarning), pytest.raises(ValueError, match=r"no observed site reads x: \['y'\]"):
        pyrolik.simulate(cvae, 4, data_shape=(3,), model_kwargs={"ys": ys}, seed=0)
    sim = pyrolik.simulate(conditioned, 4, data_shape=(6,), model_kwargs={"xs": xs}, seed=0)
    assert sim.x.shape == (4, 6) and sim.latents["z"].shape == (4, 2)


def test_a_model_whose_structure_reads_the_data_is_refused_with_a_fix_that_works(seed):
    def prodlda_like(x):  # total_count read from the data: no placeholder gives its joint
        total = int(x.sum(-1).max())
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(torch.zeros(3), 1.0).to_event(1))
            pyro.sample("x", dist.Multinomial(total, logits=z), obs=x)

    with pytest.raises(ValueError, match=r"structure reads the data|ran neither") as err:
        pyrolik.simulate(prodlda_like, 3, data_shape=(3,), seed=0)
    assert "pyrolik.bdmc(model, (x, latents)" in str(err.value)
    # the fix: (x, z) drawn by one's own code from the joint, at the total the data will have
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(3, 3, generator=g, dtype=torch.float64)
    x = torch.stack([torch.multinomial(torch.softmax(row, -1), 5, replacement=True, generator=g)
                     .bincount(minlength=3) for row in z]).double()
    b = pyrolik.bdmc(prodlda_like, (x, {"z": z}), num_steps=5, num_chains=4, seed=seed,
                     progress=False)
    assert torch.isfinite(b.lower.log_likelihood).all() and torch.isfinite(b.upper.log_likelihood).all()


def test_a_label_observed_from_an_argument_stays_observed_in_the_simulation(seed):
    means = torch.tensor([[-3.0, 0.0], [3.0, 1.0]])
    prior = torch.tensor([0.3, 0.7])

    def labelled(x, ys):  # M2's labelled half: y observed from a per-example argument
        with pyro.plate("data", x.shape[0]):
            y = pyro.sample("y", dist.Categorical(prior), obs=ys)
            z = pyro.sample("z", dist.Normal(means[y], 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ W.T, S).to_event(1), obs=x)

    ys = torch.ones(400, dtype=torch.long)
    sim = pyrolik.simulate(labelled, 400, data_shape=(6,), model_kwargs={"ys": ys}, seed=seed)
    # z | y=1 ~ N((3, 1), I): the draws are of the joint given the labels, not with y released
    assert ((sim.latents["z"].mean(0) - means[1]).abs() < 4 / 400**0.5).all()
    ys = torch.tensor([0, 1, 1, 0])
    b = pyrolik.bdmc(labelled, 4, data_shape=(6,), num_steps=30, num_chains=25, seed=seed,
                     model_kwargs={"ys": ys}, progress=False)
    exact = prior[ys].log() + dist.MultivariateNormal(
        means[ys] @ W.T, W @ W.T + S**2 * torch.eye(6)).log_prob(b.x)  # log p(x, y)
    assert ((b.lower.log_likelihood - exact) <= 4 * b.lower.mcse).all()
    assert ((b.upper.log_likelihood - exact) >= -4 * b.upper.mcse).all()
    assert torch.equal(b.lower.num_observed, torch.full((4,), 7.0, dtype=torch.float64))
