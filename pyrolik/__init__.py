"""pyrolik: log-likelihood estimation with honest bounds for decoder-based Pyro models.

The package is layered; each layer imports only the ones above it in this list:

- :mod:`pyrolik.model`: the adapter, a Pyro program as batched log-density functions;
- :mod:`pyrolik.mcmc`: the HMC transition, its adaptation strategies, annealing schedules;
- :mod:`pyrolik.execution`: batches with their own random streams, processes, faults;
- :mod:`pyrolik.infer`: the estimators (AIS, reverse AIS and BDMC on one annealing engine,
  importance sampling, KDE, CSL);
- :mod:`pyrolik.diagnostics`: statistics, checks in plain words, plots, comparison, units;
- :mod:`pyrolik.io`: export to xarray/ArviZ, result files, checkpoints, data sets;
- :mod:`pyrolik.distortion`: one AIS run along p(z) exp(-beta d(x, f(z))): log p_sigma(x) for a grid
  of sigmas, per-example sigma, rate-distortion curves and their BDMC checks;
- :mod:`pyrolik.training`: log p(x) of fixed train and test subsets inside a training loop;
- :mod:`pyrolik.app`: the command line and the demo.
"""

from __future__ import annotations

import sys as _sys

from pyrolik._version import __version__
from pyrolik.diagnostics import plots, scoring, units
from pyrolik.diagnostics.comparison import Comparison, compare
from pyrolik.distortion import (
    DistortionBDMC,
    DistortionCurve,
    distortion_bdmc,
    rate_distortion,
    sigma_curve,
)
from pyrolik.execution.faults import FailedExamplesWarning
from pyrolik.execution.threads import set_threads
from pyrolik.infer import chains
from pyrolik.infer.annealing import ais, reverse_ais
from pyrolik.infer.budget import BudgetWarning
from pyrolik.infer.conservative import biased_csl, csl
from pyrolik.infer.convergence import bdmc_convergence, plot_bdmc_convergence
from pyrolik.infer.importance import iwae, likelihood_weighting
from pyrolik.infer.parzen import kde
from pyrolik.infer.posterior import plot_posterior_decodings, posterior_samples
from pyrolik.infer.sandwich import Simulated, bdmc, simulate
from pyrolik.io import datasets, export
from pyrolik.io.checkpoint import remove_checkpoint
from pyrolik.io.export import load, save
from pyrolik.mcmc import schedules
from pyrolik.mcmc.hmc import HMC
from pyrolik.model.arguments import per_example, shared
from pyrolik.model.constructs import IdiomWarning
from pyrolik.results import AISResult, BDMCResult, EstimateResult
from pyrolik.training import TrainingMonitor

from pyrolik import curves, diagnostics, distortion, training  # isort: skip  (subpackages that import the above)

__all__ = [
    "__version__",
    # estimators
    "ais",
    "reverse_ais",
    "simulate",
    "bdmc",
    "bdmc_convergence",
    "iwae",
    "likelihood_weighting",
    "kde",
    "csl",
    "biased_csl",
    "posterior_samples",
    # kernel and schedules
    "HMC",
    "schedules",
    # results, files, comparison
    "AISResult",
    "BDMCResult",
    "EstimateResult",
    "Simulated",
    "FailedExamplesWarning",
    "BudgetWarning",
    # Pyro idioms (docs/idioms.md)
    "IdiomWarning",
    "per_example",
    "shared",
    "save",
    "load",
    "remove_checkpoint",
    "compare",
    "Comparison",
    # plots and modules
    "plot_bdmc_convergence",
    "plot_posterior_decodings",
    # one run, the whole curve: log p against sigma, rate-distortion; evaluation during training
    "sigma_curve",
    "rate_distortion",
    "distortion_bdmc",
    "DistortionCurve",
    "DistortionBDMC",
    "TrainingMonitor",
    "diagnostics",
    "plots",
    "units",
    "scoring",
    "chains",
    "datasets",
    "export",
    "curves",
    "distortion",
    "training",
    # CPU threads
    "set_threads",
]

# The modules users reach by their short names (``from pyrolik.schedules import sigmoid``,
# ``pyrolik.plots.plot_diagnostics``) keep those spellings in the layered package.
for _name, _module in {"schedules": schedules, "plots": plots, "units": units, "scoring": scoring,
                       "chains": chains, "datasets": datasets, "export": export}.items():
    _sys.modules.setdefault(f"{__name__}.{_name}", _module)
del _name, _module
