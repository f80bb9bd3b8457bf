"""A run's schedule, resolved once: fixed betas, or a schedule built per batch from the pilot."""

from __future__ import annotations

import pytest
import torch

from pyrolik import schedules
from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.run import Schedule, adaptive_of, resolve_schedule
from pyrolik.annealing.step_sizes import StepSizes


@pytest.mark.parametrize("schedule, kernel, chains, expected", [
    ("auto", HMC(), 4, True),                      # a pilot with >= 2 chains: adaptive
    ("auto", HMC(adapt=None), 4, False),           # no pilot: the sigmoid
    ("auto", HMC(pilot_chains=1), 4, False),       # one pilot chain cannot estimate a variance
    ("sigmoid", HMC(), 4, False),
    (torch.linspace(0, 1, 5), HMC(), 4, False),
    ("adaptive", HMC(), 4, True),
    ("adaptive_per_example", HMC(), 4, True),
])
def test_when_the_schedule_comes_from_the_pilot(schedule, kernel, chains, expected):
    assert adaptive_of(schedule, kernel, chains) is expected
    resolved = resolve_schedule(schedule, None if isinstance(schedule, torch.Tensor) else 20,
                                kernel, chains)
    assert resolved.adaptive is expected


def test_adaptive_without_a_pilot_says_how_to_fix_it():
    with pytest.raises(ValueError, match="adapt='pilot'"):
        adaptive_of("adaptive", HMC(adapt=None), 4)
    with pytest.raises(ValueError, match="at least 2 pilot chains"):
        adaptive_of("adaptive", HMC(), 1)
    with pytest.raises(ValueError, match="schedule='adaptive_per_example' is built from the pilot"):
        adaptive_of("adaptive_per_example", HMC(adapt=None), 4)


def test_names_and_the_base_the_pilot_reads():
    auto = resolve_schedule("auto", 20, HMC(), 4)
    assert auto.name == "adaptive" and auto.num_steps == 20
    assert torch.equal(auto.betas, schedules.sigmoid(20))  # the pilot's grid comes from the sigmoid
    assert resolve_schedule("auto", 20, HMC(adapt=None), 4).name == "sigmoid"
    assert resolve_schedule("linear", 5, HMC(), 4).name == "linear"
    custom = resolve_schedule(torch.linspace(0, 1, 6), None, HMC(), 4)
    assert custom.name == "custom" and custom.num_steps == 5 and not custom.adaptive
    with pytest.raises(ValueError, match="unknown schedule"):
        resolve_schedule("cosine", 5, HMC(), 4)
    with pytest.raises(ValueError, match="num_steps=3 needs 4"):
        resolve_schedule(torch.linspace(0, 1, 6), 3, HMC(), 4)


def test_a_fixed_schedule_ignores_the_table_and_an_adaptive_one_follows_it():
    fixed = Schedule("linear", schedules.linear(10))
    assert fixed.for_batch(None) is fixed.betas
    base = schedules.sigmoid(10)
    adaptive = Schedule("adaptive", base, adaptive=True)
    grid = torch.linspace(0, 1, 5, dtype=torch.float64)
    # all the variance of r at small beta: the steps crowd there
    var = torch.tensor([100.0, 1.0, 0.01, 0.01, 0.01], dtype=torch.float64).unsqueeze(1)
    table = StepSizes(grid, torch.zeros(5, 1, dtype=torch.float64), None, var.expand(5, 2))
    betas = adaptive.for_batch(table)
    assert betas.shape == base.shape and betas[0] == 0 and betas[-1] == 1
    assert torch.equal(betas, schedules.adaptive(10, grid, var[:, 0]))
    assert betas[5] < 0.25  # half the steps below the first quarter
    with pytest.raises(ValueError, match="log_ratio_var"):
        adaptive.for_batch(StepSizes(grid, torch.zeros(5, 1)))
    # examples whose pilot failed take no part; none left: the base schedule
    nan = torch.full((5, 2), float("nan"), dtype=torch.float64)
    assert adaptive.for_batch(StepSizes(grid, torch.zeros(5, 2), None, nan)) is base


def test_a_schedule_per_example_follows_each_examples_variances():
    """``adaptive_per_example``: column n is the adaptive schedule of example n's own pilot
    variances (the pooled one of a batch whose examples all have them)."""
    resolved = resolve_schedule("adaptive_per_example", 12, HMC(), 4)
    assert resolved.per_example and resolved.adaptive and resolved.name == "adaptive_per_example"
    grid = torch.linspace(0, 1, 5, dtype=torch.float64)
    var = torch.tensor([[100.0, 0.01], [1.0, 0.01], [0.01, 1.0], [0.01, 100.0], [0.01, 100.0]],
                       dtype=torch.float64)
    table = StepSizes(grid, torch.zeros(5, 2, dtype=torch.float64), None, var)
    betas = resolved.for_batch(table)
    assert betas.shape == (13, 2)
    for n in range(2):
        assert torch.equal(betas[:, n], schedules.adaptive(12, grid, var[:, n]))
    assert betas[1, 0] < betas[1, 1]  # example 0's variance is early: its steps crowd there
    pooled = Schedule("adaptive", resolved.betas, adaptive=True).for_batch(
        StepSizes(grid, table.log_step_size, None, var[:, :1].expand(5, 2)))
    assert torch.equal(Schedule("adaptive_per_example", resolved.betas, True, True).for_batch(
        StepSizes(grid, table.log_step_size, None, var[:, :1].expand(5, 2)))[:, 1], pooled)
