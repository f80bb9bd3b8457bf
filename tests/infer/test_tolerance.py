"""ais(num_steps=Tolerance(...)): the budget chosen by BDMC on simulated data, against the exact log p(x)."""

from __future__ import annotations

import json
import math

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from pyrolik.infer.tolerance import (
    Budget,
    BudgetWarning,
    Round,
    choose_budget,
)

# posterior sd 0.1-0.17: the sigmoid path needs tens of steps before the gap closes
LG = LinearGaussian.random(5, 2, s=0.3, seed=0, dtype=torch.float64)


def _data(n: int, seed: int, shift: float = 0.0):
    x = pyrolik.simulate(LG, n, data_shape=(5,), seed=seed + 5).x
    return x + LG.W @ torch.full((2,), shift)


@pytest.mark.statistical
def test_estimate_within_tolerance_of_exact(seed):
    tol = 0.3
    x = _data(40, seed)
    r = pyrolik.ais(LG, x, num_steps=pyrolik.Tolerance(tol), num_chains=8, seed=seed, progress=False)
    b = r.budget
    assert b.converged and b.rounds[-1].gap_upper <= tol
    assert r.settings["num_steps"] == b.num_steps == b.rounds[-1].num_steps
    assert [rd.num_steps for rd in b.rounds] == [25 * 2**i for i in range(len(b.rounds))]
    assert all(rd.gap_upper > tol for rd in b.rounds[:-1])  # stopped at the first good round
    err = float((r.log_likelihood - LG.exact_log_marginal(x)).mean())
    se = float(r.mcse.pow(2).sum().sqrt() / len(x))
    # a lower bound whose bias the tolerance bounds, up to the final run's own Monte Carlo noise
    assert -tol - 3 * se <= err <= 3 * se
    # the same as a plain run with that budget and seed: the search changes only num_steps
    plain = pyrolik.ais(LG, x, num_steps=b.num_steps, num_chains=8, seed=seed, progress=False)
    assert torch.equal(plain.log_likelihood, r.log_likelihood)
    assert b.num_simulated == 16 and b.check.num_examples == 40
    assert b.final_gradient_evals == 40 * (r.settings["gradient_evals_per_example"]
                                           + r.settings["pilot_gradient_evals_per_example"])
    assert b.cost_ratio > 1 and b.time_ratio > 1


def test_budget_in_summary_warnings_and_export(seed, tmp_path):
    x = _data(20, seed)
    r = pyrolik.ais(LG, x, num_steps=pyrolik.Tolerance(1.0), num_chains=4, seed=seed, progress=False)
    table = r.summary()
    assert table.loc["ais", "steps chosen"] == r.budget.num_steps
    assert table.loc["ais", "tolerance [nats]"] == 1.0
    assert "steps chosen" in str(table)
    tree = r.to_datatree()
    stored = json.loads(tree.attrs["budget"])
    assert stored["num_steps"] == r.budget.num_steps
    assert [rd["gap"] for rd in stored["rounds"]] == [rd.gap for rd in r.budget.rounds]
    assert Budget.from_dict(stored) == r.budget
    back = pyrolik.load(pyrolik.save(r, tmp_path / "run.nc") or tmp_path / "run.nc")
    assert back.budget == r.budget
    assert r.budget.table().index.tolist() == [rd.num_steps for rd in r.budget.rounds]


def test_cap_before_tolerance_warns_and_keeps_the_estimate(seed):
    x = _data(10, seed)
    with pytest.warns(BudgetWarning) as record:  # the check on x may warn too, at this tolerance
        r = pyrolik.ais(LG, x, num_steps=pyrolik.Tolerance(1e-3, max_steps=50), num_chains=4,
                        seed=seed, progress=False)
    assert any("reached max_steps=50 before the tolerance" in str(w.message) for w in record)
    # the warnings point at the user's call, not into pyrolik
    assert all(w.filename == __file__ for w in record if issubclass(w.category, BudgetWarning))
    assert not r.budget.converged and r.budget.num_steps == 50 and r.budget.seed == seed
    assert r.settings["num_steps"] == 50 and torch.isfinite(r.log_likelihood).all()
    assert any("max_steps=50" in w for w in r.warnings())
    assert "cap" in str(r.summary())


