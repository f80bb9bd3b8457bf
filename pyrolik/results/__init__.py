"""Result objects and their views: per-example estimates, summary tables, xarray / ArviZ export."""

from __future__ import annotations

from pyrolik.results.bdmc import BDMCResult
from pyrolik.results.estimates import (
    KHAT_WARN,
    MIN_WEIGHTS_FOR_MCSE,
    AISResult,
    EstimateResult,
    bits_per_dim,
)

__all__ = ["EstimateResult", "AISResult", "BDMCResult", "KHAT_WARN", "MIN_WEIGHTS_FOR_MCSE",
           "bits_per_dim"]
