"""pyrolik: log-likelihood estimation with honest bounds for decoder-based Pyro models."""

from __future__ import annotations

__version__ = "0.1.0"

from pyrolik import diagnostics, plots, schedules
from pyrolik.annealing import ais, reverse_ais
from pyrolik.checkpoint import remove_checkpoint
from pyrolik.convergence import bdmc_convergence, plot_bdmc_convergence
from pyrolik.export import load, save
from pyrolik.faults import FailedExamplesWarning
from pyrolik.hmc import HMC
from pyrolik.importance import iwae, likelihood_weighting
from pyrolik.parzen import kde
from pyrolik.posterior import plot_posterior_decodings, posterior_samples
from pyrolik.results import AISResult, BDMCResult, EstimateResult
from pyrolik.sandwich import Simulated, bdmc, simulate

__all__ = [
    "__version__",
    "AISResult",
    "BDMCResult",
    "EstimateResult",
    "FailedExamplesWarning",
    "HMC",
    "Simulated",
    "ais",
    "bdmc",
    "bdmc_convergence",
    "reverse_ais",
    "schedules",
    "simulate",
    "iwae",
    "kde",
    "likelihood_weighting",
    "plot_bdmc_convergence",
    "plot_posterior_decodings",
    "diagnostics",
    "plots",
    "load",
    "save",
    "posterior_samples",
    "remove_checkpoint",
]

# issue 8: CSL, units, paired comparison (helper `csl`)
from pyrolik import chains, scoring, units  # noqa: E402
from pyrolik.comparison import Comparison, compare  # noqa: E402
from pyrolik.conservative import biased_csl, csl  # noqa: E402

__all__ += [
    "csl",
    "biased_csl",
    "chains",
    "units",
    "scoring",
    "compare",
    "Comparison",
]

# issue 9: loss-data curves for representations (helper `curves`)
from pyrolik import curves  # noqa: E402

__all__ += ["curves"]
