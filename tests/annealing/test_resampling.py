"""Resampling within islands of an example's chains (pyrolik.SMC): the one systematic resampler,
the islands' resampler, exactness in both directions against the linear-Gaussian oracle, the MCSE
from the islands, and what the result says about resampled weights."""

from __future__ import annotations

import math

import pytest
import torch

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from pyrolik.annealing.engine import Resampler
from pyrolik.annealing.kernel import default_islands
from pyrolik.ops.stats import ancestor_log_weights, effective_sample_size, mcse_log_mean_exp

LG = dict(data_dim=5, latent_dim=2, s=0.3, seed=0)


def test_islands_resample_within_themselves_and_take_their_mean_weight():
    """Two islands of 4 chains per example: a row takes a state of its own island and example;
    a resampled island's chains carry its mean weight; an island above the threshold and a failed
    one stay as they are."""
    k, b, n = 8, 2, 3
    g = torch.Generator().manual_seed(0)
    lw = torch.randn(k, n, generator=g, dtype=torch.float64) * 3.0
    lw[:, 0] = torch.tensor([0.0, -6, -6, -6, -6, 0.0, -6, -6])  # both islands' ESS near 1
    lw[:4, 1] = torch.tensor([0.0, -6, -6, -6])  # island 0 of example 1: one chain holds it all
    lw[4:, 1] = 0.05 * torch.arange(4)  # island 1 of example 1 nearly uniform: ESS > half
    lw[:4, 2] = -math.inf  # island 0 of example 2 failed
    source, new, flags = Resampler(0.5, ((k, b),), n)(lw.reshape(-1), g)
    source, new, flags = source.reshape(k, n), new.reshape(k, n), flags.reshape(k, n)
    chain, col = source // n, source % n
    assert torch.equal(col, torch.arange(n).expand(k, n))
    assert ((chain // 4) == (torch.arange(k) // 4).unsqueeze(1)).all()  # within its island
    assert flags[:, 0].all() and flags[:4, 1].all() and not flags[4:, 1].any()
    assert not flags[:4, 2].any() and torch.equal(new[:4, 2], lw[:4, 2])
    for island in (slice(0, 4), slice(4, 8)):
        torch.testing.assert_close(new[island, 0], (torch.logsumexp(lw[island, 0], 0)
                                                    - math.log(4)).expand(4))
    assert torch.equal(new[4:, 1], lw[4:, 1]) and torch.equal(chain[4:, 1], torch.arange(4, 8))


def test_the_legs_are_resampled_apart():
    """Two legs (forward and reverse) of 4 and 6 chains in 2 and 3 islands: a row takes a state
    from its own leg."""
    n, g = 2, torch.Generator().manual_seed(1)
    lw = torch.randn(10 * n, generator=g, dtype=torch.float64) * 5
    source, _, flags = Resampler(1.0, ((4, 2), (6, 3)), n)(lw, g)
    assert flags.all()
    assert (source[: 4 * n] < 4 * n).all() and (source[4 * n :] >= 4 * n).all()


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


@pytest.mark.parametrize("num_chains, islands", [(1, None), (2, None), (4, None), (7, None),
                                                 (8, 2), (9, None), (10, 2), (12, 3), (14, 2),
                                                 (16, 4), (18, 3), (32, 4), (100, 4)])
def test_the_default_islands(num_chains, islands):
    assert default_islands(num_chains) == islands
    assert pyrolik.SMC().islands_for(num_chains) == islands


def test_the_settings_are_validated_recorded_and_read_back():
    for bad in (0, -0.5, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match=r"resample must be a fraction in \(0, 1\]"):
            pyrolik.SMC(resample=bad)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="islands must be a positive integer"):
            pyrolik.SMC(islands=bad)
    with pytest.raises(TypeError, match="move must be a pyrolik.HMC"):
        pyrolik.SMC(move=3)
    with pytest.raises(ValueError, match="islands=2 groups an example's chains for resampling"):
        pyrolik.SMC(resample=None, islands=2)  # was accepted and ignored
    assert pyrolik.SMC.from_dict({**pyrolik.HMC().to_dict(), "resample": None, "islands": 2}) == \
        pyrolik.SMC(resample=None)
    with pytest.raises(ValueError, match="does not split num_chains=10 into equal islands"):
        pyrolik.SMC(islands=3).islands_for(10)
    kernel = pyrolik.SMC(pyrolik.HMC(num_leapfrog=5), resample=0.5, islands=2)
    assert pyrolik.SMC.from_dict(kernel.to_dict()) == kernel
    assert pyrolik.SMC().resample == 1.0 and pyrolik.SMC(resample=None).islands_for(8) is None
    # a file written before SMC: its HMC's settings, with or without the old resample
    old = pyrolik.HMC().to_dict()
    assert pyrolik.SMC.from_dict(old).resample is None
    assert pyrolik.SMC.from_dict({**old, "resample": 0.5}).resample == 0.5
    lg = LinearGaussian.random(**LG)
    with pytest.raises(ValueError, match="islands=3 does not split num_chains=8"):
        pyrolik.ais(lg, lg.sample(2), num_steps=5, num_chains=8, progress=False,
                    kernel=pyrolik.SMC(islands=3))


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
@pytest.mark.parametrize("threshold, islands", [(0.5, 1), (1.0, 1), (1.0, 2), (0.5, 2)])
def test_forward_smc_is_unbiased_for_p_of_x(threshold, islands, seed):
    """Each example's SMC estimate of p(x) is unbiased, in one island or several (one estimate per
    run: 1000 runs per point; keeping the resampled chains' own weights instead of their island's
    mean fails it at 4-10 SE)."""
    lg = LinearGaussian.random(**LG)
    x = _replicas(lg, 2, 1000, seed)
    r = pyrolik.ais(lg, x, num_steps=20, num_chains=6, seed=seed, progress=False,
                    kernel=pyrolik.SMC(pyrolik.HMC(num_leapfrog=2), resample=threshold,
                                       islands=islands))
    assert float(r.num_resampled.sum()) > 1000 and r.ancestor.shape == (6, 2000)
    assert r.settings["islands"] == islands
    exact = lg.exact_log_marginal(x)
    _assert_mean_ratio_is_one(r.log_likelihood.reshape(2, 1000).T, exact.reshape(2, 1000).T)
    assert float((r.log_likelihood - exact).mean()) <= 3 * float(r.stderr)  # a lower bound


@pytest.mark.statistical
@pytest.mark.parametrize("islands", [1, 2])
def test_reverse_smc_from_one_exact_draw_is_unbiased_for_one_over_p_of_x(islands, seed):
    """Every chain starts at the same exact posterior draw, as in BDMC: the mean weight is still
    an unbiased estimate of 1/p(x)."""
    lg = LinearGaussian.random(**LG)
    x = _replicas(lg, 2, 1000, seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        z = lg.exact_posterior(x).sample()  # (N, d): one draw per run
    r = pyrolik.reverse_ais(lg, x, z, num_steps=20, num_chains=6, seed=seed, progress=False,
                            kernel=pyrolik.SMC(pyrolik.HMC(num_leapfrog=2), islands=islands))
    assert float(r.num_resampled.sum()) > 2000
    exact = lg.exact_log_marginal(x)
    _assert_mean_ratio_is_one(-r.log_likelihood.reshape(2, 1000).T, -exact.reshape(2, 1000).T)


@pytest.mark.statistical
def test_the_default_bdmc_brackets_the_exact_value(seed):
    lg = LinearGaussian.random(**LG)
    sim = pyrolik.simulate(lg, 20, data_shape=(5,), seed=seed)
    exact = lg.exact_log_marginal(sim.x)
    r = pyrolik.bdmc(lg, sim, num_steps=60, num_chains=8, seed=seed, progress=False)
    assert r.lower.settings["islands"] == 2 and r.lower.kernel == pyrolik.SMC()
    n = len(exact)
    se_lo, se_up = r.lower.mcse.pow(2).sum().sqrt() / n, r.upper.mcse.pow(2).sum().sqrt() / n
    assert (r.lower.log_likelihood - exact).mean() <= 3 * se_lo
    assert (r.upper.log_likelihood - exact).mean() >= -3 * se_up
    assert -3 * r.gap_stderr <= r.gap < 0.5
    assert r.lower.num_resampled is not None and r.upper.num_resampled is not None


def test_the_mcse_comes_from_the_islands_and_the_rest_from_the_ancestors(seed):
    """With islands the MCSE is the jackknife over the islands' summed weights (independent runs);
    ESS and k-hat are those of the ancestors' summed weights (Chan & Lai 2013). Plain AIS keeps
    no genealogy."""
    lg = LinearGaussian.random(**LG)
    x = lg.sample(4, torch.Generator().manual_seed(seed))
    r = pyrolik.ais(lg, x, num_steps=30, num_chains=8, seed=seed, progress=False,
                    kernel=pyrolik.SMC(pyrolik.HMC(num_leapfrog=2), islands=2))
    islands = torch.logsumexp(r.log_weights.reshape(2, 4, 4), 1)
    torch.testing.assert_close(r.mcse, mcse_log_mean_exp(islands))
    families = ancestor_log_weights(r.log_weights, r.ancestor)
    torch.testing.assert_close(r.ess, effective_sample_size(families))
    assert ((r.ancestor // 4) == (torch.arange(8) // 4).unsqueeze(1)).all()  # never crossed
    plain = pyrolik.ais(lg, x, num_steps=30, num_chains=8, seed=seed, progress=False,
                        kernel=pyrolik.SMC(pyrolik.HMC(num_leapfrog=2), resample=None))
    assert plain.ancestor is None and plain.num_resampled is None
    assert plain.settings["islands"] is None


def test_the_export_carries_the_genealogy(tmp_path, seed):
    lg = LinearGaussian.random(**LG)
    x = lg.sample(3, torch.Generator().manual_seed(seed))
    r = pyrolik.ais(lg, x, num_steps=20, num_chains=8, seed=seed, progress=False,
                    kernel=pyrolik.SMC(pyrolik.HMC(num_leapfrog=2)))
    idata = r.to_inference_data()
    assert {"num_resampled", "ancestor"} <= _all_vars(idata)
    path = tmp_path / "r.nc"
    pyrolik.save(r, path)
    back = pyrolik.load(path)
    assert torch.equal(back.ancestor, r.ancestor)
    assert torch.equal(back.num_resampled, r.num_resampled)
    torch.testing.assert_close(back.ess, r.ess)
    assert back.kernel == r.kernel and back.settings["islands"] == 2
    assert r.summary()["resamplings"].iloc[0] == pytest.approx(float(r.num_resampled.mean()))


def _all_vars(idata) -> set[str]:
    return {name for group in idata.groups() for name in idata[group].data_vars}


def test_resampling_adds_no_host_sync_per_step():
    from tests.annealing.test_host_sync import SyncCounter

    lg = LinearGaussian.random(5, 2, s=0.5, seed=0, dtype=torch.float64)
    sim = pyrolik.simulate(lg, 6, data_shape=(5,), seed=0)
    counts = []
    for steps in (10, 80):
        with SyncCounter() as c:
            pyrolik.bdmc(lg, sim, num_steps=steps, num_chains=4, seed=0, progress=False,
                         kernel=pyrolik.SMC(pyrolik.HMC(num_leapfrog=2), resample=0.5,
                                            islands=2))
        counts.append(dict(c.counts))
    assert counts[0] == counts[1], f"host syncs grew with num_steps: {counts}"


def test_one_island_can_leave_one_lineage_and_the_suggested_fix_gives_an_mcse(seed):
    """One island resampled at every step for long coalesces into one lineage: its MCSE is NaN (not
    a number that looks like one) and a warning says what to do; islands (the default with 8
    chains) fix it."""
    lg = LinearGaussian.random(**LG)
    x = lg.sample(6, torch.Generator().manual_seed(seed))
    kw = dict(num_steps=300, seed=seed, progress=False)
    r = pyrolik.ais(lg, x, num_chains=4, **kw,
                    kernel=pyrolik.SMC(pyrolik.HMC(num_leapfrog=2), islands=1))
    single = torch.tensor([len(set(r.ancestor[:, i].tolist())) == 1 for i in range(6)])
    assert single.any() and torch.equal(r.mcse.isnan(), single)
    assert any("cannot be estimated from this run" in w for w in r.warnings())
    fixed = pyrolik.ais(lg, x, num_chains=8, kernel=pyrolik.SMC(pyrolik.HMC(num_leapfrog=2)), **kw)
    assert fixed.settings["islands"] == 2
    assert not fixed.mcse.isnan().any()
    assert not any("cannot be estimated" in w for w in fixed.warnings())
