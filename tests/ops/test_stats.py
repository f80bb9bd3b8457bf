"""MCSE of log-mean-exp: the jackknife equals its definition, streams exactly, and matches the
spread of repeated runs with few chains where the delta method understated it; the results say
plainly when the MCSE cannot be checked."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from models.oracles.quadrature import BetaLatent
from pyrolik.ops.stats import (
    RunningLogWeights,
    effective_sample_size,
    khat_threshold,
    mcse_log_mean_exp,
)
from tests.oracles import LG_NARROW


def leave_one_out(lw: torch.Tensor) -> torch.Tensor:
    """The jackknife by its definition: K leave-one-out log-mean-exps."""
    k = lw.shape[0]
    loo = torch.stack([torch.logsumexp(torch.cat([lw[:i], lw[i + 1:]]), 0) - math.log(k - 1)
                       for i in range(k)])
    return torch.sqrt((k - 1) / k * (loo - loo.mean(0)).pow(2).sum(0))


@pytest.mark.parametrize("k", [2, 4, 8, 64, 300])
@pytest.mark.parametrize("scale", [0.01, 1.0, 5.0, 30.0])
def test_jackknife_is_the_leave_one_out_formula(k, scale):
    g = torch.Generator().manual_seed(k)
    lw = scale * torch.randn(k, 6, generator=g, dtype=torch.float64) - 50.0
    torch.testing.assert_close(mcse_log_mean_exp(lw), leave_one_out(lw), rtol=1e-9, atol=0)
    torch.testing.assert_close(mcse_log_mean_exp(lw.T, dim=1), leave_one_out(lw), rtol=1e-9,
                               atol=0)


def test_delta_method_is_kept_and_the_jackknife_agrees_with_it_for_many_tame_weights():
    lw = 0.3 * torch.randn(4000, 5, generator=torch.Generator().manual_seed(0),
                           dtype=torch.float64)
    delta = mcse_log_mean_exp(lw, method="delta")
    k = lw.shape[0]
    torch.testing.assert_close(delta, torch.sqrt(1 / effective_sample_size(lw) - 1 / k))
    torch.testing.assert_close(mcse_log_mean_exp(lw), delta, rtol=0.01, atol=0)
    with pytest.raises(ValueError, match="'jackknife' or 'delta'"):
        mcse_log_mean_exp(lw, method="bootstrap")


def test_the_delta_method_is_bounded_and_the_jackknife_is_not():
    lw = torch.tensor([[0.0], [-20.0], [-20.0], [-20.0]], dtype=torch.float64)  # K = 4
    assert mcse_log_mean_exp(lw, method="delta") <= math.sqrt(1 - 1 / 4)
    assert mcse_log_mean_exp(lw) > 8.0  # dropping the big weight moves the estimate by ~19 nats


def test_degenerate_weights():
    f64 = torch.float64
    assert mcse_log_mean_exp(torch.zeros(5, 2, dtype=f64)).eq(0).all()  # equal weights
    one = torch.tensor([[0.0], [-math.inf], [-math.inf]], dtype=f64)
    assert mcse_log_mean_exp(one).isinf().all()  # one weight holds all the mass
    assert mcse_log_mean_exp(torch.full((3, 2), -math.inf, dtype=f64)).isnan().all()
    assert mcse_log_mean_exp(torch.zeros(1, 2, dtype=f64)).isnan().all()  # one draw
    far = torch.tensor([[0.0], [-800.0], [-900.0]], dtype=f64)  # others below float precision
    torch.testing.assert_close(mcse_log_mean_exp(far), leave_one_out(far))
    lw32 = torch.randn(8, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    got = mcse_log_mean_exp(lw32)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, leave_one_out(lw32.double()).float())


@pytest.mark.parametrize("k", [50, 300, 2000])
@pytest.mark.parametrize("scale", [0.01, 1.0, 5.0, 30.0])
def test_streaming_jackknife_equals_the_exact_one(k, scale):
    lw = scale * torch.randn(k, 7, generator=torch.Generator().manual_seed(k),
                             dtype=torch.float64) - 50.0
    running = RunningLogWeights(k, keep=False)
    for chunk in lw.split(37):
        running.update(chunk)
    exact = mcse_log_mean_exp(lw)
    # exact up to 64 weights; beyond, a 4-term series whose error is O(r^5): far below 1e-6 nats
    torch.testing.assert_close(running.mcse, exact, rtol=1e-3, atol=1e-6)
    if k <= RunningLogWeights.EXACT_TOP:
        torch.testing.assert_close(running.mcse, exact, rtol=1e-10, atol=0)
    torch.testing.assert_close(running.khat(), pyrolik.ops.stats.pareto_khat(lw),
                               equal_nan=True)


def test_streaming_reduction_before_any_weights_says_so():
    running = RunningLogWeights(10, keep=False)
    for read in (lambda: running.log_mean, lambda: running.ess, lambda: running.mcse, running.khat):
        with pytest.raises(ValueError, match="no log-weights yet: call update"):
            read()


def test_khat_threshold_is_the_sample_size_rule_of_vehtari_et_al():
    assert khat_threshold(4) == -math.inf and khat_threshold(10) == -math.inf
    assert khat_threshold(25) == pytest.approx(1 - 1 / math.log10(25))
    assert khat_threshold(100) == pytest.approx(0.5)
    assert khat_threshold(10_000) == 0.7


# --- the MCSE against the observed spread of repeated runs ------------------------------------

REPS = 200


def _repeated(name: str):
    """``(result, reps, n)``: each of n points evaluated ``REPS`` times in one call (the data
    repeated: each copy is an independent run with its own chains or samples)."""
    if name == "lg-ais-4":  # linear-Gaussian, a short AIS run with 4 chains
        lg = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0, dtype=torch.float64)
        x = lg.sample(8, torch.Generator().manual_seed(1))
        r = pyrolik.ais(lg, x.repeat(REPS, 1), num_steps=20, num_chains=4, seed=0,
                        kernel=pyrolik.HMC(num_leapfrog=5), progress=False)
    else:  # a Beta latent, likelihood weighting with 8 samples
        beta = BetaLatent.random(data_dim=5, s=0.3, seed=0)
        x = beta.sample(8, torch.Generator().manual_seed(1))[0]
        r = pyrolik.likelihood_weighting(beta, x.repeat(REPS, 1), num_samples=8, seed=0,
                                         keep_weights=True, progress=False)
    return r, x.shape[0]


def _ratio(est: torch.Tensor, mcse: torch.Tensor, index: torch.Tensor | None = None):
    """Observed spread over runs / RMS of the reported MCSE, per point; ``index`` resamples runs."""
    if index is not None:
        est, mcse = est[index], mcse[index]
    return est.std(-2) / mcse.pow(2).mean(-2).sqrt()


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["lg-ais-4", "beta-lw-8"])
def test_reported_mcse_matches_the_spread_of_repeated_runs_with_few_chains(name):
    r, n = _repeated(name)
    est = r.log_likelihood.reshape(REPS, n)
    jack = r.mcse.reshape(REPS, n)
    ratio = _ratio(est, jack)
    # Monte Carlo error of the ratio itself: a bootstrap over the runs
    boot = torch.randint(0, REPS, (300, REPS), generator=torch.Generator().manual_seed(0))
    se = _ratio(est, jack, boot).std(0)
    # the jackknife variance is biased upwards in expectation (Efron-Stein): never understated
    # beyond Monte Carlo error, and not more than 3x conservative
    assert (ratio <= 1.0 + 3 * se).all(), (ratio, se)
    assert (ratio >= 1 / 3).all(), ratio
    # the delta method on the same runs understates the spread: this test has teeth (by 1.99x at
    # the worst point since the schedule follows the pilot's weights)
    delta = mcse_log_mean_exp(r.log_weights, method="delta").reshape(REPS, n)
    worst = _ratio(est, delta).max()
    assert worst > 1.5 and (worst > 1.0 + 3 * se.max()), worst


# --- what results say ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lg():
    return LG_NARROW  # the narrow oracle in float64, shared (tests/oracles.py)


def test_few_chains_are_said_plainly_in_summary_and_warnings(lg):
    x = lg.sample(4, torch.Generator().manual_seed(0))
    r = pyrolik.ais(lg, x, num_steps=10, num_chains=4, seed=0, progress=False)
    assert r.num_weights == 4 and r.mcse_unreliable.all()
    s = r.summary()
    assert "mean MCSE (K=4 chains: rough below 25)" in s.columns and "mean MCSE" not in s.columns
    msg = [w for w in r.warnings() if "MCSE comes from 4 chains" in w]
    assert len(msg) == 1 and "rough guide" in msg[0] and "25+ chains" in msg[0]
    lw = pyrolik.likelihood_weighting(lg, x, num_samples=8, seed=0, keep_weights=False,
                                      progress=False)
    assert lw.log_weights is None and lw.num_weights == 8  # read from the settings
    assert any("MCSE comes from 8 samples" in w for w in lw.warnings())
    b = pyrolik.bdmc(lg, 3, data_shape=(5,), num_steps=10, num_chains=4, seed=0, progress=False)
    assert any(w.startswith("forward: the MCSE comes from 4 chains") for w in b.warnings())
    assert "mean MCSE (K=4 chains: rough below 25)" in b.summary().columns


def test_enough_tame_weights_give_a_plain_mcse(lg):
    x = lg.sample(4, torch.Generator().manual_seed(0))
    r = pyrolik.iwae(lg, x, lg.exact_guide, num_samples=200, seed=0, progress=False)
    assert r.mcse.abs().max() < 1e-6  # the exact posterior as proposal: equal weights
    assert "mean MCSE" in r.summary().columns
    assert not r.mcse_unreliable.any() and not any("MCSE" in w for w in r.warnings())


def test_khat_above_the_sample_size_threshold_flags_the_mcse(lg):
    x = lg.sample(4, torch.Generator().manual_seed(0))
    r = pyrolik.iwae(lg, x, lg.exact_guide, num_samples=100, seed=0, progress=False)
    threshold = khat_threshold(100)  # 0.5
    khat = torch.tensor([0.1, 0.6, 0.8, float("nan")], dtype=r.khat.dtype)
    flagged = dataclasses.replace(r, khat=khat)
    assert flagged.mcse_unreliable.tolist() == [False, True, True, False]  # NaN: a flat tail
    msg = [w for w in flagged.warnings() if f"between {threshold:.2f} and 0.7" in w]
    assert len(msg) == 1 and msg[0].startswith("1 of 4 examples") and "100 samples" in msg[0]
    assert any("k-hat > 0.7" in w for w in flagged.warnings())  # the 0.8 one, as before
