"""Schedules: exact endpoints, strictly increasing, right length; validation of user tensors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pyrolik import schedules


@given(st.integers(1, 3000), st.sampled_from(["linear", "geometric", "sigmoid"]))
def test_named_schedules_run_from_exactly_0_to_exactly_1(num_steps, name):
    s = schedules.resolve(name, num_steps)
    assert len(s) == num_steps + 1
    assert s[0].item() == 0.0 and s[-1].item() == 1.0
    assert (s[1:] > s[:-1]).all()
    schedules.validate(s)


def test_sigmoid_matches_grosse_et_al():
    s = schedules.sigmoid(4, delta=4.0)
    raw = torch.sigmoid(torch.tensor([-4.0, -2.0, 0.0, 2.0, 4.0], dtype=torch.float64))
    torch.testing.assert_close(s, (raw - raw[0]) / (raw[-1] - raw[0]))


def test_invalid_schedules_are_rejected_with_the_fix():
    with pytest.raises(ValueError, match="start at exactly 0"):
        schedules.validate(torch.tensor([0.1, 1.0]))
    with pytest.raises(ValueError, match="strictly increasing"):
        schedules.validate(torch.tensor([0.0, 0.5, 0.5, 1.0]))
    with pytest.raises(ValueError, match="NaN"):
        schedules.validate(torch.tensor([0.0, float("nan"), 1.0]))
    with pytest.raises(ValueError, match="unknown schedule"):
        schedules.resolve("cosine", 10)
    with pytest.raises(ValueError, match="num_steps=3 needs 4"):
        schedules.resolve(torch.tensor([0.0, 1.0]), 3)
    with pytest.raises(ValueError, match="num_steps must be a positive integer"):
        schedules.linear(0)
    with pytest.raises(TypeError, match="1-D tensor"):
        schedules.validate([0.0, 1.0])


# -- the adaptive schedule (constant thermodynamic speed) --------------------------------------------
def thermodynamic_length(grid, var, betas):
    """Lambda(beta) = int_0^beta sd, with sd constant on each grid interval (mean of its ends)."""
    sd = var.sqrt()
    seg = 0.5 * (sd[1:] + sd[:-1])
    cum = torch.cat([torch.zeros(1, dtype=torch.float64), (seg * grid.diff()).cumsum(0)])
    i = torch.searchsorted(grid, betas, right=True).clamp(1, len(grid) - 1)
    return cum[i - 1] + seg[i - 1] * (betas - grid[i - 1])


@given(st.integers(1, 2000), st.integers(0, 10_000))
def test_adaptive_schedules_run_from_exactly_0_to_exactly_1(num_steps, seed):
    g = torch.Generator().manual_seed(seed)
    grid = schedules.sigmoid(30)
    var = torch.rand(31, 3, generator=g, dtype=torch.float64) ** 4 * 1e4
    s = schedules.adaptive(num_steps, grid, var)
    assert s.shape == (num_steps + 1, 3) and s.dtype == torch.float64
    for col in s.T:
        schedules.validate(col)
    torch.testing.assert_close(schedules.adaptive(num_steps, grid, var[:, 1]), s[:, 1])


def test_adaptive_schedule_moves_at_constant_thermodynamic_speed():
    """Every step covers the same length Lambda(1) / T (up to the 1% spread evenly)."""
    grid = schedules.sigmoid(40)
    var = 1.0 / (grid + 1e-3) ** 2  # sd falling like 1/beta, as for a narrow posterior
    s = schedules.adaptive(200, grid, var, floor=1e-9)
    length = thermodynamic_length(grid, var, s)
    steps = length.diff()
    torch.testing.assert_close(steps, torch.full_like(steps, float(length[-1]) / 200), rtol=1e-6,
                               atol=0)
    # a constant variance gives the linear schedule; a zero variance too (only the floor counts)
    torch.testing.assert_close(schedules.adaptive(10, grid, torch.ones(41)), schedules.linear(10))
    torch.testing.assert_close(schedules.adaptive(10, grid, torch.zeros(41)), schedules.linear(10))


@pytest.mark.parametrize("dims", [(10, 5, 0.3), (20, 5, 0.5), (50, 10, 0.3)])
def test_adaptive_schedule_has_less_perfect_transition_bias_than_the_sigmoid(dims):
    """Closed form (linear-Gaussian oracle): with perfect transitions the bias of a schedule is
    sum_t KL(f_t || f_t+1); built from the exact variances, the adaptive schedule's is at most the
    sigmoid's, and close to the Lambda^2 / 2T of the continuous optimum."""
    from pyrolik_models import LinearGaussian

    data_dim, latent_dim, s = dims
    lg = LinearGaussian.random(data_dim, latent_dim, s=s, seed=0)
    x = lg.sample(8, torch.Generator().manual_seed(1))
    grid = torch.cat([torch.zeros(1, dtype=torch.float64), torch.logspace(-7, 0, 400)])
    _, var = lg.log_obs_moments(x, grid)  # (P, N)
    pooled = var.mean(1)
    for num_steps in (100, 300):
        adaptive = schedules.adaptive(num_steps, grid, pooled)
        bias_sig, _ = lg.perfect_transition_bias(x, schedules.sigmoid(num_steps))
        bias_ada, _ = lg.perfect_transition_bias(x, adaptive)
        assert bias_ada.mean() <= bias_sig.mean()
        sd = var.sqrt()
        length = (0.5 * (sd[1:] + sd[:-1]) * grid.diff().unsqueeze(-1)).sum(0)  # (N,)
        # each example's own optimum; the shared schedule is at most a little above them
        optimum = (length**2 / (2 * num_steps)).mean()
        assert optimum * 0.95 <= bias_ada.mean() <= optimum * 1.5


def test_adaptive_schedule_rejects_bad_input():
    grid = schedules.sigmoid(4)
    with pytest.raises(ValueError, match="shape"):
        schedules.adaptive(10, grid, torch.ones(3))
    with pytest.raises(ValueError, match="strictly increasing"):
        schedules.adaptive(10, torch.tensor([0.0, 0.5, 0.5, 1.0]), torch.ones(4))
    with pytest.raises(ValueError, match="floor"):
        schedules.adaptive(10, grid, torch.ones(5), floor=0.0)


def test_adaptive_schedule_does_not_depend_on_the_default_dtype():
    """float64 throughout: a run under torch.set_default_dtype(float32) (the CLI) gets the same
    betas bit for bit (a float32 intermediate once broke a 2-process-equals-1 test)."""
    grid = schedules.sigmoid(10)
    var = torch.rand(11, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    a = schedules.adaptive(50, grid, var)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        b = schedules.adaptive(50, grid, var)
    finally:
        torch.set_default_dtype(old)
    assert torch.equal(a, b)
