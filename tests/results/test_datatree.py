"""The resampled ArviZ layout: blocks, systematic resampling, and ArviZ's numbers against an exact
posterior (linear-Gaussian), and every result type through ArviZ's own calls."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from numpy.testing import assert_array_equal

import pyrolik
from pyrolik.results import EstimateResult
from tests.export_cases import build, summary_where_defined
from tests.oracles import LG_NARROW as LG

# --- blocks and systematic resampling -------------------------------------------------------------




def test_bad_num_blocks_raise_naming_the_fix(results):
    with pytest.raises(ValueError, match="num_blocks=4"):
        results["ais"].to_datatree(num_blocks=0)
    with pytest.raises(TypeError, match="num_blocks=4"):
        results["ais"].to_inference_data(num_blocks=2.0)




# --- against the exact posterior --------------------------------------------------------------





@pytest.mark.statistical
@pytest.mark.parametrize("steps", [5, 100])
def test_summary_mean_and_sd_are_the_exact_posteriors(lg_runs, steps):
    """``az.summary`` of the resampled draws: the exact posterior mean and sd within Monte Carlo
    error, the error from the weights' ESS (4 standard errors; the unweighted final states were
    7.9x too wide at 5 steps)."""
    x, runs = lg_runs
    r = runs[steps]
    table = summary_where_defined(r.to_inference_data())
    post = LG.exact_posterior(x)
    mean, sd = post.mean.numpy(), post.variance.sqrt().numpy()  # (N, 2)
    ess = r.ess.numpy()[:, None]  # pooled Kish ESS of the weights, per example
    got_mean = table["mean"].values.reshape(mean.shape)
    got_sd = table["sd"].values.reshape(sd.shape)
    assert (np.abs(got_mean - mean) <= 4 * sd / np.sqrt(ess)).all()
    # the sd of a sample sd of ESS normal draws is about sd / sqrt(2 ESS)
    assert (np.abs(got_sd - sd) <= 4 * sd / np.sqrt(2 * np.maximum(ess - 1, 1))).all()


@pytest.mark.statistical
def test_r_hat_tells_a_5_step_run_from_a_100_step_one(lg_runs):
    """Blocks of a short run disagree (few particles carry each block): larger r_hat, smaller ESS."""
    import warnings

    import arviz as az

    _, runs = lg_runs
    worst = {}
    for steps, r in runs.items():
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=RuntimeWarning)  # collapsed blocks
            table = az.summary(r.to_inference_data(), round_to="none")
        rhat = table["r_hat"].values
        worst[steps] = np.where(np.isfinite(rhat), rhat, np.inf).max()
        ess = table["ess_bulk"].values
        worst[f"ess{steps}"] = np.median(np.where(np.isfinite(ess), ess, 0))
    assert worst[5] > worst[100] and worst[5] > 1.1
    assert worst["ess5"] < worst["ess100"]


def test_sample_stats_match_the_posterior_draws(lg_runs):
    """One row of ``sample_stats`` per draw: ``plot_pair(divergences=True)`` lines them up."""
    _, runs = lg_runs
    tree = runs[100].to_datatree()
    post, stats = tree["posterior"], tree["sample_stats"]
    assert post.sizes["chain"] == stats.sizes["chain"] == 4
    assert post.sizes["draw"] == stats.sizes["draw"] == 16
    assert set(stats.data_vars) >= {"particle", "log_weight", "acceptance_rate", "diverging",
                                    "max_energy_error"}
    assert "annealing" in tree.children and "beta" in tree["annealing"]


def test_the_annealing_group_has_the_per_block_running_evidence(lg_runs):
    _, runs = lg_runs
    r = runs[100]
    ann = r.to_datatree()["annealing"]
    lw = r.trace["log_weight"].double()  # (R, K, N)
    block = lw.reshape(lw.shape[0], 4, 16, -1)
    expected = torch.logsumexp(block, dim=2) - math.log(16)
    np.testing.assert_allclose(ann["log_marginal_likelihood"].values, expected.numpy(), rtol=1e-12)
    # the running estimate ends at the per-block estimate in particles
    np.testing.assert_allclose(ann["log_marginal_likelihood"].isel(step=-1).values,
                               r.to_datatree()["particles"]["log_marginal_likelihood"].values,
                               rtol=1e-12)


def test_the_annealing_ess_of_a_resampled_run_is_that_of_its_ancestors(seed):
    """Resampled within islands, a block's chains have equal weights after every step; the exported
    per-step ESS is that of their starting ancestors' summed weights, as the run's own ESS (with one
    island, one block: the run's ESS itself)."""
    from pyrolik.ops.stats import ancestor_log_weights, effective_sample_size

    x = LG.sample(3, torch.Generator().manual_seed(seed))
    r = pyrolik.ais(LG, x, num_steps=20, num_chains=8, seed=seed, progress=False)
    ess = r.to_datatree()["annealing"]["ess"]
    assert r.settings["islands"] == 2 and ess.sizes["chain"] == 2
    for b in range(2):
        chains = slice(4 * b, 4 * b + 4)
        families = ancestor_log_weights(r.log_weights[chains], r.ancestor[chains] - 4 * b)
        np.testing.assert_allclose(ess.isel(step=-1, chain=b).values,
                                   effective_sample_size(families).numpy(), rtol=1e-12)
    one = pyrolik.ais(LG, x, num_steps=20, num_chains=8, seed=seed, progress=False,
                      kernel=pyrolik.SMC(islands=1))
    np.testing.assert_allclose(one.to_datatree()["annealing"]["ess"].isel(step=-1, chain=0).values,
                               one.ess.numpy(), rtol=1e-12)


def test_the_export_is_reproducible_and_num_blocks_is_honoured(lg_runs):
    _, runs = lg_runs
    r = runs[100]
    a, b = r.to_datatree(), r.to_datatree()
    assert_array_equal(a["posterior"]["z"].values, b["posterior"]["z"].values)
    one = r.to_inference_data(num_blocks=1)
    assert one.posterior.sizes["chain"] == 1 and one.posterior.sizes["draw"] == 64
    # the run resampled its 64 chains in 4 islands: blocks hold whole islands, so at most 4
    assert r.settings["islands"] == 4
    assert r.to_datatree(num_blocks=8)["posterior"].sizes["chain"] == 4
    assert r.to_datatree(num_blocks=2)["posterior"].sizes["chain"] == 2


def test_estimate_results_without_draws_export_their_evidence(results):
    r = results["kde"]
    assert isinstance(r, EstimateResult)
    tree = r.to_datatree()
    assert set(tree.children) == {"evidence", "observed_data", "constant_data"}
    assert tree["evidence"].attrs["bound"] == "none"


# --- IWAE and likelihood weighting: sampling-importance-resampling --------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("keep_samples", [None, False])
def test_likelihood_weighting_posterior_is_the_exact_one(keep_samples):
    """Resampled prior draws, weighted by the likelihood, have the exact posterior's mean and sd
    within 4 standard errors (from the weights' ESS); ``keep_samples=False`` keeps only the
    resampled draws (bounded memory), with the same posterior."""
    x = LG.sample(4, torch.Generator().manual_seed(2))
    r = pyrolik.likelihood_weighting(LG, x, num_samples=4000, seed=0, chunk_size=700,
                                     keep_samples=keep_samples, progress=False)
    assert (r.samples is None) == (keep_samples is False)
    assert r.draws["z"].shape == (4, 256, 4, 2)  # 4 blocks of 1000 samples: 256 draws each
    tree = r.to_datatree()
    assert ("z" in tree["particles"]) == (keep_samples is not False)
    table = summary_where_defined(r.to_inference_data())
    post = LG.exact_posterior(x)
    mean, sd = post.mean.numpy(), post.variance.sqrt().numpy()
    ess = np.minimum(r.ess.numpy(), 4 * 256)[:, None]  # no more than the draws kept
    got = table["mean"].values.reshape(mean.shape)
    assert (np.abs(got - mean) <= 4 * sd / np.sqrt(ess)).all()
    got_sd = table["sd"].values.reshape(sd.shape)
    assert (np.abs(got_sd - sd) <= 4 * sd / np.sqrt(2 * (ess - 1))).all()
    back = pyrolik.io.export.from_datatree(tree)
    for name, v in r.draws.items():
        torch.testing.assert_close(back.draws[name], v, rtol=0, atol=0)


def test_keep_samples_needs_the_weights():
    x = LG.sample(2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="keep_weights=True"):
        pyrolik.iwae(LG, x, LG.exact_guide, num_samples=8, keep_samples=True, keep_weights=False,
                     progress=False)
    r = pyrolik.iwae(LG, x, LG.exact_guide, num_samples=8, keep_samples=True, progress=False)
    assert r.samples["z"].shape == (8, 2, 2) and r.log_weights.shape == (8, 2)
    r = pyrolik.iwae(LG, x, LG.exact_guide, num_samples=8, keep_weights=False, progress=False)
    assert r.samples is None and r.log_weights is None
    tree = r.to_datatree()  # the resampled draws and the evidence still export
    assert {"posterior", "sample_stats", "evidence"} <= set(tree.children)
    assert "particles" not in tree.children
    assert_array_equal(pyrolik.io.export.from_datatree(tree).draws["z"].numpy(), r.draws["z"].numpy())




# --- across runs: concat, and ArviZ's k-hat plot ------------------------------------------------








# --- BDMC: the calibration check ----------------------------------------------------------------


@pytest.mark.statistical
def test_bdmc_calibration_pit_is_uniform_only_when_the_posterior_is_right():
    """Simulation-based calibration for free: the simulated latents' PIT among the forward run's
    resampled draws is uniform at 100 steps (KS test not rejected) and far from it at 5 steps."""
    from scipy import stats

    pvalues = {}
    for steps in (5, 100):
        b = pyrolik.bdmc(LG, 100, data_shape=(5,), num_steps=steps, num_chains=16,
                         kernel=pyrolik.SMC(pyrolik.HMC(num_leapfrog=5), resample=None), seed=0,
                         progress=False)  # plain AIS: at 5 steps SMC's draws hide the error
        tree = b.to_datatree()
        pit = tree["calibration"]["z"]  # one draw, as the simulated latents
        draws = tree["posterior"]["z"].values  # (C, D, N, 2)
        truth = b.latents["z"].numpy()
        by_hand = ((draws < truth).mean((0, 1)) + 0.5 * (draws == truth).mean((0, 1)))
        assert_array_equal(pit.values[0, 0], by_hand)
        assert pit.dims == tree["simulated"]["z"].dims == ("chain", "draw", "data", "z_dim_0")
        pvalues[steps] = stats.kstest(pit.values.ravel(), "uniform").pvalue
    assert pvalues[100] > 1e-3 and pvalues[5] < 1e-2


def test_a_site_named_u_keeps_its_values_and_a_reserved_name_is_refused(results):
    import dataclasses

    r = results["ais"]
    renamed = dataclasses.replace(r, latents={"u": r.latents["z"], "tau": r.latents["tau"]})
    tree = renamed.to_datatree()
    assert tree["particles"]["u"].dims[-1] == "u_dim_0"  # the site, not the flat state
    assert tree["unconstrained_particles"]["u"].dims[-1] == "latent_dim"
    back = pyrolik.io.export.from_datatree(tree)
    assert torch.equal(back.latents["u"], r.latents["z"]) and torch.equal(back.final_state,
                                                                          r.final_state)
    clash = dataclasses.replace(r, latents={"ess": r.latents["z"]})
    with pytest.raises(ValueError, match="rename the site"):
        clash.to_datatree()


def test_per_batch_adaptive_schedules_and_reverse_runs_round_trip(tmp_path):
    """Batches annealed along their own adaptive schedules: ``beta`` is ``(step, <plate>)``; a
    reverse run's per-block running log Z is 0 at its last step (beta = 0)."""
    from tests.io.test_export import assert_same_result

    x = LG.sample(4, torch.Generator().manual_seed(3))
    r = pyrolik.ais(LG, x, num_steps=12, num_chains=8, schedule="adaptive", batch_size=2, seed=0,
                    progress=False)
    assert r.trace["beta"].dim() == 3
    tree = r.to_datatree()
    assert tree["annealing"]["beta"].dims == ("step", "chain", "particle", "data")
    assert_same_result(pyrolik.load(pyrolik.save(r, tmp_path / "r.nc")), r)
    rev = build()["reverse_ais"]
    ann = rev.to_datatree()["annealing"]
    np.testing.assert_allclose(ann["log_marginal_likelihood"].isel(step=-1).values, 0.0,
                               atol=1e-12)
    assert (ann["beta"].isel(step=-1) == 0.0).all()


@pytest.mark.parametrize(("k", "good_k"), [(1, -math.inf), (8, -math.inf), (10, -math.inf),
                                           (11, 1 - 1 / math.log10(11)), (100, 0.5), (10**4, 0.7)])
def test_good_k_is_the_khat_threshold_the_warnings_use(k, good_k):
    """ArviZ's ``good_k`` on ``pareto_k`` is ``ops.stats.khat_threshold`` (Vehtari et al. 2024): with
    10 weights or fewer no k-hat is good (the formula alone would give 0 at K = 10, -0.11 at K = 8)."""
    zeros = torch.zeros(2, dtype=torch.float64)
    r = EstimateResult(method="iwae", log_likelihood=zeros, bound="lower",
                       log_weights=torch.zeros(k, 2, dtype=torch.float64), khat=zeros)
    attrs = r.to_datatree()["evidence"]["pareto_k"].attrs
    assert attrs["n_samples"] == k
    assert attrs["good_k"] == good_k if math.isinf(good_k) else attrs["good_k"] == pytest.approx(good_k)
