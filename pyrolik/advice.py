"""The thresholds behind pyrolik's warnings, and the advice they give, in one place."""

from __future__ import annotations

from typing import Any

from pyrolik.exceptions import remark

__all__ = ["KHAT_WARN", "MIN_WEIGHTS", "ACCEPTANCE_COLLAPSE", "NEGATIVE_GAP_SE", "BDMC_GAP_WARN",
           "DIVERGENT_REMARK", "acceptance_fix", "inverted_gap_advice"]

KHAT_WARN = 0.7  # Pareto k-hat above it: a few weights dominate (Vehtari et al. 2024)
MIN_WEIGHTS = 25  # PSIS fits a tail of min(K/5, 3 sqrt K) >= 5 weights: no k-hat below 25
ACCEPTANCE_COLLAPSE = 0.1  # mean HMC acceptance below it: the chains barely moved
NEGATIVE_GAP_SE = 4.0  # an inverted BDMC gap beyond this many standard errors is not noise
BDMC_GAP_WARN = 1.0  # nats: a mean gap above it, AIS has not converged (Grosse et al. 2015)
DIVERGENT_REMARK = 0.01  # divergences (each rejected, AIS stays valid) below 1% are a remark
BEST_SPLIT_CHAINS = 4  # the frontier's best split of a budget: 4 chains, the rest in steps
WASTED_SPLIT = 2.0  # a split predicted to leave more than this times the best split's bias warns


def acceptance_fix(kernel: Any) -> str:
    """What to change when HMC acceptance collapsed, given the adaptation the run actually used
    (``kernel``: the run's :class:`~pyrolik.HMC`, or ``None`` when unknown, e.g. a loaded file)."""
    move = getattr(kernel, "move", kernel)
    adapt = getattr(move, "adapt", None)
    adapt = getattr(adapt, "name", adapt)  # a strategy object or its name
    if adapt == "pilot":
        return ("the pilot's step sizes were too large at some temperatures: raise target_accept "
                "(e.g. HMC(target_accept=0.95)), give the pilot more steps (pilot_fraction) or "
                "chains (pilot_chains), or anneal with more num_steps")
    if adapt == "online":
        return ("the online adaptation could not keep up: use adapt='pilot' (the default), or a "
                "smaller starting step_size")
    if kernel is None:
        return "lower the step size or use adapt='pilot'"
    return (f"the fixed step size ({getattr(move, 'step_size', '?')}) is too large: lower it, "
            "or use adapt='pilot' (the default) to tune it per temperature")


def inverted_gap_advice(mean: dict[str, Any] | None, gaps: Any, mcse: Any,
                        num_examples: int) -> list[str]:
    """What an inverted BDMC gap (upper < lower) means, in units of its MCSE.

    ``mean``: :meth:`~pyrolik.results.BDMCResult.inverted_gap` (None: the mean gap is not inverted);
    ``gaps`` and ``mcse``: per-example gaps and their MCSEs (tensors) of the examples that did not
    fail. Within :data:`NEGATIVE_GAP_SE` MCSEs an inverted gap is noise: upper minus lower has a
    non-negative expectation, and at a small budget its noise can exceed it. Those messages are
    remarks (:data:`pyrolik.exceptions.REMARK`); beyond the limit they are to act on.
    """
    out: list[str] = []
    if mean is not None:
        head = (f"the BDMC gap is inverted (upper < lower by {-mean['gap']:.3g} nats, "
                f"{mean['num_mcse']:.1f} times its MCSE of {mean['mcse']:.2g})")
        if mean["within_noise"]:
            out.append(remark(f"{head}: within Monte Carlo noise (up to {NEGATIVE_GAP_SE:g} MCSE): "
                              "the true gap is small next to the noise of this many chains; the "
                              "bounds agree, but use more chains to resolve the gap"))
        else:
            out.append(f"{head}: beyond Monte Carlo noise (more than {NEGATIVE_GAP_SE:g} MCSE): the "
                       "reverse chains did not start from exact posterior draws of x (pass data "
                       "simulated by pyrolik.simulate), or the MCSE is underestimated (too few "
                       "chains)")
    known = mcse == mcse  # an MCSE that is not NaN (a loaded result may have none)
    neg = (gaps < 0) & known
    beyond = neg & (gaps < -NEGATIVE_GAP_SE * mcse - 1e-9)
    within = neg & ~beyond
    if int(within.sum()):
        worst = float((-gaps[within] / mcse[within]).max())
        out.append(remark(f"for {int(within.sum())} of {num_examples} examples the upper bound is "
                          f"below the lower one within Monte Carlo noise (at most {worst:.1f} "
                          f"MCSE, limit {NEGATIVE_GAP_SE:g}): expected when the gap is small next "
                          "to the noise"))
    if int(beyond.sum()):
        out.append(f"for {int(beyond.sum())} of {num_examples} examples the upper bound is below the "
                   f"lower one by more than {NEGATIVE_GAP_SE:g} MCSE: the reverse chains did not "
                   "start from exact posterior draws of x (pass data simulated by pyrolik.simulate),"
                   " or their MCSE is underestimated (few chains; a resampled run's per-example "
                   "MCSE comes from its 2 to 4 islands and is noisy)")
    return out
