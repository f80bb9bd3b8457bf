r"""A linear-Gaussian state-space model written as Pyro's DMM/HMM examples write it, with the Kalman filter.

.. math::
    z_0 \sim \mathcal N(0, I_d), \quad z_t \mid z_{t-1} \sim \mathcal N(A z_{t-1}, q^2 I_d), \quad
    x_t \mid z_t \sim \mathcal N(C z_t + c, r^2 I_D), \qquad t = 0 \dots T-1,

one latent and one observed site per step (``z_t``, ``x_t``) under ``pyro.markov``, the sequences in
``x`` of shape ``(N, T, D)``. Ragged sequences are masked as ``examples/dmm.py`` masks them: with
``lengths`` given, steps ``t >= lengths[n]`` run under ``poutine.mask`` (neither scored nor observed).

The marginal :math:`\log p(x_{0:L-1})` is exact by the Kalman filter (:meth:`exact_log_marginal`):
with the prediction :math:`z_t \mid x_{<t} \sim \mathcal N(m_t, P_t)`,

.. math::
    \log p(x) = \sum_{t < L} \log \mathcal N(x_t;\ C m_t + c,\ S_t), \qquad S_t = C P_t C^\top + r^2 I,

and the update :math:`K = P_t C^\top S_t^{-1}`, :math:`m \leftarrow m_t + K (x_t - C m_t - c)`,
:math:`P \leftarrow (I - K C) P_t`, then :math:`m_{t+1} = A m`, :math:`P_{t+1} = A P A^\top + q^2 I`
(Kalman 1960; e.g. Murphy, "Machine Learning: a Probabilistic Perspective", section 18.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch import Tensor

__all__ = ["LinearStateSpace"]


@dataclass
class LinearStateSpace:
    """Call the instance as a Pyro model: ``model(x)`` or ``model(x, lengths)``, ``x`` ``(N, T, D)``."""

    A: Tensor  # (d, d) transition
    C: Tensor  # (D, d) emission
    c: Tensor  # (D,) emission offset
    q: float  # transition noise
    r: float  # observation noise

    @classmethod
    def random(cls, data_dim: int = 3, latent_dim: int = 2, q: float = 0.5, r: float = 0.4,
               seed: int = 0, dtype: torch.dtype | None = None) -> LinearStateSpace:
        """A random stable instance (transition scaled to spectral norm 0.9) under a fixed seed."""
        g = torch.Generator().manual_seed(seed)
        dtype = dtype or torch.get_default_dtype()
        A = torch.randn(latent_dim, latent_dim, generator=g, dtype=dtype)
        A = 0.9 * A / torch.linalg.matrix_norm(A, ord=2)
        C = torch.randn(data_dim, latent_dim, generator=g, dtype=dtype)
        c = torch.randn(data_dim, generator=g, dtype=dtype)
        return cls(A=A, C=C, c=c, q=q, r=r)

    def __call__(self, x: Tensor, lengths: Tensor | None = None) -> None:
        n, steps = x.shape[0], x.shape[1]
        d = self.A.shape[0]
        with pyro.plate("sequences", n):
            z = None
            for t in pyro.markov(range(steps)):
                # pyro annotates mask as BoolTensor, which a comparison is at run time
                with poutine.mask(mask=True if lengths is None else lengths > t):  # type: ignore[arg-type]
                    loc = x.new_zeros(n, d) if z is None else z @ self.A.T
                    z = pyro.sample(f"z_{t}", dist.Normal(loc, 1.0 if t == 0 else self.q)
                                    .to_event(1))
                    pyro.sample(f"x_{t}", dist.Normal(z @ self.C.T + self.c, self.r).to_event(1),
                                obs=x[:, t])

    def exact_log_marginal(self, x: Tensor, lengths: Tensor | None = None) -> Tensor:
        """``(N,)``: the Kalman filter's :math:`\\log p(x_{0:L_n-1})` of each sequence."""
        n, steps, data_dim = x.shape
        d = self.A.shape[0]
        eye_d, eye_x = torch.eye(d, dtype=x.dtype), torch.eye(data_dim, dtype=x.dtype)
        m = x.new_zeros(n, d)
        P = eye_d.expand(n, d, d).clone()
        total = x.new_zeros(n)
        for t in range(steps):
            if t:
                m = m @ self.A.T
                P = self.A @ P @ self.A.T + self.q**2 * eye_d
            observed = torch.ones(n, dtype=torch.bool) if lengths is None else t < lengths
            S = self.C @ P @ self.C.T + self.r**2 * eye_x
            pred = m @ self.C.T + self.c
            ll = dist.MultivariateNormal(pred, S).log_prob(x[:, t])
            K = P @ self.C.T @ torch.linalg.inv(S)
            m_new = m + (K @ (x[:, t] - pred).unsqueeze(-1)).squeeze(-1)
            P_new = (eye_d - K @ self.C) @ P
            total = total + torch.where(observed, ll, torch.zeros_like(ll))
            m = torch.where(observed.unsqueeze(-1), m_new, m)
            P = torch.where(observed.reshape(n, 1, 1), P_new, P)
        return total

    def exact_joint_log_marginal(self, x: Tensor) -> Tensor:
        """``(N,)``: :math:`\\log p(x)` from the joint Gaussian of all steps (checks the filter)."""
        n, steps, data_dim = x.shape
        d = self.A.shape[0]
        # z = L eps with z_0 = eps_0, z_t = A z_{t-1} + q eps_t: the stacked states' covariance
        blocks = [[torch.zeros(d, d, dtype=x.dtype) for _ in range(steps)] for _ in range(steps)]
        for t in range(steps):
            for s in range(t + 1):
                scale = 1.0 if s == 0 else self.q
                blocks[t][s] = torch.linalg.matrix_power(self.A, t - s) * scale
        L = torch.cat([torch.cat(row, 1) for row in blocks], 0)
        big_c = torch.block_diag(*[self.C] * steps)
        cov = big_c @ L @ L.T @ big_c.T + self.r**2 * torch.eye(steps * data_dim, dtype=x.dtype)
        mean = self.c.repeat(steps)
        return dist.MultivariateNormal(mean, cov).log_prob(x.reshape(n, -1))
