"""M2-style guides: a guide that samples the label the model sums out is the mixture proposal
sum_y q(y | x) q(z | x, y); iwae and ais(init=guide) against the exact log p(x)."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import config_enumerate

import pyrolik
from pyrolik.model.target import make_target
from tests.helpers import assert_unbiased, plain


class _M2:
    """y ~ Cat(pi), z ~ N(0, 1), x | y, z ~ N(a_y + b_y z, s^2 I): per class linear-Gaussian, so
    p(x) = sum_y pi_y N(x; a_y, b_y b_y^T + s^2 I), p(y | x) and p(z | x, y) in closed form."""

    def __init__(self, num_classes=3, data_dim=2, s=0.5):
        g = torch.Generator().manual_seed(7)
        self.pi = torch.tensor([0.2, 0.5, 0.3])[:num_classes]
        self.a = 2.0 * torch.randn(num_classes, data_dim, generator=g)
        self.b = torch.randn(num_classes, data_dim, generator=g)
        self.s = s

    def model(self, x, enumerate="parallel"):
        with pyro.plate("data", x.shape[0]):
            y = pyro.sample("y", dist.Categorical(self.pi), infer={"enumerate": enumerate})
            z = pyro.sample("z", dist.Normal(x.new_zeros(()), 1.0))
            loc = self.a[y] + self.b[y] * z.unsqueeze(-1)
            pyro.sample("x", dist.Normal(loc, self.s).to_event(1), obs=x)

    def unmarked(self, x):  # Pyro's SS-VAE writes the model without enumeration marks
        return self.model(x, enumerate=None)

    def _per_class(self, x):
        """log pi_y N(x; a_y, b_y b_y^T + s^2 I), posterior mean and sd of z given (x, y)."""
        cov = self.b.unsqueeze(-1) * self.b.unsqueeze(-2) + self.s**2 * torch.eye(x.shape[-1])
        joint = dist.MultivariateNormal(self.a, cov).log_prob(x.unsqueeze(-2)) + self.pi.log()
        prec = 1.0 + (self.b**2).sum(-1) / self.s**2  # (Y,)
        mean = ((x.unsqueeze(-2) - self.a) * self.b).sum(-1) / self.s**2 / prec  # (N, Y)
        return joint, mean, prec.rsqrt()

    def log_marginal(self, x):
        return self._per_class(x)[0].logsumexp(-1)

    def guide(self, x, exact=True):
        """M2's guide: y ~ q(y | x), then z ~ q(z | x, y); exact: the true posterior."""
        joint, mean, sd = self._per_class(x)
        logits = joint if exact else torch.zeros_like(joint)
        with pyro.plate("data", x.shape[0]):
            y = pyro.sample("y", dist.Categorical(logits=logits))
            loc = (torch.nn.functional.one_hot(y, len(self.pi)) * mean).sum(-1)  # y may be enumerated
            scale = sd[y] if exact else 2.0 * sd[y]
            pyro.sample("z", dist.Normal(loc + (0.0 if exact else 0.3), scale))


@pytest.fixture
def m2():
    return _M2()


@pytest.fixture
def x(m2):
    g = torch.Generator().manual_seed(1)
    y = torch.tensor([0, 1, 2, 1, 0])
    z = torch.randn(5, generator=g)
    return m2.a[y] + m2.b[y] * z.unsqueeze(-1) + m2.s * torch.randn(5, 2, generator=g)


def test_the_exact_posterior_as_an_m2_guide_gives_exact_weights(m2, x, seed):
    # q(y|x) q(z|x,y) = p(y, z | x): sum_y of it is p(z | x), so every weight is p(x) exactly
    truth = m2.log_marginal(x)
    r = pyrolik.iwae(m2.model, x, m2.guide, num_samples=8, keep_weights=True, seed=seed,
                     progress=False)
    torch.testing.assert_close(r.log_weights, truth.expand(8, -1), rtol=1e-9, atol=1e-9)
    r = pyrolik.ais(m2.model, x, num_steps=4, num_chains=3, init=m2.guide, seed=seed,
                    progress=False, schedule="linear")
    torch.testing.assert_close(r.log_weights, truth.expand(3, -1), rtol=1e-9, atol=1e-9)


def test_an_m2_guide_is_evaluated_as_the_mixture_of_its_labels(m2, x):
    t = make_target(m2.model, x, 2, guide=lambda x: m2.guide(x, exact=False))
    draw = t.program.sample_guide(torch.Generator().manual_seed(0))
    # the guide's density of z alone: sum over y of q(y | x) q(z | x, y), by hand
    _, mean, sd = m2._per_class(x.repeat(2, 1))
    z = draw.values["z"]
    by_hand = (torch.distributions.Normal(mean + 0.3, 2.0 * sd).log_prob(z.unsqueeze(-1))
               + torch.full((3,), 1 / 3).log()).logsumexp(-1)
    torch.testing.assert_close(draw.log_density, by_hand)
    torch.testing.assert_close(t.program.log_guide(draw.u), by_hand)


@pytest.mark.statistical
def test_iwae_with_an_m2_guide_is_unbiased_for_the_exact_marginal(m2, x, seed):
    truth = m2.log_marginal(x)
    r = pyrolik.iwae(m2.model, x, lambda x: m2.guide(x, exact=False), num_samples=400,
                     keep_weights=True, seed=seed, progress=False)
    assert_unbiased(r.log_weights, truth)


@pytest.mark.statistical
def test_config_enumerate_guide_sums_the_label_in_the_model_too(m2, x, seed):
    # Pyro's SS-VAE: the model samples y unmarked, the guide is config_enumerate'd
    guide = config_enumerate(lambda x: m2.guide(x, exact=False), "parallel")
    t = make_target(m2.unmarked, x, 2, guide=guide)
    assert t.layout.enumerated == ("y",) and [s.name for s in t.layout.sites] == ["z"]
    r = pyrolik.iwae(m2.unmarked, x, guide, num_samples=400, keep_weights=True, seed=seed,
                     progress=False)
    assert_unbiased(r.log_weights, m2.log_marginal(x))
    a = pyrolik.ais(m2.unmarked, x, num_steps=30, num_chains=16, init=guide, seed=seed,
                    progress=False, kernel=plain())
    assert_unbiased(a.log_weights, m2.log_marginal(x))
    # without the guide's marks the model's discrete site is refused, as before
    with pytest.raises(TypeError, match=r"latent site 'y' is discrete"):
        pyrolik.iwae(m2.unmarked, x, lambda x: m2.guide(x, exact=False), num_samples=2,
                     progress=False)
