"""The binary RBM: hidden-state enumeration against brute force over visible and joint states."""

from __future__ import annotations

import pytest
import torch
from pyrolik_models.oracles.rbm import RBM, binary_states
from scipy import stats

from pyrolik.io.datasets import load_digits


@pytest.fixture
def tiny() -> RBM:
    return RBM.random(num_visible=6, num_hidden=4, scale=1.0, seed=3)


def _joint_log_unnormalized(rbm: RBM) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-E(v, h) on the full grid of (v, h): (2^D, 2^H), by the energy formula itself."""
    vs = binary_states(rbm.num_visible)
    hs = binary_states(rbm.num_hidden)
    neg_energy = (vs @ rbm.b)[:, None] + (hs @ rbm.c)[None, :] + vs @ rbm.W @ hs.T
    return vs, hs, neg_energy


def test_binary_states_enumerates_every_vector_once():
    s = binary_states(5)
    assert s.shape == (32, 5)
    assert len({tuple(r.tolist()) for r in s}) == 32
    with pytest.raises(ValueError, match="n=30"):
        binary_states(30)


def test_partition_function_hidden_enumeration_equals_visible_and_joint(tiny):
    _, _, neg_energy = _joint_log_unnormalized(tiny)
    joint = torch.logsumexp(neg_energy.flatten(), 0)
    torch.testing.assert_close(tiny.log_partition(), joint, rtol=0, atol=1e-10)
    torch.testing.assert_close(tiny.log_partition_visible(), joint, rtol=0, atol=1e-10)
    # chunking the enumeration changes nothing
    torch.testing.assert_close(tiny.log_partition(chunk_size=3), joint, rtol=0, atol=1e-10)


def test_log_prob_and_hidden_marginal_are_normalised_and_match_joint(tiny):
    vs, _, neg_energy = _joint_log_unnormalized(tiny)
    log_z = torch.logsumexp(neg_energy.flatten(), 0)
    torch.testing.assert_close(
        tiny.log_prob(vs), torch.logsumexp(neg_energy, 1) - log_z, rtol=0, atol=1e-10
    )
    states, log_ph = tiny.hidden_log_probs()
    torch.testing.assert_close(states, binary_states(4))
    torch.testing.assert_close(log_ph, torch.logsumexp(neg_energy, 0) - log_z, rtol=0, atol=1e-10)


def test_conditionals_and_log_obs_match_the_joint(tiny):
    vs, hs, neg_energy = _joint_log_unnormalized(tiny)
    # log P(v | h) from the joint table, every (h, v) pair: (2^H, 2^D)
    log_cond = (neg_energy - torch.logsumexp(neg_energy, 0, keepdim=True)).T
    torch.testing.assert_close(tiny.log_obs(vs, hs), log_cond, rtol=0, atol=1e-10)
    # per-example layout: sample s of example n only
    h_pe = hs[torch.arange(8) % 16].unsqueeze(1).expand(8, 64, 4)
    torch.testing.assert_close(tiny.log_obs(vs, h_pe), log_cond[torch.arange(8) % 16], atol=1e-10,
                               rtol=0)
    # P(h_j = 1 | v) from the joint table
    p_h_given_v = torch.softmax(neg_energy, 1) @ hs
    torch.testing.assert_close(tiny.hidden_probs(vs), p_h_given_v, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match=r"\(S, H\) or \(S, N, H\)"):
        tiny.log_obs(vs, torch.zeros(4))


@pytest.mark.statistical
def test_block_gibbs_leaves_the_exact_distribution_invariant(tiny, seed):
    # Start 20,000 chains from exact draws of P(v), take 3 sweeps, test against P(v) (chi-square).
    g = torch.Generator().manual_seed(seed)
    vs = binary_states(6)
    p = tiny.log_prob(vs).exp()
    v0 = vs[torch.multinomial(p, 20000, replacement=True, generator=g)]
    v, _ = tiny.gibbs(v0, num_steps=3, generator=g)
    codes = (v * 2 ** torch.arange(6)).sum(-1).long()
    counts = torch.bincount(codes, minlength=64).double()
    chi2 = stats.chisquare(counts.numpy(), (p * 20000).numpy())
    assert chi2.pvalue > 1e-4


def test_sample_hidden_exact_matches_the_marginal(tiny, seed):
    g = torch.Generator().manual_seed(seed)
    h = tiny.sample_hidden_exact(40000, generator=g)
    _, log_ph = tiny.hidden_log_probs()
    codes = (h * 2 ** torch.arange(4)).sum(-1).long()
    counts = torch.bincount(codes, minlength=16).double()
    assert stats.chisquare(counts.numpy(), (log_ph.exp() * 40000).numpy()).pvalue > 1e-4


def test_fit_beats_independent_pixels_on_binarized_digits():
    x, _ = load_digits()
    x = (x > 0.5).to(torch.get_default_dtype())
    train, test = x[:1500], x[1500:]
    rbm = RBM.fit(train, num_hidden=8, epochs=60, lr=0.1, batch_size=50, seed=0)
    mean = train.mean(0).clamp(1e-3, 1 - 1e-3)
    independent = (test * mean.log() + (1 - test) * (1 - mean).log()).sum(-1).mean()
    # independent pixels are the H = 0 RBM; 8 hidden units must help by well over a nat
    assert rbm.log_prob(test).mean() > independent + 1.0


def test_fit_rejects_bad_data():
    with pytest.raises(ValueError, match="binary data"):
        RBM.fit(torch.rand(10, 4), num_hidden=2)
    with pytest.raises(ValueError, match=r"\(N, D\)"):
        RBM.fit(torch.ones(10), num_hidden=2)
