"""The per-example MCSE of the default estimator matches the spread of its estimate over seeds, on
the binarized-MNIST reference model (issue 38 item 3; the real-data figures: ``benchmarks/RESULTS.md``,
``benchmarks/mcse_calibration.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import pyrolik

REFERENCE = Path(__file__).resolve().parents[2] / "benchmarks" / "checkpoints" / "reference_iwae.pt"

pytestmark = [pytest.mark.integration, pytest.mark.statistical]


@pytest.fixture(scope="module")
def reference():
    from models.zoo.serialization import load

    return load("iwae", str(REFERENCE), dtype=torch.float32)


@pytest.mark.parametrize("num_chains, islands", [(8, 2), (4, None)],
                         ids=["smc-2-islands", "plain-ais"])
def test_the_default_mcse_matches_the_spread_over_seeds(reference, num_chains, islands):
    """sqrt(mean MCSE^2 / mean between-seed variance) within [0.75, 1.33] over 48 examples simulated
    from the model and 6 seeds (a few percent above or below 1 is the calibration measured on real
    test images; an MCSE from one island's ancestors, or the weights of resampled chains read as
    independent, falls outside), and no MCSE is NaN."""
    sim = pyrolik.simulate(reference, 48, data_shape=(784,), seed=0)
    runs = [pyrolik.ais(reference, sim.x, num_steps=100, num_chains=num_chains, seed=s,
                        progress=False) for s in range(6)]
    assert runs[0].settings["islands"] == islands
    est = torch.stack([r.log_likelihood.double() for r in runs])
    mcse = torch.stack([r.mcse.double() for r in runs])
    assert torch.isfinite(mcse).all()
    ratio = float((mcse.pow(2).mean() / est.var(0).mean()).sqrt())
    assert 0.75 <= ratio <= 1.33, f"MCSE / spread over seeds = {ratio:.2f}"
