r"""The linear-Gaussian decoder: the oracle every estimator is tested against.

.. math::
    z \sim \mathcal N(0, I_d), \qquad x \mid z \sim \mathcal N(W z + b, s^2 I_D),

so that :math:`x \sim \mathcal N(b, W W^\top + s^2 I_D)` and the posterior is Gaussian with precision
:math:`I + W^\top W / s^2`. The tempered posterior :math:`p(z) p(x \mid z)^\beta` is Gaussian too,
with precision :math:`I + \beta W^\top W / s^2`, which lets kernels be tested at every temperature.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

__all__ = ["LinearGaussian"]


@dataclass
class LinearGaussian:
    """A linear-Gaussian decoder model with closed-form marginal and posterior.

    Call the instance as a Pyro model: ``model(x)``. ``x`` has shape ``(N, D)``.
    """

    W: Tensor  # (D, d)
    b: Tensor  # (D,)
    s: float

    @classmethod
    def random(
        cls, data_dim: int = 5, latent_dim: int = 2, s: float = 0.5, seed: int = 0,
        dtype: torch.dtype | None = None,
    ) -> LinearGaussian:
        """A random instance with weights drawn from N(0, 1) under a fixed seed."""
        g = torch.Generator().manual_seed(seed)
        dtype = dtype or torch.get_default_dtype()
        W = torch.randn(data_dim, latent_dim, generator=g, dtype=dtype)
        b = torch.randn(data_dim, generator=g, dtype=dtype)
        return cls(W=W, b=b, s=s)

    @property
    def latent_dim(self) -> int:
        return self.W.shape[1]

    @property
    def data_dim(self) -> int:
        return self.W.shape[0]

    def __call__(self, x: Tensor) -> None:
        d = self.latent_dim
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample(
                "z", dist.Normal(x.new_zeros(d), x.new_ones(d)).to_event(1)
            )
            loc = z @ self.W.to(x).T + self.b.to(x)
            pyro.sample("x", dist.Normal(loc, self.s).to_event(1), obs=x)

    def marginal(self) -> dist.MultivariateNormal:
        """The exact marginal distribution of x."""
        cov = self.W @ self.W.T + self.s**2 * torch.eye(self.data_dim, dtype=self.W.dtype)
        return dist.MultivariateNormal(self.b, covariance_matrix=cov)

    def exact_log_marginal(self, x: Tensor) -> Tensor:
        """Exact log p(x) per example, shape (N,)."""
        return self.marginal().log_prob(x.to(self.W))

    def tempered_posterior(self, x: Tensor, beta: float = 1.0) -> dist.MultivariateNormal:
        r"""The normalised :math:`p(z) p(x \mid z)^\beta`, batched over the N examples."""
        x = x.to(self.W)
        prec = torch.eye(self.latent_dim, dtype=self.W.dtype) + beta * self.W.T @ self.W / self.s**2
        cov = torch.linalg.inv(prec)
        mean = beta * ((x - self.b) @ self.W / self.s**2) @ cov.T
        return dist.MultivariateNormal(mean, covariance_matrix=cov.expand(x.shape[0], -1, -1))

    def exact_posterior(self, x: Tensor) -> dist.MultivariateNormal:
        """The exact posterior p(z | x), batched over examples."""
        return self.tempered_posterior(x, 1.0)

    def exact_guide(self, x: Tensor) -> None:
        """A Pyro guide that samples the exact posterior (IWAE with it has zero variance)."""
        post = self.exact_posterior(x)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(post.loc.to(x), scale_tril=post.scale_tril.to(x)))

    def sample(self, num_examples: int, generator: torch.Generator | None = None) -> Tensor:
        """Draw x from the model's marginal."""
        z = torch.randn(num_examples, self.latent_dim, generator=generator, dtype=self.W.dtype)
        eps = torch.randn(num_examples, self.data_dim, generator=generator, dtype=self.W.dtype)
        return z @ self.W.T + self.b + self.s * eps