@pytest.mark.statistical
def test_real_data_harder_than_simulated_warns(seed):
    # x far out in the prior's tail (20 prior sd): simulated data close the gap at a few dozen
    # steps, these do not (the exact error stays well above the tolerance), and the doubling check
    # says so. The check is conservative: it catches gross disagreement, not every one.
    x = _data(50, seed, shift=20.0)
    with pytest.warns(BudgetWarning, match="AIS has not converged on these data"):
        r = pyrolik.ais(LG, x, num_steps=pyrolik.Tolerance(0.3), num_chains=8, seed=seed, progress=False)
    err = float((r.log_likelihood - LG.exact_log_marginal(x)).mean())
    assert err < -0.3  # the warning was right: the estimate is off by more than the tolerance
    c = r.budget.check
    assert c.change - 2 * c.change_se > 0.3


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((0.0,), {}, ValueError, "positive number of nats"),
    ((-1.0,), {}, ValueError, "positive number of nats"),
    ((float("nan"),), {}, ValueError, "positive number of nats"),
    ((float("inf"),), {}, ValueError, "positive number of nats"),
    (("0.3",), {}, TypeError, "number of nats"),
    ((True,), {}, TypeError, "number of nats"),
    ((None,), {}, TypeError, "number of nats"),
    ((0.3,), {"max_steps": 10}, ValueError, "max_steps must be an int of at least 25"),
    ((0.3,), {"max_steps": 100.0}, ValueError, "max_steps must be an int of at least 25"),
    ((0.3,), {"max_steps": True}, ValueError, "max_steps must be an int of at least 25"),
])
def test_a_bad_tolerance_is_refused_by_tolerance_itself(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        pyrolik.Tolerance(*args, **kwargs)


def test_tolerance_holds_its_nats_and_cap():
    t = pyrolik.Tolerance(1)
    assert t.nats == 1.0 and isinstance(t.nats, float) and t.max_steps == 6400
    assert pyrolik.Tolerance(0.3, max_steps=25).max_steps == 25
    assert pyrolik.Tolerance(0.3) == pyrolik.Tolerance(0.3, max_steps=6400)
    with pytest.raises(AttributeError):  # frozen: a search cannot change it under the caller
        t.nats = 2.0


@pytest.mark.parametrize("kwargs, match", [
    ({"num_steps": pyrolik.Tolerance(0.3), "schedule": torch.linspace(0, 1, 11)},
     "schedule tensor"),
    ({}, r"num_steps is required.*num_steps=pyrolik.Tolerance"),
])
def test_bad_tolerance_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pyrolik.ais(LG, _data(3, 0), num_chains=2, progress=False, **kwargs)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_a_tolerance_is_refused_in_a_distributed_block(tmp_path):
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with pyrolik.distributed(), pytest.raises(ValueError, match="one process"):
            pyrolik.ais(LG, _data(3, 0), num_steps=pyrolik.Tolerance(0.3), num_chains=2,
                        progress=False)
    finally:
        torch.distributed.destroy_process_group()


def test_budget_takes_a_number_or_a_tolerance(seed):
    x = _data(3, seed)
    with pytest.raises(ValueError, match="positive number of nats"):
        pyrolik.budget(LG, x, -1.0, num_chains=2, progress=False)
    with pytest.raises(TypeError, match="max_steps"):  # the cap lives in the Tolerance now
        pyrolik.budget(LG, x, 2.0, num_chains=2, max_steps=50, progress=False)
    a = pyrolik.budget(LG, x, 2.0, num_chains=2, seed=seed, progress=False)
    b = pyrolik.budget(LG, x, pyrolik.Tolerance(2.0), num_chains=2, seed=seed, progress=False)
    assert [(r.num_steps, r.gap, r.gap_se) for r in a.rounds] == \
        [(r.num_steps, r.gap, r.gap_se) for r in b.rounds]
    assert (a.num_steps, a.tolerance, a.max_steps, a.seed) == (b.num_steps, 2.0, 6400, seed)


def test_budget_refuses_a_kernel_that_is_not_hmc_before_simulating():
    with pytest.raises(TypeError, match="kernel must be a pyrolik.HMC"):
        pyrolik.budget(LG, _data(3, 0), 0.3, num_chains=2, kernel="hmc", progress=False)
    with pytest.raises(TypeError, match="kernel must be a pyrolik.HMC"):
        pyrolik.sigma_curve(LG, _data(3, 0), [0.5], num_steps=pyrolik.Tolerance(0.3),
                            num_chains=2, kernel="hmc", progress=False)


def test_model_that_cannot_be_simulated():
    def rescaled(x):  # observes a function of x, not entries of it: x cannot be assembled
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(()), 1.0))
            pyro.sample("a", dist.Normal(z.unsqueeze(-1).expand(-1, 2), 1.0).to_event(1),
                        obs=(x - 1) / 2)

    with pytest.raises(ValueError, match=r"cannot be simulated.*Pass num_steps= instead.*"
                                         r"pyrolik\.bdmc\(model, \(x, latents\)"):
        pyrolik.ais(rescaled, torch.zeros(4, 2), num_steps=pyrolik.Tolerance(0.3), num_chains=2, progress=False)
    # the fixes the message names work: a fixed num_steps, checked by BDMC on pairs drawn by hand
    assert pyrolik.ais(rescaled, torch.zeros(4, 2), num_steps=5, num_chains=2,
                       progress=False).log_likelihood.shape == (4,)
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4, generator=g)
    x = 2 * (z.unsqueeze(-1) + torch.randn(4, 2, generator=g)) + 1
    assert pyrolik.bdmc(rescaled, (x, {"z": z}), num_steps=5, num_chains=2,
                        progress=False).num_examples == 4


