"""Diagnostics: tables equal the result tensors, the running log Z_beta is unbiased at every recorded
temperature (linear-Gaussian closed form), and the plain-words checks fire when they should."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from numpy.testing import assert_array_equal

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from pyrolik.annealing import Recording
from pyrolik.annealing.driver import run
from pyrolik.diagnostics import checks as diagnostics
from tests.helpers import assert_lower_bound, assert_unbiased, plain


def n(t):
    return t.detach().cpu().double().numpy()


def test_per_example_tables(results):
    r = results["ais"]
    df = diagnostics.example_table(r)
    assert_array_equal(df["log_likelihood"], n(r.log_likelihood))
    assert_array_equal(df["ess"], n(r.ess))
    assert_array_equal(df["acceptance_rate"], n(r.acceptance_rate.mean(0)))
    assert_array_equal(df["num_divergent"], r.num_divergent.sum(0).numpy())
    b = results["bdmc"]
    g = diagnostics.example_table(b)
    assert_array_equal(g["gap"], n(b.per_example_gap))
    assert_array_equal(g["lower"], n(b.lower.log_likelihood))
    assert_array_equal(g["mcse_upper"], n(b.upper.mcse))
    assert diagnostics.example_table(results["kde"]).columns.tolist() == ["log_likelihood"]


@pytest.mark.parametrize("name", ["ais", "reverse_ais"])
def test_temperature_trace(results, name):
    r = results[name]
    df = diagnostics.temperature_trace(r)
    assert_array_equal(df.index, r.trace_steps.numpy())
    assert_array_equal(df["beta"], n(r.trace["beta"][:, 0]))
    assert_array_equal(df["acceptance_rate"], n(r.trace["acceptance_rate"].mean((1, 2))))
    assert_array_equal(df["max_step_size"], n(r.trace["step_size"].amax((1, 2))))
    final = df["log_normalizer"].iloc[-1]
    if r.direction == "forward":  # ends at the estimate: beta = 1
        assert df["beta"].iloc[-1] == 1.0
        assert math.isclose(final, r.mean, rel_tol=1e-12)
    else:  # reverse ends at beta = 0, where log Z_0 = 0
        assert df["beta"].iloc[-1] == 0.0 and final == 0.0


def log_z_beta(model: LinearGaussian, x: torch.Tensor, beta: float) -> torch.Tensor:
    r""":math:`\log \int N(z; 0, I) N(x; Wz + b, s^2 I)^\beta dz`, per example, beta > 0.

    :math:`N(x; m, s^2 I)^\beta = (2\pi s^2)^{D(1-\beta)/2} \beta^{-D/2} N(x; m, s^2 I / \beta)`.
    """
    d = model.data_dim
    cov = model.W @ model.W.T + model.s**2 / beta * torch.eye(d)
    mvn = torch.distributions.MultivariateNormal(model.b, covariance_matrix=cov)
    return (0.5 * d * (1 - beta) * math.log(2 * math.pi * model.s**2) - 0.5 * d * math.log(beta)
            + mvn.log_prob(x))


@pytest.mark.statistical
def test_running_log_normalizer_is_unbiased_at_every_temperature(seed):
    """E[w_t] = Z_{beta_t} for the partial AIS weights at every step (Neal 2001)."""
    lg = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0)
    x = lg.sample(3, torch.Generator().manual_seed(seed))
    kernel = plain(pyrolik.HMC(num_leapfrog=5, step_size=0.1, adapt=None))
    r = pyrolik.ais(lg, x, num_steps=50, num_chains=300, kernel=kernel, seed=seed, record=5,
                    progress=False)
    curve = diagnostics.running_log_normalizer(r)  # (R, N)
    for t, beta in enumerate(r.trace["beta"][:, 0].tolist()):
        exact = log_z_beta(lg, x, beta)
        assert_unbiased(r.trace["log_weight"][t], exact, min_ess_frac=0.05)
        torch.testing.assert_close(curve[t], pyrolik.ops.stats.log_mean_exp(r.trace["log_weight"][t]))
    # reverse AIS from exact posterior draws: E[w_t] = Z_{beta_t} / Z_1 (Z_0 = 1). Its weights
    # are heavy-tailed near beta = 0 (they estimate an inverse), so check the one-sided bound:
    # log-mean-exp of w_t is a stochastic lower bound on log Z_{beta_t} - log Z_1 ...
    latents = lg.exact_posterior(x).sample((300,))  # (K, N, d): one exact draw per chain
    # every 5th step, as the forward run: the driver behind pyrolik.reverse_ais (which records
    # its default trace)
    _, (rev,) = run("reverse_ais", lg, x, directions=("reverse",), num_steps=50, num_chains=300,
                    schedule="auto", kernel=kernel, latents=latents, seed=seed, batch_size=None,
                    progress=False, recording=Recording(every=5))
    assert rev.trace_steps.tolist() == list(range(5, 51, 5))
    log_z1 = lg.exact_log_marginal(x)
    curve = diagnostics.running_log_normalizer(rev)
    for t, beta in enumerate(rev.trace["beta"][:, 0].tolist()):
        lw = rev.trace["log_weight"][t]
        exact = (log_z_beta(lg, x, beta) if beta > 0 else 0.0) - log_z1
        assert_lower_bound(pyrolik.ops.stats.log_mean_exp(lw), exact, lw)
        # ... and the plotted curve is it shifted by the final upper estimate of log Z_1
        torch.testing.assert_close(curve[t], pyrolik.ops.stats.log_mean_exp(lw) + rev.log_likelihood)


def test_check_flags_acceptance_that_collapses_at_high_beta():
    """A fixed step size fine for the prior but ~5x the posterior's width: acceptance collapses
    at large beta while the run average (~0.12) stays above the whole-run threshold."""
    lg = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0)
    x = lg.sample(3, torch.Generator().manual_seed(0))
    kernel = pyrolik.HMC(num_leapfrog=3, step_size=0.5, adapt=None)
    r = pyrolik.ais(lg, x, num_steps=40, num_chains=8, schedule="linear", kernel=kernel, seed=0,
                    progress=False)
    per_step = r.trace["acceptance_rate"].mean(1)
    assert (r.acceptance_rate.mean(0) >= 0.1).all()  # the whole-run check stays silent ...
    assert (per_step[-1] < 0.1).all() and (per_step[0] > 0.5).all()
    messages = diagnostics.check(r)
    assert not any("collapsed" in m for m in r.warnings())
    collapse = [m for m in messages if "acceptance fell below 0.1" in m]
    assert len(collapse) == 1 and "for 3 examples" in collapse[0]  # ... but check() does not
    with pytest.warns(diagnostics.PyrolikWarning) as record:
        assert diagnostics.warn(r) == messages
    assert [str(w.message) for w in record] == messages


def test_check_is_quiet_on_a_healthy_run(seed):
    lg = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0)
    x = lg.sample(3, torch.Generator().manual_seed(0))
    kernel = pyrolik.HMC(num_leapfrog=5, step_size=0.1, adapt=None)  # acceptance ~0.96 throughout
    r = pyrolik.ais(lg, x, num_steps=50, num_chains=300, kernel=kernel, seed=seed, progress=False)
    assert (r.trace["acceptance_rate"].mean(1) > 0.5).all()
    messages = diagnostics.check(r)
    assert messages == r.warnings()  # nothing added (k-hat may still speak: it is random)
    assert not any("acceptance" in m or "divergent" in m for m in messages)


def test_check_explains_khat_with_few_chains(results):
    messages = diagnostics.check(results["ais"])  # 8 chains: PSIS cannot fit a tail
    few = [m for m in messages if "k-hat needs 25 or more" in m]
    assert len(few) == 1 and "8 chains" in few[0]  # said once (it was said twice before)
    assert not any("25 or more" in m for m in diagnostics.check(results["likelihood_weighting"]))


def test_check_flags_an_inverted_sandwich(results):
    b = results["bdmc"]
    assert not any("below the lower one by" in m for m in diagnostics.check(b))
    se = (b.lower.mcse**2 + b.upper.mcse**2).sqrt().max()  # beyond 4 standard errors everywhere
    upper = dataclasses.replace(b.upper, log_likelihood=b.lower.log_likelihood - 4 * se - 1.0)
    bad = dataclasses.replace(b, upper=upper)
    msg = [m for m in diagnostics.check(bad) if "below the lower one by" in m]
    assert len(msg) == 1 and msg[0].startswith("for 3 of 3 examples")


@pytest.mark.parametrize("grid,edge", [((0.05, 0.1, 0.2), "largest"), ((1.0, 2.0, 4.0), "smallest"),
                                       ((0.1, 0.7, 5.0), None)])
def test_a_kde_bandwidth_at_the_edge_of_its_grid_is_reported(grid, edge):
    # samples and held-out data from N(0, 1) in 2-D: the best bandwidth is about 0.5-0.8
    g = torch.Generator().manual_seed(0)
    samples, x, valid = (torch.randn(n, 2, generator=g, dtype=torch.float64) for n in (2000, 50, 200))
    r = pyrolik.kde(samples, x, bandwidth=list(grid), validation=valid)
    msgs = [m for m in diagnostics.check(r) if "KDE bandwidth" in m]
    if edge is None:
        assert msgs == [] and r.settings["bandwidth"] == 0.7
    else:
        assert len(msgs) == 1 and f"the {edge} of the grid" in msgs[0] and "widen the grid (bandwidth=," in msgs[0]
        assert r.warnings() == msgs  # the result says it itself, and says it once


def test_bad_input_raises(results):
    with pytest.raises(TypeError, match="pyrolik result"):
        diagnostics.check(np.zeros(3))
    with pytest.raises(TypeError, match="AIS result"):
        diagnostics.temperature_trace(results["iwae"])
    for other in ("iwae", "bdmc"):
        with pytest.raises(TypeError, match="running_log_normalizer needs an AIS result"):
            diagnostics.running_log_normalizer(results[other])
    with pytest.raises(TypeError, match="BDMCResult"):
        diagnostics.bdmc_gap(results["ais"])
    with pytest.raises(ValueError, match="holds no trace"):
        diagnostics.temperature_trace(dataclasses.replace(results["ais"], trace=None))
