"""The estimators: AIS and BDMC on one annealing engine, importance sampling, KDE, CSL."""
