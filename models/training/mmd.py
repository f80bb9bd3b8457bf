r"""Maximum mean discrepancy with a mixture of RBF kernels, the GMMN training criterion.

.. math::
    k(a, b) = \sum_s \exp\!\Big(-\frac{\lVert a - b \rVert^2}{2 s^2}\Big), \qquad
    \widehat{\mathrm{MMD}}^2(X, Y)
    = \overline{k(X, X)} + \overline{k(Y, Y)} - 2\,\overline{k(X, Y)},

the biased (V-statistic) estimate over all pairs, which is non-negative. Li, Swersky & Zemel (2015)
minimise :math:`\sqrt{\widehat{\mathrm{MMD}}^2}` with bandwidths 2, 5, 10, 20, 40, 80 on 784-pixel
MNIST; :func:`default_bandwidths` scales those by :math:`\sqrt{D / 784}` for other data sizes, which
keeps them in proportion to typical distances between images.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["GMMN_BANDWIDTHS", "default_bandwidths", "rbf_mixture", "mmd2"]

#: The bandwidths of Li et al. (2015) for MNIST in [0, 1]^784.
GMMN_BANDWIDTHS: tuple[float, ...] = (2.0, 5.0, 10.0, 20.0, 40.0, 80.0)


def default_bandwidths(data_dim: int) -> tuple[float, ...]:
    """The MNIST bandwidths scaled by ``sqrt(data_dim / 784)``."""
    scale = math.sqrt(data_dim / 784)
    return tuple(s * scale for s in GMMN_BANDWIDTHS)


def rbf_mixture(a: Tensor, b: Tensor, bandwidths: Sequence[float]) -> Tensor:
    """Kernel matrix ``(len(a), len(b))`` of the RBF mixture between rows of ``a`` and ``b``."""
    sq = (a * a).sum(-1, keepdim=True) + (b * b).sum(-1) - 2.0 * a @ b.T
    sq = sq.clamp_min(0.0)
    s2 = torch.as_tensor(bandwidths, dtype=a.dtype, device=a.device) ** 2
    return torch.exp(-sq.unsqueeze(-1) / (2.0 * s2)).sum(-1)


def mmd2(x: Tensor, y: Tensor, bandwidths: Sequence[float]) -> Tensor:
    """Biased estimate of the squared MMD between the rows of ``x`` and of ``y`` (a scalar >= 0)."""
    if len(bandwidths) == 0 or any(s <= 0 for s in bandwidths):
        raise ValueError(f"bandwidths must be non-empty and positive, got {bandwidths}")
    x, y = x.reshape(x.shape[0], -1), y.reshape(y.shape[0], -1)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must have the same number of values per row, got "
                         f"{x.shape[1]} and {y.shape[1]}")
    return (rbf_mixture(x, x, bandwidths).mean() + rbf_mixture(y, y, bandwidths).mean()
            - 2.0 * rbf_mixture(x, y, bandwidths).mean()).clamp_min(0.0)
