"""Shared test set-up: float64 by default, explicit seeds, a clean Pyro parameter store."""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import pyro
import pytest
import torch
from hypothesis import settings

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

# no time limit on a hypothesis example: the first call of a worker may pay for torch's warm-up on
# a loaded machine (speed lives in benchmarks, not in timed tests)
settings.register_profile("pyrolik", deadline=None)
settings.load_profile("pyrolik")

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


# The integration stage, `python -m pytest -m integration` (README's Quick start; .ci/run runs it after
# the everyday suite, so nothing is tested less): the wheel in a fresh environment, the notebooks, the
# documents' examples, the runs that spawn or kill processes, and the largest statistical runs. A file
# stands for all its tests, `file::test` for one test (all its parameters). pyproject's addopts
# deselects the stage from the everyday `python -m pytest`; tests marked `slow` stay slow only.
INTEGRATION = (
    # the wheel, the notebooks, the documents
    "tests/integration/test_wheel.py",
    "tests/integration/test_tutorials.py",
    "tests/integration/test_docs_examples.py",
    "tests/integration/test_curves_docs.py",
    "tests/integration/test_readme.py",
    "tests/integration/test_docs_site.py",
    "tests/integration/test_docs_reference.py",
    "tests/integration/test_docstring_examples.py",
    "tests/app/test_demo.py::test_quick_demo_writes_table_results_and_plots",
    # processes: torchrun, SIGKILL at random moments
    "tests/execution/test_distributed.py::test_two_processes_with_torchrun_equal_one_process",
    "tests/execution/test_checkpoint.py::test_sigkill_at_any_moment_then_resume_is_bit_identical",
    # the largest statistical runs (tolerances met against exact answers)
    "tests/distortion/test_tolerance.py::test_sigma_curve_within_tolerance_of_exact_at_every_sigma",
    "tests/distortion/test_tolerance.py::test_rate_distortion_within_tolerance_of_exact_log_z",
    "tests/infer/test_global_latents.py::test_evidence_with_tolerance_lands_within_it_of_the_exact_joint",
    "tests/infer/test_global_latents.py::test_evidence_is_unbiased_for_the_exact_joint",
    "tests/infer/test_tolerance.py::test_estimate_within_tolerance_of_exact",
    # the everyday suite's heaviest tests (each 5-20 s on 2 loaded cores), kept whole here: the
    # replayed model is recorded once per batch, and these run many batches, curves or exports
    "tests/model/test_arguments.py::test_per_example_arguments_follow_their_rows",
    "tests/results/test_arviz.py::test_every_result_goes_through_arviz",
    "tests/results/test_table.py::test_summary_in_a_log_file",
    "tests/distortion/test_tolerance.py::test_pilot_tables_are_reused_between_rounds",
    "tests/distortion/test_tolerance.py::test_real_data_harder_than_simulated_warns",
    "tests/distortion/test_tolerance.py::test_budget_in_summary_warnings_and_export",
    "tests/io/test_export.py::test_arviz_writes_and_reads_every_export",
    "tests/io/test_export.py::test_saved_files_open_in_arviz_and_xarray",
    "tests/distortion/test_curve.py::test_arviz_tables_a_curve_and_its_bdmc_and_both_read_back",
    "tests/app/test_curve_commands.py::test_sigma_curve_command_with_a_tolerance",
    "tests/app/test_cli.py::test_bdmc_command_matches_the_api",
    "tests/app/test_cli.py::test_evaluate_with_a_tolerance_is_the_api_with_one",
    "tests/app/test_cli_messages.py::test_data_dtype_differs_from_the_model_names_dtype",
    "tests/execution/test_checkpoint.py::test_reverse_ais_and_bdmc_resume_bit_identically",
    "tests/infer/test_sandwich.py::test_sandwich_and_gap_closing",
    "tests/infer/test_annealing.py::test_seed_reproducibility_and_batch_size",
    "tests/infer/test_tolerance.py::test_encoder_path_with_tolerance",
    "tests/infer/test_tolerance.py::test_budget_before_the_estimator_is_ais_with_tolerance",
    "tests/infer/test_tolerance.py::test_real_data_harder_than_simulated_warns",
    "tests/infer/test_tolerance.py::test_per_example_arguments_follow_the_simulated_rows",
    "tests/infer/test_global_latents.py::test_bayes_factor_through_compare",
    "tests/model/test_simulation_sites.py::test_bdmc_on_ragged_sequences_brackets_the_kalman_log_marginal",
    "tests/annealing/test_host_sync.py",
)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    root = config.rootpath
    for entry in INTEGRATION:
        if not (root / entry.split("::")[0]).is_file():
            raise pytest.UsageError(f"tests/conftest.py INTEGRATION names a missing file: {entry}")
    matched: set[str] = set()
    files = {item.nodeid.split("::")[0] for item in items}
    for item in items:
        test = item.nodeid.split("[")[0]
        entry = next((e for e in (test, test.split("::")[0]) if e in INTEGRATION), None)
        if entry is not None:
            matched.add(entry)
            if item.get_closest_marker("slow") is None:
                item.add_marker(pytest.mark.integration)
    stale = [e for e in INTEGRATION if "::" in e and e.split("::")[0] in files and e not in matched]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py INTEGRATION names tests that do not exist: {stale}")
