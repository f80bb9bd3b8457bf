"""pyrolik: log-likelihood estimation with honest bounds for decoder-based Pyro models."""

from __future__ import annotations

__version__ = "0.1.0"

from pyrolik import curves  # loss-data curves for representations (issue 9)

__all__ = ["__version__", "curves"]
