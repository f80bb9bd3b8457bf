"""Bits per dimension divide by the entries a model observes: masks, gathered observations, sites per
step; per example where they differ; in summary(), pyrolik.diagnostics.units, export and loading."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine

import pyrolik
from pyrolik.diagnostics import units

G = torch.Generator().manual_seed(0)
W = torch.randn(16, 2, generator=G, dtype=torch.float64)
S = 0.5
KEEP = torch.tensor([1, 5, 9, 12])  # 4 of the 16 entries are observed
MASK = torch.zeros(16, dtype=torch.bool).index_fill(0, KEEP, True)


def _exact(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log p of each example's observed entries: x_obs ~ N(0, W_o W_o^T + s^2 I)."""
    out = []
    for row, m in zip(x, mask.expand(x.shape[0], 16), strict=True):
        w = W[m]
        out.append(dist.MultivariateNormal(torch.zeros(len(w)), w @ w.T + S**2 * torch.eye(len(w)))
                   .log_prob(row[m]))
    return torch.stack(out)


def dist_mask(x):
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(z @ W.T, S).mask(MASK).to_event(1), obs=x)


def _pixel_plate(x, obs_mask=None, mask=None):
    """The 16 entries in a plate (obs_mask and poutine.mask work per batch element)."""
    with pyro.plate("data", x.shape[0], dim=-2):
        z = pyro.sample("z", dist.Normal(torch.zeros(1, 2), 1.0).to_event(1))
        with pyro.plate("pixels", 16, dim=-1):
            loc = (z @ W.T).reshape(x.shape[0], 16)
            if obs_mask is not None:
                pyro.sample("x", dist.Normal(loc, S), obs=x, obs_mask=obs_mask)
            else:
                with poutine.mask(mask=mask):
                    pyro.sample("x", dist.Normal(loc, S), obs=x)


def plate_obs_mask(x):
    _pixel_plate(x, obs_mask=MASK.expand(x.shape[0], 16))


def plate_poutine_mask(x):
    _pixel_plate(x, mask=MASK.expand(x.shape[0], 16))


def gathered(x):
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(z @ W[KEEP].T, S).to_event(1), obs=x[:, KEEP])


@pytest.fixture
def x():
    return (torch.randn(4, 2, generator=G, dtype=torch.float64) @ W.T
            + S * torch.randn(4, 16, generator=G, dtype=torch.float64))


@pytest.mark.parametrize("model", [dist_mask, plate_obs_mask, plate_poutine_mask, gathered],
                         ids=["dist.mask", "obs_mask", "poutine.mask", "gathered"])
def test_bits_per_dim_of_a_model_observing_4_of_16_entries(model, x):
    r = pyrolik.likelihood_weighting(model, x, num_samples=1000, seed=0, progress=False)
    assert torch.equal(r.num_observed, torch.full((4,), 4.0, dtype=torch.float64))
    assert r.num_dims == 4 and torch.equal(units.observed_dims(model, x), r.num_observed)
    bits = r.summary()["NLL [bits/dim]"].iloc[0]
    assert bits == pytest.approx(-float(r.log_likelihood.mean()) / (4 * math.log(2)), rel=1e-12)
    exact = _exact(x, MASK)  # the estimate is of the 4 entries: bits/dim within MC error of exact
    assert ((r.log_likelihood - exact).abs() <= 4 * r.mcse + 1e-3).all()
    exact_bits = -float(exact.mean()) / (4 * math.log(2))
    assert abs(bits - exact_bits) <= 4 * float(r.mcse.max()) / (4 * math.log(2)) + 1e-3
    assert abs(bits - exact_bits * 4 / 16) > 0.1  # what x[0].numel() would have said


