"""A leg's batch outputs reduced into one result: the bound's direction, batches concatenated in
order, and per-example schedules when adaptive batches annealed along different betas."""

from __future__ import annotations

import math

import torch

from pyrolik.annealing.driver import LegOutput, finish
from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.run import Leg, describe
from pyrolik.ops.stats import log_mean_exp


def _part(lw: torch.Tensor, schedule: torch.Tensor | None = None) -> LegOutput:
    k, n = lw.shape
    return LegOutput(log_weight=lw, final_state=torch.zeros(k, n, 2),
                     acceptance_rate=torch.full((k, n), 0.9), num_divergent=torch.zeros(k, n),
                     trace={"log_weight": lw.unsqueeze(0), "beta": torch.ones(1, k)},
                     trace_steps=torch.tensor([4]), latents={"z": torch.zeros(k, n, 2)},
                     schedule=schedule, num_observed=torch.full((n,), 3))


def test_forward_and_reverse_legs_bound_from_either_side(lg, x):
    problem = describe(lg, x, directions=("forward",), num_steps=4, num_chains=3,
                       schedule="linear", kernel=HMC(adapt=None))
    lw = torch.log(torch.tensor([[1.0, 2.0, 4.0, 8.0], [3.0, 2.0, 4.0, 8.0], [2.0, 2.0, 4.0, 8.0]],
                                dtype=torch.float64))
    parts = [_part(lw[:, :3]), _part(lw[:, 3:])]  # two batches of 3 and 1 examples
    lower = finish(Leg("forward", 3), problem, parts, seed=0, settings={}, start=0.0)
    upper = finish(Leg("reverse", 3), problem, parts, seed=0, settings={}, start=0.0)
    torch.testing.assert_close(lower.log_weights, lw)
    torch.testing.assert_close(lower.log_likelihood.double(), log_mean_exp(lw))
    torch.testing.assert_close(upper.log_likelihood.double(), -log_mean_exp(lw))
    assert abs(lower.log_likelihood[0].item() - math.log(2.0)) < 1e-6  # mean of 1, 3 and 2
    assert (lower.bound, upper.bound) == ("lower", "upper")
    assert torch.equal(upper.schedule, lower.schedule.flip(0))
    assert lower.num_observed.tolist() == [3, 3, 3, 3]


def test_batches_on_different_betas_give_per_example_schedules(lg, x):
    problem = describe(lg, x, directions=("forward",), num_steps=4, num_chains=2,
                       schedule="linear", kernel=HMC(adapt=None))
    a = torch.tensor([0.0, 0.1, 0.3, 0.6, 1.0], dtype=torch.float64)
    b = torch.tensor([0.0, 0.4, 0.7, 0.9, 1.0], dtype=torch.float64)
    lw = torch.zeros(2, 3, dtype=torch.float64)
    result = finish(Leg("forward", 2), problem, [_part(lw[:, :2], a), _part(lw[:, 2:], b)],
                    seed=0, settings={}, start=0.0)
    assert result.schedule.shape == (5, 3)
    assert torch.equal(result.schedule[:, 0], a) and torch.equal(result.schedule[:, 2], b)
    assert result.trace["beta"].shape == (1, 2, 3)
    same = finish(Leg("forward", 2), problem, [_part(lw[:, :2], a), _part(lw[:, 2:], a)],
                  seed=0, settings={}, start=0.0)
    assert torch.equal(same.schedule, a) and same.trace["beta"].shape == (1, 2)
