"""Property-based tests (hypothesis): schedules, log-mean-exp reductions and AIS bound bookkeeping."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyrolik
from pyrolik import schedules
from pyrolik.annealing import Recording
from pyrolik.annealing.driver import run
from pyrolik.model.target import make_target
from pyrolik.ops.stats import RunningLogWeights, effective_sample_size, log_mean_exp
from tests import scale_models as sm

FAST = settings(max_examples=10, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
CHEAP = settings(max_examples=100, deadline=None)

# -- schedules -------------------------------------------------------------------------------------


@CHEAP
@given(st.sampled_from(["linear", "geometric", "sigmoid"]), st.integers(1, 3000))
def test_named_schedules_are_valid_for_any_length(name, num_steps):
    s = schedules.resolve(name, num_steps)
    assert s.shape == (num_steps + 1,) and s[0] == 0.0 and s[-1] == 1.0
    assert (s[1:] > s[:-1]).all()
    assert torch.equal(schedules.validate(s), s)


@CHEAP
@given(st.integers(1, 500), st.floats(0.01, 40.0))
def test_sigmoid_is_symmetric_or_refused_for_any_delta(num_steps, delta):
    try:
        s = schedules.sigmoid(num_steps, delta)
    except ValueError as err:  # so steep that its ends are flat in float64: refused, not degenerate
        assert delta > 15 and "use a smaller delta" in str(err)
        return
    assert (s[1:] > s[:-1]).all() and s[0] == 0.0 and s[-1] == 1.0
    torch.testing.assert_close(s + s.flip(0), torch.ones_like(s), rtol=0, atol=1e-12)


@CHEAP
@given(st.lists(st.floats(1e-6, 1 - 1e-6), min_size=1, max_size=50, unique=True))
def test_any_strictly_increasing_grid_from_0_to_1_is_accepted(inner):
    s = torch.tensor([0.0, *sorted(inner), 1.0], dtype=torch.float64)
    if not (s[1:] > s[:-1]).all():  # floats that are equal once in float64
        return
    assert torch.equal(schedules.resolve(s, None), s)


@CHEAP
@given(st.lists(st.floats(1e-6, 1 - 1e-6), min_size=2, max_size=30, unique=True), st.data())
def test_any_out_of_order_grid_is_refused(inner, data):
    s = sorted(inner)
    i = data.draw(st.integers(0, len(s) - 2))
    s[i], s[i + 1] = s[i + 1], s[i]
    with pytest.raises(ValueError, match="strictly increasing"):
        schedules.validate(torch.tensor([0.0, *s, 1.0], dtype=torch.float64))


# -- log-mean-exp ----------------------------------------------------------------------------------

log_weights = st.lists(st.floats(-700.0, 700.0), min_size=1, max_size=200)


@CHEAP
@given(log_weights, st.floats(-1e4, 1e4))
def test_log_mean_exp_is_shift_equivariant(values, c):
    a = torch.tensor(values, dtype=torch.float64)
    torch.testing.assert_close(log_mean_exp(a + c), log_mean_exp(a) + c, rtol=1e-12, atol=1e-8)


@CHEAP
@given(log_weights)
def test_log_mean_exp_lies_between_max_minus_log_k_and_max(values):
    a = torch.tensor(values, dtype=torch.float64)
    lme, top, k = float(log_mean_exp(a)), float(a.max()), len(values)
    assert top - math.log(k) - 1e-9 <= lme <= top + 1e-9
    assert 1.0 - 1e-9 <= float(effective_sample_size(a)) <= k + 1e-9


@CHEAP
@given(st.lists(st.floats(-30.0, 30.0), min_size=1, max_size=100), st.randoms())
def test_log_mean_exp_matches_numpy_and_ignores_order(values, rnd):
    a = torch.tensor(values, dtype=torch.float64)
    expected = math.log(np.mean(np.exp(np.array(values))))
    assert float(log_mean_exp(a)) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    shuffled = list(values)
    rnd.shuffle(shuffled)
    assert float(log_mean_exp(torch.tensor(shuffled))) == pytest.approx(float(log_mean_exp(a)),
                                                                       abs=1e-12)


@CHEAP
@given(st.integers(1, 60), st.integers(1, 4), st.lists(st.integers(1, 20), min_size=1, max_size=6),
       st.integers(0, 2**31))
def test_streaming_reduction_equals_one_pass(k_total, n, chunks, seed):
    g = torch.Generator().manual_seed(seed)
    lw = torch.randn(k_total, n, generator=g, dtype=torch.float64) * 5
    running, done = RunningLogWeights(k_total, keep=False), 0
    for c in chunks * k_total:
        if done >= k_total:
            break
        running.update(lw[done : done + c])
        done += c
    torch.testing.assert_close(running.log_mean, log_mean_exp(lw), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(running.ess, effective_sample_size(lw), rtol=1e-10, atol=1e-10)


# -- bound bookkeeping -----------------------------------------------------------------------------


@FAST
@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**31))
def test_ais_with_a_two_point_schedule_is_likelihood_weighting(num_chains, num_examples, seed):
    x = sm.sample(num_examples, seed % 1000)
    a = pyrolik.ais(sm.model, x, num_steps=None, schedule=torch.tensor([0.0, 1.0]),
                    num_chains=num_chains, kernel=pyrolik.HMC(adapt=None), seed=seed,
                    progress=False)
    lw = pyrolik.likelihood_weighting(sm.model, x, num_samples=num_chains, seed=seed,
                                      progress=False)
    torch.testing.assert_close(a.log_weights, lw.log_weights, rtol=0, atol=1e-10)
    torch.testing.assert_close(a.log_likelihood, lw.log_likelihood, rtol=0, atol=1e-10)


@st.composite
def grids(draw):
    inner = draw(st.lists(st.floats(0.01, 0.99), min_size=1, max_size=6, unique=True))
    s = torch.tensor([0.0, *sorted(inner), 1.0], dtype=torch.float64)
    return s if (s[1:] > s[:-1]).all() else torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)


@FAST
@given(grids(), st.integers(1, 3), st.integers(0, 2**31), st.booleans())
def test_weight_increments_are_beta_steps_times_the_log_likelihood(schedule, k, seed, reverse):
    """log w_t - log w_{t-1} = (beta_t - beta_{t-1}) log p(x | z_{t-1}) at every step, and the
    final log-weight is their sum (Neal 2001), forward and reverse."""
    x = sm.sample(2, seed % 1000)
    kw = dict(num_steps=None, schedule=schedule, num_chains=k, seed=seed, progress=False,
              kernel=pyrolik.HMC(num_leapfrog=2, adapt=None, step_size=0.3))
    if reverse:
        z0 = torch.randn(k, 2, 2, generator=torch.Generator().manual_seed(seed), dtype=x.dtype)
        # every step recorded: the driver behind pyrolik.reverse_ais (which records its default)
        _, (r,) = run("reverse_ais", sm.model, x, directions=("reverse",), latents=z0,
                      batch_size=None, recording=Recording(every=1), **kw)
        betas, start = schedule.flip(0), z0
    else:
        r = pyrolik.ais(sm.model, x, record=Recording(every=1, states=True), **kw)
        betas, start = schedule, None
    target = make_target(sm.model, x, k)
    log_w = r.trace["log_weight"]  # (T, K, N)
    assert torch.equal(log_w[-1], r.log_weights)
    if reverse:  # the first increment uses the given start: beta goes from 1 to beta_1
        lo = target.program.log_prior_and_obs(start.reshape(k * 2, 2))[1].reshape(k, 2)
        torch.testing.assert_close(log_w[0], ((betas[1] - betas[0]) * lo), rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(-log_mean_exp(r.log_weights), r.log_likelihood)
        return
    z = r.trace["z"]  # (T, K, N, d): the state after each step
    for t in range(1, len(betas) - 1):
        lo = target.program.log_prior_and_obs(z[t - 1].reshape(k * 2, 2))[1].reshape(k, 2)
        torch.testing.assert_close(log_w[t] - log_w[t - 1], (betas[t + 1] - betas[t]) * lo,
                                   rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(log_mean_exp(r.log_weights), r.log_likelihood)
