"""The transition apart from its tuner: HMC is a transition plus an adaptation strategy, and the
transition alone gives the same moves as the facade."""

from __future__ import annotations

import dataclasses

import torch

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


def test_the_transition_moves_as_the_facade_does(lg, x):
    from pyrolik.model.target import make_target

    path = make_target(lg, x, 3).path("prior")
    kernel = HMC(num_leapfrog=4)
    z = path.sample_initial(torch.Generator().manual_seed(0))
    rows = z.shape[0]
    beta, eps = torch.full((rows,), 0.5), torch.full((rows,), 0.2)
    a, info_a = kernel.step(kernel.init(z, path.value_and_grad), path.value_and_grad, beta, eps,
                            torch.Generator().manual_seed(1))
    t = kernel.transition
    b, info_b = t.step(t.init(z, path.value_and_grad), path.value_and_grad, beta, eps,
                       torch.Generator().manual_seed(1))
    torch.testing.assert_close(a.z, b.z)
    torch.testing.assert_close(info_a.acceptance_rate, info_b.acceptance_rate)
    assert not torch.equal(a.z, z)  # it moved
