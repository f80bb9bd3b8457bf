"""Simulation as Pyro users expect: the obs=x idiom with x=None, a placeholder, or a pointer to
bdmc(model, (x, latents))."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyrolik
from pyrolik.model.simulation import draw_joint
from pyrolik.model.target import make_target


# -- simulation --------------------------------------------------------------------------------------
def test_simulation_runs_the_obs_none_idiom_and_points_to_data_when_it_cannot(lg):
    def obs_none(x, num=4):  # Pyro's idiom: with x=None the observation is sampled
        n = num if x is None else x.shape[0]
        with pyro.plate("data", n):
            z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
            return pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    x, latents = pyrolik.simulate(obs_none, 4, data_shape=(3,), seed=0)
    again, _ = draw_joint(obs_none, torch.zeros(4, 3), seed=0)
    assert torch.equal(x, again) and latents["z"].shape == (4, 2)
    resid = (x - latents["z"] @ lg.W.T - lg.b) / lg.s  # x | z ~ N(W z + b, s^2): residuals N(0, 1)
    assert resid.abs().max() < 5

    def prodlda_like(x):  # the structure reads the data: a placeholder of zeros cannot run it
        total = int(x.sum(-1).max())
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(torch.zeros(3), 1.0).to_event(1))
            pyro.sample("x", dist.Multinomial(total, logits=z), obs=x)

    counts = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 3.0]])
    make_target(prodlda_like, counts)  # it evaluates on data
    with pytest.raises(ValueError, match=r"simulating from the model failed.*pyrolik.bdmc\(model, "
                       r"\(x, latents\)"):
        pyrolik.bdmc(prodlda_like, 2, data_shape=(3,), num_steps=2, num_chains=2, progress=False)
