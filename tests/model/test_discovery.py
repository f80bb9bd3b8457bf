"""Discovery: the data plate, the latent sites and the errors of API.md."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyrolik.model.target import make_target
from tests.oracles import alias

lg = alias("lg_medium")


def test_sites_outside_the_plate_and_in_nested_plates():
    def model(x):
        with pyro.plate("data", x.shape[0], dim=-2):
            with pyro.plate("pix", x.shape[1], dim=-1):
                z = pyro.sample("z", dist.Normal(0.0, 1.0))
                pyro.sample("x", dist.Normal(z, 1.0), obs=x)

    x = torch.randn(4, 3)
    t = make_target(model, x, num_chains=2)
    assert t.layout.latent_dim == 3 and t.layout.sites[0].plate_index == 0
    u = torch.randn(8, 3)
    lp, lo = t.program.log_prior_and_obs(u)
    torch.testing.assert_close(lo, dist.Normal(u, 1.0).log_prob(x.repeat(2, 1)).sum(-1))


def test_errors_name_the_fix(lg):
    x = lg.sample(3)
    with pytest.raises(TypeError, match="torch.Tensor"):
        make_target(lg, x.numpy())
    bad = x.clone()
    bad[1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or inf in examples \[1\]"):
        make_target(lg, bad)
    with pytest.raises(ValueError, match="does not fit|shape"):
        make_target(lg, torch.randn(3, 7))
    with pytest.raises(ValueError, match=r"x of shape \(3, 7\) \(run as 4 stacked copies"):
        make_target(lg, torch.randn(3, 7), num_chains=4)
    with pytest.raises(ValueError, match="num_chains must be a positive integer"):
        make_target(lg, x, num_chains=0)

    def no_obs(x):
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="no observed site"):
        make_target(no_obs, x)

    def no_plate(x):
        z = pyro.sample("z", dist.Normal(torch.zeros(x.shape[0]), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(z.unsqueeze(-1).expand(x.shape), 1.0).to_event(2), obs=x)

    with pytest.raises(ValueError, match="no plate over the examples"):
        make_target(no_plate, x)

    def discrete(x):
        with pyro.plate("data", x.shape[0]):
            c = pyro.sample("c", dist.Bernoulli(0.5))
            pyro.sample("x", dist.Normal(c.unsqueeze(-1).expand(x.shape), 1.0).to_event(1), obs=x)

    with pytest.raises(TypeError, match="discrete"):
        make_target(discrete, x)

    def global_latent(x):
        g = pyro.sample("g", dist.Normal(0.0, 1.0))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("x", dist.Normal(g, 1.0).expand([x.shape[1]]).to_event(1), obs=x)

    with pytest.raises(ValueError, match="outside the plate"):
        make_target(global_latent, x)

    def bad_guide(x):
        pass

    with pytest.raises(ValueError, match="guide misses the latent site"):
        make_target(lg, x, guide=bad_guide)
