r"""Diagnostics of an estimate, per example and per temperature, and warnings in plain words."""

from __future__ import annotations

import warnings

import pandas as pd
import torch

from pyrolik.advice import ACCEPTANCE_COLLAPSE, acceptance_fix
from pyrolik.exceptions import REMARK, DiagnosticWarning, PyrolikWarning, RemarkWarning, severity
from pyrolik.ops.stats import log_mean_exp
from pyrolik.results import AISResult, BDMCResult, EstimateResult

__all__ = ["PyrolikWarning", "ACCEPTANCE_COLLAPSE", "example_table", "temperature_trace",
           "running_log_normalizer", "bdmc_gap", "check", "warn"]


def _check_result(result) -> None:
    if not isinstance(result, EstimateResult | BDMCResult):
        raise TypeError(f"expected a pyrolik result (from ais, reverse_ais, bdmc, iwae, "
                        f"likelihood_weighting, kde or pyrolik.load), got {type(result).__name__}")


def example_table(result: EstimateResult | BDMCResult) -> pd.DataFrame:
    """One row per example: the estimate, its MCSE, ESS and k-hat; AIS adds the mean acceptance rate
    and the number of divergences; BDMC gives both bounds and the gap.

    Parameters
    ----------
    result : EstimateResult or BDMCResult
        A result of any estimator, fresh or loaded (:func:`pyrolik.load`).

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
    r"""One row per recorded annealing step: beta and the population diagnostics at it.

    Columns: ``beta``, ``acceptance_rate`` and its per-example ``min``, ``step_size`` with
    min/max, ``divergent_fraction``, ``log_mean_weight``, ``log_normalizer``
    (:func:`running_log_normalizer`), averaged over examples.

    Parameters
    ----------
    result : AISResult
        A forward or reverse AIS result that recorded a trace (``record_every``), or a BDMC result's
        ``.lower`` / ``.upper``.

    Returns
    -------
    pandas.DataFrame
        Indexed by the recorded step.
    """
    if not isinstance(result, AISResult):
        raise TypeError(f"temperature_trace needs an AIS result (ais, reverse_ais, or a BDMC "
                        f"result's .lower / .upper), got {type(result).__name__}")
    if not result.trace or result.trace_steps is None:
        raise ValueError("this result recorded no trace; rerun with record_every set")
    tr = result.trace
    acc = tr["acceptance_rate"].double()  # (R, K, N)
    eps = tr["step_size"].double()
    out = {
        "beta": tr["beta"][:, 0].double(),
        "acceptance_rate": acc.mean((1, 2)),
        "min_acceptance_rate": acc.mean(1).min(-1).values,
        "step_size": eps.mean((1, 2)),
        "min_step_size": eps.amin((1, 2)),
        "max_step_size": eps.amax((1, 2)),
        "divergent_fraction": tr["diverging"].double().mean((1, 2)),
        "log_mean_weight": log_mean_exp(tr["log_weight"].double(), dim=1).mean(-1),
        "log_normalizer": running_log_normalizer(result).mean(-1),
    }
    df = pd.DataFrame({k: v.numpy() for k, v in out.items()},
                      index=pd.Index(result.trace_steps.numpy(), name="step"))
    return df


def running_log_normalizer(result: AISResult) -> torch.Tensor:
    r"""The run's estimate of :math:`\log Z_{\beta}` at each recorded step, per example: ``(R, N)``.

    Forward AIS: :math:`\log\frac1K\sum_k w_k^{(t)}`, a stochastic lower bound ending at the
    estimate. Reverse AIS: shifted to 0 at :math:`\beta = 0`, ending at the upper estimate.

    Parameters
    ----------
    result : AISResult
        An AIS result that recorded a trace (``record_every``).

    Returns
    -------
    torch.Tensor, shape (R, N)
        One row per recorded step, one column per example.
    """
    if not result.trace:
        raise ValueError("this result recorded no trace; rerun with record_every set")
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
    for name, part in (("lower", result.lower), ("upper", result.upper)):
        for stat in ("mcse", "ess", "khat"):
            if getattr(part, stat) is not None:
                cols[f"{stat}_{name}"] = getattr(part, stat)
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
    out = list(result.warnings())
    if isinstance(result, BDMCResult):
        for name, part in (("forward", result.lower), ("reverse", result.upper)):
            out += [f"{name}: {w}" for w in _temperature_warnings(part)]
        # an inverted gap, within noise or beyond it: result.warnings() (in units of its MCSE)
        return out
    if isinstance(result, AISResult):
        out += _temperature_warnings(result)
    return out


def warn(result: EstimateResult | BDMCResult, stacklevel: int = 2) -> list[str]:
    """Issue each message of :func:`check` once as a :class:`~pyrolik.exceptions.DiagnosticWarning`
    (a remark at the level of Monte Carlo noise as its subclass
    :class:`~pyrolik.exceptions.RemarkWarning`, which a filter can silence alone); return them.

    Parameters
    ----------
    result : EstimateResult or BDMCResult
        A result of any estimator, fresh or loaded (:func:`pyrolik.load`).
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
