"""sigma_curve / rate_distortion (num_steps=Tolerance): the base budget chosen by BDMC at every grid point on
simulated data, against the linear-Gaussian decoder's exact log p_sigma(x) and log Z_beta(x)."""

from __future__ import annotations

import json

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyrolik_models import LinearGaussian, build

import pyrolik
from pyrolik.distortion import (
    distortion_bdmc,
    distortion_model,
    rate_distortion,
    sigma_curve,
    squared_error,
)
from pyrolik.distortion.path import grid_from_sigmas, merge_grid
from pyrolik.infer.tolerance import Budget, BudgetWarning
from tests.helpers import plain

# posterior sd about 0.1 at sigma 0.1: the geometric path needs a hundred or more base steps
LG = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0, dtype=torch.float64)
SIGMAS = [0.1, 0.3, 1.0]


def _data(n: int, seed: int, shift: float = 0.0):
    x = pyrolik.simulate(LG, n, data_shape=(5,), seed=seed + 5).x
    return x + LG.W @ torch.full((2,), shift)


def _mean_se(curve, j: int) -> float:
    """Standard error of the mean over the examples of the estimate at grid point j (MCSE)."""
    return float(curve.mcse[j].pow(2).sum().sqrt() / curve.num_examples)


@pytest.mark.statistical
def test_sigma_curve_within_tolerance_of_exact_at_every_sigma(seed):
    tol = 0.5
    x = _data(10, seed)
    c = sigma_curve(LG, x, SIGMAS, num_steps=pyrolik.Tolerance(tol), num_chains=4, seed=seed, progress=False)
    b = c.budget
    assert b.converged and b.rounds[-1].gap_upper <= tol
    assert [rd.num_steps for rd in b.rounds] == [25 * 2**i for i in range(len(b.rounds))]
    assert all(rd.gap_upper > tol for rd in b.rounds[:-1])  # stopped at the first good round
    # each round is decided by its worst grid point, one of the grid's
    assert {rd.point for rd in b.rounds} <= {"sigma 0.1", "sigma 0.3", "sigma 1"}
    assert c.settings["base_num_steps"] == b.num_steps
    for j, s in enumerate(c.sigmas.tolist()):
        exact = LinearGaussian(LG.W, LG.b, s).exact_log_marginal(x)  # the model at noise sigma
        err = float((c.log_likelihood[j] - exact).mean())
        se = _mean_se(c, j)
        # a lower bound whose bias the worst point's gap bounds, up to the curve's own MC noise
        assert -tol - 3 * se <= err <= 3 * se, (s, err, se)
    # the same as a plain call with that budget and seed: the search changes only num_steps
    plain = sigma_curve(LG, x, SIGMAS, num_steps=b.num_steps, num_chains=4, seed=seed,
                        progress=False)
    assert torch.equal(plain.log_weights, c.log_weights)
    assert b.num_simulated == 16 * 3  # 16 per grid point
    assert b.check.num_examples == 10 and b.check.num_steps == b.num_steps // 2
    assert b.check.point in {"sigma 0.1", "sigma 0.3", "sigma 1"}
    s = c.ais.settings
    assert b.final_gradient_evals == 10 * (s["gradient_evals_per_example"]
                                           + s["pilot_gradient_evals_per_example"])
    assert b.cost_ratio > 1 and b.time_ratio > 1


@pytest.mark.statistical
def test_rate_distortion_within_tolerance_of_exact_log_z(seed):
    tol = 0.5
    x = _data(10, seed)
    betas = [0.5, 5.0, 50.0]
    rd = rate_distortion(LG, x, betas, num_steps=pyrolik.Tolerance(tol), num_chains=4, seed=seed, progress=False)
    b = rd.budget
    assert b.converged and b.rounds[-1].gap_upper <= tol
    assert {r.point for r in b.rounds} <= {"beta 0.5", "beta 5", "beta 50"}
    for j, beta in enumerate(rd.betas.tolist()):
        err = float((rd.log_z[j] - LG.log_normalizer(x, beta)).mean())
        se = _mean_se(rd, j)
        assert -tol - 3 * se <= err <= 3 * se, (beta, err, se)


def test_budget_in_summary_warnings_and_export(seed, tmp_path):
    x = _data(6, seed)
    c = sigma_curve(LG, x, SIGMAS, num_steps=pyrolik.Tolerance(5.0), num_chains=2, seed=seed, progress=False)
    table = c.summary()
    assert (table["steps chosen"] == c.budget.num_steps).all()
    assert (table["tolerance [nats]"] == 5.0).all()
    assert f"at {c.budget.rounds[-1].point}" in table["BDMC gap (simulated)"].iloc[0]
    assert "steps chosen" in str(table)
    tree = c.to_datatree()
    stored = json.loads(tree.attrs["budget"])
    assert stored["num_steps"] == c.budget.num_steps
    assert [r["point"] for r in stored["rounds"]] == [r.point for r in c.budget.rounds]
    assert Budget.from_dict(stored) == c.budget
    path = tmp_path / "curve.nc"
    pyrolik.save(c, path)
    back = pyrolik.load(path)
    assert back.budget == c.budget and torch.equal(back.log_weights, c.log_weights)
    # a curve without a Tolerance has no budget, in the file as in memory
    plain = sigma_curve(LG, x, SIGMAS, num_steps=5, num_chains=2, seed=seed, progress=False)
    assert plain.budget is None and "budget" not in plain.to_datatree().attrs
    pyrolik.save(plain, tmp_path / "plain.nc")
    assert pyrolik.load(tmp_path / "plain.nc").budget is None