def test_autoguide_fitted_on_x_is_refused():
    from pyro.infer.autoguide import AutoNormal

    with pytest.raises(ValueError, match="AutoGuide.*pass num_steps= with this guide"):
        pyrolik.ais(LG, _data(3, 0), num_steps=pyrolik.Tolerance(0.3), num_chains=2, init=AutoNormal(LG),
                    progress=False)


def test_encoder_path_with_tolerance(seed):
    # an amortised guide (here the exact posterior, inflated) serves simulated data too: the short
    # path closes the gap at the first round
    def guide(x):
        post = LG.exact_posterior(x)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(post.loc, scale_tril=1.5 * post.scale_tril))

    x = _data(10, seed)
    r = pyrolik.ais(LG, x, num_steps=pyrolik.Tolerance(0.5), num_chains=4, init=guide, seed=seed, progress=False)
    assert r.path == "guide" and r.budget.converged and r.budget.num_steps == 25
    err = float((r.log_likelihood - LG.exact_log_marginal(x)).mean())
    assert -0.5 - 3 * float(r.mcse.pow(2).sum().sqrt() / 10) <= err


@pytest.mark.statistical
def test_per_example_arguments_follow_the_simulated_rows(seed):
    # a conditional model: the label shifts the mean; the simulated data take labels from x's rows
    shift = torch.tensor([3.0, -2.0, 1.0, 0.0, 2.0], dtype=torch.float64)

    def conditional(x, y):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            loc = z @ LG.W.T + LG.b + y.unsqueeze(-1) * shift
            pyro.sample("x", dist.Normal(loc, LG.s).to_event(1), obs=x)

    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (12,), generator=g).double()
    x = _data(12, seed) + y.unsqueeze(-1) * shift
    r = pyrolik.ais(conditional, x, model_args=(y,), num_steps=pyrolik.Tolerance(0.5), num_chains=8, seed=seed,
                    progress=False)
    assert r.budget.num_simulated == 12 and r.budget.converged
    exact = LG.exact_log_marginal(x - y.unsqueeze(-1) * shift)  # the shift moves x's mean only
    err = float((r.log_likelihood - exact).mean())
    se = float(r.mcse.pow(2).sum().sqrt() / len(x))
    assert -0.5 - 3 * se <= err <= 3 * se


