"""Example decoder-based models as plain Pyro programs (installed as ``pyrolik_models``).

No module here imports pyrolik: these are what a user would write. Analytic models also export
``exact_log_marginal(x)`` and ``exact_posterior(x)`` so that estimators can be checked against them.

The decoder-based models of Wu et al. (2017) are ``torch.nn.Module`` s whose call is the Pyro model
(``vae(x, sigma=0.05)``), with ``.guide`` for those that have an encoder::

    from models import build, load
    gan = build("gan-50")            # untrained GAN-50 (784 pixels)
    vae = load("vae")                # the pretrained scikit-learn-digits VAE (64 pixels)
"""

from models.base import BernoulliDecoderModel, DecoderModel, GaussianDecoderModel
from models.gan import GAN
from models.gmmn import GMMN
from models.iwae import IWAE
from models.linear_gaussian import LinearGaussian
from models.mmd import mmd2
from models.serialization import load, save, shipped_checkpoint
from models.sigma import SigmaChoice, choose_sigma
from models.train_gan import train_gan
from models.train_gmmn import train_gmmn
from models.train_vae import train_vae
from models.training import TrainHistory
from models.vae import VAE
from models.zoo import KINDS, PRESETS, build

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
    "mmd2",
    "save",
    "shipped_checkpoint",
    "train_gan",
    "train_gmmn",
    "train_vae",
]
