"""Annealing schedules: 1-D tensors of inverse temperatures from exactly 0 to exactly 1.

``pyrolik.schedules.linear(num_steps)``, ``.geometric(num_steps)`` and ``.sigmoid(num_steps,
delta=4.0)`` build them; ``schedule=`` in the estimators accepts their names, any such tensor, or
``"auto"`` (the default: a schedule placed from the pilot run). The implementation lives in
:mod:`pyrolik.mcmc.schedules`, beside the kernel that runs along them.
"""

from __future__ import annotations

from pyrolik.mcmc.schedules import adaptive, geometric, linear, sigmoid, validate

__all__ = ["linear", "geometric", "sigmoid", "adaptive", "validate"]
