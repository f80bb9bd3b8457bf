"""pyrolik.evidence: log p(x_1..N) of a whole data set with global latents, against the exact answer."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyrolik_models.oracles import GlobalLinearGaussian, LinearGaussian

import pyrolik
from pyrolik.model.dataset import WholeDataset
from tests.helpers import assert_unbiased, plain

pytestmark = pytest.mark.statistical


@pytest.fixture
def glg():
    return GlobalLinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=0)


@pytest.fixture
def data(glg):
    return glg.sample(6, seed=1)


def test_the_oracle_agrees_with_itself(glg, data):
    # the dense Cholesky form and the mean/deviation split are independent derivations
    assert torch.allclose(glg.exact_log_evidence(data), glg.exact_log_evidence_mean(data))
    # N = 1: the evidence is the marginal N(0, s_mu^2 I + W W^T + s^2 I) of one example
    one = data[:1]
    cov = glg.s_mu**2 * torch.eye(4) + glg.W @ glg.W.T + glg.s**2 * torch.eye(4)
    want = torch.distributions.MultivariateNormal(torch.zeros(4), cov).log_prob(one[0])
    assert torch.allclose(glg.exact_log_evidence(one), want)


def test_ais_refuses_a_global_latent_and_points_to_evidence(glg, data, seed):
    with pytest.raises(ValueError, match=r"latent site 'mu' is outside the plate 'data'.*"
                       r"pyrolik\.evidence\(model, x"):
        pyrolik.ais(glg, data, num_steps=5, num_chains=2, seed=seed, progress=False)
    # the fix the message gives works (its accuracy: the next test)
    r = pyrolik.evidence(glg, data, num_steps=5, num_chains=2, seed=seed, progress=False)
    assert r.log_likelihood.shape == (1,) and torch.isfinite(r.log_likelihood).all()


def test_evidence_is_unbiased_for_the_exact_joint(glg, data, seed):
    log_z = glg.exact_log_evidence(data)
    r = pyrolik.evidence(glg, data, num_steps=300, num_chains=32, seed=seed, progress=False)
    assert r.method == "evidence" and r.bound == "lower"
    assert r.log_weights.shape == (32, 1) and r.ess.shape == r.mcse.shape == (1,)
    assert_unbiased(r.log_weights, log_z)
    assert abs(float(r.log_likelihood[0] - log_z)) <= 4 * float(r.mcse[0])
    # the chains' final states hold every latent, global and local, of the one data set
    assert r.latents["mu"].shape == (32, 1, 4) and r.latents["z"].shape == (32, 1, 6, 2)
    assert r.x.shape == (1, 6, 4) and torch.equal(r.x[0], data)
    assert r.summary().loc["evidence", "examples"] == 1
    idata = r.to_inference_data()
    assert float(idata.evidence["log_marginal_likelihood"].values[0, 0, 0]) == float(r.log_likelihood[0])
    # resampled: 4 blocks of 8 chains (chain, draw, dataset, mu's own dim); the raw final states
    # of the 32 chains in particles, block by block
    assert idata.posterior["mu"].shape == (4, 8, 1, 4)
    torch.testing.assert_close(torch.as_tensor(idata.particles["mu"].values).reshape(32, 1, 4),
                               r.latents["mu"])


def test_evidence_bdmc_checkpoints_in_a_block(glg, seed, tmp_path, monkeypatch):
    """evidence_bdmc in a pyrolik.checkpoint() block: the file is written, and a rerun in the block
    reads the finished run back (no step is saved again) with the numbers of a run without it."""
    from pyrolik.execution.checkpoint import Checkpoint

    kw = dict(data_shape=(5, 4), num_steps=6, num_chains=2, seed=seed, progress=False)
    plain = pyrolik.evidence_bdmc(glg, 2, **kw)
    path = tmp_path / "evidence_bdmc.ckpt"
    with pyrolik.checkpoint(path, every=2):
        first = pyrolik.evidence_bdmc(glg, 2, **kw)
    assert path.exists()
    monkeypatch.setattr(Checkpoint, "save_progress", lambda *a: pytest.fail("the run reran"))
    monkeypatch.setattr(Checkpoint, "complete", lambda *a: pytest.fail("the run reran"))
    with pyrolik.checkpoint(path, every=2):
        again = pyrolik.evidence_bdmc(glg, 2, **kw)
    for r in (first, again):
        assert torch.equal(r.lower.log_weights, plain.lower.log_weights)
        assert torch.equal(r.upper.log_weights, plain.upper.log_weights)


def test_an_evidence_result_round_trips_through_a_file(glg, data, seed, tmp_path):
    r = pyrolik.evidence(glg, data, num_steps=10, num_chains=4, seed=seed, progress=False)
    pyrolik.save(r, tmp_path / "evidence.nc")
    back = pyrolik.load(tmp_path / "evidence.nc")
    assert back.method == "evidence" and torch.equal(back.log_weights, r.log_weights)
    # a checkpoint resumes to the same numbers, and refuses another model's run
    kw = dict(num_steps=10, num_chains=4, seed=seed, progress=False)
    with pyrolik.checkpoint(tmp_path / "run.ckpt", every=5):
        first = pyrolik.evidence(glg, data, **kw)
    assert (tmp_path / "run.ckpt").exists()
    with pyrolik.checkpoint(tmp_path / "run.ckpt", every=5):
        again = pyrolik.evidence(glg, data, **kw)
    assert torch.equal(first.log_weights, again.log_weights)
    assert torch.equal(first.log_weights, r.log_weights)  # the same run as without the block
    noisier = GlobalLinearGaussian(W=glg.W, s=0.7)
    with pytest.raises(ValueError, match=r"different run \(what differs: model parameters; the "
                                         r"model's log-density at a seeded draw\)"), \
            pyrolik.checkpoint(tmp_path / "run.ckpt", every=5):
        pyrolik.evidence(noisier, data, **kw)


def test_without_global_latents_the_evidence_is_the_sum_of_marginals(seed):
    lg = LinearGaussian.random(data_dim=3, latent_dim=2, s=0.5, seed=2)
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(3)) + lg.b
    r = pyrolik.evidence(lg, x, num_steps=200, num_chains=32, seed=seed, progress=False,
                         kernel=plain())
    assert_unbiased(r.log_weights, lg.exact_log_marginal(x).sum())


def test_several_observed_sites_give_the_same_numbers(glg, data, seed):
    W, s = glg.W, glg.s

    def split(x):
        mu = pyro.sample("mu", dist.Normal(x.new_zeros(4), glg.s_mu).to_event(1))
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            loc = mu + z @ W.T
            pyro.sample("x_a", dist.Normal(loc[..., :1], s).to_event(1), obs=x[:, :1])
            pyro.sample("x_b", dist.Normal(loc[..., 1:], s).to_event(1), obs=x[:, 1:])

    wrapped = WholeDataset(split, data)
    assert not wrapped.is_whole_x and wrapped.row_shape == (24,)
    kw = dict(num_steps=20, num_chains=4, seed=seed, progress=False, schedule="sigmoid")
    a = pyrolik.evidence(split, data, **kw)
    b = pyrolik.evidence(glg, data, **kw)
    assert a.x.shape == (1, 24) and a.settings["observed_sites"] == ["x_a", "x_b"]
    assert torch.allclose(a.log_weights, b.log_weights, atol=1e-8)


def test_bdmc_brackets_the_exact_evidence_of_simulated_data_sets(glg, seed):
    b = pyrolik.evidence_bdmc(glg, 3, data_shape=(6, 4), num_steps=300, num_chains=16, seed=seed,
                              progress=False)
    assert b.x.shape == (3, 6, 4) and b.latents["mu"].shape == (3, 4)
    assert b.lower.method == "evidence" and b.upper.method == "reverse evidence"
    log_z = glg.exact_log_evidence(b.x)
    assert (b.lower.log_likelihood - log_z <= 3 * b.lower.mcse + 1e-10).all()
    assert (b.upper.log_likelihood - log_z >= -3 * b.upper.mcse - 1e-10).all()
    assert -3 * b.gap_stderr <= float(b.gap) < 1.0  # 3 data sets: a small gap may invert
    # the simulated latents are the model's: mu explains the data sets' means
    assert torch.allclose(b.x.mean(1), b.latents["mu"] + b.latents["z"].mean(1) @ glg.W.T,
                          atol=5 * glg.s / 6**0.5)  # the mean noise: sd s / sqrt(N)


def test_bayes_factor_through_compare(glg, data, seed):
    other = GlobalLinearGaussian(W=glg.W, s=1.5, s_mu=glg.s_mu)  # too much noise for these data
    kw = dict(num_steps=200, num_chains=16, seed=seed, progress=False)
    a, b = pyrolik.evidence(glg, data, **kw), pyrolik.evidence(other, data, **kw)
    c = pyrolik.compare(a, b, names=["right", "noisy"])
    pair = c.pairs.iloc[0]
    exact = float(glg.exact_log_evidence(data) - other.exact_log_evidence(data))
    assert pair["log_bayes_factor"] == pytest.approx(float(a.log_likelihood - b.log_likelihood))
    assert abs(pair["log_bayes_factor"] - exact) <= 4 * pair["se"] + 0.5
    assert c.better == "right" and "Bayes factor" in " ".join(c.notes)
    assert str(c).startswith("Bayes factors of whole-data-set evidences")
    with pytest.raises(ValueError, match="not comparable"):
        pyrolik.compare(a, torch.zeros(3).numpy())


def test_a_model_that_does_not_broadcast_over_copies_is_refused_with_the_fix(glg, data):
    W = glg.W

    def unbatched(x):
        mu = pyro.sample("mu", dist.Normal(x.new_zeros(4), 1.0).to_event(1))
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(mu.unsqueeze(-2) + z @ W.T, 0.5).to_event(1), obs=x)

    with pytest.raises(ValueError, match=r"vectorize_particles=True.*broadcast"):
        pyrolik.evidence(unbatched, data, num_steps=5, num_chains=2, progress=False)
    with pytest.raises(ValueError, match="num_datasets must be a positive integer"):
        pyrolik.evidence_bdmc(glg, 0, data_shape=(6, 4), num_steps=5, num_chains=2)
    with pytest.raises(ValueError, match="data_shape must be the shape of one data set"):
        pyrolik.evidence_bdmc(glg, 2, data_shape=(), num_steps=5, num_chains=2)


def test_a_per_example_discrete_latent_is_refused(glg, data):
    W = glg.W

    def labelled(x):
        mu = pyro.sample("mu", dist.Normal(x.new_zeros(4), 1.0).to_event(1))
        with pyro.plate("data", x.shape[0]):
            c = pyro.sample("c", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(mu * c.unsqueeze(-1) + z @ W.T, 0.5).to_event(1), obs=x)

    # summed per data set, the labels of all examples would be summed jointly: refused
    with pytest.raises(ValueError, match=r"discrete latent 'c' is inside the plate\(s\) \['data'\]"):
        pyrolik.evidence(labelled, data, num_steps=5, num_chains=2, progress=False)


def test_a_model_plate_named_dataset_keeps_its_name(glg, data, seed):
    W = glg.W

    def named(x):
        mu = pyro.sample("mu", dist.Normal(x.new_zeros(4), 1.0).to_event(1))
        with pyro.plate("dataset", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(mu + z @ W.T, 0.5).to_event(1), obs=x)

    kw = dict(num_steps=10, num_chains=4, seed=seed, progress=False, schedule="sigmoid")
    a, b = pyrolik.evidence(named, data, **kw), pyrolik.evidence(glg, data, **kw)
    assert a.example_dim == "dataset_copies" and b.example_dim == "dataset"
    assert torch.allclose(a.log_weights, b.log_weights)


def test_evidence_with_tolerance_lands_within_it_of_the_exact_joint(glg, data):
    """num_steps=Tolerance(...) chooses the steps by BDMC on simulated whole data sets, as ais does;
    the estimate of the real data set is then within the tolerance of the exact evidence (up to its
    own Monte Carlo error), and never above it beyond that error (a lower bound)."""
    log_z = float(glg.exact_log_evidence(data))
    r = pyrolik.evidence(glg, data, num_steps=pyrolik.Tolerance(0.5), num_chains=16, seed=0,
                         progress=False)
    assert r.budget is not None and r.budget.converged and r.budget.num_simulated >= 16
    assert r.settings["num_steps"] == r.budget.num_steps
    est, mcse = float(r.log_likelihood[0]), float(r.mcse[0])
    assert log_z - est <= 0.5 + 3 * mcse
    assert est - log_z <= 4 * mcse
    with pytest.raises(ValueError, match="schedule tensor"):
        pyrolik.evidence(glg, data, num_steps=pyrolik.Tolerance(0.5), num_chains=4,
                         schedule=torch.linspace(0, 1, 11), progress=False)


def test_a_tolerance_search_warns_under_the_name_of_evidence(glg, data):
    """The search's warnings name the call the user made, not the ais run inside it."""
    with pytest.warns(pyrolik.BudgetWarning, match=r"^evidence\(num_steps=Tolerance\): the budget "
                                                    r"search reached max_steps=50"):
        r = pyrolik.evidence(glg, data, num_steps=pyrolik.Tolerance(0.05, max_steps=50),
                             num_chains=4, seed=1, progress=False)
    assert r.budget.num_steps == 50 and not r.budget.converged