def test_cap_before_tolerance_warns_and_keeps_the_curve(seed):
    x = _data(4, seed)
    with pytest.warns(BudgetWarning) as record:  # the check on x may warn too, at this tolerance
        c = sigma_curve(LG, x, SIGMAS, num_steps=pyrolik.Tolerance(1e-3, max_steps=50), num_chains=2, seed=seed,
                        progress=False)
    cap = [str(w.message) for w in record if "reached max_steps=50" in str(w.message)]
    assert len(cap) == 1 and cap[0].startswith("sigma_curve(num_steps=Tolerance)")
    # the warnings point at the user's call, not into pyrolik
    assert all(w.filename == __file__ for w in record if issubclass(w.category, BudgetWarning))
    assert "at sigma" in cap[0] and "raise max_steps or use more chains" in cap[0]
    assert "init=guide" not in cap[0]  # the curve has no encoder path
    assert not c.budget.converged and c.budget.num_steps == 50
    assert c.settings["base_num_steps"] == 50 and torch.isfinite(c.log_z).all()
    assert any("max_steps=50" in w for w in c.warnings())
    assert "cap" in str(c.summary())


@pytest.mark.statistical
def test_real_data_harder_than_simulated_warns(seed):
    # x far out in the prior's tail (20 prior sd): the simulated data close the gap at every sigma,
    # these do not, and the doubling check on x says so, naming the grid point. The check is
    # conservative: with 10 examples x 4 chains its noise hid a 4-nat error on some seeds
    x = _data(30, seed, shift=20.0)
    with pytest.warns(BudgetWarning, match=r"estimate at sigma \S+ rose by .* not converged"):
        c = sigma_curve(LG, x, SIGMAS, num_steps=pyrolik.Tolerance(0.5), num_chains=8, seed=seed, progress=False,
                        kernel=plain())  # SMC's islands converge on these x: plain AIS does not
    j = [f"sigma {s:g}" for s in c.sigmas.tolist()].index(c.budget.check.point)
    exact = LinearGaussian(LG.W, LG.b, float(c.sigmas[j])).exact_log_marginal(x)
    assert float((c.log_likelihood[j] - exact).mean()) < -0.5  # the warning was right


@pytest.mark.parametrize("kwargs, match", [
    ({"num_steps": pyrolik.Tolerance(0.3), "schedule": torch.linspace(0, 1, 11)},
     "schedule tensor.*e.g. 'geometric'"),
    ({"num_steps": pyrolik.Tolerance(0.3), "num_chains": 0}, "num_chains"),
    ({"num_steps": pyrolik.Tolerance(0.3), "schedule": "auto"},
     "not available on the distortion path"),
    ({}, r"num_steps is required.*num_steps=pyrolik.Tolerance"),
])
def test_bad_tolerance_arguments(kwargs, match):
    # a bad number of nats or cap is refused by pyrolik.Tolerance itself (tests/infer/test_tolerance.py)
    kwargs = {"num_chains": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        sigma_curve(LG, _data(3, 0), SIGMAS, progress=False, **kwargs)
    with pytest.raises(ValueError, match=match):
        rate_distortion(LG, _data(3, 0), [0.5, 5.0], progress=False, **kwargs)


def test_the_curves_refuse_a_checkpoint_block(tmp_path):
    """The curves and distortion_bdmc do not checkpoint: a pyrolik.checkpoint() block around them
    is refused, naming the estimator, and no file is written."""
    x, path = _data(3, 0), tmp_path / "c.pt"
    calls = {
        "sigma_curve": lambda: sigma_curve(LG, x, SIGMAS, num_steps=5, num_chains=2,
                                           progress=False),
        "rate_distortion": lambda: rate_distortion(LG, x, [0.5, 5.0], num_steps=5, num_chains=2,
                                                   progress=False),
        "distortion_bdmc": lambda: distortion_bdmc(LG, 2, sigmas=SIGMAS,
                                                   data_shape=(5,), num_steps=5, num_chains=2,
                                                   progress=False),
    }
    for name, call in calls.items():
        with pyrolik.checkpoint(path), pytest.raises(
                ValueError, match=rf"^{name} does not run in a pyrolik.checkpoint\(\) block"):
            call()
        call()  # outside the block it runs
    assert not path.exists()


def test_a_curve_with_a_tolerance_is_refused_before_its_search(tmp_path, monkeypatch):
    def no_search(*args, **kwargs):
        raise AssertionError("the budget search ran before the refusal")

    monkeypatch.setattr("pyrolik.distortion.anneal.curve_search", no_search)
    with pyrolik.checkpoint(tmp_path / "run.pt"), pytest.raises(
            ValueError, match=r"^sigma_curve does not run in a pyrolik.checkpoint"):
        pyrolik.sigma_curve(LG, _data(3, 0), SIGMAS, num_steps=pyrolik.Tolerance(0.3),
                            num_chains=2, progress=False)


def test_user_distortion_and_non_gaussian_sites_are_refused():
    with pytest.raises(ValueError, match="user distortion is not a noise model.*pass num_steps="):
        rate_distortion(LG, _data(3, 0), [0.5, 5.0], distortion=squared_error,
                        num_steps=pyrolik.Tolerance(0.3), num_chains=2, progress=False)
    # named as without a Tolerance, not as a model that cannot be simulated
    with pytest.raises(ValueError, match="is Bernoulli, not Normal"):
        sigma_curve(build("digits-iwae"), torch.zeros(2, 64), [0.1], num_steps=pyrolik.Tolerance(0.3), num_chains=1,
                    progress=False)


def test_model_that_cannot_be_simulated():
    def rescaled(x):  # observes a function of x, not entries of it: x cannot be assembled
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(()), 1.0))
            pyro.sample("a", dist.Normal(z.unsqueeze(-1).expand(-1, 2), 1.0).to_event(1),
                        obs=(x - 1) / 2)

    with pytest.raises(ValueError, match="cannot be simulated.*Pass num_steps= instead"):
        sigma_curve(rescaled, torch.zeros(4, 2), [0.1, 0.5], num_steps=pyrolik.Tolerance(0.3), num_chains=2,
                    progress=False)
    # the fix the message names works
    assert sigma_curve(rescaled, torch.zeros(4, 2), [0.1, 0.5], num_steps=5, num_chains=2,
                       progress=False).log_likelihood.shape == (2, 4)


