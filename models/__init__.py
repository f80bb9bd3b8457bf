"""Example decoder-based models as plain Pyro programs (installed as ``pyrolik_models``).

No module here imports pyrolik: these are what a user would write. Analytic models also export
``exact_log_marginal(x)`` and ``exact_posterior(x)`` so that estimators can be checked against them.

The decoder-based models of Wu et al. (2017) are ``torch.nn.Module`` s whose call is the Pyro model
(``vae(x, sigma=0.05)``), with ``.guide`` for those that have an encoder::

    from pyrolik_models import build, load   # "models" in a source checkout
    gan = build("gan-50")            # untrained GAN-50 (784 pixels)
    vae = load("vae")                # the pretrained scikit-learn-digits VAE (64 pixels)
"""

from .base import BernoulliDecoderModel, DecoderModel, GaussianDecoderModel
from .gan import GAN
from .gmmn import GMMN
from .iwae import IWAE
from .linear_gaussian import LinearGaussian
from .mmd import mmd2
from .serialization import load, save, shipped_checkpoint
from .sigma import SigmaChoice, choose_sigma
from .train_gan import train_gan
from .train_gmmn import train_gmmn
from .train_vae import make_elbo, train_vae
from .training import TrainHistory
from .vae import VAE
from .zoo import KINDS, PRESETS, build

__all__ = [
    "BernoulliDecoderModel",
    "DecoderModel",
    "GAN",
    "GMMN",
    "GaussianDecoderModel",
    "IWAE",
    "KINDS",
    "LinearGaussian",
    "PRESETS",
    "SigmaChoice",
    "TrainHistory",
    "VAE",
    "build",
    "choose_sigma",
    "load",
    "make_elbo",
    "mmd2",
    "save",
    "shipped_checkpoint",
    "train_gan",
    "train_gmmn",
    "train_vae",
]
