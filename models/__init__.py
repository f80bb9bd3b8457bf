"""Example decoder-based models as plain Pyro programs (installed as ``pyrolik_models``).

No module here imports pyrolik: these are what a user would write. Analytic models also export
``exact_log_marginal(x)`` and ``exact_posterior(x)`` so that estimators can be checked against them.
"""
