"""Monte Carlo assertions with tolerances from the standard error (STYLE.md section 8)."""

from __future__ import annotations

import torch

from pyrolik.ops.stats import effective_sample_size, mcse_log_mean_exp


def plain(move=None):
    """Plain AIS (``pyrolik.SMC(resample=None)``): independent chains, whose weights the
    assertions below read one by one (resampled chains are tested in tests/annealing/test_resampling)."""
    import pyrolik

    return pyrolik.SMC(pyrolik.HMC() if move is None else move, resample=None)


def assert_unbiased(log_weights, log_z, num_se=4.0, min_ess_frac=0.1):
    """E[exp(log w - log Z)] = 1 per example; 4 SE gives ~1e-4 false alarms per example."""
    ratio = torch.exp(log_weights - log_z)  # (K, N)
    ess = effective_sample_size(log_weights)
    assert (ess >= min_ess_frac * len(ratio)).all(), f"degenerate weights: ESS {ess.tolist()}"
    se = ratio.std(dim=0) / len(ratio) ** 0.5
    err = (ratio.mean(dim=0) - 1).abs()
    assert (err <= num_se * se + 1e-10).all(), f"biased: |mean-1|={err.tolist()} se={se.tolist()}"


def assert_lower_bound(estimate, log_z, log_weights, num_se=4.0):
    """One-sided: a stochastic lower bound is not above the truth by more than num_se MCSE."""
    mcse = mcse_log_mean_exp(log_weights)
    excess = estimate - log_z
    assert (excess <= num_se * mcse + 1e-10).all(), f"above truth: {excess.tolist()} mcse {mcse.tolist()}"


def assert_upper_bound(estimate, log_z, log_weights, num_se=4.0):
    """One-sided: a stochastic upper bound (reverse AIS) is not below the truth by more than
    num_se MCSE."""
    mcse = mcse_log_mean_exp(log_weights)
    shortfall = log_z - estimate
    assert (shortfall <= num_se * mcse + 1e-10).all(), \
        f"below truth: {(-shortfall).tolist()} mcse {mcse.tolist()}"


def assert_bound_on_average(result, log_z, num_se=3.0, slack=0.01):
    """The mean over examples of an AIS result's estimate is on its side of the mean exact
    ``log_z`` (``result.bound``: "lower" or "upper"), up to ``num_se`` standard errors of that
    mean (from the per-example MCSEs) plus ``slack`` nats."""
    n = len(log_z)
    error = float((result.log_likelihood - log_z).mean())
    se = float(result.mcse.pow(2).sum().sqrt()) / n
    if result.bound == "lower":
        assert error <= num_se * se + slack, f"lower bound above truth by {error} (se {se})"
    else:
        assert error >= -num_se * se - slack, f"upper bound below truth by {-error} (se {se})"
