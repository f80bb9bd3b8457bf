"""Shared oracle fixtures: models whose log p(x) and posterior are known exactly.

Registered for the whole suite by ``tests/conftest.py``. A test module that needs another size
defines its own fixture of the same name, which overrides these (pytest's usual rule).

- ``lg``: the small linear-Gaussian model (data 3, latent 2, noise 0.7, seed 3) with exact marginal
  :math:`N(b, W W^T + s^2 I)` and posterior (``pyrolik_models.oracles.linear_gaussian``);
- the same oracle at other named sizes (seed 0 each): ``lg_small`` (data 4, latent 2, noise 0.5),
  ``lg_medium`` (data 5, latent 2, noise 0.5), ``lg_narrow`` (data 5, latent 2, noise 0.3: a
  narrow posterior) and ``lg_narrow64`` (``LG_NARROW``, the same in float64). A module picks one
  as its ``lg`` with ``lg = alias("lg_medium")``;
- ``x``: four examples drawn from it (generator seed 4);
- ``lg_runs``: ``(x, {5: ais, 100: ais})``, AIS runs of 64 chains at 5 and 100 steps on six examples
  of ``LG_NARROW`` (data 5, latent 2, noise 0.3, float64): a poorly and a well annealed run of one
  model, computed once per test module;
- ``results``: one small result of every estimator (``tests/export_cases.build``), once per module.
"""

from __future__ import annotations

import pytest
import torch
from pyrolik_models.oracles.linear_gaussian import LinearGaussian

import pyrolik

LG_NARROW = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0, dtype=torch.float64)


@pytest.fixture
def lg() -> LinearGaussian:
    return LinearGaussian.random(data_dim=3, latent_dim=2, s=0.7, seed=3)


@pytest.fixture
def lg_small() -> LinearGaussian:
    return LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=0)


@pytest.fixture
def lg_medium() -> LinearGaussian:
    return LinearGaussian.random(data_dim=5, latent_dim=2, s=0.5, seed=0)


@pytest.fixture
def lg_narrow() -> LinearGaussian:
    return LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0)


@pytest.fixture
def lg_narrow64() -> LinearGaussian:
    return LG_NARROW


def alias(name: str):
    """A module's ``lg`` fixture that is the named oracle ``name`` (``lg = alias("lg_medium")``)."""

    @pytest.fixture
    def lg(request) -> LinearGaussian:
        return request.getfixturevalue(name)

    return lg


@pytest.fixture
def x(lg: LinearGaussian) -> torch.Tensor:
    return lg.sample(4, torch.Generator().manual_seed(4))


@pytest.fixture(scope="module")
def lg_runs():
    x = LG_NARROW.sample(6, torch.Generator().manual_seed(1))
    kernel = pyrolik.HMC(num_leapfrog=5)
    return x, {steps: pyrolik.ais(LG_NARROW, x, num_steps=steps, num_chains=64, kernel=kernel,
                                  seed=0, progress=False) for steps in (5, 100)}


@pytest.fixture(scope="module")
def results():
    from tests.export_cases import build

    return build()
