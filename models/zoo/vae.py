r"""VAE-10 / VAE-50 of Wu et al. (2017): tanh decoder, fixed-sigma Gaussian observation site.

.. math::
    z \sim \mathcal N(0, I_d), \quad x \mid z \sim \mathcal N(g_\theta(z), \sigma^2 I), \quad
    q_\phi(z \mid x) = \mathcal N(\mu_\phi(x), \operatorname{diag}\sigma_\phi(x)^2).

Decoders 10-64-256-256-1024-784 and 50-1024-1024-1024-784 (tanh hidden, sigmoid output); encoders
784-256-64-20 and 784-1024-1024-1024-100 (tanh hidden, linear output, dropout 0.2 between the larger
encoder's hidden layers), appendix A.1. Trained by maximising the ELBO (eq. 1), see
:func:`models.training.train_vae.train_vae`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from .base import GaussianDecoderModel
from .encoder import EncoderMixin

__all__ = ["VAE"]


class VAE(EncoderMixin, GaussianDecoderModel):
    """Gaussian-observation VAE; ``vae(x, sigma=...)`` is the model, ``vae.guide`` the encoder.

    Parameters
    ----------
    sizes : sequence of int
        Decoder widths, latent first, pixels last (e.g. ``(10, 64, 256, 256, 1024, 784)``).
    activation : str
        Decoder hidden nonlinearity (``"tanh"`` in the paper).
    sigma : float
        Default observation-noise standard deviation.
    encoder_hidden : sequence of int or None
        Encoder hidden widths; ``None`` mirrors the decoder.
    encoder_activation : str
        Encoder hidden nonlinearity.
    encoder_dropout : float
        Dropout between encoder hidden layers (only in ``train()`` mode).
    """

    kind = "vae"

    def __init__(self, sizes: Sequence[int], activation: str = "tanh", sigma: float = 0.05,
                 encoder_hidden: Sequence[int] | None = None, encoder_activation: str = "tanh",
                 encoder_dropout: float = 0.0) -> None:
        super().__init__(sizes, activation, sigma)
        self._build_encoder(encoder_hidden, encoder_activation, encoder_dropout)

    def config(self) -> dict[str, Any]:
        return {**super().config(), **self._encoder_config()}

    def guide(self, x: Tensor, sigma: float | Tensor | None = None) -> None:
        """The encoder as a Pyro guide (same signature as the model; ``sigma`` is unused)."""
        self._guide(x)
