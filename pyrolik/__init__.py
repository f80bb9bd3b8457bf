"""pyrolik: log-likelihood estimation with honest bounds for decoder-based Pyro models.

The top level holds what a user calls: the estimators, :func:`simulate`, the kernel :class:`HMC`,
:mod:`pyrolik.schedules`, the result classes, :func:`save` / :func:`load`, :func:`compare`, and the
warning hierarchy under :class:`PyrolikWarning`. Everything else is reached through its subpackage.

The package is layered; each layer imports only the layers listed after it (the contract is
checked by ``lint-imports``, configured in ``pyproject.toml``):

- :mod:`pyrolik.app`: the command line and the demo;
- :mod:`pyrolik.training`: log p(x) of fixed train and test subsets inside a training loop;
- :mod:`pyrolik.distortion`: one AIS run along p(z) exp(-beta d(x, f(z))): log p_sigma(x) for a grid
  of sigmas, per-example sigma, rate-distortion curves and their BDMC checks;
- :mod:`pyrolik.curves`: loss-data curves of representations;
- :mod:`pyrolik.diagnostics`: checks in plain words, plots, comparison, scores and units;
- :mod:`pyrolik.io`: result files and data sets;
- :mod:`pyrolik.infer`: the estimators (AIS, reverse AIS and BDMC on one annealing engine,
  importance sampling, KDE, CSL);
- :mod:`pyrolik.results`: the result classes and their ArviZ/xarray export;
- :mod:`pyrolik.execution`: batches with their own random streams, processes, faults, checkpoints;
- :mod:`pyrolik.annealing`: the HMC transition, its adaptation strategies, annealing schedules;
- :mod:`pyrolik.model`: the adapter, a Pyro program as batched log-density functions;
- the bottom layer: :mod:`pyrolik.ops` (importance statistics, shared types), the random streams,
  argument checks, advice texts and :mod:`pyrolik.exceptions`.
"""

from __future__ import annotations

from pyrolik._version import __version__
from pyrolik.annealing import schedules
from pyrolik.annealing.kernel import HMC
from pyrolik.diagnostics.comparison import Comparison, compare
from pyrolik.distortion import (
    DistortionBDMC,
    DistortionCurve,
    distortion_bdmc,
    rate_distortion,
    sigma_curve,
)
from pyrolik.exceptions import (
    BudgetWarning,
    DiagnosticWarning,
    FailedExamplesWarning,
    IdiomWarning,
    PyrolikWarning,
)
from pyrolik.exceptions import moved as _moved
from pyrolik.execution.threads import set_threads
from pyrolik.infer.annealing import ais, reverse_ais
from pyrolik.infer.budget import Budget, budget
from pyrolik.infer.conservative import biased_csl, csl
from pyrolik.infer.convergence import bdmc_convergence
from pyrolik.infer.evidence import evidence, evidence_bdmc
from pyrolik.infer.importance import iwae, likelihood_weighting
from pyrolik.infer.parzen import kde
from pyrolik.infer.posterior import posterior_samples
from pyrolik.infer.sandwich import Simulated, bdmc, simulate
from pyrolik.io.concat import concat
from pyrolik.io.export import load, save
from pyrolik.model.arguments import per_example, shared
from pyrolik.results import AISResult, BDMCResult, EstimateResult
from pyrolik.training import TrainingMonitor

from pyrolik import annealing, curves, diagnostics, distortion, execution, infer, io, model, ops, training  # isort: skip

__all__ = [
    "__version__",
    # estimators
    "ais",
    "reverse_ais",
    "simulate",
    "bdmc",
    "bdmc_convergence",
    "evidence",
    "evidence_bdmc",
    "budget",
    "Budget",
    "iwae",
    "likelihood_weighting",
    "kde",
    "csl",
    "biased_csl",
    "posterior_samples",
    "sigma_curve",
    "rate_distortion",
    "distortion_bdmc",
    "TrainingMonitor",
    # kernel and schedules
    "HMC",
    "schedules",
    # results, files, comparison
    "AISResult",
    "BDMCResult",
    "EstimateResult",
    "Simulated",
    "DistortionCurve",
    "DistortionBDMC",
    "save",
    "load",
    "concat",
    "compare",
    "Comparison",
    # the model convention: per-example and shared arguments (docs/idioms.md)
    "per_example",
    "shared",
    # warnings
    "PyrolikWarning",
    "DiagnosticWarning",
    "IdiomWarning",
    "FailedExamplesWarning",
    "BudgetWarning",
    # CPU threads
    "set_threads",
    # subpackages
    "curves",
    "diagnostics",
    "distortion",
    "execution",
    "infer",
    "io",
    "annealing",
    "model",
    "ops",
    "training",
]

# Names the top level held before the public surface was narrowed: still reachable, for one
# release, with a warning that gives the new spelling.
_MOVED = {
    "plots": "pyrolik.diagnostics.plots",
    "units": "pyrolik.diagnostics.units",
    "scoring": "pyrolik.diagnostics.scoring",
    "chains": "pyrolik.infer.chains",
    "datasets": "pyrolik.io.datasets",
    "export": "pyrolik.io.export",
    "remove_checkpoint": "pyrolik.execution.checkpoint.remove_checkpoint",
    "plot_bdmc_convergence": "pyrolik.diagnostics.plots.plot_bdmc_convergence",
    "plot_posterior_decodings": "pyrolik.diagnostics.plots.plot_posterior_decodings",
}


def __getattr__(name: str):
    return _moved(__name__, name, _MOVED)
