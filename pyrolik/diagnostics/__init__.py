"""Diagnostics: importance statistics, checks in plain words, plots, comparison, scores and units."""

from __future__ import annotations

from pyrolik.diagnostics.checks import (
    ACCEPTANCE_COLLAPSE,
    PyrolikWarning,
    bdmc_gap,
    check,
    example_table,
    running_log_normalizer,
    temperature_trace,
    to_elpd,
    warn,
)

from pyrolik.diagnostics import comparison, plots, scoring, units  # isort: skip

__all__ = ["comparison", "plots", "scoring", "units", "ACCEPTANCE_COLLAPSE", "PyrolikWarning", "bdmc_gap", "check", "example_table",
           "running_log_normalizer", "temperature_trace", "to_elpd", "warn"]
