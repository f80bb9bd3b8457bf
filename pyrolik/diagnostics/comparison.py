r"""Paired comparison of models on the same held-out examples: tests, corrections, ranked tables;
whole data sets' evidences by Bayes factor (``docs/compare.md``)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

from pyrolik.diagnostics.scoring import SCORES
from pyrolik.exceptions import DiagnosticWarning

__all__ = ["Comparison", "compare", "holm"]

_TESTS = ("t", "wilcoxon")
EVIDENCE_METHODS = ("evidence", "reverse evidence")
EVIDENCE_SCORE = "log evidence"
EVIDENCE_TEST = "normal (MCSE)"  # Comparison.test of a comparison of evidences


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    r"""Holm's (1979) step-down adjusted p-values (controls the family-wise error rate).

    Parameters
    ----------
    pvalues : sequence of float
        The unadjusted p-values of the family.

    Returns
    -------
    numpy.ndarray
        The adjusted p-values, in the order given.

    Examples
    --------
    >>> from pyrolik.diagnostics.comparison import holm
    >>> holm([0.01, 0.04, 0.03])
    array([0.03, 0.06, 0.06])
    """
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1 or ((p < 0) | (p > 1)).any() or np.isnan(p).any():
        raise ValueError("pvalues must be a 1-D array of numbers in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted_sorted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted_sorted
    return out


_ADJUST: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "holm": holm, "bonferroni": lambda p: np.minimum(1.0, p * p.size), "none": np.copy}


@dataclass
class _Entry:
    name: str
    scores: dict[str, np.ndarray]
    bound: str | None
    method: str | None
    gap: float | None
    x: Any = None  # the data a result was computed on, when it carries them


@dataclass
class Comparison:
    """Outcome of :func:`compare`: ``pairs``, one row per (score, model_a, model_b) with
    ``mean_diff`` (a minus b), ``se``, the interval, both tests, ``p_adjusted`` and ``better``;
    ``table``, the models ranked per score rule; ``notes``, what the differences may contain;
    ``per_example``, the scores per rule, one column per model (``docs/compare.md``)."""

    pairs: pd.DataFrame
    table: pd.DataFrame
    notes: list[str]
    level: float
    test: str
    correction: str
    per_example: dict[str, pd.DataFrame] = field(repr=False)

    @property
    def better(self) -> str | None:
        """The significantly better of two models under the first score rule, else None."""
        first = self.pairs.iloc[0]
        if len(self.pairs.loc[self.pairs["score"] == first["score"]]) != 1:
            raise ValueError("better is defined for two models; read .pairs or .table for more")
        return first["better"] if isinstance(first["better"], str) else None

    def __str__(self) -> str:
        header = (f"Paired comparison ({self.test}-test, {self.correction} correction, "
                  f"level {self.level:g}); scores are per example, higher is better.")
        if self.test == EVIDENCE_TEST:
            header = (f"Bayes factors of whole-data-set evidences (a normal interval from the MCSEs, "
                      f"level {self.level:g}); higher is better.")
        lines = [header, self.table.to_string(float_format=lambda v: f"{v:.4g}"), "",
                 self.pairs.to_string(float_format=lambda v: f"{v:.4g}")]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_arviz(self, score: str = "log",
                 method: Literal["stacking", "BB-pseudo-BMA", "pseudo-BMA"] = "stacking",
                 ) -> pd.DataFrame:
        r"""``arviz.compare`` on the per-example scores: ELPD differences, ``dse`` and weights."""
        import arviz as az
        import xarray as xr
        from arviz.stats.stats_utils import ELPDData

        frame = self.per_example[score]
        n = len(frame)
        elpds = {name: ELPDData(data=[col.sum(), math.sqrt(n * col.var(ddof=0)), 0.0, 1, n, False,
                                      xr.DataArray(col.to_numpy(), dims=["example"]), "log"],
                                index=["elpd_loo", "se", "p_loo", "n_samples", "n_data_points",
                                       "warning", "loo_i", "scale"])
                 for name, col in frame.items()}
        with warnings.catch_warnings():
            # ArviZ 0.23 calls sort_values(inplace=True), deprecated in pandas 3.1
            warnings.filterwarnings("ignore", message=".*inplace keyword.*")
            return az.compare(elpds, method=method)


def _unpack(models: tuple) -> tuple[list | None, list]:
    """``(the dict's keys or None, the models)`` of positional models or one ``{name: model}``."""
    if len(models) == 1 and isinstance(models[0], Mapping):
        return list(models[0]), list(models[0].values())
    return None, list(models)


def _evidences(models: tuple, names: Sequence[str] | None) -> tuple[list[str], list] | None:
    """``(names, results)`` when every model is a data set's evidence; None when none is."""
    keys, objs = _unpack(models)
    names = keys if names is None else names
    kinds = [getattr(o, "method", None) in EVIDENCE_METHODS for o in objs]
    if not any(kinds):
        return None
    if not all(kinds):
        raise ValueError("compare got evidences of whole data sets (pyrolik.evidence) beside "
                         "per-example estimates: a data set's log p(x_1..N) and per-example "
                         "log p(x_n) are not comparable; compare evidences with evidences")
    if len(objs) < 2:
        raise ValueError("compare needs at least two models")
    names = [str(n) for n in names] if names is not None else [f"model_{i}"
                                                               for i in range(len(objs))]
    if len(names) != len(objs) or len(set(names)) != len(names):
        raise ValueError(f"give {len(objs)} unique names for {len(objs)} models; got {names}")
    return names, objs


def _as_scores(obj: Any, y: Any, rules: Sequence[str]) -> dict[str, np.ndarray]:
    if y is not None:
        return {rule: SCORES[rule](obj, y) for rule in rules}
    # a BDMC sandwich is compared at its midpoint (a note says so)
    values = obj.midpoint if hasattr(obj, "midpoint") else getattr(obj, "log_likelihood", obj)
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"per-example scores must be 1-D (N,); got shape {arr.shape} (for class "
                         "probabilities (N, K) pass y= the observed labels)")
    return {"log": arr}


