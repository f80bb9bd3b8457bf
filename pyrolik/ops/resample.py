r"""Weighted draws to equally weighted ones: blocks of chains and systematic resampling.

ArviZ has no weighted draws, so the export resamples: the ``K`` chains (or importance samples) of
every example are split into ``C`` blocks of ``M = K / C`` consecutive chains, and each block's
``M`` final states are resampled ``M`` times by their normalised weights. A block is then one
ArviZ ``chain`` of ``M`` equally weighted ``draw``\ s; the blocks are independent estimators, so
ArviZ's between-chain diagnostics (``r_hat``, ``ess_bulk``) measure how noisy the resampled
posterior summaries are.

The number of blocks (:func:`num_blocks`): the largest divisor of ``K`` not above the requested
``C`` that leaves at least 4 chains per block (ArviZ's diagnostics need 4 draws per chain), and 1
block when there is none (``K < 8``). ``K = 16, C = 4``: 4 blocks of 4; ``K = 12``: 3 of 4;
``K = 8``: 2 of 4; ``K = 6``: 1 block of 6; ``K = 28``: 4 of 7; ``K = 30``: 3 of 10;
``K = 31`` (prime): 1 block of 31; ``C = 1``: one block. Every chain is used once; none is dropped.
With one block ArviZ computes no ``r_hat``, ``ess`` or ``mcse`` (it needs 2 chains of 4 draws):
use ``K >= 8`` chains, a multiple of ``C``, for its diagnostics.

Systematic resampling (Kitagawa 1996; Douc, Cappe & Moulines 2005): one uniform offset
:math:`u \sim U(0, 1)` per block and example, draw :math:`j` takes the particle whose cumulative
normalised weight first passes :math:`(u + j) / M`. The indices come out sorted, so copies of a
particle are adjacent; shuffled copies would look like independent draws to ArviZ's ESS.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["num_blocks", "check_blocks", "systematic", "DEFAULT_BLOCKS"]

#: Blocks (ArviZ chains) of the export by default, as ``chains=4`` elsewhere in ArviZ.
DEFAULT_BLOCKS = 4
#: Fewest chains per block: ArviZ's diagnostics need at least 4 draws per chain.
MIN_DRAWS = 4


def check_blocks(requested: Any) -> None:
    """Refuse a ``num_blocks`` that is not a positive int, naming the fix."""
    if isinstance(requested, bool) or not isinstance(requested, int | np.integer):
        raise TypeError(f"num_blocks must be an int (the number of ArviZ chains), got "
                        f"{type(requested).__name__}; pass e.g. num_blocks=4")
    if requested < 1:
        raise ValueError(f"num_blocks must be at least 1 (the number of ArviZ chains), got "
                         f"{requested}; pass e.g. num_blocks=4")


def num_blocks(num_chains: int, requested: int = DEFAULT_BLOCKS) -> int:
    """The number of blocks ``K`` chains are split into (rule in the module docstring)."""
    check_blocks(requested)
    return max(c for c in range(1, max(1, min(requested, num_chains // MIN_DRAWS)) + 1)
               if num_chains % c == 0)


def systematic(log_weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sorted systematic-resampling indices along axis 1 of ``log_weights`` ``(C, M, N)``.

    Returns ``(C, M, N)`` integer indices into axis 1 (each column nondecreasing). A column whose
    weights are all zero (``-inf``) or not finite falls back to the identity (its draws stay
    unweighted, and its ``log_weight`` in ``sample_stats`` shows why).
    """
    c, m, n = log_weights.shape
    lw = np.asarray(log_weights, dtype=np.float64)
    top = np.max(lw, axis=1, keepdims=True)
    ok = np.isfinite(top) & ~np.isnan(lw).any(axis=1, keepdims=True)
    w = np.where(ok, np.exp(lw - np.where(ok, top, 0.0)), 1.0)
    w = np.where(np.isnan(w), 0.0, w)
    cdf = np.cumsum(w, axis=1)
    cdf = cdf / cdf[:, -1:, :]
    # every (block, example) column in one sorted array: column j's cdf shifted by j
    cols = np.arange(c * n, dtype=np.float64).reshape(c, 1, n)
    flat = np.moveaxis(np.minimum(cdf, 1.0) + cols, 1, -1).reshape(-1)
    offset = rng.random((c, 1, n))
    pos = (offset + np.arange(m).reshape(1, m, 1)) / m + cols
    idx = np.searchsorted(flat, np.moveaxis(pos, 1, -1).reshape(-1), side="right")
    idx = idx.reshape(c, n, m) - (np.arange(c * n).reshape(c, n, 1) * m)
    return np.moveaxis(np.clip(idx, 0, m - 1), -1, 1)