def test_progress_shows_the_search(capsys):
    pyrolik.ais(LG, _data(4, 0), num_steps=pyrolik.Tolerance(5.0), num_chains=2, seed=0, progress=True)
    assert "choosing num_steps (tolerance 5 nats)" in capsys.readouterr().err


def _fake_round(gaps):
    def bdmc_at(steps):
        gap = gaps[steps]
        return Round(steps, gap, 0.05, -1.0 - gap, 10.0 * steps, 0.0)
    return bdmc_at


def test_search_doubles_until_the_upper_bound_is_within_tolerance():
    gaps = {25: 2.0, 50: 0.9, 100: 0.45, 200: 0.2, 399: 0.1}
    # 0.45 + 2 * 0.05 = 0.55 > 0.5: the upper bound, not the gap, decides
    b = choose_budget(pyrolik.Tolerance(0.5), bdmc_at=_fake_round(gaps), num_simulated=1,
                      progress=False)
    assert (b.num_steps, b.converged) == (200, True)
    assert [r.num_steps for r in b.rounds] == [25, 50, 100, 200] and not b.notes
    with pytest.warns(pyrolik.BudgetWarning, match="reached max_steps=399"):
        b = choose_budget(pyrolik.Tolerance(0.01, max_steps=399), bdmc_at=_fake_round(gaps),
                          num_simulated=1, progress=False)
    # the last round runs at the cap itself, not at the last doubling below it
    assert (b.num_steps, b.converged) == (399, False)
    assert [r.num_steps for r in b.rounds] == [25, 50, 100, 200, 399]
    b = choose_budget(pyrolik.Tolerance(0.5, max_steps=150), bdmc_at=_fake_round({**gaps, 150: 0.3}),
                      num_simulated=1, progress=False)
    assert (b.num_steps, b.converged, len(b.rounds)) == (150, True, 4)


def test_choose_budget_costs_are_the_callers():
    # the reusable form: any estimator that can run BDMC at a number of steps
    budget = choose_budget(pyrolik.Tolerance(0.5), bdmc_at=_fake_round({25: 0.3}), num_simulated=7, progress=False)
    assert budget.num_steps == 25 and budget.check is None and budget.num_simulated == 7
    assert math.isnan(budget.cost_ratio)  # the final run's cost is not known before it runs
    budget = budget.with_final(1000.0, 2.0)
    assert budget.cost_ratio == pytest.approx((250.0 + 1000.0) / 1000.0)


@pytest.mark.statistical
def test_budget_before_the_estimator_is_ais_with_tolerance(seed):
    # the search is one public function: its num_steps with the same seed is ais(num_steps=Tolerance)'s run
    x = _data(20, seed)
    b = pyrolik.budget(LG, x, 1.0, num_chains=4, seed=seed, progress=False)
    assert isinstance(b, Budget) and b.final_gradient_evals is None
    r = pyrolik.ais(LG, x, num_steps=b.num_steps, num_chains=4, seed=seed, progress=False)
    t = pyrolik.ais(LG, x, num_steps=pyrolik.Tolerance(1.0), num_chains=4, seed=seed, progress=False)
    assert torch.equal(r.log_likelihood, t.log_likelihood)
    assert [(r.num_steps, r.gap, r.gap_se) for r in t.budget.rounds] == \
        [(r.num_steps, r.gap, r.gap_se) for r in b.rounds]
    assert (t.budget.check.change, t.budget.check.change_se) == (b.check.change, b.check.change_se)
    assert t.budget.final_gradient_evals == 20 * (
        r.settings["gradient_evals_per_example"] + r.settings["pilot_gradient_evals_per_example"])


