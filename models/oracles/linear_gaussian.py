r"""The linear-Gaussian decoder: the oracle every estimator is tested against.

.. math::
    z \sim \mathcal N(0, I_d), \qquad x \mid z \sim \mathcal N(W z + b, s^2 I_D),

so that :math:`x \sim \mathcal N(b, W W^\top + s^2 I_D)` and the posterior is Gaussian with precision
:math:`I + W^\top W / s^2`. The tempered posterior :math:`p(z) p(x \mid z)^\beta` is Gaussian too,
with precision :math:`I + \beta W^\top W / s^2`, which lets kernels be tested at every temperature.

The distortion path of Huang et al. (2020) with the squared error :math:`d = \lVert x - Wz - b
\rVert^2` is Gaussian as well: :math:`q_\beta(z \mid x) \propto p(z) e^{-\beta d}` is the tempered
posterior at :math:`s^2 = 1/(2\beta)`, its normaliser is :math:`Z_\beta(x) = (\pi/\beta)^{D/2}
\mathcal N(x; b, W W^\top + I/(2\beta))`, and its rate and distortion are closed form
(:meth:`LinearGaussian.rate_distortion`): the rate-distortion curve of a linear VAE.
"""

from __future__ import annotations

import math
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

    def _eigen(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        r"""Eigen-decomposition :math:`W^\top W / s^2 = U \mathrm{diag}(\lambda) U^\top` and the
        data in that basis, :math:`c = U^\top W^\top (x - b) / s^2` ``(N, d)``: ``(lam, U, c)``."""
        lam, U = torch.linalg.eigh(self.W.T @ self.W / self.s**2)
        c = ((x.to(self.W) - self.b) @ self.W / self.s**2) @ U
        return lam.clamp_min(0.0), U, c

    def log_obs_moments(self, x: Tensor, beta: Tensor | float) -> tuple[Tensor, Tensor]:
        r"""Mean and variance of :math:`r(z) = \log p(x \mid z)` under :math:`f_\beta \propto
        p(z)\,p(x \mid z)^\beta`, per example: shapes ``(B, N)`` for betas ``(B,)``.

        In the eigenbasis of :math:`W^\top W/s^2` (eigenvalues :math:`\lambda_i`, data
        :math:`c_i`), with :math:`a_i = 1 + \beta\lambda_i`, the tempered mean is
        :math:`\beta c_i / a_i`, the covariance :math:`\mathrm{diag}(1/a_i)`, and

        .. math::
            \mathrm{Var}_\beta[r] = \tfrac12 \sum_i \lambda_i^2 / a_i^2 + \sum_i c_i^2 / a_i^3,
            \qquad \frac{d}{d\beta}\mathbb E_\beta[r] = \mathrm{Var}_\beta[r].
        """
        x = x.to(self.W)
        beta = torch.as_tensor(beta, dtype=self.W.dtype).reshape(-1, 1, 1)
        lam, U, c = self._eigen(x)
        a = 1 + beta * lam  # (B, 1, d)
        var = 0.5 * (lam**2 / a**2).sum(-1) + (c**2 / a**3).sum(-1)
        mean_z = (beta * c / a) @ U.T  # (B, N, d)
        resid = x - self.b - mean_z @ self.W.T  # (B, N, D)
        trace = self.s**2 * (lam / a).sum(-1)  # tr(W S W^T), (B, 1)
        mean = -((resid**2).sum(-1) + trace) / (2 * self.s**2) \
            - 0.5 * self.data_dim * math.log(2 * math.pi * self.s**2)
        return mean, var

    def perfect_transition_bias(self, x: Tensor, schedule: Tensor) -> tuple[Tensor, Tensor]:
        r"""Bias and variance of :math:`\log w` of AIS along ``schedule`` with *perfect* transitions.

        If every transition draws :math:`z_t \sim f_{\beta_t}` exactly and independently, then
        :math:`\log w = \sum_t (\beta_{t+1} - \beta_t)\, r(z_t)` and

        .. math::
            \log p(x) - \mathbb E[\log w] = \sum_t \mathrm{KL}(f_{\beta_t} \,\|\, f_{\beta_{t+1}}),
            \qquad \mathrm{Var}[\log w] = \sum_t (\beta_{t+1} - \beta_t)^2\,
            \mathrm{Var}_{\beta_t}[r],

        since :math:`\log Z_{t+1}/Z_t = \log \mathbb E_{\beta_t} e^{\Delta_t r}`. The KL
        divergences between the Gaussian tempered posteriors are summed in the eigenbasis of
        :math:`W^\top W/s^2`: the schedule's own bias, which no transition kernel can remove.
        Returns ``(bias, variance)``, each ``(N,)``.
        """
        x = x.to(self.W)
        b = torch.as_tensor(schedule, dtype=self.W.dtype).reshape(-1)
        lam, _, c = self._eigen(x)
        a = 1 + b.reshape(-1, 1) * lam  # (T+1, d)
        m = b.reshape(-1, 1, 1) * c / a.unsqueeze(1)  # (T+1, N, d) tempered means, eigenbasis
        ratio = a[1:] / a[:-1]  # precision ratio (T, d)
        dm2 = (m[1:] - m[:-1]) ** 2  # (T, N, d)
        kl = 0.5 * ((ratio - 1 - ratio.log()).sum(-1, keepdim=True)
                    + (a[1:].unsqueeze(1) * dm2).sum(-1))  # (T, N)
        _, var = self.log_obs_moments(x, b[:-1])
        return kl.sum(0), ((b[1:] - b[:-1]).reshape(-1, 1) ** 2 * var).sum(0)

    def exact_guide(self, x: Tensor) -> None:
        """A Pyro guide that samples the exact posterior (IWAE with it has zero variance)."""
        post = self.exact_posterior(x)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(post.loc.to(x), scale_tril=post.scale_tril.to(x)))

    def distortion_posterior(self, x: Tensor, beta: float) -> dist.MultivariateNormal:
        r""":math:`q_\beta(z \mid x) \propto p(z)\, e^{-\beta \lVert x - Wz - b\rVert^2}`, batched over examples."""
        return self.tempered_posterior(x, 2.0 * beta * self.s**2)

    def log_normalizer(self, x: Tensor, beta: float) -> Tensor:
        r""":math:`\log Z_\beta(x) = \log \int p(z) e^{-\beta \lVert x - Wz - b\rVert^2} dz` per example (N,).

        Equal to :math:`\log p_\sigma(x) + \tfrac D2 \log(2\pi\sigma^2)` at :math:`\sigma^2 = 1/(2\beta)`.
        """
        if not beta > 0:
            raise ValueError(f"beta must be positive, got {beta}")
        var = 0.5 / beta
        cov = self.W @ self.W.T + var * torch.eye(self.data_dim, dtype=self.W.dtype)
        log_p = dist.MultivariateNormal(self.b, covariance_matrix=cov).log_prob(x.to(self.W))
        return log_p + 0.5 * self.data_dim * math.log(2 * math.pi * var)

    def rate_distortion(self, x: Tensor, beta: float) -> tuple[Tensor, Tensor]:
        r"""Rate :math:`R_\beta = \mathrm{KL}(q_\beta \,\|\, p)` (nats) and distortion :math:`D_\beta =
        \mathbb E_{q_\beta} \lVert x - Wz - b\rVert^2`, per example (N,) each.

        :math:`R_\beta = -\beta D_\beta - \log Z_\beta` (Huang et al. 2020); the pairs over
        :math:`\beta > 0` trace the model's rate-distortion curve for ``x``.
        """
        q = self.distortion_posterior(x, beta)
        mean, cov = q.loc, q.covariance_matrix[0]
        resid = x.to(self.W) - self.b - mean @ self.W.T
        distortion = (resid**2).sum(-1) + torch.trace(self.W @ cov @ self.W.T)
        rate = 0.5 * (torch.trace(cov) + (mean**2).sum(-1) - self.latent_dim - torch.logdet(cov))
        return rate, distortion

    def sample(self, num_examples: int, generator: torch.Generator | None = None) -> Tensor:
        """Draw x from the model's marginal."""
        z = torch.randn(num_examples, self.latent_dim, generator=generator, dtype=self.W.dtype)
        eps = torch.randn(num_examples, self.data_dim, generator=generator, dtype=self.W.dtype)
        return z @ self.W.T + self.b + self.s * eps
