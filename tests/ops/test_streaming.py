"""Sampling-importance-resampling as samples stream in (:mod:`pyrolik.ops.resampling`)."""

from __future__ import annotations

import torch


def test_streaming_resampling_picks_each_sample_with_its_weight():
    """Every slot holds sample j of its block with probability w_j / sum w (chi-square on a
    fixed seed, 5 chunks of unequal size)."""
    from pyrolik.ops.resampling import StreamingResampler

    g = torch.Generator().manual_seed(0)
    k, n = 40, 2000
    lw = torch.randn(k, 1, generator=g, dtype=torch.float64).expand(k, n).contiguous()
    res = StreamingResampler(k, n, g)
    for start, stop in ((0, 3), (3, 17), (17, 18), (18, 33), (33, 40)):
        res.update(lw[start:stop], {"v": torch.arange(start, stop).double()[:, None].expand(
            -1, n)}, start)
    out = res.result()
    assert out["draw_index"].shape == (4, 10, n)
    assert torch.equal(out["draw:v"], out["draw_index"].double())
    assert (out["draw_index"].diff(dim=1) >= 0).all()
    for c in range(4):
        w = torch.softmax(lw[c * 10:(c + 1) * 10, 0], 0)
        counts = torch.bincount(out["draw_index"][c].reshape(-1) - c * 10, minlength=10)
        expected = w * counts.sum()
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < 33.7  # 9 degrees of freedom, p = 1e-4
