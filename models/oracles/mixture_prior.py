r"""A mixture-of-Gaussians prior with a linear-Gaussian decoder: the oracle for mixture priors.

.. math::
    z \sim \sum_k \pi_k \mathcal N(\mu_k, s_k^2 I_d), \qquad x \mid z \sim \mathcal N(W z + b,
    \sigma^2 I_D),

the prior written as ``dist.MixtureSameFamily`` (the prior of GMVAE- and VampPrior-style VAEs).
Each component is a linear-Gaussian model, so

.. math::
    x \sim \sum_k \pi_k \mathcal N(W \mu_k + b,\; s_k^2 W W^\top + \sigma^2 I_D),

and the posterior is a mixture of the components' Gaussian posteriors,

.. math::
    p(z \mid x) = \sum_k w_k(x)\, \mathcal N(z; m_k, C_k), \quad
    C_k = (I / s_k^2 + W^\top W / \sigma^2)^{-1}, \quad
    m_k = C_k (\mu_k / s_k^2 + W^\top (x - b) / \sigma^2),

with :math:`w_k(x) \propto \pi_k \mathcal N(x; W \mu_k + b, s_k^2 W W^\top + \sigma^2 I_D)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

__all__ = ["MixturePriorLinearGaussian"]


@dataclass
class MixturePriorLinearGaussian:
    """A linear-Gaussian decoder under a mixture-of-Gaussians prior, with closed-form marginal and
    posterior. Call the instance as a Pyro model: ``model(x)``, ``x`` of shape ``(N, D)``."""

    weights: Tensor  # (K,) mixture weights pi_k, summing to one
    means: Tensor  # (K, d) component means mu_k
    scales: Tensor  # (K,) component standard deviations s_k (isotropic)
    W: Tensor  # (D, d)
    b: Tensor  # (D,)
    sigma: float  # observation noise

    @classmethod
    def random(cls, data_dim: int = 3, latent_dim: int = 2, num_components: int = 3,
               sigma: float = 0.5, spread: float = 2.0, seed: int = 0,
               dtype: torch.dtype | None = None) -> MixturePriorLinearGaussian:
        """A random instance under a fixed seed: means drawn from N(0, spread^2), scales in
        [0.3, 0.8], weights from a softmax of N(0, 1) logits, W and b from N(0, 1)."""
        g = torch.Generator().manual_seed(seed)
        dtype = dtype or torch.get_default_dtype()
        logits = torch.randn(num_components, generator=g, dtype=dtype)
        means = spread * torch.randn(num_components, latent_dim, generator=g, dtype=dtype)
        scales = 0.3 + 0.5 * torch.rand(num_components, generator=g, dtype=dtype)
        W = torch.randn(data_dim, latent_dim, generator=g, dtype=dtype)
        b = torch.randn(data_dim, generator=g, dtype=dtype)
        return cls(weights=logits.softmax(0), means=means, scales=scales, W=W, b=b, sigma=sigma)

    @property
    def latent_dim(self) -> int:
        return self.W.shape[1]

    @property
    def data_dim(self) -> int:
        return self.W.shape[0]

    def prior(self, like: Tensor | None = None) -> dist.MixtureSameFamily:
        """The mixture prior of z, in ``like``'s dtype and device."""
        to = self.W if like is None else like
        comp = dist.Normal(self.means.to(to), self.scales.to(to).unsqueeze(-1)).to_event(1)
        return dist.MixtureSameFamily(dist.Categorical(self.weights.to(to)), comp)

    def __call__(self, x: Tensor) -> None:
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", self.prior(x))
            loc = z @ self.W.to(x).T + self.b.to(x)
            pyro.sample("x", dist.Normal(loc, self.sigma).to_event(1), obs=x)

    def _component_covariances(self) -> Tensor:
        """``(K, D, D)``: :math:`s_k^2 W W^\\top + \\sigma^2 I`."""
        eye = torch.eye(self.data_dim, dtype=self.W.dtype)
        return self.scales.reshape(-1, 1, 1) ** 2 * (self.W @ self.W.T) + self.sigma**2 * eye

    def marginal(self) -> dist.MixtureSameFamily:
        """The exact marginal distribution of x: a mixture of Gaussians."""
        comp = dist.MultivariateNormal(self.means @ self.W.T + self.b,
                                       covariance_matrix=self._component_covariances())
        return dist.MixtureSameFamily(dist.Categorical(self.weights), comp)

    def exact_log_marginal(self, x: Tensor) -> Tensor:
        """Exact log p(x) per example, shape (N,)."""
        return self.marginal().log_prob(x.to(self.W))

    def exact_posterior(self, x: Tensor) -> dist.MixtureSameFamily:
        """The exact posterior p(z | x), a mixture of Gaussians batched over the N examples."""
        x = x.to(self.W)
        comp = dist.MultivariateNormal(self.means @ self.W.T + self.b,
                                       covariance_matrix=self._component_covariances())
        log_w = self.weights.log() + comp.log_prob(x.unsqueeze(-2))  # (N, K)
        eye = torch.eye(self.latent_dim, dtype=self.W.dtype)
        prec = eye / self.scales.reshape(-1, 1, 1) ** 2 + self.W.T @ self.W / self.sigma**2
        cov = torch.linalg.inv(prec)  # (K, d, d)
        rhs = (self.means / self.scales.unsqueeze(-1) ** 2
               + ((x - self.b) @ self.W / self.sigma**2).unsqueeze(-2))  # (N, K, d)
        mean = (cov @ rhs.unsqueeze(-1)).squeeze(-1)
        n, k, d = len(x), len(self.weights), self.latent_dim
        post = dist.MultivariateNormal(mean, covariance_matrix=cov.expand(n, k, d, d))
        return dist.MixtureSameFamily(dist.Categorical(logits=log_w), post)

    def exact_guide(self, x: Tensor) -> None:
        """A Pyro guide that samples the exact posterior (IWAE with it has zero variance)."""
        post = self.exact_posterior(x)
        comp = post.component_distribution
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MixtureSameFamily(
                dist.Categorical(logits=post.mixture_distribution.logits.to(x)),
                dist.MultivariateNormal(comp.loc.to(x), scale_tril=comp.scale_tril.to(x))))

    def sample(self, num_examples: int, generator: torch.Generator | None = None) -> Tensor:
        """Draw x from the model's marginal."""
        c = torch.multinomial(self.weights, num_examples, replacement=True, generator=generator)
        eps = torch.randn(num_examples, self.latent_dim, generator=generator, dtype=self.W.dtype)
        z = self.means[c] + self.scales[c].unsqueeze(-1) * eps
        noise = torch.randn(num_examples, self.data_dim, generator=generator, dtype=self.W.dtype)
        return z @ self.W.T + self.b + self.sigma * noise
