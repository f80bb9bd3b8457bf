"""Blocks of chains and systematic resampling (:mod:`pyrolik.ops.stats`)."""

from __future__ import annotations

import numpy as np
import pytest

from pyrolik.ops.stats import num_blocks, systematic


@pytest.mark.parametrize(("k", "c", "expected"), [
    (16, 4, 4), (64, 4, 4), (12, 4, 3), (8, 4, 2), (6, 4, 1), (7, 4, 1), (1, 4, 1), (30, 4, 3),
    (28, 4, 4), (31, 4, 1), (16, 1, 1), (16, 3, 2), (100, 8, 5)])
def test_the_block_rule(k, c, expected):
    """The largest divisor of K up to C leaving 4+ chains per block; 1 block when there is none."""
    assert num_blocks(k, c) == expected
    assert k % expected == 0 and (k // expected >= 4 or expected == 1)


def test_systematic_resampling_keeps_every_count_within_one_of_its_expectation():
    """Systematic resampling: particle i is copied floor(M w_i) or ceil(M w_i) times, sorted."""
    rng = np.random.default_rng(0)
    lw = rng.normal(size=(3, 16, 50)) * 2
    lw[0, :, 0] = -np.inf
    lw[0, 5, 0] = 0.0  # one particle has all the weight
    idx = systematic(lw, rng)
    assert idx.shape == lw.shape and (np.diff(idx, axis=1) >= 0).all()
    w = np.exp(lw - lw.max(1, keepdims=True))
    expected = 16 * w / w.sum(1, keepdims=True)
    counts = np.stack([(idx == i).sum(1) for i in range(16)], axis=1)
    assert (counts >= np.floor(expected - 1e-9)).all() and (counts <= np.ceil(expected + 1e-9)).all()
    assert (idx[0, :, 0] == 5).all()
