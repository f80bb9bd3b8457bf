r"""A binary restricted Boltzmann machine small enough to be evaluated exactly.

.. math::
    E(v, h) = -b^\top v - c^\top h - v^\top W h, \qquad
    P(v, h) = e^{-E(v, h)} / Z, \qquad v \in \{0,1\}^D,\ h \in \{0,1\}^H.

Both conditionals factorise: :math:`P(h_j = 1 \mid v) = \sigma(c_j + v^\top W_{:j})` and
:math:`P(v_i = 1 \mid h) = \sigma(b_i + W_{i:} h)`. Summing out one layer gives

.. math::
    \log P^*(v) = b^\top v + \sum_j \operatorname{softplus}(c_j + v^\top W_{:j}), \qquad
    \log P^*(h) = c^\top h + \sum_i \operatorname{softplus}(b_i + W_{i:} h),

and :math:`\log Z = \operatorname{logsumexp}_h \log P^*(h)` over the :math:`2^H` hidden states,
which is exact and cheap for :math:`H \lesssim 20` whatever the number of visible units. This is how
the CSL paper's Table 2 (Bengio, Yao & Cho, 2014, arXiv:1311.6184) gets the exact log-likelihood of
an RBM with 5 hidden units on MNIST.

Plain torch, no pyrolik imports. Training is CD-k or persistent CD (Tieleman, 2008).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["RBM", "binary_states"]


def binary_states(n: int, dtype: torch.dtype | None = None) -> Tensor:
    """All :math:`2^n` binary vectors of length ``n`` as rows, shape ``(2**n, n)``."""
    if n < 0 or n > 24:
        raise ValueError(f"binary_states enumerates 2**n states; n={n} must be in [0, 24]")
    codes = torch.arange(2**n).unsqueeze(1)
    bits = torch.arange(n)
    return ((codes >> bits) & 1).to(dtype or torch.get_default_dtype())


@dataclass
class RBM:
    """Binary RBM with weights ``W`` (D, H), visible bias ``b`` (D,), hidden bias ``c`` (H,)."""

    W: Tensor
    b: Tensor
    c: Tensor

    @classmethod
    def random(
        cls, num_visible: int, num_hidden: int, scale: float = 1.0, seed: int = 0,
        dtype: torch.dtype | None = None,
    ) -> RBM:
        """Weights and biases drawn from N(0, scale^2) under a fixed seed."""
        g = torch.Generator().manual_seed(seed)
        dtype = dtype or torch.get_default_dtype()
        W = scale * torch.randn(num_visible, num_hidden, generator=g, dtype=dtype)
        b = scale * torch.randn(num_visible, generator=g, dtype=dtype)
        c = scale * torch.randn(num_hidden, generator=g, dtype=dtype)
        return cls(W=W, b=b, c=c)

    @property
    def num_visible(self) -> int:
        return self.W.shape[0]

    @property
    def num_hidden(self) -> int:
        return self.W.shape[1]

    # ---- conditionals and the block-Gibbs chain -------------------------------------------
    def hidden_probs(self, v: Tensor) -> Tensor:
        r""":math:`P(h_j = 1 \mid v)`, shape ``(..., H)``."""
        return torch.sigmoid(self.c + v @ self.W)

    def visible_logits(self, h: Tensor) -> Tensor:
        r"""Logits of :math:`P(v_i = 1 \mid h)`, shape ``(..., D)``."""
        return self.b + h @ self.W.T

    def sample_hidden(self, v: Tensor, generator: torch.Generator | None = None) -> Tensor:
        r"""Draw :math:`h \sim P(h \mid v)`."""
        return torch.bernoulli(self.hidden_probs(v), generator=generator)

    def sample_visible(self, h: Tensor, generator: torch.Generator | None = None) -> Tensor:
        r"""Draw :math:`v \sim P(v \mid h)`."""
        return torch.bernoulli(torch.sigmoid(self.visible_logits(h)), generator=generator)

    def gibbs(
        self, v: Tensor, num_steps: int = 1, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """Run ``num_steps`` block-Gibbs sweeps h ~ P(h|v), v ~ P(v|h); return the last (v, h)."""
        h = self.sample_hidden(v, generator)
        v = self.sample_visible(h, generator)
        for _ in range(num_steps - 1):
            h = self.sample_hidden(v, generator)
            v = self.sample_visible(h, generator)
        return v, h

    def log_obs(self, v: Tensor, h: Tensor) -> Tensor:
        r""":math:`\log P(v \mid h)` for every pair, shape ``(S, N)``.

        ``v`` is ``(N, D)``; ``h`` is ``(S, H)`` (every sample against every example, the form CSL
        uses) or ``(S, N, H)`` (sample ``s`` of example ``n`` against example ``n`` only).
        :math:`\log P(v \mid h) = v^\top a - \sum_i \operatorname{softplus}(a_i)` with
        :math:`a = b + W h`.
        """
        a = self.visible_logits(h)  # (S, D) or (S, N, D)
        if h.dim() == 2:
            # v.a = b.v + h.(W^T v): an (S, H) x (H, N) product instead of (S, D) x (D, N)
            cross = h @ (v @ self.W).T  # (S, N)
            return (v @ self.b).unsqueeze(0) + cross - F.softplus(a).sum(-1, keepdim=True)
        if h.dim() == 3:
            return (v * a - F.softplus(a)).sum(-1)
        raise ValueError(f"h must have shape (S, H) or (S, N, H); got {tuple(h.shape)}")

    # ---- exact quantities by enumeration --------------------------------------------------
    def log_unnormalized(self, v: Tensor) -> Tensor:
        r""":math:`\log P^*(v) = b^\top v + \sum_j \operatorname{softplus}(c_j + v^\top W_{:j})`."""
        return v @ self.b + F.softplus(self.c + v @ self.W).sum(-1)

    def log_unnormalized_hidden(self, h: Tensor) -> Tensor:
        r""":math:`\log P^*(h) = c^\top h + \sum_i \operatorname{softplus}(b_i + W_{i:} h)`."""
        return h @ self.c + F.softplus(self.visible_logits(h)).sum(-1)

    def hidden_log_probs(self, chunk_size: int = 4096) -> tuple[Tensor, Tensor]:
        """The exact marginal over hidden states: ``(states (2**H, H), log P(h) (2**H,))``."""
        states = binary_states(self.num_hidden, dtype=self.W.dtype)
        log_p = torch.cat([self.log_unnormalized_hidden(s) for s in states.split(chunk_size)])
        return states, log_p - torch.logsumexp(log_p, 0)

    def log_partition(self, chunk_size: int = 4096) -> Tensor:
        r"""Exact :math:`\log Z` by enumerating the :math:`2^H` hidden states, in chunks."""
        states = binary_states(self.num_hidden, dtype=self.W.dtype)
        return torch.logsumexp(
            torch.cat([self.log_unnormalized_hidden(s) for s in states.split(chunk_size)]), 0
        )

    def log_partition_visible(self) -> Tensor:
        r"""Exact :math:`\log Z` by enumerating the :math:`2^D` visible states (tiny D only)."""
        states = binary_states(self.num_visible, dtype=self.W.dtype)
        return torch.logsumexp(self.log_unnormalized(states), 0)

    def log_prob(self, v: Tensor, log_partition: Tensor | None = None) -> Tensor:
        r"""Exact :math:`\log P(v)` per row of ``v`` (N, D) -> (N,)."""
        if log_partition is None:
            log_partition = self.log_partition()
        return self.log_unnormalized(v) - log_partition

    def sample_hidden_exact(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> Tensor:
        r"""I.i.d. draws from the exact marginal :math:`P(h)` by enumeration, ``(S, H)``."""
        states, log_p = self.hidden_log_probs()
        idx = torch.multinomial(log_p.exp(), num_samples, replacement=True, generator=generator)
        return states[idx]

    # ---- training -------------------------------------------------------------------------
    @classmethod
    def fit(
        cls,
        data: Tensor,
        num_hidden: int,
        *,
        k: int = 1,
        persistent: bool = True,
        epochs: int = 10,
        lr: float = 0.05,
        batch_size: int = 100,
        weight_decay: float = 0.0,
        seed: int = 0,
    ) -> RBM:
        r"""Train on binary ``data`` (N, D) with CD-k, or PCD-k when ``persistent``.

        The gradient of the average log-likelihood is
        :math:`\mathbb E_{\text{data}}[v h^\top] - \mathbb E_{\text{model}}[v h^\top]` (likewise
        for the biases); the positive phase uses :math:`P(h \mid v)` exactly, the negative phase the
        state of ``k`` Gibbs sweeps started at the data (CD) or at persistent fantasy particles
        (PCD).
        """
        if data.dim() != 2:
            raise ValueError(f"data must be (N, D); got shape {tuple(data.shape)}")
        if not bool(((data == 0) | (data == 1)).all()):
            raise ValueError("RBM.fit needs binary data in {0, 1}; threshold it first (x > 0.5)")
        g = torch.Generator().manual_seed(seed)
        n, d = data.shape
        dtype = data.dtype
        mean = data.mean(0).clamp(1e-3, 1 - 1e-3)
        rbm = cls(
            W=0.01 * torch.randn(d, num_hidden, generator=g, dtype=dtype),
            b=torch.log(mean / (1 - mean)),
            c=torch.zeros(num_hidden, dtype=dtype),
        )
        fantasy = data[torch.randint(n, (batch_size,), generator=g)]
        for _ in range(epochs):
            perm = torch.randperm(n, generator=g)
            for idx in perm.split(batch_size):
                v0 = data[idx]
                ph0 = rbm.hidden_probs(v0)
                start = fantasy[: len(idx)] if persistent else v0
                vk, _ = rbm.gibbs(start, k, g)
                if persistent:
                    fantasy = torch.cat([vk, fantasy[len(idx):]])
                phk = rbm.hidden_probs(vk)
                m = len(idx)
                dW = (v0.T @ ph0 - vk.T @ phk) / m - weight_decay * rbm.W
                rbm = cls(
                    W=rbm.W + lr * dW,
                    b=rbm.b + lr * (v0 - vk).mean(0),
                    c=rbm.c + lr * (ph0 - phk).mean(0),
                )
        return rbm
