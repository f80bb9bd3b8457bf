"""BDMC: simulate, the sandwich lower <= exact <= upper, the gap closing with steps, the encoder path."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from models.oracles.quadrature import BimodalDecoder, UniformLatent
from tests.helpers import assert_bound_on_average
from tests.oracles import alias

lg = alias("lg_narrow")


def test_simulate_draws_from_the_joint(lg, seed):
    sim = pyrolik.simulate(lg, 4000, data_shape=(5,), seed=seed)
    assert sim.x.shape == (4000, 5) and sim.latents["z"].shape == (4000, 2)
    # x - W z - b ~ N(0, s^2): the latents produced the data
    resid = sim.x - sim.latents["z"] @ lg.W.T - lg.b
    assert abs(float(resid.std()) - lg.s) < 4 * lg.s / (2 * resid.numel()) ** 0.5
    # marginal mean of x is b
    se = (lg.marginal().covariance_matrix.diagonal() / 4000).sqrt()
    assert ((sim.x.mean(0) - lg.b).abs() <= 4 * se).all()
    again = pyrolik.simulate(lg, 4000, data_shape=5, seed=seed)  # an int, as torch.zeros takes it
    assert torch.equal(sim.x, again.x)
    with pytest.raises(ValueError, match="data_shape must be a tuple of positive ints"):
        pyrolik.simulate(lg, 4, data_shape=True)


def test_simulate_constrained_latents():
    m = UniformLatent.random()
    sim = pyrolik.simulate(m, 100, data_shape=(3,), seed=0)
    assert ((sim.latents["z"] > m.a) & (sim.latents["z"] < m.b_)).all()


@pytest.mark.statistical
@pytest.mark.parametrize("make", [lambda: LinearGaussian.random(5, 2, s=0.3, seed=0),
                                  BimodalDecoder.random], ids=["linear_gaussian", "bimodal"])
def test_sandwich_and_gap_closing(make, seed):
    model = make()
    d = model.data_dim if isinstance(model, LinearGaussian) else len(model.w)
    sim = pyrolik.simulate(model, 20, data_shape=(d,), seed=seed)
    exact = model.exact_log_marginal(sim.x).to(sim.x.dtype)
    gaps, ses = [], []
    for steps in (5, 50, 400):
        r = pyrolik.bdmc(model, sim, num_steps=steps, num_chains=8, seed=seed, progress=False,
                         kernel=pyrolik.HMC(num_leapfrog=5))
        assert_bound_on_average(r.lower, exact)
        assert_bound_on_average(r.upper, exact)
        gaps.append(r.gap)
        ses.append(r.gap_stderr)
    assert gaps[0] > 2 * ses[0] and gaps[0] > gaps[1]  # few steps: visibly apart, beyond noise
    assert gaps[1] >= gaps[2] - 3 * (ses[1] ** 2 + ses[2] ** 2) ** 0.5  # shrinking, up to noise
    assert gaps[2] >= -3 * ses[2]  # a closed gap is zero up to its noise
    assert gaps[2] < 0.3


def test_encoder_path_closes_the_gap_with_few_steps(lg, seed):
    """With a reasonable guide (the exact posterior, inflated), the path is short."""
    def guide(x):
        post = lg.exact_posterior(x)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(post.loc, scale_tril=1.5 * post.scale_tril))

    sim = pyrolik.simulate(lg, 20, data_shape=(5,), seed=seed)
    kw = dict(num_steps=10, num_chains=8, seed=seed, progress=False,
              kernel=pyrolik.HMC(num_leapfrog=5))
    prior_path = pyrolik.bdmc(lg, sim, **kw)
    encoder_path = pyrolik.bdmc(lg, sim, init=guide, **kw)
    assert encoder_path.lower.path == "guide" and encoder_path.upper.path == "guide"
    assert encoder_path.gap < 0.2 < prior_path.gap
    exact = lg.exact_log_marginal(sim.x).to(sim.x.dtype)
    assert_bound_on_average(encoder_path.lower, exact)  # bounds on average, up to noise
    assert_bound_on_average(encoder_path.upper, exact)


def test_reverse_from_a_non_posterior_point_is_flagged(lg):
    sim = pyrolik.simulate(lg, 10, data_shape=(5,), seed=0)
    bad = {"z": torch.full((10, 2), 4.0)}
    with pytest.warns(UserWarning, match="do not look like exact posterior samples"):
        pyrolik.bdmc(lg, (sim.x, bad), num_steps=20, num_chains=4, seed=0, progress=False)


def test_summary_and_errors(lg):
    r = pyrolik.bdmc(lg, 5, data_shape=(5,), num_steps=10, num_chains=3, seed=0, progress=False)
    s = r.summary()
    assert s.loc["BDMC gap (upper - lower)", "log p(x) [nats]"] == pytest.approx(r.gap)
    assert r.per_example_gap.shape == (5,) and r.lower.bound == "lower" and r.upper.bound == "upper"
    with pytest.raises(ValueError, match="pass data_shape=.*or data simulated from the model in "
                       r"place of num_examples: pyrolik.bdmc\(model, pyrolik.simulate"):
        pyrolik.bdmc(lg, 5, num_steps=10, num_chains=3)
    with pytest.raises(TypeError, match="num_examples"):  # no longer optional
        pyrolik.bdmc(lg, num_steps=10, num_chains=3)
    with pytest.raises(ValueError, match="data_shape"):
        pyrolik.simulate(lg, 3, data_shape=(0,))
    with pytest.raises(TypeError, match="pair"):
        pyrolik.bdmc(lg, torch.zeros(3, 5), num_steps=10, num_chains=3)
    with pytest.raises(TypeError, match="pair"):
        pyrolik.bdmc(lg, (torch.zeros(3, 5),), num_steps=10, num_chains=3)


def test_simulated_data_in_place_of_num_examples_is_the_same_run(lg, seed):
    """``bdmc(model, n, data_shape=, seed=s)`` simulates with the run's seed: passing
    ``pyrolik.simulate(model, n, data_shape=, seed=s)`` in place of ``n`` is the same run, bit for bit
    (a plain ``(x, latents)`` pair too: its posterior-start check only warns); other data are not."""
    kw = dict(num_steps=10, num_chains=3, kernel=pyrolik.HMC(num_leapfrog=2), progress=False)
    sim = pyrolik.simulate(lg, 4, data_shape=(5,), seed=seed)
    by_count = pyrolik.bdmc(lg, 4, data_shape=(5,), seed=seed, **kw)
    by_data = pyrolik.bdmc(lg, sim, seed=seed, **kw)
    by_pair = pyrolik.bdmc(lg, (sim.x, sim.latents), seed=seed, **kw)
    assert torch.equal(by_count.x, sim.x)
    for r in (by_data, by_pair):
        assert torch.equal(r.x, sim.x)
        assert torch.equal(r.lower.log_weights, by_count.lower.log_weights)
        assert torch.equal(r.upper.log_weights, by_count.upper.log_weights)
        assert r.gap == by_count.gap
    # the run's seed alone does not make the data: other simulated data give other numbers
    other = pyrolik.bdmc(lg, pyrolik.simulate(lg, 4, data_shape=(5,), seed=seed + 1), seed=seed,
                         **kw)
    assert not torch.equal(other.x, sim.x)
    assert not torch.equal(other.lower.log_weights, by_count.lower.log_weights)


def test_convergence_table_and_plot(lg, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    table = pyrolik.infer.bdmc_convergence(lg, 6, num_steps=[2, 20], data_shape=(5,), num_chains=3, progress=False)
    assert list(table["num_steps"]) == [2, 20]
    assert (table["gap"] >= -3 * table["gap_se"]).all()  # upper >= lower up to their noise
    ax = pyrolik.diagnostics.plots.plot_bdmc_convergence(table)
    ax.figure.savefig(tmp_path / "conv.png")
    assert (tmp_path / "conv.png").stat().st_size > 1000


def test_posterior_samples_and_decodings(lg, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    x = lg.sample(4)
    r = pyrolik.ais(lg, x, num_steps=10, num_chains=5, seed=0, progress=False)
    s = pyrolik.infer.posterior_samples(r, 7, examples=[0, 2])
    assert s["z"].shape == (7, 2, 2)
    fig = pyrolik.diagnostics.plots.plot_posterior_decodings(
        r, lambda lat: lat["z"] @ lg.W.T + lg.b, examples=[0, 1], num_samples=3,
        image_shape=(1, 5))
    fig.savefig(tmp_path / "post.png")
    with pytest.raises(ValueError, match="examples must lie"):
        pyrolik.infer.posterior_samples(r, 3, examples=[9])


def test_tuning_and_schedule_do_not_depend_on_the_reverse_starts(lg, seed):
    """BDMC's exactness in both directions: the pilot (step sizes, variances, hence the adaptive
    schedule) runs forward from the prior on the forward half's chains, so other exact posterior
    draws for the reverse chains change nothing on the forward side."""
    x = lg.sample(4, torch.Generator().manual_seed(seed))
    post = lg.exact_posterior(x)
    a, b = (post.sample((1,))[0], post.sample((1,))[0])
    kw = dict(num_steps=40, num_chains=5, seed=seed, progress=False)
    ra = pyrolik.bdmc(lg, (x, a), **kw)
    rb = pyrolik.bdmc(lg, (x, b), **kw)
    assert ra.lower.settings["schedule"] == "adaptive"
    assert torch.equal(ra.lower.schedule, rb.lower.schedule)
    assert torch.equal(ra.upper.schedule, ra.lower.schedule.flip(0))
    for ta, tb in zip(ra.lower.step_sizes, rb.lower.step_sizes, strict=True):
        assert (ta is None and tb is None) or torch.equal(ta, tb)
    assert torch.equal(ra.lower.log_weights, rb.lower.log_weights)
    assert not torch.equal(ra.upper.log_weights, rb.upper.log_weights)
