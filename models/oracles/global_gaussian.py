r"""A linear-Gaussian model with a global latent: the oracle of the whole-data-set evidence.

.. math::
    \mu \sim \mathcal N(0, s_\mu^2 I_D), \qquad z_n \sim \mathcal N(0, I_d), \qquad
    x_n \mid \mu, z_n \sim \mathcal N(\mu + W z_n, s^2 I_D), \quad n = 1..N,

so that the stacked data :math:`X = (x_1, ..., x_N) \in \mathbb R^{ND}` is Gaussian with mean 0 and
covariance :math:`s_\mu^2\, \mathbf 1 \mathbf 1^\top \otimes I_D + I_N \otimes (W W^\top + s^2 I_D)`:
the examples are dependent through :math:`\mu`, and only the joint :math:`\log p(x_{1:N})` is
defined. :meth:`GlobalLinearGaussian.exact_log_evidence` evaluates it by a Cholesky factorisation
of that covariance; :meth:`GlobalLinearGaussian.exact_log_evidence_mean` by the split into the mean
of the examples and their deviations from it (a check on the first, and cheap at any N).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

__all__ = ["GlobalLinearGaussian"]


@dataclass
class GlobalLinearGaussian:
    """Global mean ``mu`` in R^D, local ``z_n`` in R^d, ``x_n ~ N(mu + W z_n, s^2 I)``.

    Call the instance as a Pyro model: ``model(x)`` with ``x`` of shape ``(N, D)``.
    """

    W: Tensor  # (D, d)
    s: float
    s_mu: float = 1.0

    @classmethod
    def random(cls, data_dim: int = 4, latent_dim: int = 2, s: float = 0.5, s_mu: float = 1.0,
               seed: int = 0, dtype: torch.dtype | None = None) -> GlobalLinearGaussian:
        """A random instance with weights drawn from N(0, 1) under a fixed seed."""
        g = torch.Generator().manual_seed(seed)
        W = torch.randn(data_dim, latent_dim, generator=g, dtype=dtype or torch.get_default_dtype())
        return cls(W=W, s=s, s_mu=s_mu)

    @property
    def data_dim(self) -> int:
        return self.W.shape[0]

    @property
    def latent_dim(self) -> int:
        return self.W.shape[1]

    def __call__(self, x: Tensor) -> None:
        W = self.W.to(x)
        mu = pyro.sample("mu", dist.Normal(x.new_zeros(self.data_dim), self.s_mu).to_event(1))
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(self.latent_dim), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(mu + z @ W.T, self.s).to_event(1), obs=x)

    def sample(self, num_examples: int, seed: int = 0) -> Tensor:
        """One data set ``(N, D)`` drawn from the model."""
        g = torch.Generator().manual_seed(seed)
        W = self.W
        mu = self.s_mu * torch.randn(self.data_dim, generator=g, dtype=W.dtype)
        z = torch.randn(num_examples, self.latent_dim, generator=g, dtype=W.dtype)
        eps = self.s * torch.randn(num_examples, self.data_dim, generator=g, dtype=W.dtype)
        return mu + z @ W.T + eps

    def covariance(self, num_examples: int) -> Tensor:
        """The covariance ``(N D, N D)`` of the stacked data set (example-major)."""
        D, W = self.data_dim, self.W
        C = W @ W.T + self.s**2 * torch.eye(D, dtype=W.dtype)
        ones = torch.ones(num_examples, num_examples, dtype=W.dtype)
        eye = torch.eye(num_examples, dtype=W.dtype)
        return torch.kron(ones, self.s_mu**2 * torch.eye(D, dtype=W.dtype)) + torch.kron(eye, C)

    def exact_log_evidence(self, x: Tensor) -> Tensor:
        r""":math:`\log p(x_{1:N})` of one data set ``(N, D)`` (or of each of ``(M, N, D)``).

        Exact: the stacked data set is :math:`\mathcal N(0, \Sigma)` with :math:`\Sigma` from
        :meth:`covariance`, evaluated by a Cholesky factorisation.
        """
        batched = x.dim() == 3
        xs = x if batched else x.unsqueeze(0)
        n = xs.shape[1]
        cov = self.covariance(n).to(xs)
        mvn = torch.distributions.MultivariateNormal(xs.new_zeros(n * self.data_dim),
                                                     covariance_matrix=cov)
        out = mvn.log_prob(xs.reshape(xs.shape[0], -1))
        return out if batched else out[0]

    def exact_log_evidence_mean(self, x: Tensor) -> Tensor:
        r"""The same by the mean/deviation split (a check on :meth:`exact_log_evidence`).

        With :math:`\bar x` the mean of the :math:`x_n` and :math:`C = W W^\top + s^2 I`:
        :math:`\bar x \sim \mathcal N(0, s_\mu^2 I + C/N)` and the deviations are independent of it,
        :math:`\log p(x_{1:N}) = \log \mathcal N(\bar x; 0, s_\mu^2 I + C/N)
        + \sum_n \log \mathcal N(x_n - \bar x; 0, C) - \log \mathcal N(0; 0, C/N)`
        (the density of the deviations given the mean on the hyperplane they span).
        """
        n, D = x.shape[-2], self.data_dim
        W = self.W.to(x)
        C = W @ W.T + self.s**2 * torch.eye(D, dtype=x.dtype)
        xbar = x.mean(-2)
        mean_term = torch.distributions.MultivariateNormal(
            x.new_zeros(D), covariance_matrix=self.s_mu**2 * torch.eye(D, dtype=x.dtype) + C / n
        ).log_prob(xbar)
        dev = torch.distributions.MultivariateNormal(x.new_zeros(D), covariance_matrix=C)
        dev_term = dev.log_prob(x - xbar.unsqueeze(-2)).sum(-1)
        at_zero = torch.distributions.MultivariateNormal(x.new_zeros(D), covariance_matrix=C / n)
        return mean_term + dev_term - at_zero.log_prob(x.new_zeros(D))
