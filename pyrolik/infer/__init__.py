"""The estimators: AIS and BDMC on one annealing engine (and the evidence of a whole data set on it),
importance sampling, KDE, CSL."""

from pyrolik.infer import chains

__all__ = ["chains"]
