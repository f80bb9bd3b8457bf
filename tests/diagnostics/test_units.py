"""Units: closed-form Gaussians under scaling and affine maps; dequantization by exact sums."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.distributions import MultivariateNormal, Normal

from pyrolik.diagnostics import units


def test_bits_and_nats_round_trip_and_uniform_bytes():
    assert units.nats_to_bits(math.log(8.0)) == pytest.approx(3.0)
    assert units.bits_to_nats(units.nats_to_bits(1.234)) == pytest.approx(1.234)
    # a uniform distribution over 256 levels in each of D dims costs exactly 8 bits/dim
    d = 784
    nll = d * math.log(256)
    assert units.nats_to_bits_per_dim(nll, d) == pytest.approx(8.0)
    assert units.bits_per_dim_to_nats(8.0, d) == pytest.approx(nll)
    arr = np.array([nll, 2 * nll])
    np.testing.assert_allclose(units.nats_to_bits_per_dim(arr, d), [8.0, 16.0])
    # uniform density on [0, 1]^D, dequantized 8-bit data: again 8 bits/dim
    assert units.nll_bits_per_dim(0.0, d, levels=256) == pytest.approx(8.0)


def _gaussian(k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(k, generator=g)
    L = torch.randn(k, k, generator=g) / k + torch.eye(k)
    x = torch.randn(10, k, generator=g) * 2 + mu
    return mu, L @ L.T, x


def test_rescaling_matches_the_closed_form_gaussian(seed):
    k = 4
    mu, cov, x = _gaussian(k, seed)
    exact = MultivariateNormal(mu, cov).log_prob(x)
    sigma = 3.7
    scaled = MultivariateNormal(mu / sigma, cov / sigma**2).log_prob(x / sigma)
    torch.testing.assert_close(units.rescale_log_density(scaled, sigma, k), exact)
    # NLL_original = NLL_scaled + k log sigma
    torch.testing.assert_close(-exact, -scaled + k * math.log(sigma))
    # one scale per dimension
    s = torch.tensor([0.5, 2.0, 3.0, 10.0])
    scaled_d = MultivariateNormal(mu / s, cov / torch.outer(s, s)).log_prob(x / s)
    torch.testing.assert_close(units.rescale_log_density(scaled_d, s), exact)


@pytest.mark.parametrize("form", ["scalar", "diagonal", "matrix"])
def test_affine_map_matches_the_closed_form_gaussian(form, seed):
    k = 3
    mu, cov, x = _gaussian(k, seed)
    c = torch.tensor([1.0, -2.0, 0.5])
    g = torch.Generator().manual_seed(seed + 1)
    A_arg = {
        "scalar": torch.tensor(-0.3),
        "diagonal": torch.tensor([2.0, -0.1, 5.0]),
        "matrix": torch.randn(k, k, generator=g),
    }[form]
    if form == "scalar":
        A = A_arg * torch.eye(k)
    else:
        A = torch.diag(A_arg) if form == "diagonal" else A_arg
    y = x @ A.T + c
    log_py = MultivariateNormal(A @ mu + c, A @ cov @ A.T).log_prob(y)
    torch.testing.assert_close(
        units.affine_log_density(log_py, A_arg, num_dims=k),
        MultivariateNormal(mu, cov).log_prob(x),
    )


def _cell_gaussian(mu: float, s: float, levels: int):
    """Exact P(k) and E_u log p(k + u) for p = N(mu, s^2) per dim, on the integer scale."""
    k = torch.arange(levels, dtype=torch.float64)
    n = Normal(mu, s)
    log_cell = torch.log(n.cdf(k + 1) - n.cdf(k))
    # E_u[(k + u - mu)^2] = (k - mu + 1/2)^2 + 1/12 for u ~ U[0, 1)
    e_log = -0.5 * math.log(2 * math.pi * s**2) - ((k - mu + 0.5) ** 2 + 1 / 12) / (2 * s**2)
    return log_cell, e_log


def test_dequantized_nll_upper_bounds_the_discrete_nll_exactly():
    # D = 2 dims, 5 levels each, a product of Gaussians on the integer scale: everything exact.
    levels, d = 5, 2
    cells = [_cell_gaussian(1.7, 0.8, levels), _cell_gaussian(3.1, 1.9, levels)]
    log_P = cells[0][0][:, None] + cells[1][0][None, :]  # (5, 5) exact log P(k)
    e_log_int = cells[0][1][:, None] + cells[1][1][None, :]  # E_u log p~(k + u)
    # on [0, 1]: p(x) = L^D p~(L x), so E_u log p((k + u)/L) = E_u log p~(k + u) + D log L
    e_log_unit = e_log_int + d * math.log(levels)
    bound = units.discrete_log_prob_bound(e_log_unit, d, levels=levels)
    torch.testing.assert_close(bound, e_log_int)
    assert (bound < log_P).all()
    torch.testing.assert_close(units.discrete_log_prob_bound(e_log_int, d, levels, rescaled=False),
                               e_log_int)
    # cross-entropy under any data distribution P_d: continuous NLL >= discrete NLL
    g = torch.Generator().manual_seed(0)
    p_data = torch.rand(levels, levels, generator=g)
    p_data /= p_data.sum()
    assert -(p_data * bound).sum() >= -(p_data * log_P).sum()


def test_dequantization_bound_is_tight_for_a_histogram_density(seed):
    # p constant on every cell (a histogram on [0, 1]^D): the bound is an equality for any u.
    levels, d = 4, 3
    g = torch.Generator().manual_seed(seed)
    P = torch.rand((levels,) * d, generator=g)
    P /= P.sum()
    k = torch.randint(levels, (50, d), generator=g)
    u = torch.rand(50, d, generator=g)
    x = (k + u) / levels
    cell = (x * levels).floor().long()
    log_p = torch.log(P[tuple(cell.T)] * levels**d)  # density of the histogram at x
    torch.testing.assert_close(units.discrete_log_prob_bound(log_p, d, levels),
                               torch.log(P[tuple(k.T)]))


def test_nll_bits_per_dim_composes_scale_and_levels():
    d, sigma = 10, 2.0
    ll_scaled = -5.0
    expected = -(ll_scaled - d * math.log(sigma) - d * math.log(256)) / (d * math.log(2))
    assert units.nll_bits_per_dim(ll_scaled, d, scale=sigma, levels=256) == pytest.approx(expected)
    # per-example dimension counts (masked data): each example's own k in every term
    dims = torch.tensor([10, 4])
    got = units.nll_bits_per_dim(torch.tensor([ll_scaled, ll_scaled]), dims, scale=sigma, levels=256)
    assert got[0].item() == pytest.approx(expected)
    assert got[1].item() == pytest.approx(-(ll_scaled - 4 * math.log(sigma) - 4 * math.log(256))
                                          / (4 * math.log(2)))
    with pytest.raises(ValueError, match="a scale per dimension needs every example"):
        units.rescale_log_density(torch.zeros(2), torch.ones(10), dims)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="num_dims"):
        units.nats_to_bits_per_dim(1.0, 0)
    with pytest.raises(ValueError, match="num_dims"):
        units.rescale_log_density(1.0, 2.0)
    with pytest.raises(ValueError, match="positive"):
        units.rescale_log_density(1.0, -2.0, 3)
    with pytest.raises(ValueError, match="num_dims=2 but scale has 3"):
        units.rescale_log_density(1.0, [1.0, 2.0, 3.0], 2)
    with pytest.raises(ValueError, match="singular"):
        units.affine_log_density(1.0, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="square"):
        units.affine_log_density(1.0, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="levels"):
        units.discrete_log_prob_bound(1.0, 3, levels=0)
    with pytest.raises(ValueError, match=r"levels must be a positive int \(the integer data's number of"):
        units.nll_bits_per_dim(1.0, 3, levels=2.0)  # named "the number of data dimensions"
    assert units.nll_bits_per_dim(0.0, 3, levels=2) == pytest.approx(1.0)  # the fix it suggests


def test_units_doc_shows_the_real_defaults():
    doc = (Path(__file__).parents[2] / "docs" / "units.md").read_text()
    levels = inspect.signature(units.nll_bits_per_dim).parameters["levels"].default
    assert f"`nll_bits_per_dim(log_p, D, *, levels={levels}, scale=None)`" in doc  # showed 256
