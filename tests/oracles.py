"""Shared oracle fixtures: models whose log p(x) and posterior are known exactly.

Registered for the whole suite by ``tests/conftest.py``. A test module that needs another size
defines its own fixture of the same name, which overrides these (pytest's usual rule).

- ``lg``: the small linear-Gaussian model (data 3, latent 2, noise 0.7, seed 3) with exact marginal
  :math:`N(b, W W^T + s^2 I)` and posterior (``pyrolik_models.oracles.linear_gaussian``);
- ``x``: four examples drawn from it (generator seed 4).
"""

from __future__ import annotations

import pytest
import torch
from pyrolik_models.oracles.linear_gaussian import LinearGaussian


@pytest.fixture
def lg() -> LinearGaussian:
    return LinearGaussian.random(data_dim=3, latent_dim=2, s=0.7, seed=3)


@pytest.fixture
def x(lg: LinearGaussian) -> torch.Tensor:
    return lg.sample(4, torch.Generator().manual_seed(4))
