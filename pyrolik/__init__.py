"""pyrolik: log-likelihood estimation with honest bounds for decoder-based Pyro models.

The top level holds what a user calls; the subpackages and their layers are in ``docs/design.md``.
"""

from __future__ import annotations

from pyrolik import schedules
from pyrolik._version import __version__
from pyrolik.annealing.kernel import HMC, SMC
from pyrolik.diagnostics.comparison import compare
from pyrolik.distortion import distortion_bdmc, rate_distortion, sigma_curve
from pyrolik.exceptions import (
                                BudgetWarning,
                                DiagnosticWarning,
                                FailedExamplesWarning,
                                IdiomWarning,
                                PyrolikWarning,
)
from pyrolik.execution.batches import checkpoint, distributed
from pyrolik.infer import (
                                ais,
                                bdmc,
                                budget,
                                csl,
                                evidence,
                                evidence_bdmc,
                                iwae,
                                kde,
                                likelihood_weighting,
                                reverse_ais,
                                simulate,
)
from pyrolik.infer.tolerance import Tolerance
from pyrolik.io.export import concat, load, save

from pyrolik import annealing, curves, diagnostics, distortion, infer, io, model, results, training  # isort: skip


__all__ = [
    "__version__",
    # estimators
    "ais", "reverse_ais", "simulate", "bdmc", "evidence", "evidence_bdmc", "budget", "iwae",
    "likelihood_weighting", "kde", "csl", "sigma_curve", "rate_distortion", "distortion_bdmc",
    # kernel, schedules, budget and execution
    "HMC", "SMC", "schedules", "Tolerance", "checkpoint", "distributed",
    # files and comparison
    "save", "load", "concat", "compare",
    # warnings
    "PyrolikWarning", "DiagnosticWarning", "IdiomWarning", "FailedExamplesWarning", "BudgetWarning",
    # subpackages
    "annealing", "infer", "results", "model", "diagnostics", "distortion", "curves", "io", "training",
]
