r"""GAN-10 / GAN-50 of Wu et al. (2017): a deterministic generator made a density by a noise site.

.. math:: z \sim \mathcal N(0, I_d), \qquad x \mid z \sim \mathcal N(G_\theta(z), \sigma^2 I).

A GAN's generator defines no density (a Dirac at :math:`G(z)`); the Gaussian observation model of
fixed :math:`\sigma` (chosen on validation data) makes the log-likelihood defined (section 5.2).
The generator has tanh hidden units and a sigmoid output. The discriminator, kept on the instance
only for training, is 784-512-256-1 with dropout 0.5 for GAN-10 and 784-4096-4096-4096-4096-1 for
GAN-50, tanh hidden units and a logistic output (appendix A.1). The paper's "dropout with parameter
0.8" for GAN-50 is read as a *keep* probability of 0.8 (pylearn2's convention), i.e. ``p=0.2``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from .base import GaussianDecoderModel
from .decoders import check_sizes, mlp

__all__ = ["GAN"]


class GAN(GaussianDecoderModel):
    """A GAN generator with a Gaussian observation site; ``gan(x, sigma=...)`` is the Pyro model.

    Parameters
    ----------
    sizes : sequence of int
        Generator widths, latent first, pixels last.
    activation : str
        Generator hidden nonlinearity.
    sigma : float
        Default observation-noise standard deviation.
    discriminator_hidden : sequence of int or None
        Discriminator hidden widths; ``None`` builds no discriminator (evaluation only).
    discriminator_activation : str
        Discriminator hidden nonlinearity.
    discriminator_dropout : float
        Dropout after each discriminator hidden layer.
    """

    kind = "gan"

    def __init__(self, sizes: Sequence[int], activation: str = "tanh", sigma: float = 0.05,
                 discriminator_hidden: Sequence[int] | None = (512, 256),
                 discriminator_activation: str = "tanh",
                 discriminator_dropout: float = 0.5) -> None:
        super().__init__(sizes, activation, sigma)
        self.discriminator_activation = discriminator_activation
        self.discriminator_dropout = float(discriminator_dropout)
        self.discriminator: nn.Sequential | None = None
        if discriminator_hidden is not None:
            hidden = check_sizes((1, *discriminator_hidden, 1), "discriminator_hidden")[1:-1]
            self.discriminator = mlp((self.data_dim, *hidden, 1), discriminator_activation,
                                     None, discriminator_dropout)

    @property
    def discriminator_hidden(self) -> tuple[int, ...] | None:
        """Hidden widths of the discriminator, or ``None`` when it has been dropped."""
        if self.discriminator is None:
            return None
        return tuple(m.out_features for m in self.discriminator if isinstance(m, nn.Linear))[:-1]

    def drop_discriminator(self) -> GAN:
        """Remove the discriminator (smaller checkpoints; the Pyro model does not use it)."""
        self.discriminator = None
        return self

    def discriminate(self, x: Tensor) -> Tensor:
        r"""Discriminator logits :math:`\operatorname{logit} D(x)`, shape ``(N,)``."""
        if self.discriminator is None:
            raise ValueError("this GAN has no discriminator (it was dropped or never built); "
                             "build one with discriminator_hidden=... to train")
        dtype = next(self.discriminator.parameters()).dtype
        return self.discriminator(x.reshape(x.shape[0], -1).to(dtype)).squeeze(-1)

    def config(self) -> dict[str, Any]:
        hidden = self.discriminator_hidden
        return {**super().config(),
                "discriminator_hidden": None if hidden is None else list(hidden),
                "discriminator_activation": self.discriminator_activation,
                "discriminator_dropout": self.discriminator_dropout}
