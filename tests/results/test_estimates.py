"""Result classes: what mean, stderr and failed mean, and the bits-per-dimension formula."""

from __future__ import annotations

import math

import pytest
import torch

from pyrolik.results import EstimateResult, bits_per_dim


def test_mean_and_stderr_leave_failed_examples_out():
    ll = torch.tensor([-1.0, -3.0, float("nan"), -float("inf"), -2.0])
    r = EstimateResult(method="test", log_likelihood=ll, bound="lower")
    assert r.failed.tolist() == [False, False, True, True, False]
    assert r.mean == pytest.approx(-2.0)
    assert r.stderr == pytest.approx(1.0 / math.sqrt(3))  # sd 1 of [-1, -3, -2], over sqrt(3)
    assert r.num_examples == 5


def test_all_failed_gives_nan_not_an_error():
    r = EstimateResult(method="test", log_likelihood=torch.full((2,), float("nan")), bound=None)
    assert math.isnan(r.mean) and math.isnan(r.stderr)


def test_bits_per_dim_is_the_nll_in_bits_over_the_dimensions():
    assert bits_per_dim(-math.log(2.0) * 784, 784) == pytest.approx(1.0)
    torch.testing.assert_close(bits_per_dim(torch.tensor([-10.0]), 5),
                               torch.tensor([10.0 / (5 * math.log(2.0))]))
