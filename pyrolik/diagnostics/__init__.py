"""Diagnostics: importance statistics, checks in plain words, plots, comparison, scores and units.

``pyrolik.diagnostics.check(result)`` and the per-example / per-temperature tables live in
:mod:`pyrolik.diagnostics.checks`; the other modules are reached as ``pyrolik.plots``,
``pyrolik.units``, ``pyrolik.scoring`` and ``pyrolik.compare``.
"""

from __future__ import annotations

from pyrolik.diagnostics.checks import (
    ACCEPTANCE_COLLAPSE,
    PyrolikWarning,
    bdmc_gap,
    check,
    per_example,
    running_log_normalizer,
    temperature_trace,
    warn,
)
from pyrolik.diagnostics.elpd import to_elpd

__all__ = ["ACCEPTANCE_COLLAPSE", "PyrolikWarning", "bdmc_gap", "check", "per_example",
           "running_log_normalizer", "temperature_trace", "to_elpd", "warn"]
