"""Errors by cause: dtype, support, event shape, in the user's words."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from torch import nn

from pyrolik.model.target import make_target
from tests.idiom_helpers import net_model


# -- errors by cause: dtype, support, event shape ---------------------------------------------------
def test_errors_name_the_cause(lg, x):
    net = nn.Linear(2, 3).float()
    with pytest.raises(ValueError, match=r"x is float64 but the model's parameters are float32 "
                       r"\(Linear.weight\): pass x.float\(\) \(command line: --dtype float32\)"):
        make_target(net_model(lg, net), x, 3)

    def bernoulli(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Bernoulli(logits=z @ lg.W.T).to_event(1), obs=x)

    grey = torch.rand(4, 3, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"observed site 'x' has support .*Boolean.* but x holds "
                       r"values outside it \(x ranges over \[0\.\d+, 0\.\d+\].*binarize x"):
        make_target(bernoulli, grey, 3)

    def no_event(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, lg.s), obs=x)

    with pytest.raises(ValueError, match=r"site 'x' has 3 values along dim -1, where "
                       r"pyro.plate\('data'\) runs over the 4 examples of x.*\.to_event\(1\)"):
        make_target(no_event, x, 6)
