"""The adapter's per-site log-densities: fast paths equal Pyro's own log_prob, scores equal autograd."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyrolik.model.messenger import normal_log_prob_and_score, per_row_log_prob
from pyrolik.model.target import make_target

ROWS = 6


def _reference(fn, value, mask=None):
    lp = fn.log_prob(value)
    if mask is not None:
        lp = lp.masked_fill(~mask, 0.0)
    return lp.reshape(ROWS, -1).sum(-1)


def _cases():
    """(name, distribution, value), float64; built inside the tests (after conftest sets the dtype)."""
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    bits = (torch.rand(ROWS, 4, 3, generator=g) < 0.3).double()
    yield "bernoulli logits, 2 event dims", dist.Bernoulli(logits=r(ROWS, 4, 3)).to_event(2), bits
    yield "bernoulli probs, event dims as batch", dist.Bernoulli(probs=torch.rand(ROWS, 4, 3, generator=g)), bits
    yield "bernoulli logits broadcast", dist.Bernoulli(logits=r(4, 3)).expand([ROWS, 4, 3]).to_event(2), bits
    yield "normal scalar scale", dist.Normal(r(5), 1.0).to_event(1).expand([ROWS]), r(ROWS, 5)
    yield "normal tensor scale", dist.Normal(r(ROWS, 5), r(ROWS, 5).exp()).to_event(1), r(ROWS, 5)
    yield "normal batch only", dist.Normal(r(ROWS), 0.3), r(ROWS)
    yield "normal broadcast scale 0.7", dist.Normal(torch.zeros(2, 3), 0.7).expand([ROWS, 2, 3]).to_event(2), r(ROWS, 2, 3)
    yield "normal value broadcast over loc", dist.Normal(0.0, 2.0).expand([ROWS, 3]).to_event(1), r(ROWS, 3)
    yield "other family (generic path)", dist.Gamma(r(ROWS, 2).exp(), 1.5).to_event(1), r(ROWS, 2).exp()


NAMES = [
    "bernoulli logits, 2 event dims", "bernoulli probs, event dims as batch", "bernoulli logits broadcast",
    "normal scalar scale", "normal tensor scale", "normal batch only", "normal broadcast scale 0.7",
    "normal value broadcast over loc", "other family (generic path)",
]


def _case(name):
    (case,) = [c for c in _cases() if c[0] == name]
    assert case[2].dtype == torch.float64
    return case


def test_the_case_list_is_complete():
    assert [c[0] for c in _cases()] == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_fast_paths_equal_pyro_log_prob(name):
    _, fn, value = _case(name)
    got = per_row_log_prob(fn, value, None, -len(fn.batch_shape), ROWS, "s")
    torch.testing.assert_close(got, _reference(fn, value), rtol=1e-12, atol=1e-12)


def test_a_mask_takes_the_generic_path():
    fn = dist.Bernoulli(logits=torch.randn(ROWS, 3)).to_event(1)
    value = (torch.rand(ROWS, 3) < 0.5).double()
    mask = torch.tensor([True, False, True, True, False, True])
    torch.testing.assert_close(per_row_log_prob(fn, value, mask, -1, ROWS, "s"),
                               _reference(fn, value, mask))


def test_bernoulli_fast_path_is_bitwise_torchs_sum_in_float32():
    logits = torch.randn(ROWS, 784, dtype=torch.float32) * 5
    value = (torch.rand(ROWS, 784) < 0.2).float()
    fn = dist.Bernoulli(logits=logits).to_event(1)
    assert torch.equal(per_row_log_prob(fn, value, None, -1, ROWS, "x"),
                       dist.Bernoulli(logits=logits).log_prob(value).sum(-1))


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("normal")])
def test_normal_score_is_the_autograd_gradient(name):
    _, fn, value = _case(name)
    value = value.clone().requires_grad_(True)
    lp, score = normal_log_prob_and_score(fn, value, -len(fn.batch_shape), ROWS, "z")
    ref = _reference(fn, value)
    (g,) = torch.autograd.grad(ref.sum(), value)
    torch.testing.assert_close(lp, ref.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(score, g, rtol=1e-12, atol=1e-12)
    assert not lp.requires_grad and not score.requires_grad


def test_no_closed_form_score_when_the_parameters_need_gradients():
    loc = torch.zeros(ROWS, 2, requires_grad=True)
    assert normal_log_prob_and_score(dist.Normal(loc, 1.0), torch.randn(ROWS, 2), -1, ROWS,
                                     "z") is None
    assert normal_log_prob_and_score(dist.Laplace(torch.zeros(ROWS), 1.0), torch.randn(ROWS), -1,
                                     ROWS, "z") is None


def _autograd_value_and_grad(t, u, path):
    """The adapter's contract computed the slow way: two autograd gradients of the log-densities."""
    u = u.detach().requires_grad_(True)
    lp, lo = t.program.log_prior_and_obs(u)
    if path == "prior":
        init, ratio = lp, lo
    else:
        init = t.program.log_guide(u)
        ratio = lp + lo - init
    g_init, = torch.autograd.grad(init.sum(), u, retain_graph=True)
    g_ratio, = torch.autograd.grad(ratio.sum(), u)
    return init.detach(), ratio.detach(), g_init, g_ratio


