r"""Bayes factors from whole-data-set evidences: what :func:`pyrolik.compare` does with them (``docs/compare.md``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["EVIDENCE_METHODS", "EVIDENCE_TEST", "is_evidence", "compare_evidence"]

EVIDENCE_METHODS = ("evidence", "reverse evidence")
SCORE = "log evidence"
EVIDENCE_TEST = "normal (MCSE)"  # Comparison.test of a comparison of evidences


def is_evidence(obj: Any) -> bool:
    """Whether ``obj`` is a result of :func:`pyrolik.evidence` (a whole data set's estimate)."""
    return getattr(obj, "method", None) in EVIDENCE_METHODS


def _estimate(name: str, obj: Any) -> tuple[float, float]:
    ll, mcse = obj.log_likelihood, obj.mcse
    if ll.shape[0] != 1:
        raise ValueError(f"{name}: an evidence result of {ll.shape[0]} data sets (evidence_bdmc's "
                         "lower or upper); compare the evidences of one data set, from "
                         "pyrolik.evidence")
    value = float(ll[0])
    se = float(mcse[0]) if mcse is not None else math.nan
    if not math.isfinite(value):
        raise ValueError(f"{name}: the evidence estimate is not finite ({value})")
    return value, se


def compare_evidence(names: list[str], objs: list[Any], level: float, comparison_cls: type) -> Any:
    """A :class:`~pyrolik.diagnostics.comparison.Comparison` of evidences: log Bayes factors."""
    est = {n: _estimate(n, o) for n, o in zip(names, objs, strict=True)}
    bounds = {n: getattr(o, "bound", None) for n, o in zip(names, objs, strict=True)}
    z = stats.norm.ppf(1 - level / 2)
    rows = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (va, sa), (vb, sb) = est[a], est[b]
            diff, se = va - vb, math.hypot(sa, sb)
            p = float(2 * stats.norm.sf(abs(diff) / se)) if se > 0 else float(diff == 0)
            lo, hi = diff - z * se, diff + z * se
            rows.append({
                "score": SCORE, "model_a": a, "model_b": b, "mean_diff": diff, "se": se,
                "p_adjusted": p, "better": (a if diff > 0 else b) if lo > 0 or hi < 0 else None,
                "log_bayes_factor": diff,
                "bayes_factor": math.exp(diff) if diff < 700 else math.inf,
                "ci_low": lo, "ci_high": hi,
            })
    order = sorted(names, key=lambda n: -est[n][0])
    best = order[0]
    table = pd.DataFrame([{
        "score": SCORE, "model": n, "rank": r, "mean": est[n][0], "se": est[n][1],
        "diff_to_best": est[n][0] - est[best][0],
        "dse": math.hypot(est[n][1], est[best][1]) if n != best else 0.0,
        "bound": bounds[n], "method": "evidence"} for r, n in enumerate(order)]
    ).set_index(["score", "model"])
    notes = [
        "evidences of the whole data set: mean_diff is the log Bayes factor of model_a over "
        "model_b, se its Monte Carlo standard error (sqrt of the summed squared MCSEs); better "
        f"names a model when the {1 - level:.0%} interval excludes 0",
    ]
    if all(b == "lower" for b in bounds.values()):
        notes.append("each evidence is a stochastic lower bound: the log Bayes factor also holds "
                     "the difference of the two AIS biases; run pyrolik.evidence_bdmc on each model "
                     "and trust a factor larger than the BDMC gaps")
    per_example = {SCORE: pd.DataFrame({n: np.array([est[n][0]]) for n in names})}
    return comparison_cls(pd.DataFrame(rows), table, notes, float(level), EVIDENCE_TEST, "none",
                          per_example)
