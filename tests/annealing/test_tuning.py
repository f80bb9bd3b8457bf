"""Adaptation strategies (pyrolik.annealing.tuning): chosen in one place, read by the engine."""

from __future__ import annotations

import pytest
import torch

from pyrolik.annealing import engine
from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.step_sizes import StepSizes
from pyrolik.annealing.tuning import Fixed, Online, Pilot, RowTuning, TableTuning, from_settings


def test_tunings_give_the_parameters_of_their_strategy():
    like = torch.zeros(3)
    fixed = Fixed(0.2).tuning(None, 2, 3, like)
    assert torch.allclose(fixed.params(torch.full((6,), 0.5)).step_size, torch.full((6,), 0.2))
    info = engine.AISInfo(torch.ones(6), torch.ones(6, dtype=torch.bool),
                          torch.zeros(6, dtype=torch.bool), torch.zeros(6), torch.ones(6))
    assert fixed.update(info) is fixed
    online = Online(0.2, target_accept=0.6, gain=0.5).tuning(None, 2, 3, like)
    moved = online.update(info)
    assert isinstance(moved, RowTuning)
    torch.testing.assert_close(moved.log_step_size, online.log_step_size + 0.5 * (1 - 0.6))
    assert torch.equal(online.restore(moved.state()).log_step_size, moved.log_step_size)
    table = StepSizes(torch.tensor([0.0, 1.0]), torch.log(torch.tensor([[0.1, 0.2, 0.3],
                                                                         [0.4, 0.5, 0.6]])))
    tab = Pilot().tuning(table, 2, 3, like)
    assert isinstance(tab, TableTuning) and tab.update(info) is tab
    eps = tab.params(torch.ones(6)).step_size  # per row (chain-major)
    torch.testing.assert_close(eps, torch.tensor([0.4, 0.5, 0.6, 0.4, 0.5, 0.6]))
    # rows at their own betas (examples with their own stops) read the table there
    eps = tab.params(torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 1.0])).step_size
    torch.testing.assert_close(eps, torch.tensor([0.4, 0.2, 0.3 ** 0.5 * 0.6 ** 0.5, 0.1, 0.5,
                                                  0.6]))


def test_the_strategy_is_chosen_in_one_place():
    assert isinstance(HMC().adaptation, Pilot) and HMC().adapt == "pilot"
    assert isinstance(HMC(adapt="online").adaptation, Online)
    assert isinstance(HMC(adapt=None, step_size=0.3).adaptation, Fixed)
    assert HMC(adapt=Online(0.05)).step_size == 0.05
    kernel = HMC(num_leapfrog=4, step_size=0.2, mass_matrix=True, pilot_chains=3)
    assert HMC(**kernel.to_dict()) == kernel and repr(kernel).startswith("HMC(num_leapfrog=4")
    assert from_settings("pilot", pilot_chains=3).chains == 3
    with pytest.raises(ValueError, match="mass_matrix=True needs adapt='pilot'"):
        HMC(adapt="online", mass_matrix=True)
    with pytest.raises(ValueError, match="adapt must be one of"):
        HMC(adapt="sometimes")
    with pytest.raises(AttributeError):
        kernel.num_leapfrog = 3  # frozen


def test_the_pilot_records_the_variance_of_the_log_likelihood_per_temperature(seed):
    """Known answer at beta = 0, where the pilot's chains stay exact prior draws: the across-chain
    variance of log p(x | z) matches the linear-Gaussian closed form (4 MC standard errors)."""
    import math

    from models.oracles.linear_gaussian import LinearGaussian
    from pyrolik import schedules
    from pyrolik.annealing.driver import run_pilot
    from pyrolik.model.target import make_target

    lg = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.5, seed=0)
    x = lg.sample(3, torch.Generator().manual_seed(seed))
    k = 4000
    path = make_target(lg, x, k).path("prior")
    kernel = HMC(num_leapfrog=3)
    g = torch.Generator().manual_seed(seed)
    table = run_pilot(Pilot(chains=None), path, kernel.transition, schedules.sigmoid(20), g)
    assert table.log_ratio_var.shape == (len(table.betas), 3)
    _, exact = lg.log_obs_moments(x, 0.0)
    # the standard error of a sample variance, sqrt((m4 - var^2) / k), with m4 from exact draws
    z = torch.randn(k, 3, 2, generator=g)
    r = torch.distributions.Normal(z @ lg.W.T + lg.b, lg.s).log_prob(x).sum(-1)
    c = r - r.mean(0)
    se = ((c**4).mean(0) - c.var(0) ** 2).sqrt() / math.sqrt(k)
    assert ((table.log_ratio_var[0] - exact[0]).abs() <= 4 * se).all()
    # the variance falls as the chains anneal toward the narrow posterior
    assert (table.log_ratio_var[-1] < table.log_ratio_var[0]).all()
    one = run_pilot(Pilot(chains=1), path, kernel.transition, schedules.sigmoid(20), g)
    assert one.log_ratio_var.isnan().all()  # one chain: no variance


def test_the_default_pilot_aims_high_on_four_chains():
    kernel = HMC()
    assert kernel.adaptation.target_accept == 0.9 and kernel.pilot_chains == 4
    assert kernel.step_jitter == 0.5 and HMC(adapt="online").adaptation.target_accept == 0.65
    assert kernel.adaptation.pilot_chains(10) == 4 and kernel.adaptation.pilot_chains(2) == 2
    assert HMC(pilot_chains=None).adaptation.pilot_chains(10) == 10


def test_the_pilot_table_never_overshoots_the_next_temperature():
    from pyrolik.annealing.tuning import _no_overshoot

    raw = torch.tensor([[0.0, 0.0], [-1.0, 0.5], [-0.5, 1.0], [-2.0, 0.2]])
    out = _no_overshoot(raw)
    # falling step sizes take the next (smaller) value; rising ones and the last are left alone
    assert torch.equal(out, torch.tensor([[-1.0, 0.0], [-1.0, 0.5], [-2.0, 0.2], [-2.0, 0.2]]))


@pytest.mark.statistical
def test_stiff_posterior_few_non_finite_proposals_and_still_exact(seed):
    # posterior sd 0.10-0.17: the pilot's table used to overshoot where the target stiffens, and
    # 46-54 proposals per run (20 examples x 8 chains x 200 steps) blew up; now a handful at most
    import pyrolik
    from models.oracles.linear_gaussian import LinearGaussian

    lg = LinearGaussian.random(5, 2, s=0.3, seed=0, dtype=torch.float64)
    sim = pyrolik.simulate(lg, 20, data_shape=(5,), seed=seed)
    r = pyrolik.ais(lg, sim.x, num_steps=200, num_chains=8, seed=seed, progress=False)
    assert int(r.num_divergent.sum()) <= 8
    # the table comes from the pilot's chains only, so the run is still a stochastic lower bound
    err = (r.log_likelihood - lg.exact_log_marginal(sim.x)).mean()
    assert err <= 3 * r.mcse.pow(2).sum().sqrt() / 20
