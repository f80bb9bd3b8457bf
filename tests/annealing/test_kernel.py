"""The HMC kernel: leapfrog accuracy and reversibility, invariance at every temperature, no stale
cache across temperatures, divergences handled."""

from __future__ import annotations

import dataclasses
import math

import pyro
import pyro.distributions as dist
import pytest
import torch

from models.oracles.linear_gaussian import LinearGaussian
from pyrolik.annealing.kernel import HMC, HMCState, leapfrog
from pyrolik.model.target import ValueAndGrad, make_target


def oscillator(z):
    """log f0 = -z^2/2 (unit harmonic oscillator), ratio 0."""
    return ValueAndGrad(-0.5 * (z * z).sum(-1), torch.zeros(z.shape[0]), -z, torch.zeros_like(z))


def run_leapfrog(q0, p0, eps, t_end):
    n = round(t_end / eps)
    state = HMCState(q0, *oscillator(q0))
    state, p = leapfrog(state, p0, oscillator, torch.zeros(1), torch.full((1,), eps), 1.0, n)
    return state.z, p


def test_leapfrog_tracks_the_harmonic_oscillator_with_second_order_error():
    q0, p0 = torch.tensor([[1.0, -0.3]]), torch.tensor([[0.2, 0.7]])
    exact = q0 * math.cos(1.0) + p0 * math.sin(1.0)
    errs = [(run_leapfrog(q0, p0, eps, 1.0)[0] - exact).abs().max() for eps in (0.1, 0.05, 0.025)]
    assert errs[0] < 1e-2
    for a, b in zip(errs, errs[1:], strict=False):
        assert 3.5 < a / b < 4.5  # O(eps^2)


def test_leapfrog_is_reversible():
    q0, p0 = torch.tensor([[1.0, -0.3]]), torch.tensor([[0.2, 0.7]])
    q1, p1 = run_leapfrog(q0, p0, 0.1, 2.0)
    q2, p2 = run_leapfrog(q1, -p1, 0.1, 2.0)
    torch.testing.assert_close(q2, q0, rtol=0, atol=1e-12)
    torch.testing.assert_close(-p2, p0, rtol=0, atol=1e-12)


@pytest.mark.statistical
@pytest.mark.parametrize("jitter", [0.0, 0.5, 0.9])
@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0])
def test_one_transition_leaves_the_tempered_posterior_invariant(beta, jitter, seed):
    """Start from exact draws of p(z) p(x|z)^beta, take one step, compare moments (4 SE); with or
    without the step-size jitter."""
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=1)
    x = lg.sample(1, torch.Generator().manual_seed(seed))
    k = 20_000
    target = make_target(lg, x, num_chains=k)
    g = torch.Generator().manual_seed(seed)
    post = lg.tempered_posterior(x, beta)
    z0 = post.loc + torch.randn(k, 2, generator=g) @ post.scale_tril[0].T

    def fn(z):
        return target.value_and_grad(z)

    kernel = HMC(num_leapfrog=5, step_jitter=jitter)
    state = kernel.transition.init(z0, fn)
    b = torch.full((k,), beta)
    state, info = kernel.transition.step(state, fn, b, torch.full((k,), 0.3), g)
    assert 0.2 < info.is_accepted.double().mean() < 1.0  # the chain actually moved
    z1 = state.z
    cov = post.covariance_matrix[0]
    se_mean = (cov.diagonal() / k).sqrt()
    assert ((z1.mean(0) - post.loc[0]).abs() <= 4 * se_mean).all()
    emp = torch.cov(z1.T)
    se_cov = ((cov**2 + torch.outer(cov.diagonal(), cov.diagonal())) / k).sqrt()
    assert ((emp - cov).abs() <= 4 * se_cov).all()


def test_no_stale_cache_across_temperatures():
    """A state carried over from beta=0.2 behaves exactly like one freshly built at beta=0.9."""
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=1)
    x = lg.sample(3)
    target = make_target(lg, x, num_chains=50)

    def fn(z):
        return target.value_and_grad(z)

    for kernel in (HMC(num_leapfrog=4, momentum_persistence=0.0), HMC(num_leapfrog=4)):
        z0 = torch.randn(150, 2, generator=torch.Generator().manual_seed(0))
        carried, _ = kernel.transition.step(kernel.transition.init(z0, fn), fn, torch.full((150,), 0.2),
                                 torch.full((150,), 0.2), torch.Generator().manual_seed(1))
        # rebuilt from the position alone (and the kept momentum, which is not a cache)
        fresh = kernel.transition.init(carried.z, fn)._replace(momentum=carried.momentum)
        eps, beta = torch.full((150,), 0.2), torch.full((150,), 0.9)
        a, ia = kernel.transition.step(carried, fn, beta, eps, torch.Generator().manual_seed(2))
        b, ib = kernel.transition.step(fresh, fn, beta, eps, torch.Generator().manual_seed(2))
        torch.testing.assert_close(a.z, b.z)
        torch.testing.assert_close(ia.acceptance_rate, ib.acceptance_rate)