def test_a_gradient_budget_is_split_into_the_frontiers_chains_and_the_most_steps():
    """``budget(gradients=)``: no search; the frontier's chains (or the caller's) and the most steps
    whose run, pilot included, stays within the gradients; refused without exactly one of
    tolerance and gradients, or when they do not pay one step."""
    from pyrolik.annealing.run import gradient_evals

    x = _data(3, 0)
    move = pyrolik.SMC().move
    b = pyrolik.budget(LG, x, gradients=5000)
    assert b.num_chains == 4 and b.tolerance is None and b.rounds == [] and math.isnan(b.gap)
    assert sum(gradient_evals(move, b.num_steps, 4)) <= 5000 < sum(
        gradient_evals(move, b.num_steps + 1, 4))
    eight = pyrolik.budget(LG, x, gradients=5000, num_chains=8)
    assert eight.num_chains == 8 and eight.num_steps < b.num_steps
    assert b.summary_fields()["chains chosen"] == 4
    assert b.table().empty and b.table().index.name == "num_steps"  # no rounds: an empty table
    with pytest.raises(ValueError, match="one of them"):
        pyrolik.budget(LG, x)
    with pytest.raises(ValueError, match="one of them"):
        pyrolik.budget(LG, x, 0.5, gradients=100)
    with pytest.raises(ValueError, match="positive number of gradient evaluations"):
        pyrolik.budget(LG, x, gradients=0)
    with pytest.raises(ValueError, match="do not pay one step"):
        pyrolik.budget(LG, x, gradients=20)
    # nothing runs: the options of a run are refused, not ignored
    with pytest.raises(ValueError, match=r"runs nothing, so seed=, batch_size= would have no effect"):
        pyrolik.budget(LG, x, gradients=5000, seed=3, batch_size=2)
    with pytest.raises(ValueError, match=r"so init=, model_kwargs= would"):
        pyrolik.budget(LG, x, gradients=5000, init=LG.exact_guide, model_kwargs={"a": 1})


def test_the_search_defaults_to_the_frontiers_chains(seed):
    b = pyrolik.budget(LG, _data(3, seed), pyrolik.Tolerance(2.0, max_steps=50), seed=seed, progress=False)
    assert b.num_chains == 4


@pytest.mark.statistical
def test_a_wasteful_split_says_so_and_the_fix_it_names_works(seed):
    """32 chains of 5 steps: the log-normal model of the chains' weights says 4 chains of 40 steps
    (the same gradients) leave several times less bias, and BDMC on simulated data agrees."""
    from models.oracles.linear_gaussian import LinearGaussian

    lg = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0)
    sim = pyrolik.simulate(lg, 80, data_shape=(5,), seed=seed)
    plain = pyrolik.SMC(resample=None)
    waste = pyrolik.bdmc(lg, sim, num_steps=5, num_chains=32, kernel=plain, seed=seed,
                         progress=False)
    said = [w for w in waste.lower.warnings() if "waste this budget" in w]
    assert said and "pass num_chains=4, num_steps=40" in said[0]
    fixed = pyrolik.bdmc(lg, sim, num_steps=40, num_chains=4, kernel=plain, seed=seed,
                         progress=False)
    assert not any("waste" in w for w in fixed.lower.warnings())
    # the fix at least halves the gap: waste - 2 * fixed is positive by two standard errors
    stderr = math.hypot(waste.gap_stderr, 2 * fixed.gap_stderr)
    assert waste.gap - 2 * fixed.gap > 2 * stderr
