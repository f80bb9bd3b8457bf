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


def test_a_per_example_tensor_the_program_reads_itself_is_named_with_fixes_that_work(lg):
    """A guide of Pyro's SVI tutorials, pyro.param of shape (N, 2) fitted on x: the message said to
    add .to_event, which the site has. Its fixes: the tensor through model_kwargs, or an AutoGuide."""
    from pyro.infer.autoguide import AutoNormal

    import pyrolik

    x = lg.sample(5, torch.Generator().manual_seed(0))
    off = x.new_zeros(5, 2)

    def model(x, off=None):
        loc = (OFF if off is None else off)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(loc, 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b, 1.0).to_event(1), obs=x)

    def guide(x, off=None):
        loc = pyro.param("q_loc", x.new_zeros(x.shape[0], 2))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.Normal(loc, 1.0).to_event(1))

    OFF = off
    message = (r"site 'z' has 5 rows, one per example of x, where pyro.plate\('data'\) runs over "
               r"the \d+ rows of \d+ stacked copies of x.*Pass such a tensor in model_args/model_kwargs")
    pyro.clear_param_store()
    with pytest.raises(ValueError, match=message):  # the model reads the tensor itself
        pyrolik.ais(model, x, num_steps=2, num_chains=4, progress=False)
    guide(x)  # fitted on x (as SVI leaves it): q_loc has one row per example
    with pytest.raises(ValueError, match=message):  # the guide's per-example pyro.param
        pyrolik.iwae(model, x, guide, num_samples=4, model_kwargs={"off": off}, progress=False)
    assert pyrolik.ais(model, x, num_steps=2, num_chains=4, model_kwargs={"off": off},
                       progress=False).log_likelihood.shape == (5,)
    pyro.clear_param_store()
    auto = AutoNormal(model)
    auto(x, off=off)  # fitted on x (no steps needed for the check)
    assert pyrolik.iwae(model, x, auto, num_samples=4, model_kwargs={"off": off},
                        progress=False).log_likelihood.shape == (5,)
    pyro.clear_param_store()
