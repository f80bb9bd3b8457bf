"""The adapter's facade: annealing paths as objects, the layers around one evaluation, first chains."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyrolik.model.target import AnnealingPath, make_target
from tests.oracles import alias

lg = alias("lg_medium")


def _mean_field(lg):
    def guide(x):
        post = lg.exact_posterior(x)
        with pyro.plate("data", x.shape[0]):
            sd = post.covariance_matrix.diagonal(dim1=-2, dim2=-1).sqrt()
            pyro.sample("z", dist.Normal(post.loc, sd).to_event(1))

    return guide


def test_paths_are_objects_over_one_evaluation(lg):
    x = lg.sample(3, torch.Generator().manual_seed(1))
    t = make_target(lg, x, num_chains=2, guide=_mean_field(lg), replay=False)
    u = torch.randn(t.layout.rows, t.layout.latent_dim, generator=torch.Generator().manual_seed(2))
    prior, guide = t.path("prior"), t.path("guide")
    assert isinstance(prior, AnnealingPath) and guide.name == "guide"
    for path in (prior, guide):
        a, b = path.value_and_grad(u), t.value_and_grad(u, path.name)
        for p, q in zip(a, b, strict=True):
            assert torch.equal(p, q)
    lp, lo = t.program.log_prior_and_obs(u)
    vg = prior.value_and_grad(u)
    assert torch.equal(vg.log_init, lp) and torch.equal(vg.log_ratio, lo)
    vg = guide.value_and_grad(u)
    torch.testing.assert_close(vg.log_init, t.program.log_guide(u), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(vg.log_ratio, lp + lo - t.program.log_guide(u), rtol=1e-12, atol=1e-12)
    assert t.kept_guide.cached is not False  # the mean-field guide is kept, not rerun
    draw = guide.sample_initial(torch.Generator().manual_seed(3))
    assert draw.shape == (t.layout.rows, t.layout.latent_dim)
    assert (prior.evaluation, guide.evaluation) == ("eager", "eager")


def test_a_path_that_cannot_exist_is_refused(lg):
    t = make_target(lg, lg.sample(2))
    with pytest.raises(ValueError, match="built without a guide"):
        t.path("guide")
    with pytest.raises(ValueError, match=r"path must be one of \('prior', 'guide'\)"):
        t.path("posterior")
    with pytest.raises(ValueError, match="built without a guide"):
        t.value_and_grad(torch.zeros(t.layout.rows, t.layout.latent_dim), "guide")


def test_first_chains_is_the_same_target_on_fewer_rows(lg):
    x = lg.sample(3, torch.Generator().manual_seed(1))
    t = make_target(lg, x, num_chains=4, replay=True)
    u = torch.randn(t.layout.rows, t.layout.latent_dim, generator=torch.Generator().manual_seed(2))
    for _ in range(3):
        t.value_and_grad(u)
    assert t.evaluation("prior") == "replay"
    two = t.path("prior").first_chains(2)
    layout = two.target.layout
    assert (layout.rows, layout.num_chains, layout.num_examples) == (6, 2, 3)
    assert two.evaluation == "eager"  # layers of its own: nothing recorded yet
    got = two.value_and_grad(u[:6])
    want = t.value_and_grad(u)
    assert torch.equal(got.log_ratio, want.log_ratio[:6])
    assert t.first_chains(4) is t
