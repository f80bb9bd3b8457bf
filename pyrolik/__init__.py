"""pyrolik: log-likelihood estimation with honest bounds for decoder-based Pyro models.

The top level holds what a user calls: the estimators, :func:`budget`, :func:`simulate`, the kernel
:class:`HMC`, :mod:`pyrolik.schedules`, :func:`save` / :func:`load` / :func:`concat`,
:func:`compare`, and the warnings. Everything else is reached through its subpackage, each layer
importing only the layers after it (checked by ``lint-imports``, configured in ``pyproject.toml``):

- :mod:`pyrolik.app`: the command line and the demo;
- :mod:`pyrolik.training`: log p(x) of fixed subsets inside a training loop;
- :mod:`pyrolik.distortion`: one run along the distortion path (sigma and rate-distortion curves);
- :mod:`pyrolik.curves`: loss-data curves of representations;
- :mod:`pyrolik.diagnostics`: checks in plain words, plots, comparison, scores and units;
- :mod:`pyrolik.io`: result files and data sets;
- :mod:`pyrolik.infer`: the estimators (AIS, BDMC, evidence, importance sampling, KDE, CSL);
- :mod:`pyrolik.annealing`: the annealing machine (transition, tuning, schedules, engine, driver);
- :mod:`pyrolik.results`: the result classes and their ArviZ/xarray export;
- :mod:`pyrolik.execution`: batches with their own random streams, processes, faults, checkpoints;
- :mod:`pyrolik.model`: a Pyro program as batched log-density functions;
- :mod:`pyrolik.ops`, the random streams, argument checks, advice texts and
  :mod:`pyrolik.exceptions`.
"""

from __future__ import annotations

import sys

from pyrolik._version import __version__
from pyrolik.annealing import schedules
from pyrolik.annealing.kernel import HMC
from pyrolik.diagnostics.comparison import compare
from pyrolik.distortion import distortion_bdmc, rate_distortion, sigma_curve
from pyrolik.exceptions import (
    BudgetWarning,
    DiagnosticWarning,
    FailedExamplesWarning,
    IdiomWarning,
    PyrolikWarning,
)
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
from pyrolik.io.concat import concat
from pyrolik.io.export import load, save

from pyrolik import annealing, curves, diagnostics, distortion, infer, io, model, results, training  # isort: skip

# ``import pyrolik.schedules`` reaches the one schedules module (as ``os.path`` does)
sys.modules[f"{__name__}.schedules"] = schedules

__all__ = [
    "__version__",
    # estimators
    "ais",
    "reverse_ais",
    "simulate",
    "bdmc",
    "evidence",
    "evidence_bdmc",
    "budget",
    "iwae",
    "likelihood_weighting",
    "kde",
    "csl",
    "sigma_curve",
    "rate_distortion",
    "distortion_bdmc",
    # kernel and schedules
    "HMC",
    "schedules",
    # files and comparison
    "save",
    "load",
    "concat",
    "compare",
    # warnings
    "PyrolikWarning",
    "DiagnosticWarning",
    "IdiomWarning",
    "FailedExamplesWarning",
    "BudgetWarning",
    # subpackages
    "annealing",
    "infer",
    "results",
    "model",
    "diagnostics",
    "distortion",
    "curves",
    "io",
    "training",
]
