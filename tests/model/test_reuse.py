"""Targets reused between the rounds of a search (pyrolik.model.reuse): equal inputs, one target,
the same numbers; never outside the block, never with a guide."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyrolik
from pyrolik.distortion.path import distortion_model
from pyrolik.exceptions import BudgetWarning
from pyrolik.model import reuse as replay
from pyrolik.model.arguments import PerExample
from pyrolik.model.reuse import TargetCache, active_cache, same_value
from pyrolik.model.target import make_target
from tests.oracles import alias

lg = alias("lg_small")


@pytest.fixture
def recordings(monkeypatch) -> list:
    """One entry per recording of a model's evaluation (pyrolik.model.reuse.record) from here on."""
    calls: list = []
    record = replay.record
    monkeypatch.setattr(replay, "record", lambda *a: calls.append(1) or record(*a))
    return calls


def test_same_value_compares_what_a_model_reads():
    t = torch.arange(6.0).reshape(2, 3)
    assert same_value(t, t.clone()) and not same_value(t, t.float())
    assert not same_value(t, t.reshape(3, 2)) and not same_value(t, t + 1)
    assert same_value((t, {"a": PerExample(t)}, 3), (t.clone(), {"a": PerExample(t.clone())}, 3))
    assert not same_value({"a": PerExample(t)}, {"a": PerExample(t, explicit=False)})
    assert not same_value(t, 1.0) and not same_value(1, 1.0)

    def model(x):
        pass

    def other(x):
        pass

    assert same_value(model, model) and not same_value(model, other)
    assert distortion_model(model, sigma=0.5) == distortion_model(model, sigma=0.5)
    assert distortion_model(model, sigma=0.5) != distortion_model(model, sigma=0.4)
    assert distortion_model(model, sigma=0.5) != distortion_model(other, sigma=0.5)


def test_inside_a_cache_equal_inputs_give_the_same_target(lg):
    x = lg.sample(4, torch.Generator().manual_seed(0))
    cache = TargetCache()
    assert active_cache() is None
    with cache:
        assert active_cache() is cache
        a = make_target(lg, x, 3)
    with cache:  # a later block, other tensor objects with the same values
        assert make_target(lg, x.clone(), 3) is a
        assert make_target(lg, x, 2) is not a  # other chains
        assert make_target(lg, x + 1, 3) is not a  # other data
        assert a.first_chains(2) is a.first_chains(2)  # the pilot's target, kept
    assert active_cache() is None
    assert make_target(lg, x, 3) is not a  # outside: always a new one
    assert len(cache) == 3


def test_a_target_with_a_guide_is_never_reused(lg):
    x = lg.sample(2, torch.Generator().manual_seed(0))

    def guide(x):
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.Normal(torch.zeros(x.shape[0], 2), 1.0).to_event(1))

    with TargetCache():
        assert make_target(lg, x, 2, guide=guide) is not make_target(lg, x, 2, guide=guide)


def test_rounds_record_the_model_once_and_give_the_same_numbers(lg, seed, recordings):
    sim = pyrolik.simulate(lg, 6, data_shape=(lg.data_dim,), seed=seed)
    kw = dict(num_chains=3, progress=False)
    alone = [pyrolik.bdmc(lg, sim, num_steps=t, seed=seed + t, **kw) for t in (30, 60)]
    before = len(recordings)
    cache = TargetCache()
    shared = []
    for t in (30, 60):
        with cache:
            shared.append(pyrolik.bdmc(lg, sim, num_steps=t, seed=seed + t, **kw))
    # the first round recorded its pilot's and its chains' evaluations; the second none
    assert len(recordings) - before == 2
    for a, b in zip(alone, shared, strict=True):
        assert torch.equal(a.lower.log_weights, b.lower.log_weights)
        assert torch.equal(a.upper.log_weights, b.upper.log_weights)
        assert b.lower.settings["evaluation"] == "replay"


@pytest.mark.parametrize("search", ["ais", "sigma_curve"])
def test_the_budget_searches_record_the_model_once(lg, seed, recordings, search):
    x = lg.sample(20, torch.Generator().manual_seed(seed))
    with pytest.warns(BudgetWarning, match="reached max_steps=100"):
        if search == "ais":
            r = pyrolik.ais(lg, x, num_steps=pyrolik.Tolerance(1e-3, max_steps=100),
                            num_chains=2, seed=seed, progress=False)
        else:
            r = pyrolik.sigma_curve(lg, x, [0.3, 1.0],
                                    num_steps=pyrolik.Tolerance(1e-3, max_steps=100),
                                    num_chains=2, seed=seed, progress=False)
    assert len(r.budget.rounds) == 3  # 25, 50, 100 steps
    # the rounds' pilot (2 chains) and chains (2 x 2 directions) once, not once per round; then
    # the final run and the check, each one target (their pilot runs on all of their 2 chains)
    assert len(recordings) == 2 + 2
