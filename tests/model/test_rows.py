"""A model whose density of one example reads other rows of its batch is refused (pyrolik.model.modules).

pyrolik folds chains and batches into the data plate, so such a model gives numbers that change with
``num_chains``, ``batch_size`` and the order of ``x``: before the check, ``x.mean(0)`` normalisation
gave AIS estimates 0.8-2.7 nats apart between ``batch_size=None`` and ``batch_size=1`` on the
linear-Gaussian oracle, and IWAE with the exact posterior (zero variance on a row-wise model) missed
``log p(x)`` by 0.28 nats with a ``z - 0.3 z.mean(0)`` coupling, all without a word.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn.functional as F

import pyrolik
from pyrolik.model.target import make_target
from tests.idiom_helpers import exact_guide, exact_iwae, same_density

REFUSED = r"density of one example depends on the other rows of its batch.*pyrolik.model.shared"


def _model(lg, loc_fn):
    def model(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(loc_fn(x, z), lg.s).to_event(1), obs=x)

    return model


def _batch_norm(x, z):
    h = z @ torch.ones(2, 3, dtype=z.dtype)
    return F.batch_norm(h, None, None, training=True)


def _reseeded_noise(x, z):
    torch.manual_seed(0)  # deterministic at a fixed latent, but each row's noise is its position's
    return z.sum(-1, keepdim=True) + 0.5 * torch.randn(x.shape, dtype=x.dtype)


CASES = {
    "x.mean(0)": lambda lg: lambda x, z: z @ lg.W.T + lg.b + (x - x.mean(0)),
    "z - z.mean(0)": lambda lg: lambda x, z: (z - 0.3 * z.mean(0)) @ lg.W.T + lg.b,
    "softmax over the batch": lambda lg: lambda x, z: z @ lg.W.T + torch.softmax(x, 0),
    "F.batch_norm(training=True)": lambda lg: _batch_norm,
    "row positions": lambda lg: lambda x, z: z @ lg.W.T + torch.arange(len(x)).to(x).unsqueeze(-1),
    "noise after torch.manual_seed": lambda lg: _reseeded_noise,
    "a neighbour's latent": lambda lg: lambda x, z: (z + z.roll(1, 0)) @ lg.W.T + lg.b,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_density_that_reads_other_rows_is_refused_by_every_estimator(lg, x, name):
    model = _model(lg, CASES[name](lg))
    with pytest.raises(ValueError, match=REFUSED):
        make_target(model, x, 3)
    with pytest.raises(ValueError, match=REFUSED):
        pyrolik.iwae(model, x, exact_guide(lg), num_samples=5, seed=0, progress=False)
    with pytest.raises(ValueError, match=REFUSED):
        pyrolik.likelihood_weighting(model, x, num_samples=50, seed=0, progress=False)
    with pytest.raises(ValueError, match=REFUSED):
        pyrolik.ais(model, x, num_steps=3, num_chains=2, seed=0, progress=False)


@pytest.mark.parametrize("name", ["x.mean(0)", "z - z.mean(0)", "a neighbour's latent"])
def test_batches_of_one_example_and_one_row_are_probed_too(lg, x, name):
    # batch_size=1 gives batches whose rows are all copies of one example: the probe runs the row
    # beside a row of other data at other latents
    model = _model(lg, CASES[name](lg))
    with pytest.raises(ValueError, match=REFUSED):
        pyrolik.ais(model, x, num_steps=3, num_chains=2, batch_size=1, seed=0, progress=False)
    with pytest.raises(ValueError, match=REFUSED):
        make_target(model, x[:1], 1)


def test_the_message_names_the_term_the_example_and_both_values(lg, x):
    with pytest.raises(ValueError, match=r"log p\(x \| z\) \(observed sites \['x'\]\) of example [23] "
                       r"\(chain 2\) is -?\d.* in the batch of 12 rows and -?\d.* in a batch of 2 "
                       r"rows at the same latents.*x.mean\(0\)"):
        make_target(_model(lg, CASES["x.mean(0)"](lg)), x, 3)

    def coupled_prior(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            w = pyro.sample("w", dist.Normal(z.mean(0), 1.0).to_event(1))
            pyro.sample("x", dist.Normal((z + w) @ lg.W.T + lg.b, lg.s).to_event(1), obs=x)

    with pytest.raises(ValueError, match=r"log p\(z\) of example"):
        make_target(coupled_prior, x, 2)


def test_row_wise_models_pass_with_arguments_subsampling_and_batches(lg, x):
    shift = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))

    def with_arguments(x, shift):  # per-example arguments follow their rows into the probe
        with pyro.plate("data", 60000, subsample_size=x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b + shift, lg.s).to_event(1), obs=x)

    def guide(x, shift):
        exact_guide(lg)(x - shift)

    truth = lg.exact_log_marginal(x - shift)
    for batch_size in (None, 1, 3):
        exact_iwae(with_arguments, x, guide, truth, model_args=(shift,), batch_size=batch_size)
    same_density(lg, lg, x[:1], k=1)  # a batch of one row


def test_a_model_that_fails_on_fewer_rows_is_refused(lg, x):
    def needs_its_batch(x):
        if x.shape[0] < 3:
            raise RuntimeError("Expected more than 2 rows")
        lg(x)

    with pytest.raises(ValueError, match=r"fails when run on 2 rows of its batch \(RuntimeError: "
                       r"Expected more than 2 rows\).*any number of rows"):
        make_target(needs_its_batch, x, 1)
