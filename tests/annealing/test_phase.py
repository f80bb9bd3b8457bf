"""One engine phase of a batch: the pilot as an ordinary engine run gives the table of the pilot
algorithm written out by hand, bit for bit, and any phase resumes from its checkpoint exactly."""

from __future__ import annotations

import math

import pytest
import torch
from pyrolik_models.oracles.linear_gaussian import LinearGaussian

from pyrolik import schedules
from pyrolik.annealing.driver import pilot_phase, run_phase, run_pilot
from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.step_sizes import StepSizes
from pyrolik.annealing.tuning import (
    WARMUP_TRANSITIONS,
    _coarse,
    _no_overshoot,
    _smooth,
    _variance,
    weighted_variance,
)
from pyrolik.execution.batches import progress_bar
from pyrolik.model.target import make_target


def pilot_by_hand(strategy, path, kernel, schedule, generator) -> StepSizes:
    """The pilot algorithm as its own loop (how the pilot was written before it became an engine
    run): adapt per example from the chains' mean acceptance, warm up at both ends, keep the mean
    of each temperature's second half, cap by the next, smooth; the variance of r under the chains'
    AIS weights."""
    k_all, n = path.target.layout.num_chains, path.target.layout.num_examples
    z0 = path.sample_initial(generator)
    k = strategy.pilot_chains(k_all)
    z0, fn = z0[: k * n], path.first_chains(k).value_and_grad
    betas = _coarse(schedule, strategy.pilot_steps(len(schedule) - 1)).to(z0.dtype)
    state = kernel.init(z0, fn)
    log_eps = z0.new_full((n,), math.log(strategy.step_size))
    inv_mass = _variance(z0, k, n) if strategy.mass_matrix else None
    logs, masses, variances = [], [], []
    log_w, previous = torch.zeros(k * n, dtype=torch.float64), betas[0]
    for j, beta in enumerate(betas):
        history = []
        log_w = log_w + ((beta - previous) * state.log_ratio).double()
        previous = beta
        for _ in range(WARMUP_TRANSITIONS if j in (0, len(betas) - 1) else 1):
            state, info = kernel.step(state, fn, beta.expand(k * n), log_eps.exp().repeat(k),
                                      generator, None if inv_mass is None else inv_mass.repeat(k, 1))
            log_eps = log_eps + strategy.gain * (
                info.acceptance_rate.reshape(k, n).mean(0) - strategy.target_accept)
            history.append(log_eps)
            if strategy.mass_matrix:
                inv_mass = _variance(state.z, k, n)
        logs.append(torch.stack(history[len(history) // 2 :]).mean(0))
        variances.append(weighted_variance(state.log_ratio.reshape(k, n), log_w.reshape(k, n)))
        if inv_mass is not None:
            masses.append(inv_mass)
    mass = _smooth(torch.stack(masses)) if masses else None
    return StepSizes(betas, _smooth(_no_overshoot(torch.stack(logs))), mass, torch.stack(variances))


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-equal, NaN where NaN (a one-chain pilot has no variance)."""
    return a.dtype == b.dtype and a.shape == b.shape and bool(
        ((a == b) | (a.isnan() & b.isnan())).all())


@pytest.fixture
def path():
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.4, seed=0)
    return make_target(lg, lg.sample(3, torch.Generator().manual_seed(1)), 6).path("prior")


@pytest.mark.parametrize("kernel", [HMC(num_leapfrog=3), HMC(num_leapfrog=2, mass_matrix=True),
                                    HMC(pilot_chains=1), HMC(pilot_chains=None)],
                         ids=["default", "mass", "one-chain", "all-chains"])
def test_the_pilot_engine_run_is_the_pilot_algorithm(path, kernel):
    schedule = schedules.sigmoid(60)
    table = run_pilot(kernel.adaptation, path, kernel.transition, schedule,
                      torch.Generator().manual_seed(3))
    expected = pilot_by_hand(kernel.adaptation, path, kernel.transition, schedule,
                             torch.Generator().manual_seed(3))
    for got, want in zip(table, expected, strict=True):
        assert (got is None and want is None) or same(got, want)


def test_no_pilot_without_a_pilot_strategy(path):
    for kernel in (HMC(adapt="online"), HMC(adapt=None)):
        assert run_pilot(kernel.adaptation, path, kernel.transition, schedules.linear(10),
                         None) is None


def test_a_phase_resumes_from_its_checkpoint_bit_for_bit(path):
    kernel = HMC(num_leapfrog=2, mass_matrix=True)
    schedule = schedules.sigmoid(40)
    reference = run_pilot(kernel.adaptation, path, kernel.transition, schedule,
                          torch.Generator().manual_seed(5))
    saves: list[dict] = []
    g = torch.Generator().manual_seed(5)
    phase, chains = pilot_phase(kernel.adaptation, path, schedule)
    n = path.target.layout.num_examples
    start = path.sample_initial(g)[: chains * n]
    run_phase(phase, start, kernel=kernel.transition, generator=g, num_examples=n, hooks={},
              saved=None, save=saves.append, tag={"phase": "pilot"}, every=7,
              bar=progress_bar(1, "", False))
    # 21 pilot temperatures, 10 transitions at each end: 39 steps, saved every 7 before the last
    assert phase.schedule.shape[0] - 1 == 39
    assert [s["loop"]["step"] for s in saves] == [7, 14, 21, 28, 35]
    assert all(s["phase"] == "pilot" for s in saves)
    g2 = torch.Generator().manual_seed(99)  # its state is replaced by the saved one
    again, _ = pilot_phase(kernel.adaptation, path, schedule)
    state = run_phase(again, None, kernel=kernel.transition, generator=g2, num_examples=n,
                      hooks={}, saved=saves[1]["loop"], save=None, tag={}, every=7,
                      bar=progress_bar(1, "", False))
    for got, want in zip(state.tuning.table(), reference, strict=True):
        assert same(got, want)


@pytest.mark.parametrize("num_steps", [1, 5, 20, 21, 100, 333, 1000])
def test_the_cost_a_result_records_is_the_pilot_that_runs(path, num_steps):
    """``pilot_transitions`` (what ``settings["pilot_gradient_evals_per_example"]`` counts) is the
    number of transitions of the pilot's engine run."""
    strategy = HMC().adaptation
    plan = strategy.pilot(6, schedules.sigmoid(num_steps))
    assert plan.schedule.shape[0] - 1 == strategy.pilot_transitions(num_steps)
    assert plan.ends[-1] == plan.schedule.shape[0] - 1