def _entries(models: tuple, names: Sequence[str] | None, y: Any, rules: Sequence[str],
             gaps: Mapping[str, float] | None) -> list[_Entry]:
    keys, objs = _unpack(models)
    if keys is not None and names is not None:
        raise ValueError("give names either as dict keys or as names=, not both")
    if names is None:
        names = keys or [getattr(o, "name", None) or getattr(o, "method", None) or f"model_{i}"
                         for i, o in enumerate(objs)]
        if len(set(names)) != len(names):  # e.g. two models scored by one estimator
            names = [f"{n}_{i}" for i, n in enumerate(names)]
    names = [str(n) for n in names]
    if len(objs) < 2:
        raise ValueError("compare needs at least two models")
    if len(names) != len(objs):
        raise ValueError(f"{len(names)} names for {len(objs)} models")
    if len(set(names)) != len(names):
        raise ValueError(f"model names must be unique; got {names}: pass names= or a dict")
    quantities = {getattr(o, "quantity", "log p(x)") for o in objs}
    if len(quantities) > 1:
        raise ValueError(f"the results estimate different quantities {sorted(quantities)}: a log Z "
                         "of a distortion path is not a log-likelihood of x, so they do not compare")
    out = []
    for name, obj in zip(names, objs, strict=True):
        scores = _as_scores(obj, y, rules)
        gap = (gaps or {}).get(name, getattr(obj, "gap", None))
        if gap is not None:
            gap = float(np.mean(gap.detach().cpu().numpy() if hasattr(gap, "detach") else gap))
        bound = getattr(obj, "bound", None)
        x = getattr(obj, "x", None)
        out.append(_Entry(name, scores, bound, getattr(obj, "method", None), gap,
                          x if hasattr(x, "shape") else None))
    lengths = {e.name: len(next(iter(e.scores.values()))) for e in out}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"models were scored on different numbers of examples {lengths}: "
                         "paired comparison needs the same examples in the same order")
    for e in out:
        for rule, s in e.scores.items():
            if np.isfinite(s).all():
                continue
            hint = ""
            if rule == "log" and y is not None:
                hint = (" (a zero probability on an observed class: try the quadratic or spherical "
                        "score)")
            elif rule == "log":  # log-likelihoods: the examples that failed
                hint = (f" in examples {np.flatnonzero(~np.isfinite(s))[:10].tolist()}: they failed "
                        "(result.failed); compare the examples every model evaluated, e.g. ok = "
                        "~(a.failed | b.failed); compare(a.log_likelihood[ok], "
                        "b.log_likelihood[ok], names=[...])")
            raise ValueError(f"{e.name}: non-finite {rule} scores{hint}")
    return out


