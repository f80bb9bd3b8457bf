"""The transition apart from its tuner: HMC is a transition plus an adaptation strategy."""

from __future__ import annotations

import dataclasses

from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.transition import HMCTransition


def test_the_facade_is_a_transition_and_a_tuner():
    kernel = HMC(num_leapfrog=7, step_jitter=0.25, max_energy_error=50.0, adapt=None, step_size=0.3)
    assert kernel.transition == HMCTransition(num_leapfrog=7, max_energy_error=50.0, step_jitter=0.25,
                                              momentum_persistence=0.5)
    assert kernel.adaptation.name is None and kernel.adaptation.step_size == 0.3
    fields = {f.name for f in dataclasses.fields(HMCTransition)}
    assert fields == {"num_leapfrog", "max_energy_error", "step_jitter",
                      "momentum_persistence"}  # nothing of a tuner

