"""The public surface: the top-level names, one warning hierarchy, the moved names' warnings."""

from __future__ import annotations

import importlib
import warnings

import pytest

import pyrolik
from pyrolik import exceptions


def test_every_top_level_name_resolves():
    for name in pyrolik.__all__:
        assert getattr(pyrolik, name) is not None, name


def test_one_warning_hierarchy():
    for cls in (pyrolik.DiagnosticWarning, pyrolik.IdiomWarning, pyrolik.FailedExamplesWarning):
        assert issubclass(cls, pyrolik.PyrolikWarning)
    assert issubclass(pyrolik.PyrolikWarning, UserWarning)
    assert issubclass(pyrolik.FailedExamplesWarning, RuntimeWarning)  # as before the hierarchy
    assert pyrolik.diagnostics.PyrolikWarning is exceptions.PyrolikWarning


def test_every_warning_pyrolik_issues_is_a_pyrolik_warning():
    """No ``warnings.warn`` in the package falls back to a bare UserWarning."""
    import ast
    import pathlib

    root = pathlib.Path(pyrolik.__file__).parent
    bare = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "warn" and getattr(node.func.value, "id", "") == "warnings"):
                category = node.args[1] if len(node.args) > 1 else next(
                    (k.value for k in node.keywords if k.arg == "category"), None)
                name = getattr(category, "id", getattr(category, "attr", None))
                if name is None or name in ("UserWarning", "RuntimeWarning"):
                    bare.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not bare, bare


def test_diagnostic_warnings_are_diagnostic_warnings():
    import torch
    from pyrolik_models.oracles.linear_gaussian import LinearGaussian

    torch.manual_seed(0)
    lg = LinearGaussian.random(latent_dim=2, data_dim=3)
    x = lg.marginal().sample((2,))
    result = pyrolik.likelihood_weighting(lg, x, num_samples=3, seed=0, progress=False)
    with pytest.warns(pyrolik.DiagnosticWarning, match="weights"):
        assert pyrolik.diagnostics.warn(result)


def test_unknown_attribute_is_an_attribute_error():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
            pyrolik.nonexistent  # noqa: B018


def test_schedules_is_a_real_module():
    from pyrolik.schedules import sigmoid

    assert importlib.import_module("pyrolik.schedules") is pyrolik.schedules
    assert sigmoid(10)[0] == 0 and sigmoid(10)[-1] == 1


def test_a_surface_a_user_can_hold():
    """About three dozen top-level names; the subpackages export their verbs; no shims."""
    # 36, and issue 39's Tolerance and the checkpoint() and distributed() blocks
    assert len(pyrolik.__all__) <= 39
    assert {"Tolerance", "checkpoint", "distributed"} <= set(pyrolik.__all__)
    for name in ("bdmc_convergence", "posterior_samples", "biased_csl", "budget", "Budget", "ais"):
        assert name in pyrolik.infer.__all__
    assert pyrolik.annealing.HMC is pyrolik.HMC
    assert not hasattr(exceptions, "moved")
    with pytest.raises(AttributeError):
        pyrolik.plots  # noqa: B018  (moved names are gone, not forwarded)