def _pair_stats(a: np.ndarray, b: np.ndarray, level: float) -> dict[str, float]:
    d = a - b
    n = d.size
    mean = float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    se = sd / math.sqrt(n)
    if n < 2:
        raise ValueError("paired tests need at least two examples")
    if sd == 0.0:  # every difference equal: scipy would divide by zero
        t_stat, t_p = (math.nan, 1.0) if mean == 0.0 else (math.copysign(math.inf, mean), 0.0)
    else:
        res = stats.ttest_rel(a, b)
        t_stat, t_p = float(res.statistic), float(res.pvalue)
    if np.all(d == 0):
        w_stat, w_p = math.nan, 1.0
    else:
        res_w = stats.wilcoxon(a, b)
        w_stat, w_p = float(res_w.statistic), float(res_w.pvalue)
    half = stats.t.ppf(1 - level / 2, n - 1) * se if sd > 0 else 0.0
    return {"mean_diff": mean, "se": se, "ci_low": mean - half, "ci_high": mean + half,
            "t_statistic": t_stat, "t_pvalue": t_p, "wilcoxon_statistic": w_stat,
            "wilcoxon_pvalue": w_p}


def _data_notes(entries: list[_Entry]) -> list[str]:
    """A note, and a warning, when results were computed on different data (their ``x`` differ)."""
    known = [(e.name, np.asarray(e.x.detach().cpu() if hasattr(e.x, "detach") else e.x,
                                 dtype=np.float64)) for e in entries if e.x is not None]
    if len(known) < 2:
        return []
    (first, ref), others = known[0], known[1:]
    differ = [n for n, x in others if x.shape != ref.shape or not np.array_equal(x, ref)]
    if not differ:
        return []
    note = (f"{', '.join(differ)} {'was' if len(differ) == 1 else 'were'} computed on other data "
            f"than {first} (their x differ): the paired tests assume that example i is the same "
            "example in every model; on different examples they are meaningless")
    warnings.warn(note, DiagnosticWarning, stacklevel=3)
    return [note]


def _bound_notes(entries: list[_Entry], pairs: pd.DataFrame) -> list[str]:
    notes = []
    # plain arrays carry neither a bound nor a method: nothing is known about them
    known = [e for e in entries if e.bound is not None or e.method is not None]
    kinds = {e.name: e.bound for e in known}
    label = {"lower": "a stochastic lower bound", "upper": "a stochastic upper bound",
             "sandwich": "the midpoint of a BDMC sandwich", None: "not a bound"}
    described = ", ".join(f"{e.name}: {label.get(e.bound, e.bound)}"
                          + (f" ({e.method})" if e.method else "") for e in known)
    if len(set(kinds.values())) > 1:
        notes.append(f"the estimates are of different kinds ({described}); each difference mixes "
                     "the models' difference with the estimators' biases, which here need not "
                     "have the same sign")
    elif len(known) > 1 and all(b == "lower" for b in kinds.values()):
        if len({e.method for e in known}) > 1:
            notes.append(f"all estimates are stochastic lower bounds, but from different estimators "
                         f"({described}): each falls short of log p(x) by its own amount, so a "
                         "difference also contains the difference of those biases; use one "
                         "estimator, or bound the bias with a BDMC gap")
    for e in entries:
        if e.bound is None and e.method is not None:
            notes.append(f"{e.name} ({e.method}) is not a bound: use it to rank, not to report")
    for _, row in pairs.iterrows():
        gaps = [g for g in (row.get("gap_a"), row.get("gap_b")) if g is not None and g == g]
        if gaps and abs(row["mean_diff"]) <= max(gaps):
            notes.append(f"{row['model_a']} vs {row['model_b']} ({row['score']}): |difference| "
                         f"{abs(row['mean_diff']):.3g} nats is within the BDMC gap {max(gaps):.3g}: "
                         "the estimators' bias alone could explain it")
    return notes


