"""Adaptation strategies (pyrolik.mcmc.adaptation): chosen in one place, read by the engine."""

from __future__ import annotations

import pytest
import torch

from pyrolik.infer import engine
from pyrolik.mcmc.adaptation import Fixed, Online, Pilot, RowTuning, TableTuning, from_settings
from pyrolik.mcmc.hmc import HMC
from pyrolik.mcmc.step_sizes import StepSizes


def test_tunings_give_the_parameters_of_their_strategy():
    like = torch.zeros(3)
    fixed = Fixed(0.2).tuning(None, 2, 3, like)
    assert torch.allclose(fixed.params(torch.tensor([0.5])).step_size, torch.full((6,), 0.2))
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
    eps = tab.params(torch.tensor([1.0])).step_size
    torch.testing.assert_close(eps, torch.tensor([0.4, 0.5, 0.6, 0.4, 0.5, 0.6]))


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
