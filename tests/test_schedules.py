"""Schedules: exact endpoints, strictly increasing, right length; validation of user tensors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pyrolik.mcmc import schedules


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
