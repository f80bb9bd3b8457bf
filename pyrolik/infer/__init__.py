"""The estimators: AIS and BDMC on one annealing engine, importance sampling, KDE, CSL."""

from pyrolik.infer import chains

__all__ = ["chains"]
