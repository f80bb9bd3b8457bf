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
from pyrolik.diagnostics.elpd import to_elpd
from pyrolik.exceptions import moved

from pyrolik.diagnostics import comparison, plots, scoring, units  # isort: skip

__all__ = ["comparison", "plots", "scoring", "units", "ACCEPTANCE_COLLAPSE", "PyrolikWarning", "bdmc_gap", "check", "example_table",
           "running_log_normalizer", "temperature_trace", "to_elpd", "warn"]


def __getattr__(name: str):
    # ``per_example`` also names the per-example argument marker (pyrolik.per_example): the table
    # is ``example_table`` now; the old spelling works, with a warning, for one release
    return moved(__name__, name, {"per_example": "pyrolik.diagnostics.checks.example_table"})
