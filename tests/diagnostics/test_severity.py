"""Each warning's severity is decided where it is written: to act on, or a remark at the level of
Monte Carlo noise / a standing caveat of the settings (issue 33 item 6). Every message stays in
``result.warnings()``; only the presentation folds the remarks (``tests/app/test_report.py``)."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
import warnings

import pytest
import torch

import pyrolik
from pyrolik.exceptions import (
    ACT,
    REMARK,
    DiagnosticWarning,
    Message,
    RemarkWarning,
    prefixed,
    remark,
    severity,
)
from pyrolik.results import AISResult, BDMCResult, EstimateResult


def _by_severity(messages):
    return {kind: [m for m in messages if severity(m) == kind] for kind in (ACT, REMARK)}


def test_a_message_is_a_str_that_keeps_its_severity():
    m = remark("within noise")
    assert m == "within noise" and isinstance(m, str) and severity(m) == REMARK
    assert severity("a plain str") == ACT  # nobody classified it: shown, never folded away
    for copied in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m), copy.copy(m)):
        assert copied == m and severity(copied) == REMARK
    assert prefixed("forward: ", m) == "forward: within noise"
    assert severity(prefixed("forward: ", m)) == REMARK and severity(prefixed("x: ", "y")) == ACT
    with pytest.raises(ValueError, match="severity"):
        Message("text", "loud")
    assert issubclass(RemarkWarning, DiagnosticWarning)


def _ais(log_weights, **kw):
    lw = torch.as_tensor(log_weights, dtype=torch.float64)
    mcse = pyrolik.ops.stats.mcse_log_mean_exp(lw)
    return AISResult(method="ais", log_likelihood=torch.logsumexp(lw, 0) - math.log(lw.shape[0]),
                     bound="lower", log_weights=lw, mcse=mcse, **kw)


def test_few_chains_is_a_remark_unless_one_chain_dominates_the_weights():
    # 8 chains with even weights: the standing caveat only, a remark
    even = _ais(torch.zeros(8, 3) + 0.01 * torch.arange(8.0)[:, None])
    got = _by_severity(even.warnings())
    assert got[ACT] == [] and len(got[REMARK]) == 1 and "MCSE comes from 8 chains" in got[REMARK][0]
    # one example whose first chain holds ~95% of the weight: its jackknife MCSE is above
    # sqrt(1 - 1/8) = 0.94, the delta method's ceiling; that is to act on, the caveat stays a remark
    lw = torch.zeros(8, 3)
    lw[0, 1] = 5.0
    heavy = _ais(lw)
    assert float(heavy.mcse[1]) > math.sqrt(1 - 1 / 8) > float(heavy.mcse[0])
    got = _by_severity(heavy.warnings())
    (act,) = got[ACT]
    assert act.startswith("for 1 of 3 examples the weights are dominated by one of the 8 chains")
    assert "0.94" in act and "more annealing steps or chains" in act
    assert any("MCSE comes from 8 chains" in m for m in got[REMARK])
    # likelihood weighting with few samples says samples
    lw_result = EstimateResult(method="likelihood_weighting", log_likelihood=heavy.log_likelihood,
                               bound="lower", log_weights=heavy.log_weights, mcse=heavy.mcse)
    (act,) = _by_severity(lw_result.warnings())[ACT]
    assert "dominated by one of the 8 samples" in act and act.endswith("use more samples")


def test_with_enough_chains_there_is_no_caveat_and_no_dominance_message():
    r = _ais(torch.zeros(30, 2))
    assert not any("MCSE comes from" in m or "dominated by one of" in m for m in r.warnings())


def _leg(lw, bound):
    return dataclasses.replace(_ais(lw), bound=bound)


def test_a_bdmc_leg_resting_on_one_chain_is_a_remark_when_the_sandwich_is_tight():
    lw = torch.zeros(8, 3)
    lw[0, 1] = 5.0
    lower = _leg(lw, "lower")
    # reverse AIS: log p(x) = -logmeanexp(reverse weights); choose them so that the gap is small
    upper = _leg(-lw, "upper")
    tight = BDMCResult(lower=lower, x=torch.zeros(3, 2), latents={},
                       upper=dataclasses.replace(upper, log_likelihood=lower.log_likelihood + 0.2))
    assert tight.gap == pytest.approx(0.2)
    dominated = [m for m in tight.warnings() if "dominated by one of the" in m]
    assert dominated and all(severity(m) == REMARK for m in dominated)
    assert all("bounds what it costs" in m for m in dominated)
    # a gap above 1 nat: the gap is to act on, and so is the chain that holds the weight
    loose = BDMCResult(lower=lower, x=torch.zeros(3, 2), latents={},
                       upper=dataclasses.replace(upper, log_likelihood=lower.log_likelihood + 3.0))
    got = _by_severity(loose.warnings())
    assert any(m.startswith("forward: for 1 of 3 examples the weights are dominated by one of")
               for m in got[ACT])
    assert any("the BDMC gap is 3.00 nats" in m for m in got[ACT])


def _sandwich(lower, upper, mcse):
    def leg(ll, bound):
        return AISResult(method="ais", log_likelihood=torch.tensor(ll, dtype=torch.float64),
                         bound=bound, mcse=torch.tensor([mcse] * len(ll), dtype=torch.float64))

    return BDMCResult(lower=leg(lower, "lower"), upper=leg(upper, "upper"),
                      x=torch.zeros(len(lower), 2), latents={})


def test_an_inverted_gap_within_noise_is_a_remark_and_beyond_it_is_to_act_on():
    noise = _sandwich([0.0, 1.0, 2.0], [-0.03, 0.99, 2.01], 0.035)
    got = _by_severity(noise.warnings())
    assert got[ACT] == [] and len(got[REMARK]) == 2
    assert all("within Monte Carlo noise" in m for m in got[REMARK])
    beyond = _sandwich([0.0, 1.0, 2.0], [-0.03, 0.99, 2.01], 3.5e-4)
    got = _by_severity(beyond.warnings())
    assert got[REMARK] == [] and len(got[ACT]) == 2
    assert all("beyond Monte Carlo noise" in m or "more than 4" in m for m in got[ACT])


def _divergent(count, steps=100):
    num = torch.zeros(8, 10, dtype=torch.long)
    num[0, 0] = count
    return AISResult(method="ais", log_likelihood=torch.zeros(10), bound="lower",
                     num_divergent=num, schedule=torch.linspace(0, 1, steps + 1))


def test_rare_divergences_are_a_remark_frequent_ones_are_to_act_on():
    # 8 chains x 10 examples x 100 steps = 8000 transitions; 1% of them is 80
    (rare,) = _divergent(7).warnings()
    assert severity(rare) == REMARK and "7 of 8000 transitions" in rare
    assert rare.startswith("7 HMC proposals were non-finite (divergent) and rejected")
    (often,) = _divergent(400).warnings()
    assert severity(often) == ACT and "400 of 8000 transitions" in often
    unknown = AISResult(method="ais", log_likelihood=torch.zeros(10), bound="lower",
                        num_divergent=_divergent(7).num_divergent)  # no schedule, no settings
    (msg,) = unknown.warnings()
    assert severity(msg) == ACT and msg == "7 HMC proposals were non-finite (divergent) and rejected"


def test_khat_between_the_threshold_and_0_7_is_a_remark_beside_khat_above_0_7():
    def result(khat):
        k = torch.tensor(khat, dtype=torch.float64)
        return EstimateResult(method="iwae", log_likelihood=torch.zeros(len(khat)), bound="lower",
                              log_weights=torch.zeros(100, len(khat)), khat=k,
                              mcse=torch.zeros(len(khat)))

    alone = [m for m in result([0.6, 0.1]).warnings() if "between" in m]
    assert len(alone) == 1 and severity(alone[0]) == ACT
    got = _by_severity(result([0.6, 0.9]).warnings())
    assert len(got[ACT]) == 1 and "k-hat > 0.7" in got[ACT][0]
    assert len(got[REMARK]) == 1 and "between 0.50 and 0.7" in got[REMARK][0]


def test_diagnostics_warn_issues_remarks_as_remark_warnings():
    r = _ais(torch.zeros(8, 3))  # the few-chain caveat only
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        messages = pyrolik.diagnostics.warn(r)
    assert [w.category for w in caught] == [RemarkWarning] and messages == r.warnings()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=RemarkWarning)
        pyrolik.diagnostics.warn(r)  # silenced alone
    lw = torch.zeros(8, 3)
    lw[0, 1] = 5.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pyrolik.diagnostics.warn(_ais(lw))
    assert sorted(w.category.__name__ for w in caught) == ["DiagnosticWarning", "RemarkWarning"]
