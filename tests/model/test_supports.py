"""``mappable_support``: a mixture's support is its components', through ``.to_event``/``.expand``
wrappers, and every other support is left as it is."""

from __future__ import annotations

import pyro.distributions as dist
import pytest
import torch
from pyro.distributions import constraints
from torch.distributions import biject_to

from pyrolik.model.supports import mappable_support, to_unconstrained

CAT = dist.Categorical(torch.tensor([0.3, 0.7]))
CASES = {
    "scalar": (dist.MixtureSameFamily(CAT, dist.Normal(torch.tensor([-1.0, 1.0]), 1.0)),
               constraints.real),
    "event": (dist.MixtureSameFamily(CAT, dist.Normal(torch.zeros(2, 3), 1.0).to_event(1)),
              constraints.independent(constraints.real, 1)),
    "positive, to_event outside": (
        dist.MixtureSameFamily(CAT, dist.LogNormal(torch.zeros(2), 1.0)).expand([3]).to_event(1),
        constraints.independent(constraints.positive, 1)),
    "unit interval, nested": (
        dist.MixtureSameFamily(CAT, dist.Beta(torch.ones(2, 4), 2.0).to_event(1))
        .expand([3]).to_event(1),
        constraints.independent(constraints.independent(constraints.unit_interval, 1), 1)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_mixture_is_mapped_as_its_components(name):
    fn, expected = CASES[name]
    support = mappable_support(fn.support)
    assert str(support) == str(expected) and support.event_dim == fn.support.event_dim
    value = fn.sample(torch.Size([5]))
    u = to_unconstrained("z", fn, value)
    torch.testing.assert_close(biject_to(support)(u), value)
    assert fn.support.check(biject_to(support)(torch.randn_like(u) * 3)).all()


def test_other_supports_are_left_as_they_are():
    for support in (constraints.real, constraints.positive, constraints.sphere,
                    constraints.independent(constraints.unit_interval, 1)):
        assert mappable_support(support) is support
