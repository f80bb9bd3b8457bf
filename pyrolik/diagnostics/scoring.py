r"""Proper scoring rules for categorical predictive distributions, per example, higher is better (``docs/compare.md``)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SCORES", "log_score", "quadratic_score", "brier_score", "spherical_score", "score"]


def _check(probs: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(q, q_y)``: the checked ``(N, K)`` probabilities and each example's probability of its class."""
    q = np.asarray(probs.detach().cpu() if hasattr(probs, "detach") else probs, dtype=np.float64)
    labels = np.asarray(y.detach().cpu() if hasattr(y, "detach") else y)
    if q.ndim != 2:
        raise ValueError(f"probs must be (N, K) class probabilities; got shape {q.shape}")
    if labels.shape != (q.shape[0],):
        raise ValueError(f"y must hold one class label per row of probs, shape ({q.shape[0]},); "
                         f"got {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        if not np.all(labels == np.round(labels)):
            raise TypeError("y must hold integer class labels")
        labels = labels.astype(np.int64)
    if labels.min(initial=0) < 0 or labels.max(initial=0) >= q.shape[1]:
        raise ValueError(f"labels must lie in [0, {q.shape[1]}); got range "
                         f"[{labels.min()}, {labels.max()}]")
    if not np.isfinite(q).all() or (q < 0).any():
        raise ValueError("probs must be finite and non-negative")
    if not np.allclose(q.sum(1), 1.0, rtol=0, atol=1e-6):
        raise ValueError("each row of probs must sum to 1 (apply softmax to logits first)")
    return q, q[np.arange(len(labels)), labels]


_SHARED = """

    Parameters
    ----------
    probs : array or tensor, shape (N, K)
        Predicted class probabilities, one row per example (rows sum to 1).
    y : array or tensor of int, shape (N,)
        The true class of each example.

    Returns
    -------
    numpy.ndarray, shape (N,)
    """


def _rule(fn: Any) -> Any:
    """A scoring rule: its docstring completed with the parameters every rule shares."""
    fn.__doc__ = (fn.__doc__ or "") + _SHARED
    return fn


@_rule
def log_score(probs: Any, y: Any) -> np.ndarray:
    r"""Logarithmic score :math:`\ln q_{y}` per example (``-inf`` where :math:`q_y = 0`)."""
    _, q_y = _check(probs, y)
    with np.errstate(divide="ignore"):
        return np.log(q_y)


@_rule
def quadratic_score(probs: Any, y: Any) -> np.ndarray:
    r"""Quadratic score :math:`2 q_y - \|q\|^2` per example, in :math:`[-1, 1]`."""
    q, q_y = _check(probs, y)
    return 2 * q_y - (q**2).sum(1)


@_rule
def brier_score(probs: Any, y: Any) -> np.ndarray:
    r"""Brier score :math:`\|q - e_y\|^2 = 1 - \text{quadratic}` per example (lower is better)."""
    return 1.0 - quadratic_score(probs, y)


@_rule
def spherical_score(probs: Any, y: Any) -> np.ndarray:
    r"""Spherical score :math:`q_y / \|q\|` per example, in :math:`[0, 1]`."""
    q, q_y = _check(probs, y)
    return q_y / np.linalg.norm(q, axis=1)


SCORES = {"log": log_score, "quadratic": quadratic_score, "spherical": spherical_score}


def score(probs: Any, y: Any, rule: str = "log") -> np.ndarray:
    """Per-example score under ``rule`` in ``SCORES`` (all oriented so that higher is better).

    Parameters
    ----------
    probs, y
        As in :func:`log_score`.
    rule : {"log", "quadratic", "spherical"}
        The scoring rule.

    Returns
    -------
    numpy.ndarray, shape (N,)

    Examples
    --------
    >>> from pyrolik.diagnostics.scoring import score
    >>> score([[0.9, 0.1], [0.5, 0.5]], [0, 1], rule="quadratic")
    array([0.98, 0.5 ])
    """
    if rule not in SCORES:
        raise ValueError(f"unknown scoring rule {rule!r}; choose one of {sorted(SCORES)}")
    return SCORES[rule](probs, y)
