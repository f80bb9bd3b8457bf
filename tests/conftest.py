"""Shared test set-up: float64 by default, explicit seeds, a clean Pyro parameter store."""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import pyro
import pytest
import torch

# Tests exercise the checkout's models/ (installed as pyrolik_models), whatever is installed.
_models = importlib.import_module("models")
sys.modules.setdefault("pyrolik_models", _models)
if sys.modules["pyrolik_models"] is _models:
    # its submodules under both names too: `from pyrolik_models.train_digits import ...` (as the
    # docs write it) would otherwise load a second copy, which rebinds pyrolik_models.train_vae
    # (the function) to that copy's submodule
    for _info in pkgutil.iter_modules(_models.__path__):
        sys.modules.setdefault(f"pyrolik_models.{_info.name}",
                               importlib.import_module(f"models.{_info.name}"))

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
