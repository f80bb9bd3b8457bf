"""Blocks of chains and systematic resampling (:mod:`pyrolik.ops.stats`, :mod:`pyrolik.ops.resampling`)."""

from __future__ import annotations

import math

import pytest
import torch

from pyrolik.ops.resampling import systematic
from pyrolik.ops.stats import lognormal_bias, num_blocks


@pytest.mark.parametrize(("k", "c", "expected"), [
    (16, 4, 4), (64, 4, 4), (12, 4, 3), (8, 4, 2), (6, 4, 1), (7, 4, 1), (1, 4, 1), (30, 4, 3),
    (28, 4, 4), (31, 4, 1), (16, 1, 1), (16, 3, 2), (100, 8, 5)])
def test_the_block_rule(k, c, expected):
    """The largest divisor of K up to C leaving 4+ chains per block; 1 block when there is none."""
    assert num_blocks(k, c) == expected
    assert k % expected == 0 and (k // expected >= 4 or expected == 1)


@pytest.mark.parametrize(("k", "c", "islands", "expected"), [
    (16, 4, 4, 4), (16, 4, 2, 2), (16, 8, 4, 4), (32, 4, 8, 4), (12, 4, 3, 3), (8, 4, 1, 1),
    (24, 4, 6, 3)])
def test_blocks_hold_whole_islands(k, c, islands, expected):
    """Resampled chains are split only into whole islands: the blocks stay independent."""
    assert num_blocks(k, c, islands) == expected and islands % expected == 0


def test_systematic_resampling_keeps_the_expected_offspring():
    """Chain k is drawn floor or ceil of num W_k times, sorted; a zero weight never; a column
    without a finite weight keeps its chains in order; any number of draws and batch shape."""
    g = torch.Generator().manual_seed(0)
    lw = torch.randn(8, 3, 2, generator=g, dtype=torch.float64) * 2.0
    lw[2, 0, 0] = -math.inf
    lw[:, 1, 1] = -math.inf  # a failed column
    for num in (8, 5, 20):
        idx = systematic(lw, num, generator=g)
        assert idx.shape == (num, 3, 2) and idx.dtype == torch.long
        ok = torch.isfinite(lw).any(0)
        assert (idx.diff(dim=0) >= 0)[:, ok].all()
        for i, j in ((0, 0), (0, 1), (1, 0), (2, 1)):
            offspring = torch.bincount(idx[:, i, j], minlength=8).double()
            assert ((offspring - num * torch.softmax(lw[:, i, j], 0)).abs() < 1).all()
        assert not (idx[:, 0, 0] == 2).any()
        assert torch.equal(idx[:, 1, 1], torch.arange(num) % 8)


def test_systematic_resampling_is_unbiased_for_the_weights():
    """The mean offspring count over many uniforms is num W_k (Kitagawa 1996)."""
    lw = torch.tensor([0.0, 1.5, -2.0, 0.3], dtype=torch.float64)
    idx = systematic(lw.unsqueeze(1).expand(4, 20_000), 3, generator=torch.Generator().manual_seed(1))
    mean = torch.stack([(idx == k).double().sum(0) for k in range(4)]).mean(1)
    torch.testing.assert_close(mean, 3 * torch.softmax(lw, 0), atol=0.02, rtol=0)


def test_the_log_normal_bias_has_its_known_answers():
    """One weight: E log w = log E w - v/2 exactly; many, small v: (e^v - 1) / (2K) (the delta
    method); it falls with the number of weights and rises with their spread."""
    assert lognormal_bias(1, 2.0) == pytest.approx(1.0, abs=0.03)
    for k in (4, 16):
        assert lognormal_bias(k, 0.1) == pytest.approx(math.expm1(0.1) / (2 * k), rel=0.1)
    assert lognormal_bias(4, 3.0) > lognormal_bias(8, 3.0) > lognormal_bias(8, 1.0)
    assert lognormal_bias(8, 2.0) == lognormal_bias(8, 2.0)  # a fixed stream