def _evidence_estimate(name: str, obj: Any) -> tuple[float, float]:
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


def _compare_evidence(names: list[str], objs: list[Any], level: float) -> Comparison:
    """A :class:`Comparison` of whole data sets' evidences: log Bayes factors."""
    est = {n: _evidence_estimate(n, o) for n, o in zip(names, objs, strict=True)}
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
                "score": EVIDENCE_SCORE, "model_a": a, "model_b": b, "mean_diff": diff, "se": se,
                "p_adjusted": p, "better": (a if diff > 0 else b) if lo > 0 or hi < 0 else None,
                "log_bayes_factor": diff, "bayes_factor": math.exp(diff) if diff < 700 else math.inf,
                "ci_low": lo, "ci_high": hi})
    order = sorted(names, key=lambda n: -est[n][0])
    best = order[0]
    table = pd.DataFrame([{
        "score": EVIDENCE_SCORE, "model": n, "rank": r, "mean": est[n][0], "se": est[n][1],
        "diff_to_best": est[n][0] - est[best][0],
        "dse": math.hypot(est[n][1], est[best][1]) if n != best else 0.0,
        "bound": bounds[n], "method": "evidence"} for r, n in enumerate(order)]
    ).set_index(["score", "model"])
    notes = ["evidences of the whole data set: mean_diff is the log Bayes factor of model_a over "
             "model_b, se its Monte Carlo standard error (sqrt of the summed squared MCSEs); better "
             f"names a model when the {1 - level:.0%} interval excludes 0"]
    if all(b == "lower" for b in bounds.values()):
        notes.append("each evidence is a stochastic lower bound: the log Bayes factor also holds "
                     "the difference of the two AIS biases; run pyrolik.evidence_bdmc on each model "
                     "and trust a factor larger than the BDMC gaps")
    per_example = {EVIDENCE_SCORE: pd.DataFrame({n: np.array([est[n][0]]) for n in names})}
    return Comparison(pd.DataFrame(rows), table, notes, float(level), EVIDENCE_TEST, "none",
                      per_example)


