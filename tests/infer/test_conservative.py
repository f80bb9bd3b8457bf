"""CSL and biased CSL against exact log-likelihoods: an enumerable RBM, the linear-Gaussian."""

from __future__ import annotations

import math

import pyro.distributions as dist
import pytest
import torch
from pyrolik_models.oracles.linear_gaussian import LinearGaussian
from pyrolik_models.oracles.rbm import RBM

from pyrolik import likelihood_weighting
from pyrolik._random import generator_for
from pyrolik.infer.conservative import (
    AlternatingChain,
    biased_csl,
    csl,
    encoder_decoder,
    iterate_chain,
    prior_samples,
    sample_chain,
)
from pyrolik.io.datasets import load_digits
from pyrolik.model.target import make_target


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    x, _ = load_digits(dtype=torch.float64)
    x = (x > 0.5).double()
    return x[:1500], x[1500:]


@pytest.fixture(scope="module")
def rbms(digits) -> dict[int, RBM]:
    train, _ = digits
    return {
        h: RBM.fit(train, num_hidden=h, epochs=100, lr=0.1, batch_size=50, seed=0)
        for h in (1, 3, 8)
    }


def _ratio_within(ratio: torch.Tensor, num_se: float = 4.0) -> None:
    """E[ratio] = 1 per column, with the standard error over rows (independent replicates)."""
    se = ratio.std(0) / math.sqrt(ratio.shape[0])
    assert ((ratio.mean(0) - 1).abs() <= num_se * se + 1e-12).all(), (ratio.mean(0), se)


# ---- deterministic identities --------------------------------------------------------------


def test_streaming_equals_one_pass_and_iterables(seed):
    rbm = RBM.random(10, 4, seed=seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.bernoulli(torch.full((7, 10), 0.5), generator=g)
    h = torch.bernoulli(torch.full((53, 4), 0.5), generator=g)
    direct = torch.logsumexp(rbm.log_obs(x, h), 0) - math.log(53)
    for chunk in (1, 7, 53, 1000):
        torch.testing.assert_close(csl(rbm, x, h, chunk_size=chunk).log_likelihood, direct,
                                   rtol=0, atol=1e-12)
    torch.testing.assert_close(csl(rbm, x, list(h.split(10))).log_likelihood, direct,
                               rtol=0, atol=1e-12)
    # a plain function works like the object with a log_obs method
    res = csl(rbm.log_obs, x, h, keep_weights=True)
    torch.testing.assert_close(res.log_weights, rbm.log_obs(x, h))
    assert res.bound == "lower" and res.method == "csl" and res.settings["num_samples"] == 53
    w = res.log_weights.exp()
    torch.testing.assert_close(res.ess, w.sum(0) ** 2 / (w**2).sum(0))


def test_csl_over_all_hidden_states_weighted_is_exact():
    # Enumerating h with P(h) as multiplicities is CSL at infinite S: exact log P(v).
    rbm = RBM.random(6, 3, seed=1)
    states, log_ph = rbm.hidden_log_probs()
    x = torch.tensor([[0, 1, 1, 0, 1, 0], [1, 1, 1, 1, 0, 0.0]])
    lw = rbm.log_obs(x, states) + log_ph[:, None]
    torch.testing.assert_close(torch.logsumexp(lw, 0), rbm.log_prob(x), rtol=0, atol=1e-10)


def test_prior_samples_make_csl_likelihood_weighting(seed):
    # CSL with i.i.d. prior draws of a Pyro model is likelihood weighting, weight by weight.
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.7, seed=seed)
    x = lg.sample(5, torch.Generator().manual_seed(seed))
    z = prior_samples(lg, x, 300, seed=seed)
    res = csl(lg, x, z, keep_weights=True, chunk_size=64)
    by_hand = dist.Normal(z["z"] @ lg.W.T + lg.b, lg.s).log_prob(x[:, None]).sum(-1).T  # (S, N)
    torch.testing.assert_close(res.log_weights, by_hand, rtol=0, atol=1e-10)
    # per-example prior draws through the Pyro path: the same identity
    zpe = {"z": torch.randn(30, 5, 2, generator=torch.Generator().manual_seed(seed))}
    res_pe = csl(lg, x, zpe, per_example=True, keep_weights=True)
    by_hand_pe = dist.Normal(zpe["z"] @ lg.W.T + lg.b, lg.s).log_prob(x).sum(-1)
    torch.testing.assert_close(res_pe.log_weights, by_hand_pe, rtol=0, atol=1e-10)


