r"""The binarized-MNIST IWAE of Wu et al. (2017), appendix A.2, after Burda et al. (2016).

.. math::
    z \sim \mathcal N(0, I_{50}), \quad
    x_i \mid z \sim \mathrm{Bernoulli}(\mathrm{sigmoid}(g_\theta(z)_i)), \quad
    q_\phi(z \mid x) = \mathcal N(\mu_\phi(x), \operatorname{diag}\sigma_\phi(x)^2).

Decoder 50-200-200-784 with tanh hidden units whose last layer gives the Bernoulli logits; encoder
symmetric, 784-200-200-100, linear output. The same program is a Bernoulli VAE: whether it is an
"IWAE" depends only on the training objective (:func:`models.training.train_vae.train_vae` with
``objective="iwae"``, k = 50 in the paper).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from .base import BernoulliDecoderModel
from .encoder import EncoderMixin

__all__ = ["IWAE"]


class IWAE(EncoderMixin, BernoulliDecoderModel):
    """Bernoulli VAE; ``iwae(x)`` is the model over binary ``x``, ``iwae.guide`` the encoder.

    Parameters
    ----------
    sizes : sequence of int
        Decoder widths, latent first, pixels last (``(50, 200, 200, 784)`` in the paper).
    activation : str
        Decoder hidden nonlinearity.
    encoder_hidden : sequence of int or None
        Encoder hidden widths; ``None`` mirrors the decoder.
    encoder_activation : str
        Encoder hidden nonlinearity.
    encoder_dropout : float
        Dropout between encoder hidden layers (only in ``train()`` mode).
    """

    kind = "iwae"

    def __init__(self, sizes: Sequence[int], activation: str = "tanh",
                 encoder_hidden: Sequence[int] | None = None, encoder_activation: str = "tanh",
                 encoder_dropout: float = 0.0) -> None:
        super().__init__(sizes, activation)
        self._build_encoder(encoder_hidden, encoder_activation, encoder_dropout)

    def config(self) -> dict[str, Any]:
        return {**super().config(), **self._encoder_config()}

    def guide(self, x: Tensor) -> None:
        """The encoder as a Pyro guide (same signature as the model)."""
        self._guide(x)
