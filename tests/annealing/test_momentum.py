"""Partial momentum refreshment (``momentum_persistence``): the full refresh draw for draw at 0, the
refresh-leapfrog-flip move as written, invariance of the extended target, exact AIS and BDMC."""

from __future__ import annotations

import math

import pytest
import torch

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from pyrolik.annealing.kernel import HMC, HMCState, leapfrog
from pyrolik.model.target import make_target
from tests.helpers import assert_lower_bound, assert_unbiased


def _fn(lg, x, k):
    target = make_target(lg, x, num_chains=k)
    return target.value_and_grad


def reference_step(state, p0, fn, beta, eps, num_leapfrog, u_accept, inv_mass=None):
    """A plain Metropolis-adjusted leapfrog trajectory from momentum ``p0``, written out."""
    inv_m = 1.0 if inv_mass is None else inv_mass
    kin = (lambda p: (p * p).sum(-1)) if inv_mass is None else (lambda p: (inv_mass * p * p).sum(-1))
    h0 = -state.log_density(beta) + 0.5 * kin(p0)
    prop, p1 = leapfrog(state, p0, fn, beta, eps, inv_m, num_leapfrog)
    h1 = -prop.log_density(beta) + 0.5 * kin(p1)
    accepted = torch.log(u_accept) < (h0 - h1).clamp_max(0.0)
    return torch.where(accepted.unsqueeze(-1), prop.z, state.z), p1, accepted


def test_zero_persistence_is_the_full_refresh_draw_for_draw(lg, x):
    """Known answer: at 0 the transition draws the jitter, a fresh N(0, M) momentum and the accept
    uniform in that order, as the kernel always has, and keeps no momentum."""
    k, n = 5, x.shape[0]
    fn = _fn(lg, x, k)
    z0 = torch.randn(k * n, 2, generator=torch.Generator().manual_seed(1))
    beta, eps = torch.full((k * n,), 0.6), torch.linspace(0.1, 0.8, k * n)
    inv_mass = torch.rand(k * n, 2, generator=torch.Generator().manual_seed(2)) + 0.5
    for im in (None, inv_mass):
        kernel = HMC(num_leapfrog=3, step_jitter=0.3, momentum_persistence=0.0).transition
        new, info = kernel.step(kernel.init(z0, fn), fn, beta, eps, torch.Generator().manual_seed(3),
                                im)
        assert new.momentum is None
        g = torch.Generator().manual_seed(3)
        jitter = torch.add(1.0 - 0.3, torch.rand(k * n, generator=g), alpha=2 * 0.3)
        xi = torch.randn(k * n, 2, generator=g)
        p0 = xi if im is None else xi * im.rsqrt()
        z, _, accepted = reference_step(kernel.init(z0, fn), p0, fn, beta, eps * jitter, 3,
                                        torch.rand(k * n, generator=g), im)
        assert torch.equal(new.z, z) and torch.equal(info.is_accepted, accepted)
        assert 0 < accepted.sum() < k * n  # both branches exercised
    # through ais: 0 keeps no momentum at all (the kernel of pyrolik 0.1), the default keeps it
    zero = pyrolik.ais(lg, x, num_steps=8, num_chains=3, seed=0, progress=False,
                       kernel=HMC(num_leapfrog=2, momentum_persistence=0.0))
    kept = pyrolik.ais(lg, x, num_steps=8, num_chains=3, seed=0, progress=False,
                       kernel=HMC(num_leapfrog=2))
    assert zero.kernel.move.momentum_persistence == 0.0 and kept.kernel.move.momentum_persistence == 0.5
    assert not torch.equal(zero.final_state, kept.final_state)


@pytest.mark.parametrize("with_mass", [False, True])
def test_partial_refresh_then_leapfrog_then_flip_on_rejection(lg, x, with_mass):
    """Known answer: u <- a u + sqrt(1 - a^2) xi, leapfrog from M^(1/2) u; the new state keeps the
    whitened end momentum M^(-1/2) p' where accepted and -u where rejected. From a state without a
    momentum the first transition refreshes fully."""
    k, n, a = 5, x.shape[0], 0.8
    rows = k * n
    fn = _fn(lg, x, k)
    g0 = torch.Generator().manual_seed(1)
    z0, u0 = torch.randn(rows, 2, generator=g0), torch.randn(rows, 2, generator=g0)
    beta, eps = torch.full((rows,), 0.6), torch.linspace(0.1, 0.9, rows)
    im = torch.rand(rows, 2, generator=g0) + 0.5 if with_mass else None
    kernel = HMC(num_leapfrog=3, step_jitter=0.0, momentum_persistence=a)
    plain = HMC(num_leapfrog=3, step_jitter=0.0, momentum_persistence=0.0)
    for start in (None, u0):
        state = kernel.transition.init(z0, fn)._replace(momentum=start)
        new, info = kernel.transition.step(state, fn, beta, eps, torch.Generator().manual_seed(3), im)
        g = torch.Generator().manual_seed(3)
        xi = torch.randn(rows, 2, generator=g)
        u = xi if start is None else a * start + math.sqrt(1 - a * a) * xi
        p0 = u if im is None else u * im.rsqrt()
        z, p1, accepted = reference_step(state, p0, fn, beta, eps, 3,
                                         torch.rand(rows, generator=g), im)
        assert 0 < accepted.sum() < rows
        torch.testing.assert_close(new.z, z, rtol=0, atol=1e-12)
        u1 = p1 if im is None else p1 * im.sqrt()
        expected = torch.where(accepted.unsqueeze(-1), u1, -u)
        torch.testing.assert_close(new.momentum, expected, rtol=0, atol=1e-12)
        if start is None:  # the first transition is today's
            same, _ = plain.transition.step(plain.transition.init(z0, fn), fn, beta, eps,
                                 torch.Generator().manual_seed(3), im)
            assert torch.equal(same.z, new.z)


