r"""Decoders with a 1-D latent whose marginal likelihood is computed by quadrature: known answers.

.. math:: \log p(x) = \log \int p(z)\, p(x \mid z)\, dz \approx
          \log \sum_g p(z_g)\, p(x \mid z_g)\, \Delta z

on a fine grid that covers the prior's mass (the rectangle rule with spacing 1e-3 is exact to far
below Monte Carlo error for these smooth, well-resolved posteriors). Exact posterior draws come from
the same grid by inverse-CDF sampling (plus uniform jitter within a cell).

- :class:`BimodalDecoder`: :math:`x \mid z \sim \mathcal N(w |z| + b, s^2 I)`; the posterior has two
  mirror-image modes at :math:`\pm z^*`.
- :class:`BernoulliDecoder`: :math:`x_j \mid z \sim \mathrm{Bernoulli}(\sigma(w_j z + b_j))`.
- :class:`UniformLatent`: :math:`z \sim U(a, b)`, :math:`x \mid z \sim \mathcal N(w z + c, s^2 I)`:
  a latent with constrained support.
- :class:`BetaLatent`: :math:`z \sim \mathrm{Beta}(\alpha, \beta)`,
  :math:`x \mid z \sim \mathcal N(w z + c, s^2 I)`: a skewed latent on (0, 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

__all__ = ["BimodalDecoder", "BernoulliDecoder", "UniformLatent", "BetaLatent"]


class _Quadrature1D:
    """Shared quadrature machinery; subclasses define the prior, the decoder and the grid."""

    low: float = -10.0
    high: float = 10.0
    spacing: float = 1e-3

    def prior(self, like: Tensor) -> dist.TorchDistribution:
        return dist.Normal(like.new_zeros(()), like.new_ones(()))

    def likelihood(self, z: Tensor) -> dist.TorchDistribution:  # z (..., 1) -> event over x
        raise NotImplementedError

    def __call__(self, x: Tensor) -> None:
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", self.prior(x).expand([1]).to_event(1))
            pyro.sample("x", self.likelihood(z), obs=x)

    def grid(self, dtype: torch.dtype) -> Tensor:
        n = int(round((self.high - self.low) / self.spacing))
        return self.low + (torch.arange(n, dtype=dtype) + 0.5) * self.spacing

    def log_joint_grid(self, x: Tensor) -> Tensor:
        """``log p(z_g) + log p(x | z_g)`` on the grid: shape (G, N)."""
        x = x.double()
        z = self.grid(torch.float64)
        lp = self.prior(x).log_prob(z)
        out = []
        for chunk in z.split(2000):
            out.append(self.likelihood(chunk.reshape(-1, 1, 1)).log_prob(x))
        return lp.unsqueeze(-1) + torch.cat(out)

    def exact_log_marginal(self, x: Tensor) -> Tensor:
        """log p(x) per example by quadrature, shape (N,)."""
        return torch.logsumexp(self.log_joint_grid(x), 0) + math.log(self.spacing)

    def sample_posterior(self, x: Tensor, num_samples: int,
                         generator: torch.Generator | None = None) -> Tensor:
        """Exact posterior draws ``(num_samples, N, 1)`` by inverse CDF on the grid."""
        lj = self.log_joint_grid(x)
        cdf = torch.cumsum(torch.softmax(lj, 0), 0).T.contiguous()  # (N, G)
        u = torch.rand(x.shape[0], num_samples, generator=generator, dtype=torch.float64)
        idx = torch.searchsorted(cdf, u).clamp_max(cdf.shape[1] - 1)
        jitter = torch.rand(idx.shape, generator=generator, dtype=torch.float64) - 0.5
        z = self.grid(torch.float64)[idx] + jitter * self.spacing
        return z.T.unsqueeze(-1).to(x.dtype)

    def sample(self, num_examples: int, generator: torch.Generator | None = None,
               dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        """Draw ``(x, z)`` from the joint; ``z`` is an exact posterior sample for ``x``."""
        dtype = dtype or torch.get_default_dtype()
        like = torch.zeros((), dtype=dtype)
        with torch.random.fork_rng():
            if generator is not None:
                torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
            z = self.prior(like).sample((num_examples, 1))
            x = self.likelihood(z).sample()
        return x, z


@dataclass
class BimodalDecoder(_Quadrature1D):
    r""":math:`z \sim \mathcal N(0, 1)`, :math:`x \mid z \sim \mathcal N(w |z| + b, s^2 I_D)`."""

    w: Tensor
    b: Tensor
    s: float = 0.3

    @classmethod
    def random(cls, data_dim: int = 3, s: float = 0.3, seed: int = 0) -> BimodalDecoder:
        g = torch.Generator().manual_seed(seed)
        return cls(w=1.0 + torch.rand(data_dim, generator=g, dtype=torch.float64),
                   b=0.5 * torch.randn(data_dim, generator=g, dtype=torch.float64), s=s)

    def likelihood(self, z: Tensor) -> dist.TorchDistribution:
        loc = z.abs() * self.w.to(z) + self.b.to(z)
        return dist.Normal(loc, self.s).to_event(1)


@dataclass
class BernoulliDecoder(_Quadrature1D):
    r""":math:`z \sim \mathcal N(0, 1)`, :math:`x_j \mid z \sim \mathrm{Bernoulli}(\sigma(w_j z + b_j))`."""

    w: Tensor
    b: Tensor

    @classmethod
    def random(cls, data_dim: int = 10, seed: int = 0) -> BernoulliDecoder:
        g = torch.Generator().manual_seed(seed)
        return cls(w=2.0 * torch.randn(data_dim, generator=g, dtype=torch.float64),
                   b=0.5 * torch.randn(data_dim, generator=g, dtype=torch.float64))

    def likelihood(self, z: Tensor) -> dist.TorchDistribution:
        return dist.Bernoulli(logits=z * self.w.to(z) + self.b.to(z)).to_event(1)


@dataclass
class UniformLatent(_Quadrature1D):
    r""":math:`z \sim U(a, b)`, :math:`x \mid z \sim \mathcal N(w z + c, s^2 I_D)`: constrained support."""

    w: Tensor
    c: Tensor
    s: float = 0.5
    a: float = -1.0
    b_: float = 2.0

    def __post_init__(self):
        self.low, self.high = self.a, self.b_

    @classmethod
    def random(cls, data_dim: int = 3, s: float = 0.5, seed: int = 0) -> UniformLatent:
        g = torch.Generator().manual_seed(seed)
        return cls(w=torch.randn(data_dim, generator=g, dtype=torch.float64),
                   c=torch.randn(data_dim, generator=g, dtype=torch.float64), s=s)

    def prior(self, like: Tensor) -> dist.TorchDistribution:
        return dist.Uniform(like.new_tensor(self.a), like.new_tensor(self.b_))

    def likelihood(self, z: Tensor) -> dist.TorchDistribution:
        return dist.Normal(z * self.w.to(z) + self.c.to(z), self.s).to_event(1)


@dataclass
class BetaLatent(_Quadrature1D):
    r""":math:`z \sim \mathrm{Beta}(\alpha, \beta)`, :math:`x \mid z \sim \mathcal N(w z + c, s^2 I_D)`.

    The grid is the unit interval with spacing 1e-4 (``alpha, beta >= 1.5`` keep the prior density
    smooth at the ends, so the midpoint rule is exact far below Monte Carlo error).
    """

    w: Tensor
    c: Tensor
    s: float = 0.3
    alpha: float = 2.0
    beta: float = 5.0

    def __post_init__(self):
        self.low, self.high, self.spacing = 0.0, 1.0, 1e-4

    @classmethod
    def random(cls, data_dim: int = 5, s: float = 0.3, seed: int = 0, alpha: float = 2.0,
               beta: float = 5.0) -> BetaLatent:
        g = torch.Generator().manual_seed(seed)
        return cls(w=3.0 * torch.randn(data_dim, generator=g, dtype=torch.float64),
                   c=torch.randn(data_dim, generator=g, dtype=torch.float64), s=s, alpha=alpha,
                   beta=beta)

    def prior(self, like: Tensor) -> dist.TorchDistribution:
        return dist.Beta(like.new_tensor(self.alpha), like.new_tensor(self.beta))

    def likelihood(self, z: Tensor) -> dist.TorchDistribution:
        return dist.Normal(z * self.w.to(z) + self.c.to(z), self.s).to_event(1)
