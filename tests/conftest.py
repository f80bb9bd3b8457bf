"""Shared test set-up: float64 by default, explicit seeds, a clean Pyro parameter store."""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import pyro
import pytest
import torch

# Tests exercise the checkout's models/ (installed as pyrolik_models), whatever is installed: the
# package and its submodules under both names, so that `pyrolik_models.oracles.rbm` is `models.oracles.rbm`.
# The top-level modules are imported first, so that `from pyrolik_models.train_digits import ...` (as
# the docs and tutorials write it) finds the same module instead of loading a second copy.
_models = importlib.import_module("models")
sys.modules.setdefault("pyrolik_models", _models)
for _info in pkgutil.iter_modules(_models.__path__):
    importlib.import_module(f"models.{_info.name}")
for _name, _module in list(sys.modules.items()):
    if _name.startswith("models."):
        sys.modules.setdefault("pyrolik_models" + _name[len("models"):], _module)

pytest_plugins = ["tests.oracles"]  # shared oracle fixtures: lg, x

SEED = int(os.environ.get("PYROLIK_TEST_SEED", "0"))
# The tests run small tensors, where intra-op threads only add contention (10x slower on a loaded
# 2-core machine); PYROLIK_TEST_THREADS overrides.
torch.set_num_threads(int(os.environ.get("PYROLIK_TEST_THREADS", "1")))


def pytest_report_header(config):
    return f"pyrolik test seed: {SEED} (set PYROLIK_TEST_SEED to sweep)"


@pytest.fixture(autouse=True)
def _float64_and_clean_state():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    pyro.clear_param_store()
    torch.manual_seed(SEED)
    yield
    torch.set_default_dtype(old)
    pyro.clear_param_store()


@pytest.fixture
def seed() -> int:
    return SEED
