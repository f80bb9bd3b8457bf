"""The frozen step-size table: log-linear interpolation in beta, rows and concatenation of batches."""

from __future__ import annotations

import math

import torch

from pyrolik.annealing.step_sizes import StepSizes, rows_of


def _table(n=3, d=2):
    betas = torch.tensor([0.0, 0.5, 1.0])
    log_eps = torch.log(torch.tensor([[0.1] * n, [0.4] * n, [0.2] * n]))
    inv_mass = torch.stack([torch.full((n, d), v) for v in (1.0, 4.0, 2.0)])
    var = torch.arange(3 * n, dtype=torch.float64).reshape(3, n)
    return StepSizes(betas, log_eps, inv_mass, var)


def test_at_the_grid_points_gives_the_table():
    t = _table()
    eps, m = t.at(torch.tensor([0.0, 0.5, 1.0]))
    torch.testing.assert_close(eps[:, 0], torch.tensor([0.1, 0.4, 0.2]))
    torch.testing.assert_close(m[:, 0, 0], torch.tensor([1.0, 4.0, 2.0]))


def test_between_grid_points_the_log_step_size_is_linear_in_beta():
    eps, m = _table().at(torch.tensor([0.25, 0.75]))
    torch.testing.assert_close(eps[0, 0], torch.tensor(math.sqrt(0.1 * 0.4)))  # geometric mean
    torch.testing.assert_close(eps[1, 0], torch.tensor(math.sqrt(0.4 * 0.2)))
    torch.testing.assert_close(m[0, 0, 0], torch.tensor(2.0))


def test_outside_the_grid_the_end_values_hold():
    t = StepSizes(torch.tensor([0.2, 1.0]), torch.log(torch.tensor([[0.3], [0.6]])))
    eps, m = t.at(torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(eps[:, 0], torch.tensor([0.3, 0.6]))
    assert m is None


def test_rows_and_concat_are_inverse():
    t = _table(n=5)
    back = StepSizes.concat([t.rows(0, 2), t.rows(2, 5)])
    for a, b in zip(t, back, strict=True):
        torch.testing.assert_close(a, b)


def test_rows_of_is_chain_major():
    out = rows_of(torch.tensor([1.0, 2.0]), num_chains=2, num_examples=3)
    assert out.tolist() == [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    assert rows_of(torch.tensor([5.0]), num_chains=2, num_examples=2).tolist() == [5.0] * 4


def test_at_per_chain_and_example_equals_at_per_chain_column_by_column():
    """Betas (C, N) (examples with their own stops) read each example's row of the table at its
    own beta: the same numbers, bit for bit, as reading every example at that beta."""
    g = torch.Generator().manual_seed(0)
    t = StepSizes(torch.tensor([0.0, 0.3, 0.7, 1.0]), torch.randn(4, 3, generator=g),
                  torch.rand(4, 3, 2, generator=g) + 0.5)
    beta = torch.tensor([[0.1, 0.7, 1.0], [0.0, 0.5, 0.9]])
    eps, m = t.at(beta)
    assert eps.shape == (2, 3) and m.shape == (2, 3, 2)
    for c in range(2):
        for n in range(3):
            e1, m1 = t.at(beta[c, n].reshape(1))
            assert torch.equal(eps[c, n], e1[0, n]) and torch.equal(m[c, n], m1[0, n])


def test_cut_keeps_the_table_below_and_reads_it_at_the_cut():
    t = _table(n=2)
    cut = t.cut(0.75)
    torch.testing.assert_close(cut.betas, torch.tensor([0.0, 0.5, 0.75]))
    eps, m = t.at(torch.tensor([0.75]))
    torch.testing.assert_close(cut.log_step_size[-1], eps[0].log())
    torch.testing.assert_close(cut.inv_mass[-1], m[0])
    torch.testing.assert_close(cut.log_ratio_var[-1], 0.5 * (t.log_ratio_var[1] + t.log_ratio_var[2]))
    assert torch.equal(cut.log_step_size[:2], t.log_step_size[:2])
    for a, b in zip(t.cut(1.0), t, strict=True):  # at the end: the same table
        torch.testing.assert_close(a, b)
