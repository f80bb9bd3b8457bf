"""One run along the distortion path against the linear-Gaussian decoder's closed forms."""

from __future__ import annotations

import dataclasses
import math
import types

import matplotlib
import numpy as np
import pytest
import torch
from pyrolik_models import LinearGaussian, build

import pyrolik
from pyrolik.distortion import (
    OPTIMAL_SIGMA_WARNING,
    DistortionCurve,
    distortion_bdmc,
    rate_distortion,
    sigma_curve,
    squared_error,
)
from pyrolik.distortion.path import merge_grid
from tests.conftest import SEED
from tests.helpers import assert_unbiased, plain
from tests.io.test_export import assert_same_result
from tests.oracles import LG_NARROW

matplotlib.use("Agg")
SIGMAS = [0.05, 0.1, 0.2, 0.5, 1.0]


@pytest.fixture(scope="module")
def lg():
    return LG_NARROW  # the narrow oracle in float64, shared (tests/oracles.py)


@pytest.fixture(scope="module")
def x(lg):
    return lg.sample(3, torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def curve(lg, x):
    torch.set_default_dtype(torch.float64)
    return sigma_curve(lg, x, SIGMAS, num_steps=250, num_chains=200, seed=SEED, progress=False,
                       kernel=plain())  # the chains' own weights are tested one by one


def _exact_rd(lg, x, betas):
    pairs = [lg.rate_distortion(x, float(b)) for b in betas]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def _rate_at(lg, x, distortion: float) -> float:
    """The analytic mean-over-examples RD function at a mean distortion (bisection in log beta)."""
    lo, hi = math.log(1e-6), math.log(1e6)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if float(lg.rate_distortion(x, math.exp(mid))[1].mean()) > distortion:
            lo = mid
        else:
            hi = mid
    return float(lg.rate_distortion(x, math.exp(0.5 * (lo + hi)))[0].mean())


@pytest.mark.statistical
def test_one_run_matches_the_exact_log_p_sigma_at_every_grid_sigma(lg, x, curve):
    assert torch.allclose(curve.sigmas, torch.tensor(sorted(SIGMAS, reverse=True)))
    for j, beta in enumerate(curve.betas):
        exact = lg.log_normalizer(x, float(beta))
        assert_unbiased(curve.log_weights[j], exact)
        # a lower bound: 4 MCSE, as 15 correlated comparisons are made (5 sigmas x 3 examples)
        assert (curve.log_z[j] - exact <= 4 * curve.mcse[j] + 1e-9).all()
        assert ((curve.log_z[j] - exact).abs() <= 4 * curve.mcse[j] + 1e-9).all()
        # log p_sigma against an independent formula: the model with its own sigma set to sigma_j
        s = float(curve.sigmas[j])
        direct = LinearGaussian(lg.W, lg.b, s).exact_log_marginal(x)
        torch.testing.assert_close(curve.log_likelihood[j] - curve.log_z[j], direct - exact)


@pytest.mark.statistical
def test_distortion_and_rate_against_the_linear_vae(lg, x, curve):
    """D_beta within its MCSE of the closed form; the AIS (D, R) points on or above the analytic
    rate-distortion curve (in expectation), and close to it."""
    rate, dist = _exact_rd(lg, x, curve.betas)
    n = x.shape[0]
    # the self-normalised ratio estimator: its delta-method MCSE, on the mean over the examples
    # (one comparison per beta), and a looser per-example check
    se_mean = curve.distortion_mcse.pow(2).sum(-1).sqrt() / n
    assert ((curve.distortion - dist).mean(-1).abs() <= 4 * se_mean).all()
    assert ((curve.distortion - dist).abs() <= 6 * curve.distortion_mcse).all()
    for j, beta in enumerate(curve.betas):
        d_hat, r_hat = float(curve.distortion[j].mean()), float(curve.rate[j].mean())
        se = float(torch.sqrt((curve.mcse[j] ** 2 + beta**2 * curve.distortion_mcse[j] ** 2).sum())
                   / n)
        assert r_hat >= _rate_at(lg, x, d_hat) - 3 * se - 1e-6
        assert abs(r_hat - float(rate[j].mean())) <= 4 * se + 1e-6


@pytest.mark.statistical
def test_reverse_ais_from_exact_draws_brackets_the_analytic_curve(lg, seed):
    """On real data with exact draws of q_beta (the linear-Gaussian oracle): lower <= log Z <= upper,
    and the tangent lines -U - beta D of the reverse bounds lie under the analytic curve."""
    x = lg.sample(30, torch.Generator().manual_seed(7))
    check = [0.05, 0.5]
    g = torch.Generator().manual_seed(seed)
    data = {}
    for s in check:
        q = lg.distortion_posterior(x, 0.5 / s**2)
        eps = torch.randn(q.loc.shape, generator=g, dtype=q.loc.dtype)
        data[s] = (x, {"z": q.loc + (q.scale_tril @ eps.unsqueeze(-1)).squeeze(-1)})
    b = distortion_bdmc(lg, data, sigmas=SIGMAS, check=check, num_steps=150, num_chains=32,
                        seed=seed, progress=False)
    n = len(x)
    for j, s in enumerate(check):
        beta = 0.5 / s**2
        exact = lg.log_normalizer(x, beta)
        lo_mcse, up_mcse = b.results[j].lower.mcse, b.results[j].upper.mcse
        # one-sided on the mean over the examples (per-example MCSEs from few effective chains are
        # themselves noisy; their root-sum-square is the standard error of the mean)
        assert float((b.lower[j] - exact).mean()) <= 3 * float(lo_mcse.pow(2).sum().sqrt()) / n
        assert float((b.upper[j] - exact).mean()) >= -3 * float(up_mcse.pow(2).sum().sqrt()) / n
        assert float((b.upper[j] - b.lower[j]).mean()) < 1.0
        rate, dist = lg.rate_distortion(x, beta)
        # the rate sandwich at the exact distortion (one exact draw per example: its own noise)
        d_err = (b.distortion[j] - dist).std() / math.sqrt(n)
        tol = 4 * beta * float(d_err) + 4 * float(torch.sqrt((up_mcse**2).sum()) / n)
        assert float(b.rate_lower[j].mean()) <= float(rate.mean()) + tol
        assert float(b.rate_upper[j].mean()) >= float(rate.mean()) - tol
        # the line -U - beta D is under the analytic curve everywhere (checked at its tangent point
        # and at two other betas' distortions)
        for other in (0.3 * beta, beta, 3 * beta):
            r_o, d_o = lg.rate_distortion(x, other)
            line = -float(b.upper[j].mean()) - beta * float(d_o.mean())
            assert line <= float(r_o.mean()) + 4 * float(torch.sqrt((up_mcse**2).sum()) / n)


@pytest.mark.statistical
def test_bdmc_on_simulated_data_follows_the_curves_betas(lg, seed):
    b = distortion_bdmc(lg, 12, sigmas=SIGMAS, check=[0.1, 1.0], data_shape=(5,), num_steps=150,
                        num_chains=8, seed=seed, progress=False)
    assert b.betas.tolist() == pytest.approx([0.5 / 0.1**2, 0.5])
    assert (b.gap >= -3 * b.gap_stderr).all()
    for i, beta in enumerate(b.betas):  # the sandwich holds the exact log Z of the simulated data
        exact = lg.log_normalizer(b.x[i], float(beta))
        se_lo = float(b.results[i].lower.mcse.pow(2).sum().sqrt()) / 12
        se_up = float(b.results[i].upper.mcse.pow(2).sum().sqrt()) / 12
        assert float((b.lower[i] - exact).mean()) <= 3 * se_lo
        assert float((b.upper[i] - exact).mean()) >= -3 * se_up
    # the forward run visits the one-run schedule's betas up to its point, rescaled
    grid_b = (0.05 / torch.tensor(sorted(SIGMAS, reverse=True), dtype=torch.float64)) ** 2
    grid_b[-1] = 1.0
    path, steps = merge_grid(grid_b, "geometric", 150)
    j = 3  # sigma 0.1
    cut = path[: int(steps[j]) + 1] / path[steps[j]]
    torch.testing.assert_close(b.results[0].lower.schedule, cut)
    # one pass: sigma 1 (grid point 0) stopped at its point, then stayed (read in its own units);
    # its reverse chains started there
    first = path[: int(steps[0]) + 1] / path[steps[0]]
    visited = b.results[1].lower.schedule
    torch.testing.assert_close(visited[: len(first)], first)
    assert (visited[len(first):] == 1.0).all() and len(visited) == len(cut)
    assert torch.equal(b.results[1].upper.schedule, visited.flip(0))
    for res in b.results:  # weights read in the point's own units, the running ones too
        for leg in (res.lower, res.upper):
            torch.testing.assert_close(leg.trace["log_weight"][-1], leg.log_weights)
            assert float(leg.trace["beta"][-1, 0]) == (1.0 if leg is res.lower else 0.0)
    up = b.results[1].upper  # reverse chains held at their point: no weight yet, exactly
    held = up.trace["beta"][:, 0] == 1.0
    assert held.sum() >= 2 and (up.trace["log_weight"][held] == 0).all()
    assert (up.trace["log_weight"][~held] != 0).all()
    assert b.results[1].lower.settings["steps_to_point"] == len(first) - 1
    # data simulated at sigma: the exact draws' distortion is D sigma^2 on average (pure noise)
    for i, s in enumerate((0.1, 1.0)):
        d = b.distortion[i]
        assert abs(float(d.mean()) - 5 * s * s) < 4 * float(d.std()) / math.sqrt(len(d))
    lo, up = b.log_likelihood_bounds()  # log p_sigma = log Z + (D/2) log(beta / pi)
    torch.testing.assert_close(up - lo, b.upper - b.lower)
    torch.testing.assert_close(lo[1] - b.lower[1], torch.full_like(lo[1], 2.5 * math.log(0.5 / math.pi)))
    assert "gap [nats]" in b.summary().columns
    rate_se = b.summary()["rate stderr"].to_numpy()  # the rate sandwich's error bar over examples
    np.testing.assert_allclose(rate_se, (b.rate_lower.std(-1) / math.sqrt(b.rate_lower.shape[-1])
                                         ).double().numpy())
    gap = b.to_datatree()["bdmc"]["gap"]  # one draw of the estimator, 2 points
    assert gap.dims == ("chain", "draw", "beta") and gap.shape == (1, 1, 2)


def test_squared_error_as_a_user_distortion_is_the_same_path(lg, x, seed):
    """The Gaussian mode and the user mode with the squared error anneal the same densities (up to
    a constant that cancels): same seed, same numbers up to rounding."""
    betas = [0.5, 12.5, 200.0]
    a = rate_distortion(lg, x, betas, num_steps=30, num_chains=4, seed=seed, progress=False)
    b = rate_distortion(lg, x, betas, distortion=squared_error, num_steps=30, num_chains=4,
                        seed=seed, progress=False)
    assert a.mode == "gaussian" and b.mode == "user" and b.sigmas is None
    torch.testing.assert_close(a.log_z, b.log_z, rtol=1e-6, atol=1e-6)
    # the user mode's run estimates log Z, not log p(x): its result says so, with no bound on
    # log p(x) and no bits/dim (it read as a lower bound on log p(x) above the exact value)
    assert (a.ais.bound, a.ais.quantity) == ("lower", "log p(x)")
    log_z = "log Z at its beta (not log p(x))"
    assert (b.ais.bound, b.ais.quantity) == ("lower", log_z)  # a lower bound on log Z
    row = b.ais.summary()
    assert f"{log_z} [nats]" in row and "NLL [bits/dim]" not in row
    # so are distortion_bdmc's runs, and a file saved before quantity existed reads back so
    draws = {k: v[0] for k, v in b.ais.latents.items()}  # a chain's final states: any draws do here
    check = distortion_bdmc(lg, {12.5: (x, draws)}, betas=betas, check=[12.5],
                            distortion=squared_error, num_steps=4, num_chains=2, progress=False)
    assert {(r.lower.quantity, r.upper.quantity) for r in check.results} == {(log_z, log_z)}
    assert "log p(x) [nats]" not in check.results[0].summary()  # the gap row too
    old = b.to_datatree()
    del old["ais"].attrs["quantity"]
    assert pyrolik.io.export.from_datatree(old).ais.quantity == log_z
    with pytest.raises(ValueError, match="cannot concat an estimate of log Z at its beta"):
        pyrolik.concat(b.ais, a.ais)
    with pytest.raises(ValueError, match="the results estimate different quantities"):
        pyrolik.compare(a.ais, b.ais)
    torch.testing.assert_close(a.rate, b.rate, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="needs the Gaussian mode"):
        b.best_sigma()


def _fake(log_lik: torch.Tensor, sigmas) -> DistortionCurve:
    """A curve whose log p_sigma equals ``log_lik`` (m, N) exactly (one chain)."""
    betas = 0.5 / torch.tensor(sigmas, dtype=torch.float64) ** 2
    const = 0.5 * 4 * torch.log(betas / math.pi)
    lw = (log_lik - const.unsqueeze(-1)).unsqueeze(1)
    return DistortionCurve("gaussian", betas, lw, torch.ones_like(lw), 4, torch.zeros(3, 4),
                           torch.linspace(0, 1, 5), torch.arange(len(sigmas)) + 2, float(betas[-1]))


def test_best_fixed_sigma_and_per_example_sigma():
    sigmas = [0.4, 0.2, 0.1]
    ll = torch.tensor([[1.0, 5.0, 2.0],   # sigma 0.4
                       [3.0, 4.0, 2.5],   # sigma 0.2
                       [2.0, 0.0, 9.0]],  # sigma 0.1
                      dtype=torch.float64)
    c = _fake(ll, sigmas)
    torch.testing.assert_close(c.log_likelihood, ll)
    best = c.best_sigma()
    assert best.sigma == pytest.approx(0.1) and best.index == 2  # means 8/3, 9.5/3, 11/3
    opt = c.optimal_sigma(fixed_sigma=0.2)
    assert opt.sigma.tolist() == pytest.approx([0.2, 0.4, 0.1])
    assert opt.log_likelihood.tolist() == [3.0, 5.0, 9.0]
    assert opt.improvement.tolist() == [0.0, 1.0, 6.5]
    assert opt.warning == OPTIMAL_SIGMA_WARNING and "not a generative model" in opt.warning
    assert "upper bound" in opt.summary().index[0]
    assert c.optimal_sigma().fixed_sigma == pytest.approx(0.1)
    with pytest.raises(ValueError, match="not on the grid"):
        c.optimal_sigma(fixed_sigma=0.3)
    # an example whose density is not finite is flagged and left out of the means
    bad = ll.clone()
    bad[1, 2] = float("nan")
    c = _fake(bad, sigmas)
    assert c.failed.tolist() == [False, False, True]
    torch.testing.assert_close(c.mean_log_likelihood, ll[:, :2].mean(-1))
    assert c.best_sigma().sigma == pytest.approx(0.2)  # means 3, 3.5, 1
    assert any("1 of 3 examples failed" in w for w in c.warnings())
    assert float(c.summary()["log p_sigma(x) [nats]"][1]) == pytest.approx(3.5)


def test_export_round_trip_and_plots(curve, tmp_path):
    tree = curve.to_datatree()
    ds = curve.to_dataset()  # the curve group, its one draw squeezed
    assert ds["log_z"].dims == ("beta", "example") and ds["sigma"].dims == ("beta",)
    assert tree["curve"]["log_z"].dims == ("chain", "draw", "beta", "example")
    # the grid comes back as typed, so that selecting a given value works without method=
    assert sorted(ds["sigma"].values.tolist()) == SIGMAS
    assert ds["log_z"].swap_dims(beta="sigma").sel(sigma=0.1).shape == (3,)
    assert "sigma" in ds.coords  # a coordinate along beta: select a sigma by value (docs/sigma_and_rd.md)
    by_sigma = ds["log_likelihood_mean"].swap_dims(beta="sigma")
    assert by_sigma.sel(sigma=float(curve.sigmas[0]), method="nearest").item() == \
        pytest.approx(float(curve.log_likelihood[0].mean()))
    torch.testing.assert_close(torch.as_tensor(ds["log_likelihood"].values), curve.log_likelihood)
    torch.testing.assert_close(torch.as_tensor(ds["rate"].values), curve.rate)
    torch.testing.assert_close(torch.as_tensor(ds["stderr"].values), curve.stderr)
    # each chain's weight by block: chain c * M + particle of the run
    lw = tree["particles"]["log_weight"]
    assert lw.dims == ("beta", "chain", "particle", "example")
    assert torch.equal(torch.as_tensor(lw.values).flatten(1, 2), curve.log_weights)
    path = pyrolik.save(tree, tmp_path / "curve.nc")
    import xarray as xr

    with xr.open_datatree(path) as back:
        back.load()
        again = pyrolik.io.export.from_datatree(back)
    assert_same_result(again, curve)
    idata = curve.to_inference_data()
    assert {"curve", "particles", "observed_data", "posterior", "ais_annealing"} <= set(
        idata.groups())
    assert curve.summary().shape[0] == len(SIGMAS)
    from pyrolik.distortion import plot_optimal_sigma, plot_rate_distortion, plot_sigma_curve

    assert plot_sigma_curve(curve).get_xscale() == "log"
    assert plot_optimal_sigma(curve).lines
    assert plot_rate_distortion(curve, analytic=([1.0, 2.0], [3.0, 1.0])).lines


def test_saved_distortion_results_open_whole_in_arviz(curve, lg, tmp_path):
    """``pyrolik.save`` flattens every nested export (the curve's ``ais`` run, each point's BDMC),
    so ``az.from_netcdf`` sees every group; the flat tree and ``to_inference_data()`` read back
    whole (they lost ``ais`` and the points without a word)."""
    import arviz as az
    import xarray as xr

    from pyrolik.io.export import from_datatree

    check = distortion_bdmc(lg, 2, sigmas=[0.2, 0.5], data_shape=(lg.data_dim,), num_steps=4,
                            num_chains=2, seed=0, progress=False)
    check = dataclasses.replace(check, step_sizes=None)  # the one pass's pilot table: not saved
    for r in (curve, check):
        idata = r.to_inference_data()
        assert_same_result(from_datatree(idata), r)
        path = pyrolik.save(r, tmp_path / f"{type(r).__name__}.nc")
        with az.rc_context({"data.load": "eager"}):
            assert set(az.from_netcdf(str(path)).groups()) == set(idata.groups())
        with xr.open_datatree(path) as tree:
            assert_same_result(from_datatree(tree.load()), r)
    assert {"beta_0_lower_posterior", "beta_1_upper_evidence"} <= set(check.to_inference_data().groups())


def test_log_axes_are_labelled_with_plain_numbers_thinned_by_span():
    """matplotlib's minor labels (3 x 10^-1, 4 x 10^-1, ...) overlapped on 1-2 decade axes."""
    import matplotlib.pyplot as plt

    from pyrolik.diagnostics.plots import plain_log_axis  # what the distortion plots call

    shown = {}
    for lo, hi in ((0.3, 5.9), (0.01, 1000.0)):
        fig, ax = plt.subplots()
        plain_log_axis(ax, "x")
        ax.plot([lo, hi], [1.0, 0.0])
        fig.canvas.draw()
        shown[lo] = [t.get_text() for t in [*ax.get_xticklabels(), *ax.get_xticklabels(minor=True)]
                     if t.get_text() and lo <= t.get_position()[0] <= hi]
        plt.close(fig)
    assert sorted(shown[0.3], key=float) == ["0.3", "0.5", "1", "2", "3", "5"]
    assert sorted(shown[0.01], key=float) == ["0.01", "0.1", "1", "10", "100", "1000"]


def test_a_grid_comes_back_as_typed(lg, x):
    betas = [0.5, 2.0, 12.5, 50.0]  # 50.0 came back as 49.99999999999999 (through a sigma)
    rd = rate_distortion(lg, x, betas, num_steps=4, num_chains=2, seed=0, progress=False)
    assert rd.betas.tolist() == betas and rd.to_dataset()["rate"].sel(beta=50.0).shape == (3,)
    check = distortion_bdmc(lg, 2, betas=betas, data_shape=(lg.data_dim,), num_steps=4,
                            num_chains=2, seed=0, progress=False)
    assert check.betas.tolist() == betas
    sigmas = [0.5, 0.315, 0.062]  # 0.31500000000000006 and 0.06199999999999999 before
    sc = sigma_curve(lg, x, sigmas, num_steps=4, num_chains=2, seed=0, progress=False)
    assert sc.sigmas.tolist() == sigmas and sc.to_dataset()["log_z"].swap_dims(beta="sigma").sel(
        sigma=0.062).shape == (3,)


def test_refusals(lg, x):
    with pytest.raises(ValueError, match="is Bernoulli, not Normal"):
        sigma_curve(build("digits-iwae"), torch.zeros(2, 64), [0.1], num_steps=2, num_chains=1,
                    progress=False)
    with pytest.raises(ValueError, match="positive finite"):
        sigma_curve(lg, x, [0.1, -1.0], num_steps=2, num_chains=1, progress=False)
    with pytest.raises(ValueError, match="must not repeat"):
        sigma_curve(lg, x, [0.1, 0.1], num_steps=2, num_chains=1, progress=False)
    with pytest.raises(ValueError, match=r"1-D list of numbers, got shape \(2, 1\)"):
        sigma_curve(lg, x, [[0.1], [0.2]], num_steps=2, num_chains=1, progress=False)
    with pytest.raises(ValueError, match="not a noise model"):
        distortion_bdmc(lg, 3, betas=[1.0, 2.0], distortion=squared_error, data_shape=(5,),
                        num_steps=2, num_chains=1, progress=False)
    with pytest.raises(ValueError, match="not a point of the grid"):
        distortion_bdmc(lg, 3, sigmas=[0.1, 0.2], check=[0.3], data_shape=(5,), num_steps=2,
                        num_chains=1, progress=False)
    with pytest.raises(ValueError, match="exactly one of sigmas= or betas="):
        distortion_bdmc(lg, 3, data_shape=(5,), num_steps=2, num_chains=1)
    # data: a number of examples to simulate (with data_shape), or exact draws at every point
    for data, shape in ((3, None), (True, (5,)), ([(x, None)], (5,))):
        with pytest.raises(ValueError, match="a number of examples to simulate"):
            distortion_bdmc(lg, data, sigmas=[0.1, 0.2], data_shape=shape, num_steps=2,
                            num_chains=1, progress=False)
    with pytest.raises(ValueError, match="at every checked point"):
        distortion_bdmc(lg, {0.1: (x, None)}, sigmas=[0.1, 0.2], num_steps=2, num_chains=1,
                        progress=False)
    # pyrolik.ais's default schedule is built per batch from the pilot: the grid needs fixed steps
    for name in ("auto", "adaptive"):
        with pytest.raises(ValueError, match=f"schedule='{name}' is not available on the distortion"):
            sigma_curve(lg, x, [0.1, 0.2], num_steps=2, num_chains=1, schedule=name, progress=False)
        with pytest.raises(ValueError, match="fixed steps|same steps"):
            rate_distortion(lg, x, [1.0, 2.0], num_steps=2, num_chains=1, schedule=name,
                            progress=False)


def test_merged_schedule_hits_every_grid_point():
    grid = torch.tensor([1e-3, 0.03, 0.25, 1.0], dtype=torch.float64)
    for base in ("geometric", "sigmoid", "linear", torch.linspace(0, 1, 11, dtype=torch.float64)):
        path, steps = merge_grid(grid, base, None if isinstance(base, torch.Tensor) else 40)
        assert path[0] == 0 and path[-1] == 1 and (path[1:] > path[:-1]).all()
        assert torch.equal(path[steps], grid)
    path, _ = merge_grid(grid, "geometric", 40)
    assert float(path[1]) == pytest.approx(1e-5)  # geometric starts below the first grid point


@pytest.mark.statistical
def test_a_poor_run_stays_above_the_rate_distortion_curve(lg, x, seed):
    """With 3 annealing steps (of the kernel of Wu et al.) the estimates are far from the curve, but on its upper side (the
    bound does not need a converged run)."""
    betas = [0.5, 5.0, 50.0]
    poor = rate_distortion(lg, x, betas, num_steps=3, num_chains=64, seed=seed, progress=False,
                           kernel=pyrolik.HMC(num_leapfrog=10, momentum_persistence=0.0))
    rate, _ = _exact_rd(lg, x, poor.betas)
    n = x.shape[0]
    gaps = []
    for j, beta in enumerate(poor.betas):
        d_hat, r_hat = float(poor.distortion[j].mean()), float(poor.rate[j].mean())
        se = float(torch.sqrt((poor.mcse[j] ** 2 + beta**2 * poor.distortion_mcse[j] ** 2).sum())
                   / n)
        above = r_hat - _rate_at(lg, x, d_hat)
        assert above >= -3 * se - 1e-6
        gaps.append(above)
    assert max(gaps) > 0.5  # the run is poor: the test is not about a converged estimate


# ArviZ 0.23's to_dataframe sorts in place and merges with copy=, which pandas 3.1 deprecates
@pytest.mark.filterwarnings("ignore:The inplace keyword in DataFrame.sort_index")
@pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")
def test_arviz_tables_a_curve_and_its_bdmc_and_both_read_back(lg, curve, seed, tmp_path):
    """``idata.to_dataframe()`` with ArviZ's defaults on a curve's export and on a distortion BDMC's:
    the estimates (one draw) on the row of chain 0, draw 0; both files read back field by field."""
    df = curve.to_inference_data().to_dataframe()
    assert {"chain", "draw"} <= set(df.columns)
    one = curve.to_inference_data().to_dataframe(groups="curve")
    cols = [c for c in one.columns if isinstance(c, tuple) and c[0].startswith("log_likelihood[")]
    assert len(one) == 1 and len(cols) == curve.log_likelihood.numel()
    np.testing.assert_array_equal(np.sort(one[cols].to_numpy().ravel()),
                                  np.sort(curve.log_likelihood.numpy().ravel()))
    b = distortion_bdmc(lg, 3, sigmas=[0.1, 1.0], data_shape=(5,), num_steps=10, num_chains=4,
                        seed=seed, progress=False)
    idata = b.to_inference_data()
    assert {"bdmc", "beta_0_evidence", "beta_1_lower_posterior"} <= set(idata.groups())
    bounds = idata.to_dataframe(groups="bdmc")
    cols = [c for c in bounds.columns if isinstance(c, tuple) and c[0].startswith("lower[")]
    np.testing.assert_array_equal(np.sort(bounds[cols].to_numpy().ravel()),
                                  np.sort(b.lower.numpy().ravel()))
    assert {"chain", "draw"} <= set(idata.to_dataframe().columns)
    again = pyrolik.load(pyrolik.save(b, tmp_path / "b.nc"))
    assert_same_result(again, dataclasses.replace(b, step_sizes=None))  # the table is not saved
    assert again.seed == seed and [x.shape for x in again.x] == [(3, 5), (3, 5)]


def test_a_resampled_curve_has_the_error_bars_of_its_run(lg, x, seed, tmp_path):
    """Under the default SMC (8 chains: 2 islands) the last grid point is the AIS run itself, so its
    MCSE and ESS are the run's (over the islands and the chains' starting ancestors), not those of
    independent chains; plain AIS keeps the independent chains' formulas."""
    c = sigma_curve(lg, x, [1.0, 0.3], num_steps=40, num_chains=8, seed=seed, progress=False)
    assert c.ais.settings["islands"] == 2 and c.ais.trace["ancestor"].shape == (2, 8, 3)
    torch.testing.assert_close(c.mcse[-1], c.ais.mcse.double())
    torch.testing.assert_close(c.ess[-1], c.ais.ess.double())
    again = pyrolik.load(pyrolik.save(c, tmp_path / "curve.nc"))
    assert torch.equal(again.mcse, c.mcse) and torch.equal(again.distortion_mcse, c.distortion_mcse)
    p = sigma_curve(lg, x, [1.0, 0.3], num_steps=40, num_chains=8, seed=seed, progress=False,
                    kernel=plain())
    assert "ancestor" not in p.ais.trace
    torch.testing.assert_close(p.mcse, pyrolik.ops.stats.mcse_log_mean_exp(p.log_weights, dim=1))


def test_the_curves_blocks_of_chains_are_its_runs(lg, x, seed):
    """The particles group splits the chains as the run's export does: whole islands per block
    (16 chains in 2 islands: 2 blocks, not the 4 of independent chains)."""
    c = sigma_curve(lg, x, [1.0, 0.3], num_steps=10, num_chains=16, seed=seed, progress=False,
                    kernel=pyrolik.SMC(pyrolik.HMC(), islands=2))
    tree = c.to_datatree()
    assert tree["particles"].sizes["chain"] == tree["ais"]["particles"].sizes["chain"] == 2


def test_the_distortion_error_bar_of_islands_by_hand():
    """Two islands of two chains: the delta method over the islands' weighted means, with the
    jackknife's factor G / (G - 1) for G = 2 islands."""
    lw = torch.log(torch.tensor([1.0, 3.0, 2.0, 2.0], dtype=torch.float64)).view(1, 4, 1)
    d = torch.tensor([1.0, 2.0, 4.0, 6.0], dtype=torch.float64).view(1, 4, 1)
    run = types.SimpleNamespace(trace={"ancestor": torch.tensor([0, 0, 2, 3]).view(1, 4, 1)},
                                settings={"islands": 2})
    c = DistortionCurve(mode="user", betas=torch.tensor([1.0], dtype=torch.float64),
                        log_weights=lw, distortions=d, num_values=1, x=torch.zeros(1, 1),
                        schedule=torch.tensor([0.0, 1.0]), record_steps=torch.tensor([1]),
                        beta_max=1.0, ais=run)
    w = torch.tensor([1.0, 3.0, 2.0, 2.0]) / 8
    total = float((w * d.flatten()).sum())  # 0.125 + 0.75 + 1 + 1.5
    islands = [(float(w[:2].sum()), float((w[:2] * d.flatten()[:2]).sum() / w[:2].sum())),
               (float(w[2:].sum()), float((w[2:] * d.flatten()[2:]).sum() / w[2:].sum()))]
    want = math.sqrt(2 * sum((wi * (di - total)) ** 2 for wi, di in islands))
    assert float(c.distortion[0, 0]) == pytest.approx(total)
    assert float(c.distortion_mcse[0, 0]) == pytest.approx(want)


def test_the_curve_plots_refuse_other_results(curve):
    from pyrolik.distortion import plots
    from pyrolik.distortion.bounds import DistortionBDMC

    sandwich = DistortionBDMC.__new__(DistortionBDMC)  # its type is what the plots look at
    for draw in (plots.plot_sigma_curve, plots.plot_optimal_sigma, plots.plot_rate_distortion):
        with pytest.raises(TypeError, match=r"got DistortionBDMC \(a distortion_bdmc result is "
                                            r"drawn beside its curve"):
            draw(sandwich)
        with pytest.raises(TypeError, match="got AISResult"):
            draw(curve.ais)
    with pytest.raises(TypeError, match="bdmc= takes the result of pyrolik.distortion_bdmc"):
        plots.plot_rate_distortion(curve, bdmc=curve)