@pytest.mark.statistical
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_the_extended_target_stays_invariant(beta, seed):
    """From exact draws of f_beta(z) N(u; 0, I), five transitions (about 40% rejected, so the flips
    matter) leave both z and the kept momentum u distributed as they were (moments, 4 SE)."""
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=1)
    x = lg.sample(1, torch.Generator().manual_seed(seed))
    k = 20_000
    fn = _fn(lg, x, k)
    g = torch.Generator().manual_seed(seed)
    post = lg.tempered_posterior(x, beta)
    z0 = post.loc + torch.randn(k, 2, generator=g) @ post.scale_tril[0].T
    kernel = HMC(num_leapfrog=2, momentum_persistence=0.9)
    state = kernel.transition.init(z0, fn)._replace(momentum=torch.randn(k, 2, generator=g))
    b, eps = torch.full((k,), beta), torch.full((k,), 1.3 if beta == 0 else 0.35)
    inv_mass = torch.tensor([[1.5, 0.7]]).expand(k, 2)
    rejected = 0.0
    for _ in range(5):
        state, info = kernel.transition.step(state, fn, b, eps, g, inv_mass)
        rejected += (1 - float(info.is_accepted.double().mean())) / 5
    assert 0.15 < rejected < 0.7, rejected
    cov = post.covariance_matrix[0]
    for value, mean, c in ((state.z, post.loc[0], cov), (state.momentum, torch.zeros(2),
                                                           torch.eye(2, dtype=cov.dtype))):
        assert ((value.mean(0) - mean).abs() <= 4 * (c.diagonal() / k).sqrt()).all()
        se_cov = ((c**2 + torch.outer(c.diagonal(), c.diagonal())) / k).sqrt()
        assert ((torch.cov(value.T) - c).abs() <= 4 * se_cov).all()


@pytest.mark.statistical
@pytest.mark.parametrize("persistence, mass_matrix", [(0.5, False), (0.9, False), (0.8, True)])
def test_ais_with_persistent_momentum_is_unbiased(persistence, mass_matrix, seed):
    lg = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0)
    x = lg.sample(3, torch.Generator().manual_seed(seed))
    exact = lg.exact_log_marginal(x)
    kernel = HMC(num_leapfrog=3, momentum_persistence=persistence, mass_matrix=mass_matrix)
    r = pyrolik.ais(lg, x, num_steps=60, num_chains=300, seed=seed, progress=False,
                    kernel=pyrolik.SMC(kernel, resample=None))  # iid chains: plain AIS
    assert_unbiased(r.log_weights, exact, min_ess_frac=0.05)
    assert_lower_bound(r.log_likelihood, exact, r.log_weights)
    assert r.kernel.move.momentum_persistence == persistence


@pytest.mark.statistical
def test_bdmc_with_persistent_momentum_brackets_the_exact_value(seed):
    lg = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0)
    sim = pyrolik.simulate(lg, 20, data_shape=(5,), seed=seed)
    exact = lg.exact_log_marginal(sim.x)
    r = pyrolik.bdmc(lg, sim, num_steps=100, num_chains=8, seed=seed, progress=False,
                     kernel=HMC(num_leapfrog=2, momentum_persistence=0.8))
    n = len(exact)
    se_lo, se_up = r.lower.mcse.pow(2).sum().sqrt() / n, r.upper.mcse.pow(2).sum().sqrt() / n
    assert (r.lower.log_likelihood - exact).mean() <= 3 * se_lo
    assert (r.upper.log_likelihood - exact).mean() >= -3 * se_up
    assert -3 * r.gap_stderr <= r.gap < 0.5


def test_persistence_is_validated_and_recorded():
    for bad in (-0.1, 1.0, 1.5, True, "0.5", None):
        with pytest.raises(ValueError, match=r"momentum_persistence must be a number in \[0, 1\)"):
            HMC(momentum_persistence=bad)
    kernel = HMC(num_leapfrog=4, momentum_persistence=0.75, mass_matrix=True)
    assert kernel.to_dict()["momentum_persistence"] == 0.75
    assert HMC(**kernel.to_dict()) == kernel
    assert HMC().momentum_persistence == 0.5 and HMC().num_leapfrog == 3  # the defaults
    assert isinstance(kernel.transition.init(torch.zeros(2, 1), lambda z: _quadratic(z)), HMCState)


def _quadratic(z):
    from pyrolik.model.target import ValueAndGrad

    return ValueAndGrad(-0.5 * (z * z).sum(-1), torch.zeros(z.shape[0]), -z, torch.zeros_like(z))


def test_the_kept_momentum_adds_no_host_sync_per_step():
    from tests.annealing.test_host_sync import SyncCounter

    lg = LinearGaussian.random(5, 2, s=0.5, seed=0, dtype=torch.float64)
    sim = pyrolik.simulate(lg, 6, data_shape=(5,), seed=0)
    kernel = HMC(num_leapfrog=3, momentum_persistence=0.5, mass_matrix=True)
    counts = []
    for steps in (10, 80):
        with SyncCounter() as c:
            pyrolik.bdmc(lg, sim, num_steps=steps, num_chains=4, kernel=kernel, seed=0,
                         progress=False)
        counts.append(dict(c.counts))
    assert counts[0] == counts[1], f"host syncs grew with num_steps: {counts}"
