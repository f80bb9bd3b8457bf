"""A result's warnings say what to change given the settings the run actually used."""

from __future__ import annotations

import pytest
import torch

import pyrolik
from pyrolik.results import AISResult


def _collapsed(kernel):
    return AISResult(method="ais", log_likelihood=torch.zeros(3), bound="lower",
                     acceptance_rate=torch.full((4, 3), 0.02), kernel=kernel)


@pytest.mark.parametrize("kernel,says,never", [
    (pyrolik.HMC(), "raise target_accept", "use adapt='pilot'"),
    (pyrolik.HMC(adapt="online"), "use adapt='pilot'", "pilot's step sizes"),
    (pyrolik.HMC(adapt=None, step_size=0.7), "fixed step size (0.7) is too large", "pilot's"),
])
def test_acceptance_collapse_advice_follows_the_kernel(kernel, says, never):
    (message,) = [w for w in _collapsed(kernel).warnings() if "acceptance collapsed" in w]
    assert says in message and never not in message


def _sandwich(lower, upper, mcse_lower, mcse_upper):
    from pyrolik.results import BDMCResult

    def leg(ll, mcse, bound):
        ll = torch.tensor(ll, dtype=torch.float64)
        return AISResult(method="ais", log_likelihood=ll, bound=bound,
                         mcse=torch.tensor(mcse, dtype=torch.float64))

    return BDMCResult(lower=leg(lower, mcse_lower, "lower"), upper=leg(upper, mcse_upper, "upper"),
                      x=torch.zeros(len(lower), 2), latents={})


def test_an_inverted_gap_is_read_in_units_of_its_mcse():
    # per-example gaps -0.03, -0.01, +0.01 with per-example MCSE 0.05 (0.03, 0.04): mean gap -0.01,
    # MCSE of the mean sqrt(3 * 0.05^2) / 3 = 0.0289, so 0.35 MCSE: noise
    r = _sandwich([0.0, 1.0, 2.0], [-0.03, 0.99, 2.01], [0.03] * 3, [0.04] * 3)
    assert r.gap == pytest.approx(-0.01) and r.gap_mcse == pytest.approx(0.05 * 3**0.5 / 3)
    inv = r.inverted_gap()
    assert inv["within_noise"] and inv["num_mcse"] == pytest.approx(0.01 / (0.05 * 3**0.5 / 3))
    text = " ".join(r.warnings())
    assert "inverted" in text and "within Monte Carlo noise" in text and "0.3 times" in text
    assert "for 2 of 3 examples the upper bound is below the lower one within" in text
    assert "beyond" not in text
    row = r.summary().loc["BDMC gap (upper - lower)"]
    assert row["inverted gap"] == "0.3 MCSE: noise" and row["gap MCSE"] == pytest.approx(r.gap_mcse)
    # the same gaps with MCSE 100 times smaller: beyond noise, for the mean and per example
    r = _sandwich([0.0, 1.0, 2.0], [-0.03, 0.99, 2.01], [3e-4] * 3, [4e-4] * 3)
    text = " ".join(r.warnings())
    assert "beyond Monte Carlo noise" in text and "did not start from exact posterior" in text
    assert "for 2 of 3 examples the upper bound is below the lower one by more than 4 MCSE" in text
    assert "or their MCSE is underestimated" in text
    assert r.summary().loc["BDMC gap (upper - lower)", "inverted gap"].endswith("NOT noise")
    assert pyrolik.diagnostics.check(r) == r.warnings()  # said once
    # a gap that is not inverted says nothing of it
    r = _sandwich([0.0, 1.0], [0.1, 1.2], [0.03] * 2, [0.04] * 2)
    assert r.inverted_gap() is None and not any("inverted" in w for w in r.warnings())
    assert "inverted gap" not in r.summary().columns


def test_the_midpoint_is_named():
    r = _sandwich([0.0, 1.0], [0.2, 1.6], [0.03] * 2, [0.04] * 2)
    torch.testing.assert_close(r.midpoint, torch.tensor([0.1, 1.3], dtype=torch.float64))
    assert r.mean == pytest.approx(0.7)
    assert not hasattr(r, "log_likelihood")  # the midpoint is not an estimate: no such name


def test_examples_that_observe_nothing_are_named():
    """A fully masked example's log p(x) is exactly 0 and would lift the mean unnoticed."""
    from pyrolik.results import EstimateResult

    r = EstimateResult(method="iwae", bound="lower", log_likelihood=torch.tensor([-5.0, 0.0, -6.0]),
                       num_observed=torch.tensor([4.0, 0.0, 4.0]))
    assert any(w.startswith("1 of 3 examples observe nothing") for w in r.warnings())
    r = EstimateResult(method="iwae", bound="lower", log_likelihood=torch.tensor([-5.0]),
                       num_observed=torch.tensor([4.0]))
    assert not any("observe nothing" in w for w in r.warnings())
