"""pyrolik: log-likelihood estimation with honest bounds for decoder-based Pyro models."""

from __future__ import annotations

__version__ = "0.1.0"

from pyrolik.importance import iwae, likelihood_weighting
from pyrolik.parzen import kde
from pyrolik.results import AISResult, BDMCResult, EstimateResult

__all__ = [
    "__version__",
    "AISResult",
    "BDMCResult",
    "EstimateResult",
    "iwae",
    "kde",
    "likelihood_weighting",
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
