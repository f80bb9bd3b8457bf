"""The one driver: a described run in, one result per leg out; the pilot and the estimating run
of each batch, and the checkpoint a run of a given description opens."""

from __future__ import annotations

import torch

import pyrolik
from pyrolik.annealing.driver import drive, open_checkpoint
from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.run import Recording, describe
from pyrolik.execution.batches import Execution


def test_one_result_per_leg_in_the_order_of_the_legs(lg, x):
    sim = pyrolik.simulate(lg, 3, data_shape=(3,), seed=1)
    problem = describe(lg, sim.x, directions=("forward", "reverse"), num_steps=10, num_chains=2,
                       schedule="sigmoid", kernel=HMC(num_leapfrog=2), latents=sim.latents)
    lower, upper = drive("bdmc", problem, Execution(0, progress=False))
    assert (lower.direction, lower.bound, lower.method) == ("forward", "lower", "ais")
    assert (upper.direction, upper.bound, upper.method) == ("reverse", "upper", "reverse_ais")
    assert lower.settings == {**problem.settings(None), "evaluation": lower.settings["evaluation"]}
    # both legs read one pilot's table, and the reverse leg visits the schedule backwards
    assert all(torch.equal(a, b) for a, b in zip(lower.step_sizes, upper.step_sizes, strict=True)
               if a is not None)
    assert torch.equal(upper.schedule, lower.schedule.flip(0))


def test_the_same_description_gives_the_same_numbers_as_the_front_end(lg, x):
    kernel = HMC(num_leapfrog=2)
    problem = describe(lg, x, directions=("forward",), num_steps=12, num_chains=3,
                       schedule="auto", kernel=kernel)
    (direct,) = drive("ais", problem, Execution(7, batch_size=2, progress=False), Recording())
    front = pyrolik.ais(lg, x, num_steps=12, num_chains=3, kernel=kernel, seed=7, batch_size=2,
                        progress=False)
    assert torch.equal(direct.log_weights, front.log_weights)
    assert direct.settings["schedule"] == "adaptive" and direct.step_sizes is not None


def test_a_given_table_replaces_the_pilot(lg, x):
    kernel = HMC(num_leapfrog=2)
    first = pyrolik.ais(lg, x, num_steps=12, num_chains=3, kernel=kernel, seed=1, progress=False)
    problem = describe(lg, x, directions=("forward",), num_steps=12, num_chains=3,
                       schedule="auto", kernel=kernel, step_sizes=first.step_sizes)
    (again,) = drive("ais", problem, Execution(2, progress=False))
    assert all(torch.equal(a, b) for a, b in zip(again.step_sizes, first.step_sizes, strict=True)
               if a is not None)
    assert torch.equal(again.schedule, first.schedule)  # the adaptive schedule of the same table


def test_no_checkpoint_unless_a_path_is_given(lg, x, tmp_path):
    problem = describe(lg, x, directions=("forward",), num_steps=4, num_chains=2,
                       schedule="linear", kernel=HMC(adapt=None))
    assert open_checkpoint("ais", problem, Execution(0), Recording()) is None
    ckpt = open_checkpoint("ais", problem, Execution(0, checkpoint=tmp_path / "c.pt"), Recording())
    assert ckpt is not None and ckpt.fingerprint["method"] == "ais"
