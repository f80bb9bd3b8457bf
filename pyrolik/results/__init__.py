"""Result objects and their views: the per-example estimates every estimator returns, their
fixed-width summary tables (:mod:`~pyrolik.results.table`) and their xarray / ArviZ export
(:mod:`~pyrolik.results.convert`: one converter per result kind).

The classes live in :mod:`pyrolik.results.estimates` and :mod:`pyrolik.results.bdmc`, each field
declaring where its export stores it; the export reads results by their attributes and does not
import those modules, so the estimators (one layer up) build results and never see xarray.
"""

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
