"""The AIS driver's decisions before any annealing: argument checks, whether the schedule is built
from the pilot, and the costs every result records."""

from __future__ import annotations

import pytest
import torch

from pyrolik.infer.driver import adaptive_of, prepare, settings_of
from pyrolik.mcmc.hmc import HMC


def test_prepare_resolves_the_kernel_and_the_base_schedule(lg, x):
    x2, betas, kernel = prepare(lg, x, 20, 4, "auto", None, None)
    assert x2 is x and isinstance(kernel, HMC) and kernel.adapt == "pilot"
    assert betas.shape == (21,) and betas[0] == 0 and betas[-1] == 1  # the sigmoid the pilot uses


def test_prepare_refuses_a_kernel_that_is_not_hmc(lg, x):
    with pytest.raises(TypeError, match="pyrolik.HMC"):
        prepare(lg, x, 20, 4, "sigmoid", object(), None)


@pytest.mark.parametrize("schedule, kernel, chains, expected", [
    ("auto", HMC(), 4, True),                      # a pilot with >= 2 chains: adaptive
    ("auto", HMC(adapt=None), 4, False),           # no pilot: the sigmoid
    ("auto", HMC(pilot_chains=1), 4, False),       # one pilot chain cannot estimate a variance
    ("sigmoid", HMC(), 4, False),
    (torch.linspace(0, 1, 5), HMC(), 4, False),
    ("adaptive", HMC(), 4, True),
])
def test_when_the_schedule_comes_from_the_pilot(schedule, kernel, chains, expected):
    assert adaptive_of(schedule, kernel, chains) is expected


def test_adaptive_without_a_pilot_says_how_to_fix_it():
    with pytest.raises(ValueError, match="adapt='pilot'"):
        adaptive_of("adaptive", HMC(adapt=None), 4)
    with pytest.raises(ValueError, match="at least 2 pilot chains"):
        adaptive_of("adaptive", HMC(), 1)


def test_settings_count_every_gradient_evaluation():
    kernel = HMC(num_leapfrog=5, pilot_chains=2)
    s = settings_of(100, 8, "auto", kernel, None, None)
    assert s["schedule"] == "adaptive" and s["init"] == "prior"
    assert s["gradient_evals_per_example"] == (100 * 5 + 1) * 8
    pilot = kernel.adaptation.pilot_transitions(100)
    assert pilot > 0 and s["pilot_gradient_evals_per_example"] == (pilot * 5 + 1) * 2
    fixed = settings_of(100, 8, "auto", HMC(adapt=None), None, None)
    assert fixed["schedule"] == "sigmoid" and fixed["pilot_gradient_evals_per_example"] == 0
