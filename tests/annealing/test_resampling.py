"""Resampling among an example's chains (HMC(resample=)): the resampler, exactness in both
directions against the linear-Gaussian oracle, and what the result says about resampled weights."""

from __future__ import annotations

import math

import pytest
import torch

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from pyrolik.annealing.resampling import Resampling, ancestor_log_weights
from pyrolik.ops.stats import effective_sample_size, mcse_log_mean_exp

LG = dict(data_dim=5, latent_dim=2, s=0.3, seed=0)


def test_systematic_resampling_keeps_the_expected_offspring_and_the_mean_weight():
    """Systematic resampling gives chain k floor or ceil of K W_k offspring; the resampled chains
    all carry the mean weight; an example above the threshold and a failed one stay as they are."""
    k, n = 8, 3
    g = torch.Generator().manual_seed(0)
    lw = torch.randn(k, n, generator=g, dtype=torch.float64) * 2.0
    lw[:, 1] = 0.1 * torch.arange(k)  # nearly uniform: ESS above half the chains
    lw[:, 2] = -math.inf  # a failed example
    source, new, flags = Resampling(0.5).bind((k,), n)(lw.reshape(-1), g)
    source, new, flags = source.reshape(k, n), new.reshape(k, n), flags.reshape(k, n)
    assert flags[:, 0].all() and not flags[:, 1:].any()
    offspring = torch.bincount(source[:, 0] // n, minlength=k).double()
    expected = k * torch.softmax(lw[:, 0], 0)
    assert ((offspring - expected).abs() < 1).all()
    assert torch.equal(source % n, torch.arange(n).expand(k, n))  # within its example
    assert torch.allclose(new[:, 0], torch.logsumexp(lw[:, 0], 0) - math.log(k))
    assert torch.equal(source[:, 1:], (torch.arange(k).unsqueeze(1) * n + torch.arange(1, n)))
    assert torch.equal(new[:, 1:], lw[:, 1:])


def test_the_legs_are_resampled_apart():
    """Two legs (forward and reverse) of 3 and 5 chains: a row takes a state from its own leg."""
    n, g = 2, torch.Generator().manual_seed(1)
    lw = torch.randn(8 * n, generator=g, dtype=torch.float64) * 5
    source, _, flags = Resampling(1.0).bind((3, 5), n)(lw, g)
    assert flags.all()
    assert (source[: 3 * n] < 3 * n).all() and (source[3 * n :] >= 3 * n).all()


def test_ancestor_weights_sum_over_descendants_and_reduce_to_the_weights():
    lw = torch.tensor([[0.0, 1.0], [1.0, 2.0], [2.0, -math.inf]], dtype=torch.float64)
    assert ancestor_log_weights(lw, None) is lw
    same = ancestor_log_weights(lw, torch.arange(3).unsqueeze(1).expand(3, 2).contiguous())
    torch.testing.assert_close(same, lw)
    families = ancestor_log_weights(lw, torch.tensor([[0, 1], [0, 1], [2, 1]]))
    torch.testing.assert_close(families[:, 0], torch.tensor([math.log(1 + math.e), -math.inf,
                                                             2.0], dtype=torch.float64))
    torch.testing.assert_close(families[1, 1], torch.logsumexp(lw[:, 1], 0))
    assert effective_sample_size(families)[1] == pytest.approx(1.0)


def test_the_threshold_is_validated_and_recorded():
    for bad in (0, -0.5, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match=r"resample must be a fraction in \(0, 1\]"):
            pyrolik.HMC(resample=bad)
    kernel = pyrolik.HMC(resample=0.5)
    assert kernel.resample == 0.5 and pyrolik.HMC(**kernel.to_dict()) == kernel
    assert pyrolik.HMC().resample is None  # plain AIS by default


def _replicas(lg, num_points, copies, seed):
    """``num_points`` data points, each repeated ``copies`` times: independent SMC runs of each."""
    x = lg.sample(num_points, torch.Generator().manual_seed(seed))
    return x.repeat_interleave(copies, 0)


def _assert_mean_ratio_is_one(log_estimate, log_truth, num_se=4.0):
    """E[exp(estimate - truth)] = 1 over independent runs (the examples), per data point."""
    ratio = torch.exp(log_estimate - log_truth)
    se = ratio.std(0) / ratio.shape[0] ** 0.5
    err = (ratio.mean(0) - 1).abs()
    assert (err <= num_se * se).all(), f"biased: |mean - 1| = {err.tolist()}, se {se.tolist()}"


@pytest.mark.statistical
@pytest.mark.parametrize("threshold", [0.5, 1.0])
def test_forward_smc_is_unbiased_for_p_of_x(threshold, seed):
    """Each example's SMC estimate of p(x) is unbiased (one estimate per run: 1000 runs per point;
    keeping the resampled chains' own weights instead of their mean fails it at 4-10 SE)."""
    lg = LinearGaussian.random(**LG)
    x = _replicas(lg, 2, 1000, seed)
    r = pyrolik.ais(lg, x, num_steps=20, num_chains=6, seed=seed, progress=False,
                    kernel=pyrolik.HMC(num_leapfrog=2, resample=threshold))
    assert int(r.num_resampled.sum()) > 2000 and r.ancestor.shape == (6, 2000)
    exact = lg.exact_log_marginal(x)
    _assert_mean_ratio_is_one(r.log_likelihood.reshape(2, 1000).T, exact.reshape(2, 1000).T)
    assert float((r.log_likelihood - exact).mean()) <= 3 * float(r.stderr)  # a lower bound


@pytest.mark.statistical
def test_reverse_smc_from_one_exact_draw_is_unbiased_for_one_over_p_of_x(seed):
    """Every chain starts at the same exact posterior draw, as in BDMC: the mean weight is still
    an unbiased estimate of 1/p(x)."""
    lg = LinearGaussian.random(**LG)
    x = _replicas(lg, 2, 1000, seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        z = lg.exact_posterior(x).sample()  # (N, d): one draw per run
    r = pyrolik.reverse_ais(lg, x, z, num_steps=20, num_chains=6, seed=seed, progress=False,
                            kernel=pyrolik.HMC(num_leapfrog=2, resample=1.0))
    assert int(r.num_resampled.sum()) > 2000
    exact = lg.exact_log_marginal(x)
    _assert_mean_ratio_is_one(-r.log_likelihood.reshape(2, 1000).T, -exact.reshape(2, 1000).T)


@pytest.mark.statistical
def test_bdmc_with_resampling_brackets_the_exact_value(seed):
    lg = LinearGaussian.random(**LG)
    sim = pyrolik.simulate(lg, 20, data_shape=(5,), seed=seed)
    exact = lg.exact_log_marginal(sim.x)
    r = pyrolik.bdmc(lg, data=sim, num_steps=60, num_chains=8, seed=seed, progress=False,
                     kernel=pyrolik.HMC(resample=0.5))
    n = len(exact)
    se_lo, se_up = r.lower.mcse.pow(2).sum().sqrt() / n, r.upper.mcse.pow(2).sum().sqrt() / n
    assert (r.lower.log_likelihood - exact).mean() <= 3 * se_lo
    assert (r.upper.log_likelihood - exact).mean() >= -3 * se_up
    assert -3 * r.gap_stderr <= r.gap < 0.5
    assert r.lower.num_resampled is not None and r.upper.num_resampled is not None


def test_the_diagnostics_are_those_of_the_ancestors(seed):
    """ESS, MCSE and k-hat of a resampled run come from the ancestors' summed weights: an example
    whose chains all descend from one chain has an ESS of 1, whatever its final weights."""
    lg = LinearGaussian.random(**LG)
    x = lg.sample(4, torch.Generator().manual_seed(seed))
    r = pyrolik.ais(lg, x, num_steps=30, num_chains=8, seed=seed, progress=False,
                    kernel=pyrolik.HMC(num_leapfrog=2, resample=1.0))
    families = ancestor_log_weights(r.log_weights, r.ancestor)
    torch.testing.assert_close(r.ess, effective_sample_size(families))
    torch.testing.assert_close(r.mcse, mcse_log_mean_exp(families))
    one = torch.tensor([len(set(r.ancestor[:, i].tolist())) == 1 for i in range(4)])
    assert torch.allclose(r.ess[one], torch.ones(int(one.sum()), dtype=r.ess.dtype))
    assert (r.ess <= effective_sample_size(r.log_weights) + 1e-9).all()
    plain = pyrolik.ais(lg, x, num_steps=30, num_chains=8, seed=seed, progress=False,
                        kernel=pyrolik.HMC(num_leapfrog=2))
    assert plain.ancestor is None and plain.num_resampled is None


def test_the_export_carries_the_genealogy_and_says_what_it_means(tmp_path, seed):
    lg = LinearGaussian.random(**LG)
    x = lg.sample(3, torch.Generator().manual_seed(seed))
    r = pyrolik.ais(lg, x, num_steps=20, num_chains=8, seed=seed, progress=False,
                    kernel=pyrolik.HMC(num_leapfrog=2, resample=1.0))
    idata = r.to_inference_data()
    assert {"num_resampled", "ancestor"} <= _all_vars(idata)
    assert any("resampled" in w for w in r.warnings())
    path = tmp_path / "r.nc"
    pyrolik.save(r, path)
    back = pyrolik.load(path)
    assert torch.equal(back.ancestor, r.ancestor)
    assert torch.equal(back.num_resampled, r.num_resampled)
    torch.testing.assert_close(back.ess, r.ess)
    assert back.kernel.resample == 1.0
    assert r.summary()["resamplings"].iloc[0] == pytest.approx(float(r.num_resampled.double().mean()))


def _all_vars(idata) -> set[str]:
    return {name for group in idata.groups() for name in idata[group].data_vars}


def test_resampling_adds_no_host_sync_per_step():
    from tests.annealing.test_host_sync import SyncCounter

    lg = LinearGaussian.random(5, 2, s=0.5, seed=0, dtype=torch.float64)
    sim = pyrolik.simulate(lg, 6, data_shape=(5,), seed=0)
    counts = []
    for steps in (10, 80):
        with SyncCounter() as c:
            pyrolik.bdmc(lg, data=sim, num_steps=steps, num_chains=4, seed=0, progress=False,
                         kernel=pyrolik.HMC(num_leapfrog=2, resample=0.5))
        counts.append(dict(c.counts))
    assert counts[0] == counts[1], f"host syncs grew with num_steps: {counts}"


def test_a_single_lineage_has_no_mcse_and_the_suggested_fix_gives_one(seed):
    """Resampled at every step for long, an example's chains coalesce into one lineage: its MCSE is
    NaN (not a number that looks like one) and a warning says what to do; resample=0.5 works."""
    lg = LinearGaussian.random(**LG)
    x = lg.sample(6, torch.Generator().manual_seed(seed))
    kw = dict(num_steps=300, num_chains=4, seed=seed, progress=False)
    r = pyrolik.ais(lg, x, kernel=pyrolik.HMC(num_leapfrog=2, resample=1.0), **kw)
    single = torch.tensor([len(set(r.ancestor[:, i].tolist())) == 1 for i in range(6)])
    assert single.any() and torch.equal(r.mcse.isnan(), single)
    assert any("cannot be estimated from this run" in w for w in r.warnings())
    fixed = pyrolik.ais(lg, x, kernel=pyrolik.HMC(num_leapfrog=2, resample=0.5), **kw)
    assert not fixed.mcse.isnan().any()
    assert not any("cannot be estimated" in w for w in fixed.warnings())
