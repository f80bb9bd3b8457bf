"""Diagnostics: importance statistics, checks in plain words, plots, comparison, scores and units.

``pyrolik.diagnostics.check(result)`` and the per-example / per-temperature tables live in
:mod:`pyrolik.diagnostics.checks`; the other modules are reached as ``pyrolik.diagnostics.plots``,
``pyrolik.diagnostics.units``, ``pyrolik.diagnostics.scoring`` and ``pyrolik.compare``.
"""

from __future__ import annotations

from pyrolik.diagnostics.checks import (
    ACCEPTANCE_COLLAPSE,
    PyrolikWarning,
    bdmc_gap,
    check,
    example_table,
    running_log_normalizer,
    temperature_trace,
    warn,
)

from pyrolik.diagnostics import comparison, plots, scoring, units  # isort: skip

__all__ = ["comparison", "plots", "scoring", "units", "ACCEPTANCE_COLLAPSE", "PyrolikWarning", "bdmc_gap", "check", "example_table",
           "running_log_normalizer", "temperature_trace", "warn"]


def __getattr__(name: str):
    # ``per_example`` also names the per-example argument marker (pyrolik.per_example): the table
    # is ``example_table`` now; the old spelling works, with a warning, for one release
    if name == "per_example":
        import warnings

        warnings.warn("pyrolik.diagnostics.per_example is now pyrolik.diagnostics.example_table; the "
                      "old spelling will be removed in the next release", FutureWarning, stacklevel=2)
        return example_table
    raise AttributeError(f"module 'pyrolik.diagnostics' has no attribute {name!r}")
