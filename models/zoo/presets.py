"""Named architectures: the six continuous-MNIST models and the IWAE of Wu et al. (2017), plus the
small versions trained on scikit-learn's 8x8 digits.

``build("gan-50")`` returns an untrained model; keyword arguments override the preset (for example
``build("vae-10", sizes=(10, 64, 256, 256, 1024, 64))`` for other data).
"""

from __future__ import annotations

from typing import Any

from .base import DecoderModel
from .decoders import PAPER_SIZES
from .gan import GAN
from .gmmn import GMMN
from .iwae import IWAE
from .vae import VAE

__all__ = ["KINDS", "PRESETS", "DIGITS_SIZES", "DIGITS_BERNOULLI_SIZES", "build"]

#: Model classes by the ``kind`` a checkpoint records.
KINDS: dict[str, type[DecoderModel]] = {"vae": VAE, "gan": GAN, "gmmn": GMMN, "iwae": IWAE}

#: The shared small decoder of the digits models (latent 8, 64 pixels).
DIGITS_SIZES: tuple[int, ...] = (8, 64, 128, 64)
#: The Bernoulli digits model, a scaled-down 50-200-200-784.
DIGITS_BERNOULLI_SIZES: tuple[int, ...] = (8, 100, 100, 64)

#: name -> (kind, constructor keyword arguments).
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    # Wu et al. (2017), appendix A.1 (continuous MNIST, 784 pixels)
    "vae-10": ("vae", {"sizes": PAPER_SIZES["10"], "encoder_hidden": (256, 64)}),
    "vae-50": ("vae", {"sizes": PAPER_SIZES["50"], "encoder_hidden": (1024, 1024, 1024),
                       "encoder_dropout": 0.2}),
    "gan-10": ("gan", {"sizes": PAPER_SIZES["10"], "discriminator_hidden": (512, 256),
                       "discriminator_dropout": 0.5}),
    "gan-50": ("gan", {"sizes": PAPER_SIZES["50"], "discriminator_hidden": (4096,) * 4,
                       "discriminator_dropout": 0.2}),
    "gmmn-10": ("gmmn", {"sizes": PAPER_SIZES["10"]}),
    "gmmn-50": ("gmmn", {"sizes": PAPER_SIZES["50"]}),
    # appendix A.2 (binarized MNIST), after Burda et al. (2016)
    "iwae": ("iwae", {"sizes": PAPER_SIZES["iwae"], "encoder_hidden": (200, 200)}),
    # scikit-learn digits (64 pixels): the shipped checkpoints, models/train_digits.py
    "digits-vae": ("vae", {"sizes": DIGITS_SIZES, "encoder_hidden": (128, 64), "sigma": 0.1}),
    "digits-gan": ("gan", {"sizes": DIGITS_SIZES, "discriminator_hidden": (128, 64),
                           "discriminator_dropout": 0.0, "sigma": 0.1}),
    "digits-gmmn": ("gmmn", {"sizes": DIGITS_SIZES, "sigma": 0.1}),
    "digits-iwae": ("iwae", {"sizes": DIGITS_BERNOULLI_SIZES, "encoder_hidden": (100, 100)}),
}


def build(name: str, **overrides: Any) -> DecoderModel:
    """An untrained model by preset name (see :data:`PRESETS`), in ``eval()`` mode.

    Parameters
    ----------
    name : str
        One of ``vae-10, vae-50, gan-10, gan-50, gmmn-10, gmmn-50, iwae`` and the ``digits-*``
        versions.
    **overrides
        Constructor arguments that replace the preset's.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(PRESETS)}")
    kind, kwargs = PRESETS[name]
    return KINDS[kind](**{**kwargs, **overrides}).eval()
