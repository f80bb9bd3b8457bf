"""A model to copy: a small VAE written as a plain Pyro program, with its encoder as the guide.

pyrolik needs only what every Pyro VAE already has: the data ``x`` ``(N, *event_shape)`` as the first
argument, one plate over dim 0 of ``x``, an observed site conditioned on ``x`` (here Gaussian noise
around the decoder's output), and networks in ``eval()`` mode. Every other sample site is a latent;
the guide takes the same arguments and samples the same latent sites. Change the sizes and the
networks, train with Pyro's SVI (or ``pyrolik_models.train_vae``), then::

    import pyrolik
    from pyrolik_models.example import model, guide   # ``models.example`` in a checkout
    pyrolik.ais(model, x, num_steps=500, num_chains=16, seed=0)        # a stochastic lower bound
    pyrolik.iwae(model, x, guide, num_samples=1000, seed=0)
    pyrolik.bdmc(model, 20, data_shape=(DATA,), num_steps=500, num_chains=16, seed=0)  # a sandwich
"""

import pyro
import pyro.distributions as dist
import torch
from torch import nn

__all__ = ["LATENT", "DATA", "decoder", "encoder", "model", "guide"]

LATENT, DATA, HIDDEN = 4, 64, 32
with torch.random.fork_rng():  # the same initial weights on every import, the global RNG untouched
    torch.manual_seed(0)
    decoder = nn.Sequential(nn.Linear(LATENT, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, DATA),
                            nn.Sigmoid()).eval()
    encoder = nn.Sequential(nn.Linear(DATA, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 2 * LATENT)).eval()


def model(x, sigma=0.1):
    """``z ~ N(0, I)``, ``x | z ~ N(decoder(z), sigma^2 I)``, one row of ``x`` per example."""
    pyro.module("decoder", decoder)
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(x.new_zeros(LATENT), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(decoder(z), sigma).to_event(1), obs=x)


def guide(x, sigma=0.1):
    """``q(z | x) = N(loc(x), diag(scale(x)^2))`` from the encoder."""
    pyro.module("encoder", encoder)
    with pyro.plate("data", x.shape[0]):
        loc, log_scale = encoder(x).chunk(2, dim=-1)
        pyro.sample("z", dist.Normal(loc, log_scale.exp()).to_event(1))
