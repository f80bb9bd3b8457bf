"""The description of an annealing run: the checks every front end shares, the legs, the settings
and costs every result records, and what a checkpoint of the run must match."""

from __future__ import annotations

import pytest
import torch

import pyrolik
from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.run import Leg, Recording, describe


def test_describe_resolves_the_kernel_and_the_schedule_once(lg, x):
    problem = describe(lg, x, directions=("forward",), num_steps=20, num_chains=4,
                       schedule="auto", kernel=None)
    assert problem.x is x and isinstance(problem.kernel, pyrolik.SMC)
    assert problem.kernel.move.adapt == "pilot" and problem.kernel.resample == 1.0
    assert problem.islands is None  # 4 chains: plain AIS (islands of 4 or more from 8 chains)
    betas = problem.schedule.betas
    assert betas.shape == (21,) and betas[0] == 0 and betas[-1] == 1  # the sigmoid the pilot uses
    assert problem.schedule.adaptive and problem.path_name == "prior"
    assert problem.legs == (Leg("forward", 4),) and problem.rows_per_example == 4


def test_describe_refuses_bad_input_naming_the_fix(lg, x):
    common = dict(directions=("forward",), num_steps=20, num_chains=4, schedule="sigmoid")
    with pytest.raises(TypeError, match="pyrolik.HMC or pyrolik.SMC"):
        describe(lg, x, kernel=object(), **common)
    with pytest.raises(ValueError, match="num_chains must be a positive integer"):
        describe(lg, x, kernel=None, **{**common, "num_chains": 0})
    with pytest.raises(TypeError, match="init must be a callable"):
        describe(lg, x, kernel=None, init=3, **common)
    with pytest.raises(TypeError, match="StepSizes"):
        describe(lg, x, kernel=None, step_sizes=(1, 2), **common)
    with pytest.raises(ValueError, match="given latents"):
        describe(lg, x, kernel=None, **{**common, "directions": ("reverse",)})


def test_reverse_legs_get_their_latents_per_chain(lg):
    sim = pyrolik.simulate(lg, 3, data_shape=(3,), seed=0)
    problem = describe(lg, sim.x, directions=("forward", "reverse"), num_steps=5, num_chains=2,
                       schedule="linear", kernel=None, latents=sim.latents)
    forward, reverse = problem.legs
    assert forward.latents is None and forward.method == "ais"
    assert reverse.method == "reverse_ais" and reverse.latents["z"].shape == (2, 3, 2)
    assert torch.equal(reverse.latents["z"][1], sim.latents["z"])
    extra = problem.fingerprint_extra()
    assert set(extra) == {"schedule", "latents.z"} and problem.rows_per_example == 4


def test_settings_count_every_gradient_evaluation(lg, x):
    kernel = HMC(num_leapfrog=5, pilot_chains=2)
    s = describe(lg, x, directions=("forward",), num_steps=100, num_chains=8, schedule="auto",
                 kernel=kernel).settings(None)
    assert s["schedule"] == "adaptive" and s["init"] == "prior"
    assert s["gradient_evals_per_example"] == (100 * 5 + 1) * 8
    pilot = kernel.adaptation.pilot_transitions(100)
    assert pilot > 0 and s["pilot_gradient_evals_per_example"] == (pilot * 5 + 1) * 2
    fixed = describe(lg, x, directions=("forward",), num_steps=100, num_chains=8, schedule="auto",
                     kernel=HMC(adapt=None)).settings(3)
    assert fixed["schedule"] == "sigmoid" and fixed["pilot_gradient_evals_per_example"] == 0
    assert fixed["batch_size"] == 3


def test_recording_settings_name_only_what_was_asked():
    assert Recording().settings() == {"record_every": None, "keep_states": False}
    steps = Recording(steps=(2, 4), log_ratio=True).settings()
    assert steps["record_steps"] == (2, 4) and steps["record_log_ratio"] is True
