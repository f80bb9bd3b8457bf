"""``pyrolik.concat``: chains of runs on the same data joined, evidence recomputed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import pyrolik
from tests.export_cases import summary_where_defined
from tests.oracles import LG_NARROW as LG


def test_concat_joins_chains_and_recomputes_the_evidence(lg_runs):
    from pyrolik.ops.stats import mcse_log_mean_exp

    x, _ = lg_runs
    kw = dict(num_steps=20, num_chains=16, kernel=pyrolik.HMC(num_leapfrog=3), progress=False,
              schedule=pyrolik.schedules.sigmoid(20))
    a, b = (pyrolik.ais(LG, x, seed=s, **kw) for s in (0, 1))
    both = pyrolik.concat(a, b)
    lw = torch.cat([a.log_weights, b.log_weights])
    torch.testing.assert_close(both.log_likelihood, torch.logsumexp(lw, 0) - math.log(32))
    # 4 islands of 4 chains each (SMC): joined, 8 independent islands, the MCSE from their spread
    assert a.settings["islands"] == 4 and both.settings["islands"] == 8
    torch.testing.assert_close(both.mcse, mcse_log_mean_exp(torch.logsumexp(lw.reshape(8, 4, -1), 1)))
    assert torch.equal(both.ancestor, torch.cat([a.ancestor, b.ancestor + 16]))
    assert torch.equal(both.trace["ancestor"][-1], both.ancestor)  # the recorded ones follow too
    assert both.settings["num_chains"] == 32 and both.seed is None
    tree = both.to_datatree()
    assert tree["posterior"].sizes["chain"] == 4 and tree["posterior"].sizes["draw"] == 8
    np.testing.assert_allclose(tree["evidence"]["log_marginal_likelihood"].values[0, 0],
                               both.log_likelihood.numpy())
    assert torch.equal(both.trace["log_weight"], torch.cat([a.trace["log_weight"],
                                                            b.trace["log_weight"]], 1))
    # from exports too; refused across different data or schedules, naming the fix
    again = pyrolik.concat(a.to_inference_data(), b.to_datatree())
    torch.testing.assert_close(again.log_likelihood, both.log_likelihood)
    with pytest.raises(ValueError, match="different data"):
        pyrolik.concat(a, pyrolik.ais(LG, x[:3], seed=2, **kw))
    with pytest.raises(ValueError, match="same schedule"):
        pyrolik.concat(a, pyrolik.ais(LG, x, seed=2, **{**kw, "schedule": "linear"}))
    with pytest.raises(TypeError, match="cannot concat"):
        pyrolik.concat(a, pyrolik.likelihood_weighting(LG, x, num_samples=16, progress=False))


def test_concat_of_bdmc_and_importance_results(results):
    r = results["bdmc"]
    both = pyrolik.concat(r, r)
    assert both.lower.log_weights.shape[0] == 2 * r.lower.log_weights.shape[0]
    torch.testing.assert_close(both.lower.log_likelihood, r.lower.log_likelihood)
    iw = results["iwae"]
    two = pyrolik.concat(iw, iw)
    assert two.draws["draw_index"].shape[0] == 2 * iw.draws["draw_index"].shape[0]
    summary_where_defined(two.to_inference_data())


def test_concat_without_weights_names_a_fix_that_exists(results):
    with pytest.raises(ValueError, match=r"a kde result keeps none; run pyrolik.kde once on both"):
        pyrolik.concat(results["kde"], results["kde"])
    x = results["kde"].x
    csl = pyrolik.csl(LG, x, pyrolik.infer.prior_samples(LG, x, 8, seed=0))
    with pytest.raises(ValueError, match="rerun csl with keep_weights=True"):
        pyrolik.concat(csl, csl)
