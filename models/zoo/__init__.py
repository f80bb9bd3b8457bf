"""The model zoo: the decoder-based models of Wu et al. (2017) as Pyro programs, and their files.

``VAE``, ``GAN``, ``GMMN`` and ``IWAE`` are ``torch.nn.Module`` s whose call is the Pyro model
(``vae(x, sigma=0.05)``), with ``.guide`` for those with an encoder (:mod:`.encoder`); they share
the decoder builders of :mod:`.decoders` and the base classes of :mod:`.base`. :mod:`.presets` names
the paper's sizes (``build("gan-50")``); :mod:`.serialization` saves and loads checkpoints
(``load("vae")`` reads a shipped one).
"""

from .base import BernoulliDecoderModel, DecoderModel, GaussianDecoderModel
from .gan import GAN
from .gmmn import GMMN
from .iwae import IWAE
from .presets import KINDS, PRESETS, build
from .serialization import load, save, shipped_checkpoint
from .vae import VAE

__all__ = ["BernoulliDecoderModel", "DecoderModel", "GAN", "GMMN", "GaussianDecoderModel", "IWAE",
           "KINDS", "PRESETS", "VAE", "build", "load", "save", "shipped_checkpoint"]