def test_csl_with_per_example_prior_draws_is_likelihood_weighting(seed):
    # likelihood_weighting draws z ~ p(z) per example through make_target from the batch's
    # generator; CSL on those same draws must give its estimate to rounding.
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.7, seed=seed)
    x = lg.sample(6, torch.Generator().manual_seed(seed))
    lw = likelihood_weighting(lg, x, num_samples=200, seed=seed, progress=False,
                              keep_weights=True)
    target = make_target(lg, x, 200)
    draw = target.program.sample_prior(generator_for(seed, 0))
    z = target.layout.by_chain(target.layout.constrain(draw.u))  # {site: (K, N, d)}
    res = csl(lg, x, z, per_example=True, keep_weights=True)
    torch.testing.assert_close(res.log_weights, lw.log_weights, rtol=0, atol=1e-10)
    torch.testing.assert_close(res.log_likelihood, lw.log_likelihood, rtol=0, atol=1e-10)
    torch.testing.assert_close(res.ess, lw.ess)
    torch.testing.assert_close(res.khat, lw.khat, equal_nan=True)


# ---- statistical tests against exact answers -----------------------------------------------


@pytest.mark.statistical
def test_csl_with_exact_hidden_draws_is_unbiased_on_the_rbm(rbms, digits, seed):
    rbm, test = rbms[3], digits[1][:20]
    h = rbm.sample_hidden_exact(4000, generator=torch.Generator().manual_seed(seed))
    res = csl(rbm, test, h, keep_weights=True)
    _ratio_within(torch.exp(res.log_weights - rbm.log_prob(test)))


@pytest.mark.statistical
def test_csl_on_gibbs_chains_converges_to_exact_and_is_conservative(rbms, digits, seed):
    rbm, (train, test) = rbms[3], digits
    test = test[:20]
    exact = rbm.log_prob(test)
    num_chains, num_samples = 32, 200
    x0 = train[torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))[:32]]
    h = sample_chain(rbm, x0, num_samples=num_samples, thin=2, burn_in=50, seed=seed)
    res = csl(rbm, test, h.flatten(0, 1), keep_weights=True)
    # independent chains give independent estimates of P(x): the SE comes from their spread
    lw = res.log_weights.reshape(num_samples, num_chains, -1)
    per_chain = torch.logsumexp(lw, 0) - math.log(num_samples)  # (C, N)
    _ratio_within(torch.exp(per_chain - exact))
    torch.testing.assert_close(
        torch.logsumexp(per_chain, 0) - math.log(num_chains), res.log_likelihood
    )
    # few samples per chain: the Jensen gap shows, on the conservative side
    short = torch.logsumexp(lw[:3], 0) - math.log(3)  # (C, N)
    gap = (short - exact).mean(1)  # per chain, averaged over examples
    assert gap.mean() <= 3 * gap.std() / math.sqrt(num_chains)
    # and more samples bring the estimate closer
    err_short = (torch.logsumexp(lw[:5].flatten(0, 1), 0) - math.log(5 * 32) - exact).abs().mean()
    assert (res.log_likelihood - exact).abs().mean() < err_short


