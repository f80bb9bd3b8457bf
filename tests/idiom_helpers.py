"""Shared oracles of the idiom tests: the exact-posterior guide, zero-variance IWAE, same densities."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch import nn

import pyrolik
from pyrolik.model.target import make_target


def exact_guide(lg, x_arg_is_data=True):
    def guide(x, *args, **kwargs):
        post = lg.exact_posterior(x)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(post.loc, scale_tril=post.scale_tril))

    return guide


def exact_iwae(model, x, guide, truth, **kw):
    r = pyrolik.iwae(model, x, guide, num_samples=5, seed=0, progress=False, **kw)
    torch.testing.assert_close(r.log_weights, truth.expand(5, -1), rtol=1e-9, atol=1e-9)


def same_density(model, reference, x, k=3, **kw):
    """``model`` and ``reference`` give the same per-row log p(u) and log p(x | u)."""
    t, r = make_target(model, x, k, **kw), make_target(reference, x, k)
    u = torch.randn(t.layout.rows, t.layout.latent_dim, generator=torch.Generator().manual_seed(5))
    for a, b in zip(t.program.log_prior_and_obs(u), r.program.log_prior_and_obs(u), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    return t


def lg_body(lg, x, plate, **sample_kw):
    d = lg.latent_dim
    with plate:
        z = pyro.sample("z", dist.Normal(x.new_zeros(d), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x, **sample_kw)


# -- modules in training mode, random evaluations ---------------------------------------------------
def net_model(lg, net):
    def model(x):
        decoder = pyro.module("decoder", net)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(decoder(z), lg.s).to_event(1), obs=x)

    return model


def linear(lg):
    layer = nn.Linear(lg.latent_dim, lg.data_dim)
    with torch.no_grad():
        layer.weight.copy_(lg.W)
        layer.bias.copy_(lg.b)
    return layer
