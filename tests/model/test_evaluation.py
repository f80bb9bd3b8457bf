"""The plain evaluation: log densities, gradients, Jacobians, dtypes and seeded draws."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch

from pyrolik.model.target import make_target
from tests.oracles import alias

lg = alias("lg_medium")


def test_linear_gaussian_log_joint_and_gradients(lg):
    x = lg.sample(3, torch.Generator().manual_seed(1))
    t = make_target(lg, x, num_chains=4)
    layout = t.layout
    assert (layout.rows, layout.latent_dim, layout.plate_name, layout.observed) == (12, 2, "data",
                                                                                    ("x",))
    u = torch.randn(12, 2, generator=torch.Generator().manual_seed(2))
    lp, lo = t.program.log_prior_and_obs(u)
    ref_lp = dist.Normal(0.0, 1.0).log_prob(u).sum(-1)
    ref_lo = dist.Normal(u @ lg.W.T + lg.b, lg.s).log_prob(x.repeat(4, 1)).sum(-1)
    torch.testing.assert_close(lp, ref_lp, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lo, ref_lo, rtol=1e-12, atol=1e-12)
    vg = t.value_and_grad(u)
    torch.testing.assert_close(vg.grad_init, -u)
    resid = (x.repeat(4, 1) - u @ lg.W.T - lg.b) / lg.s**2
    torch.testing.assert_close(vg.grad_ratio, resid @ lg.W)


def test_constrained_sites_carry_their_log_jacobian():
    def model(x):
        with pyro.plate("data", x.shape[0]):
            a = pyro.sample("a", dist.Uniform(-1.0, 2.0))
            b = pyro.sample("b", dist.LogNormal(0.0, 1.0).expand([2]).to_event(1))
            pyro.sample("x", dist.Normal(a.unsqueeze(-1) * b, 1.0).to_event(1), obs=x)

    x = torch.randn(3, 2)
    t = make_target(model, x, num_chains=2)
    assert [(s.name, s.size) for s in t.layout.sites] == [("a", 1), ("b", 2)]
    u = torch.randn(6, 3)
    lp, _ = t.program.log_prior_and_obs(u)
    # by hand: a = -1 + 3 sigmoid(u0), b = exp(u1:3)
    s = torch.sigmoid(u[:, 0])
    ref_a = torch.log(torch.tensor(1 / 3.0)) + torch.log(3 * s * (1 - s))
    ref_b = (dist.LogNormal(0.0, 1.0).log_prob(u[:, 1:].exp()) + u[:, 1:]).sum(-1)
    torch.testing.assert_close(lp, ref_a + ref_b)
    z = t.layout.by_chain(t.layout.constrain(u))
    assert z["a"].shape == (2, 3) and z["b"].shape == (2, 3, 2)
    torch.testing.assert_close(t.layout.unconstrain(t.layout.constrain(u)), u)


def test_float32_data_give_float32_densities(lg):
    x = lg.sample(3).float()
    t = make_target(lg, x, num_chains=2)
    draw = t.program.sample_prior(torch.Generator().manual_seed(0))
    assert draw.u.dtype == torch.float32
    vg = t.value_and_grad(draw.u)
    assert vg.log_ratio.dtype == torch.float32 and vg.grad_ratio.dtype == torch.float32


def test_sampling_is_seeded_and_leaves_global_rng_alone(lg):
    x = lg.sample(3)
    t = make_target(lg, x, num_chains=2)
    state = torch.get_rng_state()
    a = t.program.sample_prior(torch.Generator().manual_seed(5)).u
    b = t.program.sample_prior(torch.Generator().manual_seed(5)).u
    assert torch.equal(a, b)
    assert torch.equal(state, torch.get_rng_state())