def compare(*models: Any, names: Sequence[str] | None = None, y: Any = None,
            scores: Sequence[str] | None = None, level: float = 0.05, test: str = "t",
            correction: str = "holm", gaps: Mapping[str, float] | None = None) -> Comparison:
    r"""Compare models scored on the same examples, pair by pair, with a paired t-test and a
    Wilcoxon signed-rank test, corrected over pairs: they see Monte Carlo noise, not bias
    (``docs/compare.md``). :func:`pyrolik.evidence` results are compared by log Bayes factor.

    Parameters
    ----------
    *models : result objects, arrays, or one dict ``{name: model}``
        Objects with per-example ``.log_likelihood``, 1-D per-example log scores, or, with ``y``,
        ``(N, K)`` predicted class probabilities.
    names : sequence of str, optional
        Names for positional models (default: each one's ``.name``, ``.method`` or ``model_i``;
        when two are alike, every name suffixed with its position ``_i``).
    y : array of int, optional
        Observed classes, scored by ``scores``.
    scores : sequence of str, optional
        The scoring rules applied with ``y`` (:mod:`pyrolik.diagnostics.scoring`; default: log,
        quadratic and spherical).
    level : float
        Significance level of the decisions and intervals.
    test : {"t", "wilcoxon"}
        Which test decides ``better``; both are always reported.
    correction : {"holm", "bonferroni", "none"}
        Multiple-comparison correction over the pairs of each score rule.
    gaps : dict, optional
        BDMC gaps (nats) by model name, shown beside the differences.

    Returns
    -------
    Comparison
        ``pairs``, ``table`` (ranked), ``notes``, ``better`` (two models).

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models.oracles.linear_gaussian import LinearGaussian
    >>> model = LinearGaussian.random(data_dim=5, latent_dim=2, seed=0)   # exact log p(x) known
    >>> x = model.sample(4, torch.Generator().manual_seed(0))
    >>> ais = pyrolik.ais(model, x, num_steps=50, num_chains=8, seed=0, progress=False)
    >>> lw = pyrolik.likelihood_weighting(model, x, num_samples=1000, seed=0, progress=False)
    >>> comparison = pyrolik.compare(ais, lw, names=["ais", "lw"])
    >>> comparison.pairs[["model_a", "model_b"]].values.tolist()
    [['ais', 'lw']]
    """
    if not (isinstance(level, float | int) and 0 < level < 1):
        raise ValueError(f"level must be in (0, 1); got {level!r}")
    evidences = _evidences(models, names)
    if evidences is not None:
        return _compare_evidence(*evidences, level)
    if test not in _TESTS:
        raise ValueError(f"test must be one of {_TESTS}; got {test!r}")
    if correction not in _ADJUST:
        raise ValueError(f"correction must be one of {tuple(_ADJUST)}; got {correction!r}")
    if y is None:
        if scores is not None and list(scores) != ["log"]:
            raise ValueError("scoring rules other than log need class probabilities and y=")
        rules = ["log"]
    else:
        rules = list(scores) if scores is not None else ["log", "quadratic", "spherical"]
        unknown = [r for r in rules if r not in SCORES]
        if unknown:
            raise ValueError(f"unknown scoring rule(s) {unknown}; choose from {sorted(SCORES)}")
    entries = _entries(models, names, y, rules, gaps)
    pair_rows: list[dict[str, Any]] = []
    table_rows: list[dict[str, Any]] = []
    pcol = "t_pvalue" if test == "t" else "wilcoxon_pvalue"
    for rule in rules:
        rows: list[dict[str, Any]] = []
        for i, a in enumerate(entries):
            for b in entries[i + 1:]:
                rows.append({"score": rule, "model_a": a.name, "model_b": b.name,
                             **_pair_stats(a.scores[rule], b.scores[rule], level),
                             "gap_a": a.gap, "gap_b": b.gap})
        adjusted = _ADJUST[correction](np.array([r[pcol] for r in rows]))
        for r, p in zip(rows, adjusted, strict=True):
            r["p_adjusted"] = float(p)
            winner = r["model_a"] if r["mean_diff"] > 0 else r["model_b"]
            r["better"] = winner if p <= level and r["mean_diff"] != 0 else None
        pair_rows += rows
        order = sorted(entries, key=lambda e: -float(e.scores[rule].mean()))
        best = order[0]
        for rank, e in enumerate(order):
            s = e.scores[rule]
            if e is best:
                diff, dse, p_best = 0.0, 0.0, math.nan
            else:
                match = next(r for r in rows if {r["model_a"], r["model_b"]} == {e.name, best.name})
                diff = float((s - best.scores[rule]).mean())
                dse, p_best = match["se"], match["p_adjusted"]
            table_rows.append({
                "score": rule, "model": e.name, "rank": rank, "mean": float(s.mean()),
                "se": float(s.std(ddof=1) / math.sqrt(s.size)), "diff_to_best": diff, "dse": dse,
                "p_vs_best": p_best, "worse_than_best": bool(p_best <= level), "bound": e.bound,
                "method": e.method, "gap": e.gap})
    pairs = pd.DataFrame(pair_rows)
    first = ["score", "model_a", "model_b", "mean_diff", "se", "p_adjusted", "better"]
    pairs = pairs[first + [c for c in pairs.columns if c not in first]]
    if all(e.gap is None for e in entries):
        pairs = pairs.drop(columns=["gap_a", "gap_b"])
    table = pd.DataFrame(table_rows).set_index(["score", "model"])
    notes = _data_notes(entries) + _bound_notes(entries, pairs)
    per_example = {rule: pd.DataFrame({e.name: e.scores[rule] for e in entries}) for rule in rules}
    return Comparison(pairs, table, notes, float(level), test, correction, per_example)
