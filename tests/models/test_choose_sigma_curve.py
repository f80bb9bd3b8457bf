"""pyrolik_models.choose_sigma on the one-run sigma curve (issue 18): one run for the whole grid."""

from __future__ import annotations

import types

import pytest
import torch
from pyrolik_models import LinearGaussian, choose_sigma

import pyrolik


def test_a_curve_object_is_read_by_its_sigmas():
    """curve_fn may return the grid in any order with its sigmas (pyrolik's curve is decreasing)."""
    x = torch.zeros(3, 2)
    grid = [0.05, 0.1, 0.2]
    ll = torch.tensor([[1.0, 1.0, 1.0], [5.0, 6.0, 7.0], [2.0, 2.0, 2.0]])  # rows: 0.2, 0.1, 0.05

    calls = []

    def curve(model, x, sigmas):
        calls.append(list(sigmas))
        return types.SimpleNamespace(sigmas=torch.tensor([0.2, 0.1, 0.05]), log_likelihood=ll)

    choice = choose_sigma(None, x, grid, curve_fn=curve)
    assert calls == [grid]  # called once, with the whole grid
    assert choice.sigma == 0.1
    torch.testing.assert_close(choice.log_likelihood, ll.flip(0).double())
    tensor_choice = choose_sigma(None, x, grid, curve_fn=lambda m, x, s: ll.flip(0))
    assert tensor_choice.sigma == 0.1
    with pytest.raises(TypeError, match="exactly one callable"):
        choose_sigma(None, x, grid, lambda m, x, s: torch.zeros(3), curve_fn=curve)
    with pytest.raises(ValueError, match="has no sigma 0.3"):
        choose_sigma(None, x, [0.3], curve_fn=curve)
    with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
        choose_sigma(None, x, [0.05, 0.1], curve_fn=lambda m, x, s: ll)


@pytest.mark.statistical
def test_one_run_chooses_the_sigma_that_made_the_data(seed):
    """Data from a linear-Gaussian decoder with s = 0.5: the one-run curve, read on a grid around
    it, puts its best mean at 0.5, below the exact curve by no more than its Monte Carlo error."""
    lg = LinearGaussian.random(data_dim=6, latent_dim=2, s=0.5, seed=1)
    x = lg.sample(200, torch.Generator().manual_seed(seed))
    grid = [0.25, 0.5, 1.0]
    runs = []

    def curve(model, x, sigmas):
        runs.append(pyrolik.sigma_curve(model, x, sigmas, num_steps=100, num_chains=8, seed=seed,
                                        progress=False))
        return runs[-1]

    choice = choose_sigma(lg, x, grid, curve_fn=curve)
    assert len(runs) == 1 and choice.sigma == 0.5
    exact = torch.stack([LinearGaussian(lg.W, lg.b, s).exact_log_marginal(x) for s in grid])
    err = (choice.log_likelihood - exact).mean(-1)
    se = runs[0].mcse.flip(0).pow(2).sum(-1).sqrt() / x.shape[0]  # grid order: increasing sigma
    assert (err <= 3 * se).all(), (err, se)  # lower bounds
    spread = exact.mean(-1)
    assert (spread[1] - spread[[0, 2]]).min() > 3 * err.abs().max()  # the choice is not noise
