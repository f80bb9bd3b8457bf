r"""The Gaussian encoder (recognition network) of a VAE, used as a Pyro guide.

.. math:: q_\phi(z \mid x) = \mathcal N\big(\mu_\phi(x), \operatorname{diag} \sigma_\phi(x)^2\big),

with :math:`(\mu_\phi, \log \sigma_\phi^2)` the two halves of a fully connected network's linear
output (Wu et al. 2017, appendix A.1; Burda et al. 2016 for the binarized-MNIST IWAE). The guide
has the model's signature and samples the same site ``"z"`` in the same plate ``"data"``. The
encoder is registered with ``pyro.module("encoder", ...)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor, nn

from .decoders import check_sizes, mlp

__all__ = ["GaussianEncoder", "EncoderMixin"]


class GaussianEncoder(nn.Module):
    """``x -> (loc, scale)`` of a diagonal Gaussian over ``z``.

    Parameters
    ----------
    data_dim, latent_dim : int
        Input and latent sizes; the network outputs ``2 * latent_dim`` values.
    hidden : sequence of int
        Hidden widths.
    activation : str
        Hidden nonlinearity.
    dropout : float
        Dropout after each hidden layer (active only in ``train()`` mode).
    """

    def __init__(self, data_dim: int, latent_dim: int, hidden: Sequence[int],
                 activation: str = "tanh", dropout: float = 0.0) -> None:
        super().__init__()
        self.net = mlp((data_dim, *hidden, 2 * latent_dim), activation, None, dropout)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        loc, log_var = self.net(x).chunk(2, dim=-1)
        return loc, torch.exp(0.5 * log_var)


class EncoderMixin:
    """Adds ``self.encoder`` and the Pyro guide to a :class:`models.zoo.base.DecoderModel`."""

    encoder: GaussianEncoder

    def _build_encoder(self, hidden: Sequence[int] | None, activation: str,
                       dropout: float) -> None:
        sizes = self.sizes  # type: ignore[attr-defined]
        self.encoder_hidden = (
            tuple(reversed(sizes[1:-1])) if hidden is None
            else check_sizes((1, *hidden, 1), "encoder_hidden")[1:-1]
        )
        self.encoder_activation = activation
        self.encoder_dropout = float(dropout)
        self.encoder = GaussianEncoder(sizes[-1], sizes[0], self.encoder_hidden, activation,
                                       dropout)

    def _encoder_config(self) -> dict:
        return {"encoder_hidden": list(self.encoder_hidden),
                "encoder_activation": self.encoder_activation,
                "encoder_dropout": self.encoder_dropout}

    def encode(self, x: Tensor) -> dist.Normal:
        """The approximate posterior :math:`q(z \\mid x)` as a batched ``Normal`` (event dim 1)."""
        self._check_x(x)  # type: ignore[attr-defined]
        dtype = cast(nn.Linear, self.encoder.net[-1]).weight.dtype  # mlp ends in a Linear
        loc, scale = self.encoder(x.reshape(x.shape[0], -1).to(dtype))
        return dist.Normal(loc.to(x.dtype), scale.to(x.dtype)).to_event(1)

    def _guide(self, x: Tensor) -> None:
        self._check_x(x)  # type: ignore[attr-defined]
        pyro.module("encoder", self.encoder)
        q = self.encode(x)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", q)
