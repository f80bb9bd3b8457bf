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
