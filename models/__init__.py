"""Example decoder-based models as plain Pyro programs (installed as ``pyrolik_models``).

No model here imports pyrolik: these are what a user would write. Three subpackages:

- :mod:`.zoo`: the models of Wu et al. (2017), VAE, GAN, GMMN and IWAE, their presets and
  checkpoint files; ``checkpoints/`` holds small pretrained digits models;
- :mod:`.training`: their trainers (ELBO/IWAE, GAN, GMMN by MMD), the choice of the noise
  ``sigma``, and the scripts that trained the checkpoints;
- :mod:`.oracles`: models with known answers (linear-Gaussian, 1-D quadrature models, a small RBM)
  against which the estimators are tested.

:mod:`.example` is a short model to copy when writing your own. The decoder-based models are
``torch.nn.Module`` s whose call is the Pyro model (``vae(x, sigma=0.05)``), with ``.guide`` for
those that have an encoder::

    from pyrolik_models import build, load   # "models" in a source checkout
    gan = build("gan-50")            # untrained GAN-50 (784 pixels)
    vae = load("vae")                # the pretrained scikit-learn-digits VAE (64 pixels)
"""


from . import oracles, training, zoo  # noqa: F401 (the subpackages)
from .oracles.linear_gaussian import LinearGaussian
from .training import (
    SigmaChoice,
    TrainHistory,
    choose_sigma,
    make_elbo,
    mmd2,
    train_gan,
    train_gmmn,
    train_vae,
)
from .zoo import (
    GAN,
    GMMN,
    IWAE,
    KINDS,
    PRESETS,
    VAE,
    BernoulliDecoderModel,
    DecoderModel,
    GaussianDecoderModel,
    build,
    load,
    save,
    shipped_checkpoint,
)

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
