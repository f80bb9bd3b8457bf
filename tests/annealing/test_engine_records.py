"""The engine's recorder at chosen steps with the states' log-ratio, through the driver (issue 18)."""

from __future__ import annotations

import torch

from pyrolik.annealing import engine
from pyrolik.annealing.driver import drive
from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.run import Recording, describe
from pyrolik.annealing.step_sizes import rows_of
from pyrolik.annealing.tuning import Fixed
from pyrolik.execution.batches import Execution
from pyrolik.model.target import make_target
from tests.oracles import alias

lg = alias("lg_small")


def test_recorder_keeps_the_states_log_ratio(lg, seed):
    x = lg.sample(2, torch.Generator().manual_seed(seed))
    k, n = 3, 2
    path = make_target(lg, x, k).path("prior")
    g = torch.Generator().manual_seed(seed)
    schedule = torch.linspace(0, 1, 7).unsqueeze(-1)
    state = engine.init(path.sample_initial(g), path.value_and_grad, HMC(num_leapfrog=2).transition,
                        rows_of(schedule[0], k, n), Fixed(0.2).tuning(None, k, n, schedule))
    recorder = engine.Recorder(schedule, k, steps=[3, 6], keep_states=True,
                               record_log_ratio=True)
    engine.run(state, schedule, kernel=HMC(num_leapfrog=2).transition, density=path.value_and_grad,
               generator=g, num_examples=n, hooks=[recorder])
    trace, steps = recorder.trace()
    assert steps.tolist() == [3, 6] and trace["log_ratio"].shape == (2, k * n)
    for r in range(2):  # the cached ratio is log p(x | z) of the recorded state (prior path)
        log_obs = path.target.program.log_prior_and_obs(trace["z"][r])[1]
        torch.testing.assert_close(trace["log_ratio"][r], log_obs)
    assert "log_ratio" not in engine.Recorder(schedule, k).records  # opt-in


def test_driver_records_at_explicit_steps(lg, seed):
    x = lg.sample(3, torch.Generator().manual_seed(seed))
    betas = torch.linspace(0, 1, 9, dtype=torch.float64)
    kernel = HMC(num_leapfrog=2, adapt=None, step_size=0.2)
    problem = describe(lg, x, directions=("forward",), num_steps=None, num_chains=2,
                       schedule=betas, kernel=kernel)
    results = drive("ais", problem, Execution(seed, progress=False),
                    Recording(steps=(2, 8), log_ratio=True))
    assert results is not None
    (result,) = results
    assert result.trace_steps.tolist() == [2, 8]
    assert result.trace["log_ratio"].shape == (2, 2, 3)
    assert torch.equal(result.trace["log_weight"][-1], result.log_weights)
