"""The layout: flat unconstrained u <-> per-site values, rows chain-major."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyrolik.model.target import make_target
from tests.oracles import alias

lg = alias("lg_medium")


def test_rows_are_chain_major_and_chains_do_not_interact(lg):
    x = lg.sample(3, torch.Generator().manual_seed(1))
    t = make_target(lg, x, num_chains=2)
    torch.testing.assert_close(t.program.x[4], x[1])  # row k*N + n holds example n
    u = torch.randn(6, 2)
    g = t.value_and_grad(u).grad_ratio
    u2 = u.clone()
    u2[5] += 10.0  # perturb chain 1 of example 2
    g2 = t.value_and_grad(u2).grad_ratio
    torch.testing.assert_close(g[:5], g2[:5])
    assert not torch.allclose(g[5], g2[5])


def _two_site_model(x):
    with pyro.plate("data", x.shape[0], dim=-1):
        with pyro.plate("pix", 2, dim=-2):
            pyro.sample("a", dist.Gamma(2.0, 1.0))  # value (2, rows): the data plate at index 1
        pyro.sample("b", dist.Beta(2.0, 2.0).expand([3]).to_event(1))
        pyro.sample("x", dist.Normal(0.0, 1.0).expand([2]).to_event(1), obs=x)


def test_the_two_spaces_and_their_maps_are_inverse():
    x = torch.randn(4, 2)
    layout = make_target(_two_site_model, x, num_chains=3).layout
    assert (layout.rows, layout.latent_dim) == (12, 5)
    assert [(s.name, s.offset, s.size, s.shape) for s in layout.sites] == [
        ("a", 0, 2, (2,)), ("b", 2, 3, (3,))]
    u = torch.randn(12, 5, dtype=torch.float64)
    parts = layout.split(u)
    assert layout.sites[0].plate_index == 1 and layout.sites[1].plate_index == 0
    assert parts["a"].shape == (2, 12) and parts["b"].shape == (12, 3)
    torch.testing.assert_close(layout.join(parts), u)
    values = layout.constrain(u)
    assert (values["a"] > 0).all() and ((values["b"] > 0) & (values["b"] < 1)).all()
    torch.testing.assert_close(layout.unconstrain(values), u)
    chains = layout.by_chain(values)
    assert chains["a"].shape == (3, 4, 2) and chains["b"].shape == (3, 4, 3)
    torch.testing.assert_close(chains["b"][1, 2], values["b"][1 * 4 + 2])  # row k*N + n
    zero_b = layout.join({"a": parts["a"]}, fill=u)
    assert torch.equal(zero_b[:, 2:], torch.zeros(12, 3, dtype=torch.float64))


def test_the_layout_is_frozen_and_first_chains_keeps_the_sites():
    layout = make_target(_two_site_model, torch.randn(4, 2), num_chains=3).layout
    with pytest.raises(AttributeError):
        layout.num_chains = 1
    two = layout.first_chains(2)
    assert (two.rows, two.sites, layout.num_chains) == (8, layout.sites, 3)