def test_divergences_are_rejections_never_nan():
    def model(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([1]).to_event(1))
            # the likelihood is -inf/NaN away from a narrow region: huge steps must be rejected
            loc = torch.where(z.abs() < 3, z, torch.full_like(z, float("nan")))
            pyro.sample("x", dist.Normal(loc, 0.1).to_event(1), obs=x)

    x = torch.zeros(2, 1)
    target = make_target(model, x, num_chains=10)

    def fn(z):
        return target.value_and_grad(z)

    kernel = HMC(num_leapfrog=5)
    state = kernel.transition.init(torch.zeros(20, 1), fn)
    new, info = kernel.transition.step(state, fn, torch.ones(20), torch.full((20,), 50.0),
                            torch.Generator().manual_seed(0))
    assert info.is_divergent.all() and not info.is_accepted.any()
    assert torch.equal(new.z, state.z) and torch.isfinite(new.log_ratio).all()


def test_step_jitter_scales_each_rows_step_size_by_a_fresh_uniform():
    """Known answer: a jittered step is the unjittered step at eps * (1 - j + 2 j u), with u the
    generator's first draw per row (drawn before the momentum)."""
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=1)
    x = lg.sample(3, torch.Generator().manual_seed(0))
    target = make_target(lg, x, num_chains=4)

    def fn(z):
        return target.value_and_grad(z)

    z0 = torch.randn(12, 2, generator=torch.Generator().manual_seed(1))
    beta, eps = torch.full((12,), 0.7), torch.linspace(0.05, 0.4, 12)
    jittered = HMC(num_leapfrog=3, step_jitter=0.4).transition
    a, info_a = jittered.step(jittered.init(z0, fn), fn, beta, eps, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    u = torch.rand(12, generator=g)
    plain = HMC(num_leapfrog=3, step_jitter=0.0).transition
    b, info_b = plain.step(plain.init(z0, fn), fn, beta, eps * (0.6 + 0.8 * u), g)
    torch.testing.assert_close(a.z, b.z)
    torch.testing.assert_close(info_a.energy_error, info_b.energy_error)
    assert not torch.equal(a.z, plain.step(plain.init(z0, fn), fn, beta, eps,
                                           torch.Generator().manual_seed(5))[0].z)


def test_kernel_parameters_are_validated():
    with pytest.raises(ValueError, match="num_leapfrog"):
        HMC(num_leapfrog=0)
    with pytest.raises(ValueError, match="step_size"):
        HMC(step_size=-1.0)
    with pytest.raises(ValueError, match="adapt must be"):
        HMC(adapt="dual")
    with pytest.raises(ValueError, match="mass_matrix=True needs adapt='pilot'"):
        HMC(adapt=None, mass_matrix=True)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="pilot_chains"):
            HMC(pilot_chains=bad)
    for bad in (-0.1, 1.0, True, "0.5"):
        with pytest.raises(ValueError, match=r"step_jitter must be a number in \[0, 1\)"):
            HMC(step_jitter=bad)
    # each of these ran, with every proposal divergent or the step sizes collapsed, and no error
    for bad in (0.0, -1.0, True):
        with pytest.raises(ValueError, match="max_energy_error must be a positive number"):
            HMC(max_energy_error=bad)
    for name in ("adapt_gain", "step_size"):
        for bad in (-5.0, 0.0, float("inf"), float("nan"), True):
            with pytest.raises(ValueError, match=f"{name} must be a positive finite number"):
                HMC(**{name: bad})
    with pytest.raises(TypeError, match="mass_matrix must be True or False"):
        HMC(mass_matrix="no")
    # options the chosen adaptation does not use were accepted and ignored
    with pytest.raises(ValueError, match="adapt=None does not use target_accept, pilot_fraction"):
        HMC(adapt=None, target_accept=0.8, pilot_fraction=0.5)
    with pytest.raises(ValueError, match="adapt='online' does not use pilot_chains: drop it"):
        HMC(adapt="online", pilot_chains=2)
    assert HMC(adapt="online", target_accept=0.7, adapt_gain=2.0).to_dict()["adapt_gain"] == 2.0
    # a kernel rebuilt from another's fields (which hold the resolved target_accept) is not refused
    assert dataclasses.replace(HMC(), adapt=None).adaptation.settings()["adapt"] is None
    assert dataclasses.replace(HMC(adapt="online"), adapt=None).to_dict()["adapt"] is None
    with pytest.raises(ValueError, match="adapt must be one of"):
        HMC(adapt=["pilot"])
    assert HMC(max_energy_error=float("inf")).transition.max_energy_error == float("inf")


def test_state_gradient_mixes_the_two_cached_terms():
    g = torch.Generator().manual_seed(0)
    state = HMCState(*(torch.randn(s, generator=g) for s in [(4, 3), (4,), (4,), (4, 3), (4, 3)]))
    beta = torch.tensor([0.0, 0.25, 0.5, 1.0])
    torch.testing.assert_close(state.grad(beta), state.grad_init + beta[:, None] * state.grad_ratio)
    torch.testing.assert_close(state.grad(0.3), state.grad_init + 0.3 * state.grad_ratio)
    torch.testing.assert_close(state.log_density(beta), state.log_init + beta * state.log_ratio)
