"""Models for the scale tests: plain functions (stable names across processes), linear-Gaussian.

``PYROLIK_TEST_DELAY`` (seconds) makes every model call sleep, so that a subprocess can be killed in
the middle of a run; it does not change any number. Replayed evaluations (``pyrolik.model.reuse``) skip
the program's Python, sleep included: set ``PYROLIK_REPLAY=0`` with it.
"""

from __future__ import annotations

import os
import time

import pyro
import pyro.distributions as dist
import torch

_g = torch.Generator().manual_seed(0)
W = torch.randn(5, 2, generator=_g, dtype=torch.float64)
B = torch.randn(5, generator=_g, dtype=torch.float64)
S = 0.3
DELAY = float(os.environ.get("PYROLIK_TEST_DELAY", "0"))


def model(x):
    if DELAY:
        time.sleep(DELAY)
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(z @ W.to(x).T + B.to(x), S).to_event(1), obs=x)


def nan_model(x):
    """The same model, but its likelihood is NaN for examples whose first coordinate exceeds 1."""
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
        loc = z @ W.to(x).T + B.to(x)
        loc = torch.where((x[:, :1] > 1.0), torch.full_like(loc, float("nan")), loc)
        pyro.sample("x", dist.Normal(loc, S).to_event(1), obs=x)


def exact_log_marginal(x):
    cov = W @ W.T + S**2 * torch.eye(5, dtype=W.dtype)
    return dist.MultivariateNormal(B, covariance_matrix=cov).log_prob(x.to(W))


def sample(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, 2, generator=g, dtype=torch.float64)
    return z @ W.T + B + S * torch.randn(n, 5, generator=g, dtype=torch.float64)
