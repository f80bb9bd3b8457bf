"""Trainers for the zoo: the ELBO and IWAE objectives, GANs, GMMNs (MMD), and the noise ``sigma``.

:mod:`.common` holds what every trainer shares (checks, seeded context, mini-batches, history);
:mod:`.train_digits` and :mod:`.train_mnist` are the scripts that made the shipped checkpoints and
the MNIST models (``python -m pyrolik_models.training.train_digits``; the old spelling
``python -m pyrolik_models.train_digits`` still works). The trainers import no pyrolik; the two
scripts do (data sets, and the estimators that choose sigma).
"""

from .common import TrainHistory
from .mmd import mmd2
from .sigma import SigmaChoice, choose_sigma
from .train_gan import train_gan
from .train_gmmn import train_gmmn
from .train_vae import make_elbo, train_vae

__all__ = ["SigmaChoice", "TrainHistory", "choose_sigma", "make_elbo", "mmd2", "train_gan",
           "train_gmmn", "train_vae"]
