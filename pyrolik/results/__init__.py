"""Result objects and their views: the per-example estimates every estimator returns, their
fixed-width summary tables (:mod:`~pyrolik.results.table`) and their xarray / ArviZ export
(:mod:`~pyrolik.results.datatree`).

The classes live in :mod:`pyrolik.results.estimates`; the export reads results by their attributes
and does not import that module, so the estimators (one layer up) build results and never see xarray.
"""

from __future__ import annotations

from pyrolik.results.estimates import (
    KHAT_WARN,
    MIN_WEIGHTS_FOR_MCSE,
    AISResult,
    BDMCResult,
    EstimateResult,
    bits_per_dim,
)

__all__ = ["EstimateResult", "AISResult", "BDMCResult", "KHAT_WARN", "MIN_WEIGHTS_FOR_MCSE",
           "bits_per_dim"]
