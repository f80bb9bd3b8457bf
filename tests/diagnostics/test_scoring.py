"""Proper scoring rules: closed-form values, the expected-score identities, and propriety."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pyrolik.diagnostics import scoring


def test_closed_form_values():
    q = np.array([[0.5, 0.3, 0.2], [0.0, 1.0, 0.0]])
    y = np.array([0, 1])
    np.testing.assert_allclose(scoring.log_score(q, y), [math.log(0.5), 0.0])
    np.testing.assert_allclose(scoring.quadratic_score(q, y), [1.0 - 0.38, 1.0])
    np.testing.assert_allclose(scoring.brier_score(q, y), [0.25 + 0.09 + 0.04, 0.0])
    np.testing.assert_allclose(scoring.spherical_score(q, y), [0.5 / math.sqrt(0.38), 1.0])
    # torch input, and a zero probability on the observed class
    qt = torch.tensor([[0.0, 1.0]])
    assert scoring.log_score(qt, torch.tensor([0]))[0] == -np.inf
    assert scoring.quadratic_score(qt, torch.tensor([0]))[0] == -1.0
    assert scoring.score(q, y, "spherical")[1] == 1.0


def _expected(rule, q, f):
    """E_{y ~ f}[S(q, y)] by summing over the K classes."""
    k = len(f)
    return sum(f[i] * rule(q[None], np.array([i]))[0] for i in range(k))


def test_expected_scores_are_divergences_plus_entropies(seed):
    rng = np.random.default_rng(seed)
    f, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    kl = float(np.sum(f * np.log(f / q)))
    entropy = -float(np.sum(f * np.log(f)))
    assert _expected(scoring.log_score, q, f) == pytest.approx(-kl - entropy)
    # seed eq. (11): E[2 q_y - ||q||^2] = ||f||^2 - ||f - q||^2
    assert _expected(scoring.quadratic_score, q, f) == pytest.approx(f @ f - (f - q) @ (f - q))
    assert _expected(scoring.spherical_score, q, f) == pytest.approx(f @ q / np.linalg.norm(q))


@pytest.mark.parametrize("rule", ["log", "quadratic", "spherical"])
def test_rules_are_strictly_proper(rule, seed):
    rng = np.random.default_rng(seed)
    fn = scoring.SCORES[rule]
    for _ in range(20):
        f = rng.dirichlet(np.ones(4))
        truthful = _expected(fn, f, f)
        for q in rng.dirichlet(np.ones(4), size=50):
            assert _expected(fn, q, f) < truthful


def test_bad_input_raises():
    q = np.array([[0.5, 0.5]])
    with pytest.raises(ValueError, match="sum to 1"):
        scoring.log_score(np.array([[0.5, 0.6]]), [0])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\)"):
        scoring.log_score(q, [2])
    with pytest.raises(ValueError, match="one class label per row"):
        scoring.log_score(q, [0, 1])
    with pytest.raises(ValueError, match=r"\(N, K\)"):
        scoring.log_score(np.array([0.5, 0.5]), [0])
    with pytest.raises(TypeError, match="integer"):
        scoring.log_score(q, [0.5])
    with pytest.raises(ValueError, match="unknown scoring rule"):
        scoring.score(q, [0], "hinge")
