"""Recorded evaluations (pyrolik.model.reuse): the Pyro program's numbers without its Python, or eager."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from torch import nn

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from pyrolik.model import reuse as _replay
from pyrolik.model.target import make_target
from tests.model.test_site_density import _guide as _hierarchical_guide
from tests.model.test_site_density import _hierarchical


def _constrained(x):
    with pyro.plate("data", x.shape[0]):
        a = pyro.sample("a", dist.Uniform(-1.0, 2.0))
        b = pyro.sample("b", dist.LogNormal(0.0, 1.0).expand([2]).to_event(1))
        pyro.sample("x", dist.Normal(a.unsqueeze(-1) * b, 1.0).to_event(1), obs=x)


class _Encoder:
    """An amortised Gaussian encoder guide for a 2-D latent (kept by the guide cache)."""

    def __init__(self, data_dim: int, dropout: float = 0.0):
        torch.manual_seed(5)
        self.net = nn.Sequential(nn.Linear(data_dim, 8), nn.Tanh(), nn.Dropout(dropout), nn.Linear(8, 4))

    def __call__(self, x):
        net = pyro.module("encoder", self.net)
        with pyro.plate("data", x.shape[0]):
            h = net(x)
            pyro.sample("z", dist.Normal(h[..., :2], nn.functional.softplus(h[..., 2:]) + 0.1).to_event(1))


def _pair(model, x, k=3, guide=None, dtype=torch.float64):
    """The same target with and without replay, and a generator of latent points."""
    x = x.to(dtype)
    if isinstance(guide, _Encoder):
        guide.net.to(dtype)
    fast = make_target(model, x, k, guide=guide, replay=True)
    slow = make_target(model, x, k, guide=guide, replay=False)
    g = torch.Generator().manual_seed(7)
    points = [torch.randn(fast.layout.rows, fast.layout.latent_dim, generator=g, dtype=dtype)
              for _ in range(5)]
    return fast, slow, points


def _same(a, b):
    for p, q in zip(a, b, strict=True):
        assert torch.equal(p, q), (p - q).abs().max()


def _cases():
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=0)
    x_lg = lg.sample(3, torch.Generator().manual_seed(1))
    x2 = torch.randn(3, 2, generator=torch.Generator().manual_seed(3))
    return {
        "linear-gaussian, prior": (lg, x_lg, None, "prior"),
        "linear-gaussian, encoder guide": (lg, x_lg, _Encoder(4), "guide"),
        "hierarchical, learned scale, prior": (_hierarchical, x2, _hierarchical_guide, "prior"),
        "hierarchical, guide rerun each time": (_hierarchical, x2, _hierarchical_guide, "guide"),
        "uniform and lognormal latents": (_constrained, x2, None, "prior"),
    }


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", list(_cases()))
def test_the_replay_gives_the_programs_numbers(name, dtype):
    model, x, guide, path = _cases()[name]
    fast, slow, points = _pair(model, x, guide=guide, dtype=dtype)
    for u in points:
        _same(fast.value_and_grad(u, path), slow.value_and_grad(u, path))
    assert fast.evaluation(path) == "replay" and slow.evaluation(path) == "eager"


def test_one_off_calls_are_not_recorded():
    model, x, _, _ = _cases()["linear-gaussian, prior"]
    fast, _, points = _pair(model, x)
    for u in points[: _replay.RECORD_AFTER - 1]:
        fast.value_and_grad(u)
    assert fast.evaluation("prior") == "eager" and not fast._evaluation("prior").replays


def _branching(x):
    """Python control flow on a tensor's value: recording refuses it."""
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(0.0, 1.0))
        loc = z if bool(z.sum() > 0) else -2.0 * z
        pyro.sample("x", dist.Normal(loc, 1.0), obs=x)


def _reads_values(x):
    """A tensor's value taken into Python (.tolist()): the tracer cannot see it, the check does.
    (Row by row: a batch statistic such as max(z.tolist()) is refused by make_target.)"""
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(0.0, 1.0))
        shift = z.new_tensor([abs(v) for v in z.tolist()])
        pyro.sample("x", dist.Normal(z + shift, 1.0), obs=x)


@pytest.mark.parametrize("model, why", [(_branching, "recording failed"),
                                         (_reads_values, "disagree with the program")])
def test_programs_that_use_tensor_values_in_python_stay_eager(model, why):
    x = torch.randn(4, generator=torch.Generator().manual_seed(0))
    fast, slow, points = _pair(model, x)
    for u in points + [-p for p in points]:  # both branches of _branching
        _same(fast.value_and_grad(u), slow.value_and_grad(u))
    assert why in fast.evaluation("prior")
    assert fast.evaluation("prior").startswith(f"eager ({why}") or why in fast.evaluation("prior")


