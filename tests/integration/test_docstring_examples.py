"""The Examples sections of the public docstrings run as written (doctest, in this interpreter).

Every public function and class (``tests/test_docstrings.py``'s ``public_functions`` and the
classes the packages export) whose docstring has an Examples section gets one test here: a new
example is tested without being listed. The examples are tiny (a few annealing steps on the
linear-Gaussian oracle), so they print shapes, bounds and comparisons, not digits that depend on
the library's defaults.
"""

from __future__ import annotations

import doctest
import inspect

import pytest

import pyrolik
from tests.test_docstrings import public_functions, public_modules


def with_examples() -> dict[str, object]:
    objects = dict(public_functions())
    for module in public_modules():
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and obj.__module__.startswith("pyrolik"):
                objects.setdefault(f"{module.__name__}.{name}", obj)
    return {name: obj for name, obj in objects.items()
            if "Examples\n--------" in (inspect.getdoc(obj) or "")}


EXAMPLES = with_examples()


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(EXAMPLES[name], name, globs={})
    assert tests and tests[0].examples, f"{name}: no doctest in its Examples section"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"


def test_the_estimators_have_examples_here():
    assert "pyrolik.bdmc" in EXAMPLES and "pyrolik.iwae" in EXAMPLES
    assert all(name.startswith("pyrolik.") for name in EXAMPLES)
    assert pyrolik.kde in EXAMPLES.values()
