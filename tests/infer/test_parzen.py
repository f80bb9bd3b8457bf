"""The Parzen/KDE baseline against closed forms."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import pyrolik
from pyrolik.infer.parzen import kde_log_density


def test_single_sample_kde_is_a_gaussian_density():
    s = torch.randn(1, 4)
    x = torch.randn(6, 4)
    out = kde_log_density(s, x, torch.tensor([0.3, 2.0]))
    for i, h in enumerate((0.3, 2.0)):
        ref = torch.distributions.Normal(s[0], h).log_prob(x).sum(-1)
        torch.testing.assert_close(out[i], ref)
    with pytest.raises(ValueError, match="needs at least one sample"):  # a reshape error before
        kde_log_density(s[:0], x, torch.tensor([1.0]))


def test_data_far_from_the_origin_next_to_the_bandwidth_keep_their_digits():
    """float32 data far from the origin next to h (raw grey levels) lost the digits of the offset
    when distances were expanded as |x|^2 + |s|^2 - 2 x.s: one shared offset, then two groups far
    apart (background 0, strokes 255), where no one offset is common to the samples."""
    g = torch.Generator().manual_seed(0)
    one = [200 + 0.3 * torch.randn(n, 64, generator=g) for n in (200, 5)]
    two = [torch.cat([0.3 * torch.randn(100, 64, generator=g), 255 + 0.3 * torch.randn(100, 64, generator=g)]),
           255 + 0.3 * torch.randn(5, 64, generator=g)]
    for (s, x), h in itertools.product((one, two), (0.3, 0.1)):
        exact = (torch.distributions.Normal(s.double().unsqueeze(0), h).log_prob(x.double().unsqueeze(1))
                 .sum(-1).logsumexp(1) - math.log(200))
        got = pyrolik.kde(s, x, bandwidth=h, progress=False).log_likelihood
        torch.testing.assert_close(got.double(), exact, atol=1e-4 * exact.abs().max().item(), rtol=0)


def test_chunking_does_not_change_the_value():
    s, x = torch.randn(50, 3), torch.randn(4, 3)
    a = kde_log_density(s, x, torch.tensor([0.5]), chunk_size=7)
    b = kde_log_density(s, x, torch.tensor([0.5]), chunk_size=1000)
    torch.testing.assert_close(a, b)


@pytest.mark.statistical
def test_kde_of_gaussian_samples_approaches_the_smoothed_density():
    """Samples from N(0, 1) in 1-D: the KDE estimates the density of N(0, 1 + h^2)."""
    g = torch.Generator().manual_seed(0)
    s = torch.randn(200_000, 1, generator=g)
    x = torch.linspace(-2, 2, 5).reshape(-1, 1)
    h = 0.5
    r = pyrolik.kde(s, x, bandwidth=h, progress=False)
    ref = torch.distributions.Normal(0.0, math.sqrt(1 + h**2)).log_prob(x[:, 0])
    torch.testing.assert_close(r.log_likelihood, ref, atol=0.02, rtol=0)
    assert r.bound is None


def test_bandwidth_grid_is_chosen_on_validation_data():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(2000, 2, generator=g)
    valid, x = torch.randn(200, 2, generator=g), torch.randn(50, 2, generator=g)
    r = pyrolik.kde(s, x, bandwidth=[0.01, 0.1, 0.3, 1.0, 3.0], validation=valid, progress=False)
    scores = r.settings["validation_log_likelihood"]
    assert r.settings["bandwidth"] == r.settings["bandwidth_grid"][scores.index(max(scores))]
    assert 0.1 <= r.settings["bandwidth"] <= 1.0
    with pytest.raises(ValueError, match="needs validation"):
        pyrolik.kde(s, x, bandwidth=[0.1, 1.0])
    with pytest.raises(ValueError, match="not the evaluated x"):
        pyrolik.kde(s, x, bandwidth=[0.1, 1.0], validation=x)
    for bad in (-1.0, [], True, [0.1, float("inf")]):
        with pytest.raises(ValueError, match="bandwidth must be a positive finite number"):
            pyrolik.kde(s, x, bandwidth=bad)
    with pytest.raises(ValueError, match="event shape"):
        pyrolik.kde(s, torch.randn(3, 5), bandwidth=1.0)


def test_kde_errors_name_the_argument_at_fault():
    s, x, v = torch.randn(30, 3), torch.randn(5, 3), torch.randn(20, 3)
    with pytest.raises(ValueError, match=r"validation has event shape \(2,\) but x has \(3,\)"):
        pyrolik.kde(s, x, bandwidth=[0.5, 1.0], validation=v[:, :2], progress=False)
    with pytest.raises(ValueError, match=r"samples contains NaN or inf in examples \[30\]"):
        pyrolik.kde(torch.cat([s, torch.full((1, 3), float("nan"))]), x, bandwidth=0.5)
    with pytest.raises(TypeError, match=r"samples must be a torch.Tensor.*as_tensor\(samples"):
        pyrolik.kde(s.numpy(), x, bandwidth=0.5)
    with pytest.raises(ValueError, match="validation contains NaN"):
        pyrolik.kde(s, x, bandwidth=[0.5, 1.0], validation=torch.full_like(v, float("nan")))
