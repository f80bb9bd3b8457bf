"""Paired model comparison: published test results on known samples, scipy, Holm, notes, ArviZ."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from pyrolik.diagnostics import scoring
from pyrolik.diagnostics.comparison import compare, holm
from pyrolik.results import AISResult, BDMCResult, EstimateResult

# Darwin's Zea mays data: cross- minus self-fertilised heights (eighths of an inch), as analysed by
# Fisher (1935): t = 2.148 on 14 df, p = 0.0497; the exact signed-rank test gives T = 24,
# p = 0.0413 (Hollander & Wolfe; the scipy.stats.wilcoxon documentation).
DARWIN = np.array([6, 8, 14, 16, 23, 24, 28, 29, 41, -48, 49, 56, 60, -67, 75], dtype=float)
# Student's (1908) sleep data, extra hours of sleep under two drugs on the same ten patients;
# R's t.test(extra ~ group, data = sleep, paired = TRUE): t = -4.0621, df = 9, p = 0.002833,
# 95% CI of the mean difference (-2.4598858, -0.7001142).
SLEEP_1 = np.array([0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0])
SLEEP_2 = np.array([1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4])


def test_published_paired_tests_on_known_samples():
    c = compare(DARWIN, np.zeros(15), names=["cross", "self"])
    row = c.pairs.iloc[0]
    assert row["mean_diff"] == pytest.approx(314 / 15)
    assert row["t_statistic"] == pytest.approx(2.148, abs=5e-4)
    assert row["t_pvalue"] == pytest.approx(0.0497, abs=5e-5)
    assert row["wilcoxon_statistic"] == 24.0
    assert row["wilcoxon_pvalue"] == pytest.approx(0.041259765625, rel=1e-9)
    assert c.better == "cross"
    assert compare(DARWIN, np.zeros(15), level=0.04).better is None  # 0.0497 > 0.04
    assert compare(DARWIN, np.zeros(15), level=0.045, test="wilcoxon").better == "model_0"
    s = compare(SLEEP_1, SLEEP_2, names=["drug1", "drug2"])
    row = s.pairs.iloc[0]
    assert row["t_statistic"] == pytest.approx(-4.0621, abs=5e-5)
    assert row["t_pvalue"] == pytest.approx(0.002833, abs=5e-7)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((-2.4598858, -0.7001142), abs=1e-7)
    assert s.better == "drug2"


def test_matches_scipy_on_random_samples(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(-90, 5, 200)
    b = a - 0.2 + rng.standard_t(3, 200)
    row = compare(a, b).pairs.iloc[0]
    t = stats.ttest_rel(a, b)
    w = stats.wilcoxon(a, b)
    assert row["t_statistic"] == pytest.approx(t.statistic, rel=1e-12)
    assert row["t_pvalue"] == pytest.approx(t.pvalue, rel=1e-12)
    assert row["wilcoxon_pvalue"] == pytest.approx(w.pvalue, rel=1e-12)
    assert row["se"] == pytest.approx(np.std(a - b, ddof=1) / math.sqrt(200))


def test_holm_by_hand_and_inside_compare(seed):
    # sorted: 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, max(0.06, 1*0.04)
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm([0.9, 0.02]), [0.9, 0.04])
    np.testing.assert_allclose(holm([0.5, 0.9]), [1.0, 1.0])  # 2 * 0.5 caps at 1, then monotone
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.5, 1.5])
    rng = np.random.default_rng(seed)
    base = rng.normal(-50, 3, 300)
    models = {f"m{k}": base + off + rng.normal(0, 1, 300)
              for k, off in enumerate([0.0, -0.05, -0.4, -1.0])}
    c = compare(models)
    assert len(c.pairs) == 6
    np.testing.assert_allclose(c.pairs["p_adjusted"], holm(c.pairs["t_pvalue"].to_numpy()))
    bonf = compare(models, correction="bonferroni").pairs
    np.testing.assert_allclose(bonf["p_adjusted"], np.minimum(1, 6 * bonf["t_pvalue"]))
    raw = compare(models, correction="none").pairs
    np.testing.assert_allclose(raw["p_adjusted"], raw["t_pvalue"])


def test_ranked_table(seed):
    rng = np.random.default_rng(seed)
    base = rng.normal(-50, 3, 400)
    models = {"mid": base - 0.5 + rng.normal(0, 0.5, 400), "best": base + rng.normal(0, 0.5, 400),
              "worst": base - 3 + rng.normal(0, 0.5, 400)}
    table = compare(models).table.loc["log"]
    assert list(table.index) == ["best", "mid", "worst"]
    assert list(table["rank"]) == [0, 1, 2]
    assert list(table["worse_than_best"]) == [False, True, True]
    diff = (models["worst"] - models["best"]).mean()
    assert table.loc["worst", "diff_to_best"] == pytest.approx(diff)
    assert table.loc["best", "se"] == pytest.approx(models["best"].std(ddof=1) / 20)


def _result(values, bound, method, name=None, gap=None):
    obj = SimpleNamespace(log_likelihood=torch.as_tensor(values), bound=bound, method=method,
                          name=name)
    if gap is not None:
        obj.gap = gap
    return obj


def test_notes_on_bounds_of_different_kinds_and_bdmc_gaps(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(-90, 4, 100)
    ais = _result(x, "lower", "ais")
    iwae = _result(x - 0.3 + rng.normal(0, 0.1, 100), "lower", "iwae")
    rev = _result(x + 0.2, "upper", "reverse_ais")
    c = compare(ais, iwae)
    assert list(c.table.loc["log"].index) == ["ais", "iwae"]
    assert any("different estimators" in n for n in c.notes)
    assert any("different kinds" in n for n in compare(ais, rev).notes)
    assert compare(ais, _result(x + 0.1, "lower", "ais", name="ais2")).notes == []
    assert compare(ais, x - 1.0).notes == []  # plain arrays: nothing known, nothing claimed
    biased = EstimateResult("biased_csl", torch.as_tensor(x + 1), None)
    assert any("bcsl (biased_csl) is not a bound" in n
               for n in compare(ais, biased, names=["ais", "bcsl"]).notes)
    # a BDMC gap beside the difference, from gaps= or from the result's .gap
    g = compare(ais, iwae, gaps={"ais": 0.5})
    assert g.pairs.iloc[0]["gap_a"] == 0.5
    assert any("within the BDMC gap 0.5" in n for n in g.notes)
    g2 = compare(_result(x, "lower", "ais", gap=torch.tensor([0.1, 0.1])), iwae)
    assert g2.pairs.iloc[0]["gap_a"] == pytest.approx(0.1)
    assert not any("within the BDMC gap" in n for n in g2.notes)  # 0.3 nats > 0.1
    assert "note: " in str(c)
    # a BDMC result: its midpoint is compared, its gap shown, its kind named
    lower = AISResult("ais", torch.as_tensor(x - 0.2), "lower")
    upper = AISResult("reverse_ais", torch.as_tensor(x + 0.2), "upper")
    bdmc = BDMCResult(lower, upper, torch.zeros(100, 1), {})
    b = compare(bdmc, iwae, names=["vae", "gan"])
    assert b.pairs.iloc[0]["gap_a"] == pytest.approx(0.4)
    np.testing.assert_allclose(b.per_example["log"]["vae"], x)
    assert any("midpoint of a BDMC sandwich" in n for n in b.notes)


def test_categorical_predictions_under_three_scores(seed):
    rng = np.random.default_rng(seed)
    n, k = 500, 4
    truth = rng.dirichlet(np.ones(k), size=n)
    y = np.array([rng.choice(k, p=p) for p in truth])
    sharp = 0.8 * truth + 0.2 / k
    flat = 0.3 * truth + 0.7 / k
    c = compare({"sharp": sharp, "flat": flat}, y=y)
    assert set(c.pairs["score"]) == {"log", "quadratic", "spherical"}
    for rule in ("log", "quadratic", "spherical"):
        np.testing.assert_allclose(c.per_example[rule]["flat"], scoring.score(flat, y, rule))
        assert c.table.loc[(rule, "sharp"), "rank"] == 0
    # zero probability on an observed class: the log score is -inf, the quadratic score is not
    zero = np.eye(k)[(y + 1) % k]
    with pytest.raises(ValueError, match="quadratic or spherical"):
        compare({"sharp": sharp, "zero": zero}, y=y)
    q = compare({"sharp": sharp, "zero": zero}, y=y, scores=["quadratic"])
    assert q.better == "sharp"


def test_arviz_compare_agrees_with_the_paired_statistics(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(-90, 5, 200)
    models = {"a": a, "b": a - 0.3 + rng.normal(0, 1, 200), "c": a + rng.normal(0, 2, 200)}
    c = compare(models)
    az_table = c.to_arviz()
    best = az_table.index[0]
    assert best == c.table.loc["log"].index[0]
    for name in az_table.index[1:]:
        d = models[best] - models[name]
        assert az_table.loc[name, "elpd_diff"] == pytest.approx(d.sum())
        # ArviZ's dse is the paired SE on the sum scale with ddof=0
        row = c.table.loc[("log", name)]
        assert az_table.loc[name, "dse"] == pytest.approx(row["dse"] * 200 * math.sqrt(199 / 200))
    assert az_table["weight"].sum() == pytest.approx(1.0)


def test_bad_input_raises():
    a = np.zeros(5)
    with pytest.raises(ValueError, match="at least two"):
        compare(a)
    with pytest.raises(ValueError, match="different numbers of examples"):
        compare(a, np.zeros(6))
    with pytest.raises(ValueError, match="unique"):
        compare(a, a, names=["x", "x"])
    with pytest.raises(ValueError, match="level"):
        compare(a, a, level=1.5)
    with pytest.raises(ValueError, match="test must be"):
        compare(a, a, test="z")
    with pytest.raises(ValueError, match="correction"):
        compare(a, a, correction="fdr")
    with pytest.raises(ValueError, match="pass y="):
        compare(np.zeros((5, 2)), np.zeros((5, 2)))
    with pytest.raises(ValueError, match="need class probabilities"):
        compare(a, a, scores=["quadratic"])
    with pytest.raises(ValueError, match="non-finite"):
        compare(a, np.full(5, np.nan))
    failed = a.copy()
    failed[2] = np.nan  # a failed example's estimate: named, with the fix that works
    with pytest.raises(ValueError, match=r"in examples \[2\]: they failed .*ok = ~\(a.failed"):
        compare(a, failed)
    assert len(compare(a[[0, 1, 3, 4]], failed[[0, 1, 3, 4]]).table) == 2
    with pytest.raises(ValueError, match="both"):
        compare({"a": a, "b": a}, names=["x", "y"])
    # identical scores: no winner, no warnings from scipy
    same = compare(a + np.arange(5), a + np.arange(5))
    assert same.better is None and same.pairs.iloc[0]["t_pvalue"] == 1.0


def test_compare_real_estimator_results(seed):
    # likelihood weighting and IWAE (exact posterior as guide) on the linear-Gaussian oracle: both
    # lower bounds from different estimators; IWAE with the exact posterior is exact.
    from pyrolik_models.oracles.linear_gaussian import LinearGaussian

    from pyrolik import iwae, likelihood_weighting

    lg = LinearGaussian.random(data_dim=4, latent_dim=2, seed=seed)
    x = lg.sample(40, torch.Generator().manual_seed(seed))
    lw = likelihood_weighting(lg, x, num_samples=50, seed=seed, progress=False)
    iw = iwae(lg, x, lg.exact_guide, num_samples=5, seed=seed, progress=False)
    c = compare(lw, iw)
    assert set(c.table.loc["log"].index) == {"likelihood_weighting", "iwae"}
    assert any("different estimators" in n for n in c.notes)
    assert c.table.loc[("log", "iwae"), "mean"] == pytest.approx(
        float(lg.exact_log_marginal(x).mean()))
    # two models scored by one estimator, passed without names: each named by its position
    lw2 = likelihood_weighting(lg, x, num_samples=50, seed=seed + 1, progress=False)
    assert set(compare(lw, lw2).table.loc["log"].index) == {"likelihood_weighting_0",
                                                            "likelihood_weighting_1"}


def test_results_on_different_data_are_noted_and_warned(seed):
    """Every result carries the data it was computed on: a comparison of results on other data says
    so (a note and a DiagnosticWarning); the same data, or plain arrays, say nothing."""
    from pyrolik_models.oracles.linear_gaussian import LinearGaussian

    from pyrolik import DiagnosticWarning, iwae, likelihood_weighting

    lg = LinearGaussian.random(data_dim=4, latent_dim=2, seed=seed)
    xa, xb = (lg.sample(6, torch.Generator().manual_seed(seed + i)) for i in range(2))
    a = iwae(lg, xa, lg.exact_guide, num_samples=4, seed=seed, progress=False)
    b = iwae(lg, xb, lg.exact_guide, num_samples=4, seed=seed, progress=False)
    with pytest.warns(DiagnosticWarning, match="b was computed on other data than a"):
        c = compare(a, b, names=["a", "b"])
    assert any("computed on other data" in n for n in c.notes)
    same = likelihood_weighting(lg, xa, num_samples=20, seed=seed, progress=False)
    assert not any("other data" in n for n in compare(a, same).notes)
    assert compare(a, b.log_likelihood.numpy()).notes == []  # an array carries no data
