"""The engine's recorder at chosen steps with the states' log-ratio, through the driver (issue 18)."""

from __future__ import annotations

import pytest
import torch
from pyrolik_models import LinearGaussian

from pyrolik.execution.distributed import Shard
from pyrolik.infer import engine
from pyrolik.infer.driver import Leg, Run, anneal, finish, settings_of
from pyrolik.mcmc.adaptation import Fixed
from pyrolik.mcmc.hmc import HMC
from pyrolik.mcmc.step_sizes import rows_of
from pyrolik.model.target import make_target


@pytest.fixture
def lg():
    return LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=0)


def test_recorder_keeps_the_states_log_ratio(lg, seed):
    x = lg.sample(2, torch.Generator().manual_seed(seed))
    k, n = 3, 2
    path = make_target(lg, x, k).path("prior")
    g = torch.Generator().manual_seed(seed)
    schedule = torch.linspace(0, 1, 7).unsqueeze(-1)
    state = engine.init(path.sample_initial(g), path.value_and_grad, HMC(num_leapfrog=2),
                        rows_of(schedule[0], k, n))
    recorder = engine.Recorder(schedule, k, steps=[3, 6], record_states=True,
                               record_log_ratio=True)
    engine.run(state, schedule, Fixed(0.2).tuning(None, k, n, schedule), kernel=HMC(num_leapfrog=2),
               density=path.value_and_grad, generator=g, num_examples=n, hooks=[recorder])
    trace, steps = recorder.trace()
    assert steps.tolist() == [3, 6] and trace["log_ratio"].shape == (2, k * n)
    for r in range(2):  # the cached ratio is log p(x | z) of the recorded state (prior path)
        torch.testing.assert_close(trace["log_ratio"][r], path.target.log_obs(trace["z"][r]))
    assert "log_ratio" not in engine.Recorder(schedule, k).records  # opt-in


def test_driver_records_at_explicit_steps(lg, seed):
    x = lg.sample(3, torch.Generator().manual_seed(seed))
    betas = torch.linspace(0, 1, 9, dtype=torch.float64)
    kernel = HMC(num_leapfrog=2, adapt=None, step_size=0.2)
    run = Run("ais", lg, x, betas, kernel, (Leg("forward", 2),), seed, Shard(0, 1),
              settings_of(8, 2, betas, kernel, None, None), record_steps=(2, 8),
              record_log_ratio=True, progress=False)
    parts = anneal(run, None)
    result = finish("ais", "forward", run, parts[0], 0.0, 2)
    assert result.trace_steps.tolist() == [2, 8]
    assert result.trace["log_ratio"].shape == (2, 2, 3)
    assert torch.equal(result.trace["log_weight"][-1], result.log_weights)
