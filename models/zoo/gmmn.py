r"""GMMN-10 / GMMN-50 of Wu et al. (2017): a ReLU generator trained by MMD, with a noise site.

.. math:: z \sim \mathcal N(0, I_d), \qquad x \mid z \sim \mathcal N(G_\theta(z), \sigma^2 I).

As for GANs, the generator is deterministic and the fixed-sigma Gaussian observation site makes the
likelihood defined. Hidden layers use ReLU and the output a sigmoid (appendix A.1). Training by
maximum mean discrepancy with a mixture of RBF kernels (Li et al. 2015; Dziugaite et al. 2015) is in
:func:`models.training.train_gmmn.train_gmmn`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import GaussianDecoderModel

__all__ = ["GMMN"]


class GMMN(GaussianDecoderModel):
    """A GMMN generator with a Gaussian observation site; ``gmmn(x, sigma=...)`` is the Pyro model.

    Parameters
    ----------
    sizes : sequence of int
        Generator widths, latent first, pixels last.
    activation : str
        Hidden nonlinearity (``"relu"`` in the paper).
    sigma : float
        Default observation-noise standard deviation.
    """

    kind = "gmmn"

    def __init__(self, sizes: Sequence[int], activation: str = "relu",
                 sigma: float = 0.05) -> None:
        super().__init__(sizes, activation, sigma)
