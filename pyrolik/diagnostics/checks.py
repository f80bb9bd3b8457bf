r"""Diagnostics of an estimate, per example and per temperature, warnings in plain words, and the
per-example k-hat as ArviZ's ``ELPDData`` (for ``az.plot_khat``)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import torch
import xarray as xr
from arviz import ELPDData  # ArviZ 0.x; the 1.x equivalent is arviz_stats' (not wrapped here)

from pyrolik.advice import ACCEPTANCE_COLLAPSE, acceptance_fix
from pyrolik.exceptions import REMARK, DiagnosticWarning, PyrolikWarning, RemarkWarning, severity
from pyrolik.ops.stats import log_mean_exp
from pyrolik.results import AISResult, BDMCResult, EstimateResult

__all__ = ["PyrolikWarning", "ACCEPTANCE_COLLAPSE", "example_table", "temperature_trace",
           "running_log_normalizer", "bdmc_gap", "check", "warn", "to_elpd", "EvidenceData"]


def _check_result(result) -> None:
    if not isinstance(result, EstimateResult | BDMCResult):
        raise TypeError(f"expected a pyrolik result (from ais, reverse_ais, bdmc, iwae, "
                        f"likelihood_weighting, kde or pyrolik.load), got {type(result).__name__}")


def example_table(result: EstimateResult | BDMCResult) -> pd.DataFrame:
    """One row per example: the estimate, its MCSE, ESS and k-hat; AIS adds the mean acceptance rate
    and the number of divergences; BDMC gives both bounds and the gap.

    Parameters
    ----------
    result
        As in :func:`check`.

    Returns
    -------
    pandas.DataFrame
        Indexed by example; for a BDMC result, :func:`bdmc_gap`'s table.
    """
    _check_result(result)
    if isinstance(result, BDMCResult):
        return bdmc_gap(result)
    df = result.per_example()
    if isinstance(result, AISResult):
        if result.acceptance_rate is not None:
            df["acceptance_rate"] = result.acceptance_rate.mean(0).double().numpy()
        if result.num_divergent is not None:
            df["num_divergent"] = result.num_divergent.sum(0).numpy()
    return df


def temperature_trace(result: AISResult) -> pd.DataFrame:
    r"""One row per recorded annealing step: beta, the acceptance rate, step sizes, divergences,
    the mean log-weight and :func:`running_log_normalizer`, averaged over examples.

    Parameters
    ----------
    result : AISResult
        An AIS result with its trace (recorded by default; ``record=`` sets the stride), or a BDMC
        result's ``.lower`` / ``.upper``.

    Returns
    -------
    pandas.DataFrame
        Indexed by the recorded step.
    """
    if not isinstance(result, AISResult):
        raise TypeError(f"temperature_trace needs an AIS result (ais, reverse_ais, or a BDMC "
                        f"result's .lower / .upper), got {type(result).__name__}")
    if not result.trace or result.trace_steps is None:
        raise ValueError("this result holds no trace (an AIS run records one by default): rerun "
                         "pyrolik.ais, record= sets its stride")
    tr = result.trace
    acc = tr["acceptance_rate"].double()  # (R, K, N)
    eps = tr["step_size"].double()
    out = {"beta": tr["beta"][:, 0].double(), "acceptance_rate": acc.mean((1, 2)),
           "min_acceptance_rate": acc.mean(1).min(-1).values, "step_size": eps.mean((1, 2)),
           "min_step_size": eps.amin((1, 2)), "max_step_size": eps.amax((1, 2)),
           "divergent_fraction": tr["diverging"].double().mean((1, 2)),
           "log_mean_weight": log_mean_exp(tr["log_weight"].double(), dim=1).mean(-1),
           "log_normalizer": running_log_normalizer(result).mean(-1)}
    return pd.DataFrame({k: v.numpy() for k, v in out.items()},
                        index=pd.Index(result.trace_steps.numpy(), name="step"))


def running_log_normalizer(result: AISResult) -> torch.Tensor:
    r"""The run's estimate of :math:`\log Z_{\beta}` at each recorded step, per example, ending at
    the estimate (reverse AIS: shifted to 0 at :math:`\beta = 0`).

    Parameters
    ----------
    result : AISResult
        An AIS result with its trace (recorded by default; ``record=`` sets the stride).

    Returns
    -------
    torch.Tensor, shape (R, N)
        One row per recorded step, one column per example.
    """
    if not isinstance(result, AISResult):
        raise TypeError(f"running_log_normalizer needs an AIS result (ais, reverse_ais, or a BDMC "
                        f"result's .lower / .upper), got {type(result).__name__}")
    if not result.trace:
        raise ValueError("this result holds no trace (an AIS run records one by default): rerun "
                         "pyrolik.ais, record= sets its stride")
    lme = log_mean_exp(result.trace["log_weight"].double(), dim=1)  # (R, N)
    if result.direction == "reverse":
        if result.log_weights is None:
            raise ValueError("this reverse AIS result has no log-weights to end its curve at")
        lme = lme - log_mean_exp(result.log_weights.double())
    return lme


def bdmc_gap(result: BDMCResult) -> pd.DataFrame:
    """Per example: lower (forward AIS) and upper (reverse AIS) bounds, gap, MCSE, ESS, k-hat.

    Parameters
    ----------
    result : BDMCResult
        The result of :func:`pyrolik.bdmc`.

    Returns
    -------
    pandas.DataFrame
        Indexed by example: ``lower``, ``upper``, ``gap``, and ``mcse_*``, ``ess_*``, ``khat_*`` of
        each bound.
    """
    if not isinstance(result, BDMCResult):
        raise TypeError(f"bdmc_gap needs a BDMCResult, got {type(result).__name__}")
    cols = {"lower": result.lower.log_likelihood, "upper": result.upper.log_likelihood,
            "gap": result.per_example_gap}
    parts = (("lower", result.lower), ("upper", result.upper))
    cols.update({f"{stat}_{name}": getattr(part, stat) for name, part in parts
                 for stat in ("mcse", "ess", "khat") if getattr(part, stat) is not None})
    df = pd.DataFrame({k: v.detach().cpu().double().numpy() for k, v in cols.items()})
    df.index.name = "example"
    return df


def _temperature_warnings(result: AISResult) -> list[str]:
    """Acceptance that collapses at some temperatures although the run average looks fine."""
    if not result.trace or result.acceptance_rate is None:
        return []
    already = result.acceptance_rate.mean(0) < ACCEPTANCE_COLLAPSE  # reported by result.warnings()
    per_step = result.trace["acceptance_rate"].mean(1)  # (R, N)
    low = (per_step < ACCEPTANCE_COLLAPSE) & ~already
    if not bool(low.any()):
        return []
    betas = result.trace["beta"][:, 0][low.any(1)]
    return [f"HMC acceptance fell below {ACCEPTANCE_COLLAPSE} at {int(low.any(1).sum())} of "
            f"{per_step.shape[0]} recorded temperatures (beta {float(betas.min()):.3g} to "
            f"{float(betas.max()):.3g}) for {int(low.any(0).sum())} examples: the chains barely "
            "moved there, so those steps were wasted and the estimate is noisier than it should "
            f"be; {acceptance_fix(result.kernel)}"]


def check(result: EstimateResult | BDMCResult) -> list[str]:
    """All plain-words warnings: ``result.warnings()``, acceptance collapse, negative BDMC gaps.

    Parameters
    ----------
    result : EstimateResult or BDMCResult
        A result of any estimator, fresh or loaded (:func:`pyrolik.load`).

    Returns
    -------
    list of str
        The messages, empty when nothing calls for attention.

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models.oracles.linear_gaussian import LinearGaussian
    >>> model = LinearGaussian.random(data_dim=5, latent_dim=2, seed=0)
    >>> x = model.sample(3, torch.Generator().manual_seed(0))
    >>> result = pyrolik.likelihood_weighting(model, x, num_samples=4, seed=0, progress=False)
    >>> messages = pyrolik.diagnostics.check(result)   # 4 samples per example: too few weights
    >>> len(messages) > 0
    True
    """
    _check_result(result)
    out = list(result.warnings())  # a BDMC result's inverted gap among them
    if isinstance(result, BDMCResult):
        for name, part in (("forward", result.lower), ("reverse", result.upper)):
            out += [f"{name}: {w}" for w in _temperature_warnings(part)]
    elif isinstance(result, AISResult):
        out += _temperature_warnings(result)
    return out


def warn(result: EstimateResult | BDMCResult, stacklevel: int = 2) -> list[str]:
    """Issue each message of :func:`check` once as a :class:`~pyrolik.exceptions.DiagnosticWarning`
    (a remark as its subclass :class:`~pyrolik.exceptions.RemarkWarning`); return them.

    Parameters
    ----------
    result
        As in :func:`check`.
    stacklevel : int
        Passed to :func:`warnings.warn`: 2 points the warning at the caller of ``warn``.

    Returns
    -------
    list of str
        The messages issued.
    """
    messages = check(result)
    for message in messages:
        category = RemarkWarning if severity(message) == REMARK else DiagnosticWarning
        warnings.warn(message, category, stacklevel=stacklevel)
    return messages


def _evidence(data: Any, bound: str) -> xr.Dataset:
    """The per-example ``evidence`` dataset of a result, DataTree or InferenceData."""
    if hasattr(data, "to_datatree") and not isinstance(data, xr.DataTree):
        data = data.to_datatree()  # a result, or an InferenceData
    if not isinstance(data, xr.DataTree):
        raise TypeError(f"to_elpd takes a pyrolik result, DataTree or InferenceData, got "
                        f"{type(data).__name__}")
    for path in (f"{bound}/evidence", f"{bound}_evidence", "evidence"):
        try:
            ds = data[path].to_dataset()
        except KeyError:
            continue
        if "pareto_k" in ds:  # one draw of the estimator: per example
            return ds.squeeze([d for d in ("chain", "draw") if d in ds.dims], drop=True)
    raise ValueError("no evidence group with pareto_k: export a result that kept its weights "
                     "(AIS, IWAE or likelihood weighting) with pyrolik >= this layout, e.g. "
                     "pyrolik.load(path).to_inference_data()")


class EvidenceData(ELPDData):
    """``ELPDData`` of per-example log evidence (not leave-one-out; ``az.compare`` should not be
    given it); prints as such."""

    @property
    def _constructor(self):
        return EvidenceData

    def __str__(self) -> str:
        k = np.asarray(self["pareto_k"])
        bad, missing = int(np.sum(k > self["good_k"])), int(np.sum(np.isnan(k)))
        text = (f"Computed from {self['n_samples']} weights per example for "
                f"{self['n_data_points']} examples (log evidence, not leave-one-out)\n"
                f"sum of log p(x_i): {self['elpd_evidence']:.2f} (se {self['se']:.2f})\n"
                f"Pareto k-hat above good_k = {self['good_k']:.2f}: {bad} of {k.size}")
        if missing:
            text += f"; not computable for {missing} (NaN: fewer than 25 weights or a flat tail)"
        return text

    __repr__ = __str__


def to_elpd(data: Any, *, bound: str = "lower") -> Any:
    """An ``arviz.ELPDData`` of the export's per-example evidence, for ``az.plot_khat``.

    Parameters
    ----------
    data : result, xarray.DataTree or arviz.InferenceData
        An export with an ``evidence`` group, or a BDMC export (its ``bound`` run).
    bound : {"lower", "upper"}
        Which run of a BDMC export: forward AIS (lower) or reverse AIS (upper).

    Returns
    -------
    EvidenceData
        ``pareto_k`` per example, ``elpd_evidence`` (the sum of the estimates) and ``se``.
    """
    ev = _evidence(data, bound)
    k = ev["pareto_k"]
    n_samples = int(k.attrs.get("n_samples", 0))
    good = float(k.attrs.get("good_k", -math.inf))
    lml = ev["log_marginal_likelihood"]
    se = float(np.sqrt(np.nansum(ev["mcse"].values ** 2))) if "mcse" in ev else math.nan
    return EvidenceData(data=[float(lml.sum()), se, n_samples, int(lml.size),
                              bool(np.any(k.values > good)), lml, k, "log", good],
                        index=["elpd_evidence", "se", "n_samples", "n_data_points", "warning",
                               "evidence_i", "pareto_k", "scale", "good_k"])