def _hierarchical(x):
    """Normal sites whose parameters depend on another latent, a learned scale and a Jacobian."""
    w = pyro.param("w_scale", torch.tensor(0.8), constraint=dist.constraints.positive)
    with pyro.plate("data", x.shape[0]):
        a = pyro.sample("a", dist.Normal(0.0, 1.0))
        b = pyro.sample("b", dist.Normal(a.unsqueeze(-1).expand(-1, 2), 0.5).to_event(1))
        c = pyro.sample("c", dist.Normal(torch.zeros(2), w).to_event(1))
        s = pyro.sample("s", dist.LogNormal(0.0, 0.3))
        pyro.sample("x", dist.Normal(torch.tanh(b + c), s.unsqueeze(-1)).to_event(1), obs=x)


def _guide(x):
    with pyro.plate("data", x.shape[0]):
        pyro.sample("a", dist.Normal(x.mean(-1), 1.2))
        pyro.sample("b", dist.Normal(x, 0.7).to_event(1))
        pyro.sample("c", dist.Normal(torch.zeros(2), 0.9).to_event(1))
        pyro.sample("s", dist.LogNormal(0.1, 0.2))


@pytest.mark.parametrize("path", ["prior", "guide"])
def test_value_and_grad_equals_autograd_on_a_mixed_model(path):
    pyro.clear_param_store()
    x = torch.randn(3, 2, generator=torch.Generator().manual_seed(3))
    t = make_target(_hierarchical, x, num_chains=2, guide=_guide)
    u = torch.randn(t.layout.rows, t.layout.latent_dim, generator=torch.Generator().manual_seed(4))
    got = t.value_and_grad(u, path)
    for a, b in zip(got, _autograd_value_and_grad(t, u, path), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("replay", [False, True])
def test_the_hot_loop_memo_keeps_pyro_semantics(replay):
    """Module parameters and plate indices are remembered; plain pyro.param values are not, and a
    recorded evaluation (pyrolik.model.reuse) sees a replaced store value too."""
    pyro.clear_param_store()
    net = torch.nn.Linear(2, 3)
    indices = []

    def model(x):
        dec = pyro.module("dec", net)
        shift = pyro.param("shift", torch.zeros(3))
        noise = pyro.param("noise", torch.ones(()), constraint=dist.constraints.positive)
        with pyro.plate("data", x.shape[0]) as idx:
            indices.append(idx)
            z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(dec(z) + shift, noise).to_event(1), obs=x)

    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    t = make_target(model, x, num_chains=2, replay=replay)
    indices.clear()
    u = torch.randn(t.layout.rows, 2, generator=torch.Generator().manual_seed(1))
    first = t.value_and_grad(u)
    assert {"dec$$$weight", "dec$$$bias", "shift", "noise"} <= set(pyro.get_param_store().keys())
    for _ in range(3):
        again = t.value_and_grad(u)
        for a, b in zip(first, again, strict=True):
            assert torch.equal(a, b)
    assert all(torch.equal(i, torch.arange(x.shape[0] * 2)) for i in indices)
    assert t.evaluation("prior") == ("replay" if replay else "eager")
    pyro.get_param_store()["shift"] = torch.ones(3)  # a new tensor in the store is seen next time
    moved = t.value_and_grad(u)
    assert not torch.allclose(moved.log_ratio, first.log_ratio)
    fresh = make_target(model, x, num_chains=2).value_and_grad(u)
    torch.testing.assert_close(moved.log_ratio, fresh.log_ratio)
    with torch.no_grad():
        net.weight.mul_(2.0)  # updated in place (an optimiser step): seen by the replay too
    for _ in range(3):
        doubled = t.value_and_grad(u)
        fresh = make_target(model, x, num_chains=2, replay=False).value_and_grad(u)
        for a, b in zip(doubled, fresh, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(doubled.log_ratio, moved.log_ratio)