def test_progress_shows_the_search(capsys):
    sigma_curve(LG, _data(3, 0), SIGMAS, num_steps=pyrolik.Tolerance(5.0), num_chains=2, seed=0, progress=True)
    assert "choosing num_steps (tolerance 5 nats)" in capsys.readouterr().err


def test_pilot_tables_are_reused_between_rounds(seed):
    # distortion_bdmc(step_sizes=): given an earlier call's table (on the same data and points),
    # the pass runs no pilot; each point's result holds its rows, read in its own units
    sims = {s: pyrolik.simulate(distortion_model(LG, sigma=s), 4, data_shape=(5,),
                                seed=seed + i) for i, s in enumerate(SIGMAS)}
    kw = dict(sigmas=SIGMAS, num_chains=2, progress=False)
    first = distortion_bdmc(LG, sims, num_steps=30, seed=seed, **kw)
    again = distortion_bdmc(LG, sims, num_steps=60, seed=seed + 1, step_sizes=first.step_sizes, **kw)
    assert torch.equal(again.step_sizes.log_step_size, first.step_sizes.log_step_size)
    for i, res in enumerate(again.results):  # each point's rows, cut at its point, in its units
        stop, table = res.lower.settings["stop"], res.lower.step_sizes
        cut = first.step_sizes.rows(4 * i, 4 * (i + 1)).cut(stop)
        torch.testing.assert_close(table.betas * stop, cut.betas)
        assert table.betas[0] == 0 and table.betas[-1] == 1
        assert torch.equal(table.log_step_size, cut.log_step_size)
        torch.testing.assert_close(table.log_ratio_var, stop**2 * cut.log_ratio_var, equal_nan=True)
    # the same call without the table runs its own pilot: another table, other bounds
    fresh = distortion_bdmc(LG, sims, num_steps=60, seed=seed + 1, **kw)
    assert not torch.equal(fresh.step_sizes.log_step_size, again.step_sizes.log_step_size)
    assert not torch.equal(fresh.lower, again.lower)
    with pytest.raises(ValueError, match="step_sizes must be the pilot table"):
        distortion_bdmc(LG, sims, num_steps=30, step_sizes=first.results[0].lower.step_sizes, **kw)
    # the search: when the rounds at 25 and 50 steps have pilots of the same length, the round at
    # 50 runs none, and costs only its chains' evaluations: every point's examples make the whole
    # path's transitions (one pass)
    with pytest.warns(BudgetWarning, match="reached max_steps=50"):
        c = sigma_curve(LG, _data(3, 0), SIGMAS, num_steps=pyrolik.Tolerance(1e-3, max_steps=50), num_chains=2,
                        seed=seed, progress=False)
    r50 = c.budget.rounds[1]
    assert r50.num_steps == 50
    grid, _ = grid_from_sigmas(SIGMAS)
    kernel = pyrolik.HMC()
    L, a = kernel.num_leapfrog, kernel.adaptation
    t25, t50 = (int(merge_grid(grid / grid[-1], "geometric", t)[1][-1]) for t in (25, 50))
    assert a.pilot_steps(t25) == a.pilot_steps(t50)
    expected = len(SIGMAS) * 16 * 2 * (t50 * L + 1) * 2  # forward and reverse, 16 examples, 2 chains
    assert r50.gradient_evals == expected