def test_a_random_program_stays_eager():
    # make_target refuses a program that is random at a fixed latent (tests/integration/test_idioms.py); the
    # replay layer stays safe on its own if one gets through (noise added after the checks)
    def noisy(u):
        return (u * 2.0 + torch.randn_like(u)).sum(-1)

    replayed = _replay.Replayed(noisy, enabled=True)
    u = torch.randn(6, 2, generator=torch.Generator().manual_seed(0))
    for _ in range(_replay.RECORD_AFTER + 2):
        replayed(u)
    assert "disagree" in replayed.status and replayed.evaluation.startswith("eager (")


def test_an_updated_guide_is_recorded_again():
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=0)
    x = lg.sample(3, torch.Generator().manual_seed(1))
    guide = _Encoder(4)
    fast, slow, points = _pair(lg, x, guide=guide)
    for u in points:
        fast.value_and_grad(u, "guide")
    assert fast.evaluation("guide") == "replay"
    before = fast.value_and_grad(points[0], "guide")
    with torch.no_grad():
        guide.net[0].weight.add_(0.3)  # in place: the kept mu(x), sigma(x) are stale now
    for u in points:
        _same(fast.value_and_grad(u, "guide"), slow.value_and_grad(u, "guide"))
    assert not torch.equal(fast.value_and_grad(points[0], "guide").log_init, before.log_init)
    assert list(fast._evaluation("guide").recordings.values()) == [2]


def test_a_program_that_keeps_changing_stops_being_recorded():
    def model(x):
        shift = pyro.param("shift", torch.zeros(()))
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
            pyro.sample("x", dist.Normal(z + shift, 1.0), obs=x)

    x = torch.randn(4, generator=torch.Generator().manual_seed(0))
    fast, slow, points = _pair(model, x)
    for i in range(3 * _replay.MAX_RECORDINGS * _replay.RECORD_AFTER):
        pyro.get_param_store()["shift"] = torch.tensor(0.1 * i)  # a new tensor every time
        _same(fast.value_and_grad(points[0]), slow.value_and_grad(points[0]))
    assert "changed after each" in fast.evaluation("prior")


def test_ais_gives_the_same_run_with_and_without_replay(monkeypatch):
    """Bit for bit: recording and its checks leave the run's random stream alone."""
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=0)
    x = lg.sample(5, torch.Generator().manual_seed(1))
    runs, after, recorded, record = [], [], [], _replay.record

    def counting_record(*args):
        out = record(*args)
        recorded.append(out[1])
        return out

    monkeypatch.setattr(_replay, "record", counting_record)
    for flag in ("1", "0"):
        monkeypatch.setenv("PYROLIK_REPLAY", flag)
        torch.manual_seed(0)
        runs.append(pyrolik.ais(lg, x, num_steps=20, num_chains=4, seed=3, progress=False))
        after.append(torch.rand(3))  # the global stream after the run
    assert recorded == ["replay"]  # one recording (pilot and run share the target), replay on only
    assert runs[0].settings["evaluation"] == "replay" and runs[1].settings["evaluation"] == "eager"
    assert torch.equal(runs[0].log_weights, runs[1].log_weights)
    assert torch.equal(after[0], after[1])


@pytest.mark.parametrize("value, on", [(None, True), ("1", True), ("0", False), ("off", False),
                                       ("false", False), ("yes", True)])
def test_the_environment_switch(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv("PYROLIK_REPLAY", raising=False)
    else:
        monkeypatch.setenv("PYROLIK_REPLAY", value)
    assert _replay.replay_default() is on
    x = torch.randn(2, 4)
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=0)
    assert make_target(lg, x).replay is on
    assert make_target(lg, x, replay=not on).replay is (not on)


def test_a_bad_switch_is_an_error_that_names_the_fix(monkeypatch):
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=0)
    x = torch.randn(2, 4)
    monkeypatch.setenv("PYROLIK_REPLAY", "fasle")
    with pytest.raises(ValueError, match="PYROLIK_REPLAY='fasle'.*set it to 1 .* or 0"):
        make_target(lg, x)
    monkeypatch.delenv("PYROLIK_REPLAY")
    with pytest.raises(TypeError, match="replay must be True, False or None.*got '0'"):
        make_target(lg, x, replay="0")


# -- the graph passes ----------------------------------------------------------------------------
def _recorded(fn, u):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(u)


def _ops(graph):
    return [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]


def test_fold_constants_computes_the_programs_literals_once_and_nothing_else():
    w = torch.randn(3)  # closed over, like a parameter: never folded

    def fn(u):
        c = torch.tensor(2.0).log() + torch.zeros(3).exp()  # made from Python numbers: folded
        return u * c + w.exp() + torch.randn(3) * 0.0 + u.new_ones(3).sum()

    u = torch.randn(4, 3)
    graph = _recorded(fn, u)
    assert _replay.fold_constants(graph) >= 5
    ops = _ops(graph)
    assert "aten.exp.default" in ops and "aten.randn.default" in ops  # w.exp(), the random draw
    assert "aten.log.default" not in ops and "aten.zeros.default" not in ops
    torch.testing.assert_close(graph(u), fn(u), rtol=0, atol=0)
    w.mul_(2.0)  # in place: the replay reads it again
    torch.testing.assert_close(graph(u), fn(u), rtol=0, atol=0)