@pytest.mark.statistical
def test_streamed_chain_equals_stored_chain(rbms, digits, seed):
    rbm, (train, test) = rbms[1], digits
    stored = sample_chain(rbm, train[:8], num_samples=30, thin=3, burn_in=5, seed=seed,
                          flatten=True)
    streamed = csl(rbm, test, iterate_chain(rbm, train[:8], num_samples=30, thin=3, burn_in=5,
                                            chunk_size=7, seed=seed))
    torch.testing.assert_close(streamed.log_likelihood, csl(rbm, test, stored).log_likelihood)
    assert torch.is_grad_enabled()  # streaming from a generator leaks no no_grad state
    gen = iterate_chain(rbm, train[:8], num_samples=30, chunk_size=7, seed=seed)
    next(gen)  # a half-consumed chain, too
    assert torch.is_grad_enabled()
    gen.close()


@pytest.mark.statistical
def test_encoder_decoder_chain_with_exact_posterior_targets_the_model(seed):
    # With q = p(z|x) the alternating chain is Gibbs on p(x, z): its latent marginal is the prior.
    lg = LinearGaussian.random(data_dim=3, latent_dim=2, s=1.0, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = lg.sample(6, g)
    num_chains, num_samples = 24, 100
    chain = encoder_decoder(lg, lg.exact_guide)
    z = sample_chain(chain, lg.sample(num_chains, g), num_samples=num_samples, thin=2,
                     burn_in=20, seed=seed)
    assert z["z"].shape == (num_samples, num_chains, 2)
    res = csl(lg, x, {"z": z["z"].flatten(0, 1)}, keep_weights=True)
    lw = res.log_weights.reshape(num_samples, num_chains, -1)
    per_chain = torch.logsumexp(lw, 0) - math.log(num_samples)
    _ratio_within(torch.exp(per_chain - lg.exact_log_marginal(x)))


@pytest.mark.statistical
def test_biased_csl_ranks_rbm_sizes_like_the_exact_likelihood_and_over_estimates(rbms, digits):
    test = digits[1]
    exact = {h: float(r.log_prob(test).mean()) for h, r in rbms.items()}
    for num_steps in (1, 5):
        biased = {
            h: biased_csl(r, test, r, num_chains=10, num_steps=num_steps, seed=0).mean
            for h, r in rbms.items()
        }
        assert sorted(biased, key=biased.get) == sorted(exact, key=exact.get)
        assert all(biased[h] > exact[h] for h in rbms)


def test_biased_csl_result_and_seeding(rbms, digits):
    rbm, test = rbms[1], digits[1][:9]
    before = torch.random.get_rng_state()
    a = biased_csl(rbm, test, rbm, num_chains=4, num_steps=3, seed=5)
    assert torch.equal(before, torch.random.get_rng_state())  # the user's RNG is left alone
    b = biased_csl(rbm, test, rbm, num_chains=4, num_steps=3, seed=5)
    assert torch.equal(a.log_likelihood, b.log_likelihood)
    assert a.bound is None and a.method == "biased_csl" and a.settings["num_samples"] == 12
    assert a.seed == 5
    assert a.log_likelihood.shape == (9,)
    # one step, one chain: exactly log P(x | h), h ~ P(h | x) drawn from the same generator
    one = biased_csl(rbm, test, rbm, num_chains=1, num_steps=1, seed=7)
    h = rbm.sample_hidden(test, torch.Generator().manual_seed(7))
    torch.testing.assert_close(one.log_likelihood, rbm.log_obs(test, h[None]).squeeze(0))
    table = a.summary()
    assert table["NLL [bits/dim]"].iloc[0] == pytest.approx(-a.mean / (64 * math.log(2)))


def test_biased_csl_with_a_pyro_model_and_encoder(seed):
    lg = LinearGaussian.random(data_dim=3, latent_dim=2, seed=seed)
    x = lg.sample(4, torch.Generator().manual_seed(seed))
    res = biased_csl(lg, x, encoder_decoder(lg, lg.exact_guide), num_chains=3, num_steps=2,
                     seed=seed)
    assert res.log_likelihood.shape == (4,) and torch.isfinite(res.log_likelihood).all()


# ---- bad input -------------------------------------------------------------------------------


def test_bad_input_raises_with_a_fix():
    rbm = RBM.random(5, 2)
    x = torch.ones(3, 5)
    h = torch.ones(4, 2)
    with pytest.raises(ValueError, match="NaN or inf"):
        csl(rbm, x.clone().fill_(float("nan")), h)
    with pytest.raises(ValueError, match="chunk_size"):
        csl(rbm, x, h, chunk_size=0)
    with pytest.raises(ValueError, match="no samples"):
        csl(rbm, x, [])
    with pytest.raises(TypeError, match="log_obs"):
        csl(42, x, h)
    with pytest.raises(ValueError, match=r"expected \(S=4, N=3\)"):
        csl(lambda x, h: h.sum(-1), x, h)
    with pytest.raises(ValueError, match=r"per_example latents must have shape \(S, N=3"):
        csl(rbm, x, h, per_example=True)
    with pytest.raises(ValueError, match="num_chains"):
        biased_csl(rbm, x, rbm, num_chains=0)
    with pytest.raises(TypeError, match="sample_hidden"):
        biased_csl(rbm, x, object())
    lg = LinearGaussian.random()
    with pytest.raises(ValueError, match="exactly the model's latent sites"):
        csl(lg, torch.zeros(2, 5), {"w": torch.zeros(3, 2)})
    with pytest.raises(ValueError, match="latents is an empty dict"):
        csl(lg, torch.zeros(2, 5), {})
    with pytest.raises(TypeError, match="latents as"):
        csl(lg, torch.zeros(2, 5), torch.zeros(3, 2))  # a Pyro model with a bare tensor
    with pytest.raises(ValueError, match="thin"):
        sample_chain(rbm, x, num_samples=2, thin=0)
    with pytest.raises(ValueError, match="num_samples"):
        prior_samples(lg, torch.zeros(2, 5), 0)


def test_csl_refuses_latents_shaped_unlike_the_site():
    lg = LinearGaussian.random(data_dim=5, latent_dim=2, seed=0)
    x = lg.sample(4, torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match=r"latents\['z'\] has shape \(20, 4, 2\); expected .* = "
                       r"\(20, 2\) for draws shared .* = \(20, 4, 2\) with per_example=True"):
        csl(lg, x, {"z": torch.randn(20, 4, 2)})  # per-example draws without per_example=True
    with pytest.raises(ValueError, match=r"latents\['z'\] has shape \(20, 3\); expected"):
        csl(lg, x, {"z": torch.randn(20, 3)})


def test_chain_keeps_the_documented_steps():
    # a counting chain: h_t = x_{t-1} + 1, x_t = h_t, so h_t = t from x_0 = 0
    counter = AlternatingChain(lambda x, g: x + 1, lambda h, x, g: h)
    h = sample_chain(counter, torch.zeros(2, 1), num_samples=4, thin=2, burn_in=3, seed=0)
    assert h.shape == (4, 2, 1)
    torch.testing.assert_close(h[:, 0, 0], torch.tensor([5.0, 7.0, 9.0, 11.0]))
    chunks = list(iterate_chain(counter, torch.zeros(3, 1), num_samples=5, chunk_size=2, seed=0))
    assert [c.shape[0] for c in chunks] == [6, 6, 3]  # k steps x 3 chains, sample-major
    torch.testing.assert_close(chunks[0][:, 0], torch.tensor([1.0, 1, 1, 2, 2, 2]))


def test_a_pyro_model_chain_refuses_a_flat_tensor_of_latents():
    lg = LinearGaussian.random(data_dim=3, latent_dim=2, s=1.0, seed=0)
    x = lg.sample(4, torch.Generator().manual_seed(1))
    chain = encoder_decoder(lg, lg.exact_guide)
    with pytest.raises(TypeError, match=r"latents are a dict \{site name: tensor\}, got Tensor"):
        chain.sample_obs_fn(torch.zeros(4, 2), x, None)
