"""pyrolik: log-likelihood estimation with honest bounds for decoder-based Pyro models."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