def test_nothing_is_folded_where_the_program_writes_into_it():
    def fn(u):
        total = torch.zeros(u.shape[-1])
        total.add_(u.sum(0))  # a literal written in place at every call
        return u * total

    u = torch.randn(4, 3)
    graph = _recorded(fn, u)
    assert _replay.fold_constants(graph) == 0
    for _ in range(3):
        torch.testing.assert_close(graph(u), fn(u), rtol=0, atol=0)


@pytest.mark.parametrize("fn, rewritten", [
    (lambda u: (u.exp() - 1.0) * 2.0, 2),  # a chain of fresh buffers: both in place
    (lambda u: (u.exp(), u.exp() - 1.0), 1),  # the first exp is an output: only the second
    (lambda u: (lambda a: (a - 1.0, a.view(-1)))(u.exp()), 0),  # a view of it lives on
    (lambda u: u.sum(-1, keepdim=True) + u, 0),  # the result is larger than the buffer
    (lambda u: (u > 0) * 1.5, 0),  # the result's dtype differs
    (lambda u: u - u * 3.0, 0),  # u is the input: not ours to overwrite
    (lambda u: u * 3.0 - u, 1),  # u * 3.0 is ours
])
def test_reuse_buffers_writes_in_place_only_where_no_one_else_sees_the_buffer(fn, rewritten):
    u = torch.randn(4, 3)
    keep = u.clone()
    graph = _recorded(fn, u)
    assert _replay.reuse_buffers(graph) == rewritten
    torch.testing.assert_close(graph(u), fn(u), rtol=0, atol=0)
    assert torch.equal(u, keep)


def test_a_learned_prior_scale_updated_in_place_is_seen():
    """The prior's log(sigma) depends on a parameter: not folded, so an optimiser step shows."""
    model, x, guide, _ = _cases()["hierarchical, learned scale, prior"]
    fast, slow, points = _pair(model, x, guide=guide)
    for u in points:
        fast.value_and_grad(u)
    assert fast.evaluation("prior") == "replay"
    with torch.no_grad():
        pyro.get_param_store()._params["w_scale"].add_(0.5)  # the unconstrained tensor, in place
    for u in points:
        _same(fast.value_and_grad(u), slow.value_and_grad(u))
    assert list(fast._evaluation("prior").recordings.values()) == [1]  # the same recording


@pytest.mark.parametrize("name", ["digits-vae", "digits-gan", "digits-gmmn", "digits-iwae"])
def test_the_shipped_models_replay_with_their_own_numbers(name):
    from models import zoo

    model = zoo.build(name)
    x = (torch.rand(3, model.data_dim, generator=torch.Generator().manual_seed(0)) < 0.3).double()
    guide = getattr(model, "guide", None)
    for path in ["prior"] + (["guide"] if guide is not None else []):
        fast, slow, points = _pair(model, x, guide=guide)
        for u in points:
            _same(fast.value_and_grad(u, path), slow.value_and_grad(u, path))
        assert fast.evaluation(path) == "replay"


def _reshaping(x):
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        flat = z.reshape(-1)  # recorded as a view of a contiguous z: no view of a transposed one
        pyro.sample("x", dist.Normal(flat.reshape(z.shape).sum(-1), 1.0), obs=x)


def test_another_memory_layout_gets_its_own_recording():
    x = torch.randn(3, generator=torch.Generator().manual_seed(0))
    fast, slow, points = _pair(_reshaping, x)
    for u in points:
        fast.value_and_grad(u)
    for u in points:  # the same values, columns in Fortran order
        t = u.t().contiguous().t()
        _same(fast.value_and_grad(t), slow.value_and_grad(t))
    assert len(fast._evaluation("prior").replays) == 2


def test_a_replay_that_fails_hands_over_to_the_program():
    x = torch.randn(3, generator=torch.Generator().manual_seed(0))
    fast, slow, points = _pair(_reshaping, x)
    for u in points:
        fast.value_and_grad(u)
    (key,) = fast._evaluation("prior").replays
    graph, state = fast._evaluation("prior").replays[key]
    fast._evaluation("prior").replays[key] = (lambda u: graph(u.t().contiguous().t()), state)  # view fails
    _same(fast.value_and_grad(points[0]), slow.value_and_grad(points[0]))
    assert "the replay failed: RuntimeError" in fast.evaluation("prior")
    _same(fast.value_and_grad(points[1]), slow.value_and_grad(points[1]))  # eager from now on