def test_per_example_masks_pool_the_observed_entries(x, tmp_path):
    masks = torch.stack([MASK, MASK.roll(1), torch.ones(16, dtype=torch.bool),
                         torch.arange(16) < 7])  # 4, 4, 16 and 7 entries

    def model(x, mask):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ W.T, S).mask(mask).to_event(1), obs=x)

    r = pyrolik.likelihood_weighting(model, x, num_samples=2000, model_kwargs={"mask": masks},
                                     seed=0, progress=False, batch_size=3)
    counts = torch.tensor([4.0, 4.0, 16.0, 7.0], dtype=torch.float64)
    assert torch.equal(r.num_observed, counts) and r.num_dims is None
    # hand-computed: total NLL over total observed entries, in bits
    hand = -float(r.log_likelihood.sum()) / (31 * math.log(2))
    assert r.summary()["NLL [bits/dim]"].iloc[0] == pytest.approx(hand, rel=1e-12)
    assert r.bits_per_dim == pytest.approx(hand, rel=1e-12)
    assert ((r.log_likelihood - _exact(x, masks)).abs() <= 4 * r.mcse + 1e-3).all()
    assert r.per_example()["observed_dims"].tolist() == counts.tolist()
    # pyrolik.diagnostics.units divides per example by such counts
    per = units.nats_to_bits_per_dim(-r.log_likelihood, r.observed_dims)
    torch.testing.assert_close(per, -r.log_likelihood / (counts * math.log(2)))
    with pytest.raises(ValueError, match="positive whole numbers"):
        units.nats_to_bits_per_dim(1.0, torch.tensor([4.0, 0.0]))
    # the count survives the file
    path = pyrolik.save(r, tmp_path / "masked.nc")
    loaded = pyrolik.load(path)
    assert torch.equal(loaded.num_observed, counts)
    assert loaded.summary()["NLL [bits/dim]"].iloc[0] == pytest.approx(hand, rel=1e-9)


def test_ragged_sequences_with_a_site_per_step_count_their_length():
    lengths = torch.tensor([5, 2, 3])

    def dmm_like(x, lengths):  # one observed site per step, masked past each sequence's length
        n, steps = x.shape[0], x.shape[1]
        with pyro.plate("data", n):
            h = torch.zeros(n, 2)
            for t in pyro.markov(range(steps)):
                with poutine.mask(mask=t < lengths):
                    h = pyro.sample(f"h_{t}", dist.Normal(0.8 * h, 1.0).to_event(1))
                    pyro.sample(f"x_{t}", dist.Normal(h @ W[:3].T, S).to_event(1), obs=x[:, t])

    x = torch.randn(3, 5, 3, generator=G, dtype=torch.float64)
    r = pyrolik.ais(dmm_like, x, num_steps=3, num_chains=2, model_kwargs={"lengths": lengths},
                    seed=0, progress=False)
    assert torch.equal(r.num_observed, 3.0 * lengths.double())
    hand = -float(r.log_likelihood.sum()) / (30 * math.log(2))
    assert r.summary()["NLL [bits/dim]"].iloc[0] == pytest.approx(hand, rel=1e-12)


def test_a_model_of_all_of_x_counts_every_entry(x):
    def plain(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ W.T, S).to_event(1), obs=x)

    r = pyrolik.likelihood_weighting(plain, x, num_samples=10, seed=0, progress=False)
    assert r.num_dims == 16 and "observed_dims" not in r.per_example().columns
    bits = r.summary()["NLL [bits/dim]"].iloc[0]
    assert bits == pytest.approx(-float(r.log_likelihood.mean()) / (16 * math.log(2)), rel=1e-12)


def test_csl_of_a_pyro_model_divides_by_the_entries_observed(x):
    z = torch.randn(500, 2, generator=G, dtype=torch.float64)  # prior draws: likelihood weighting
    r = pyrolik.csl(dist_mask, x, {"z": z}, progress=False)
    assert torch.equal(r.num_observed, torch.full((4,), 4.0, dtype=torch.float64))
    bits = r.summary()["NLL [bits/dim]"].iloc[0]
    assert bits == pytest.approx(-float(r.log_likelihood.mean()) / (4 * math.log(2)), rel=1e-12)
