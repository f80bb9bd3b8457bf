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

import sys as _sys
from types import ModuleType as _ModuleType

from . import oracles, training, zoo  # noqa: F401 (the subpackages)
from .oracles import linear_gaussian, quadrature, rbm
from .oracles.linear_gaussian import LinearGaussian
from .training import (
    SigmaChoice,
    TrainHistory,
    choose_sigma,
    make_elbo,
    mmd,
    mmd2,
    sigma,
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
    base,
    build,
    decoders,
    encoder,
    load,
    save,
    serialization,
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

# Module paths from before the subpackages (``models.oracles.linear_gaussian``, ``models.oracles.rbm``,
# ``models.zoo.serialization``, ...) keep working: each old name is the module at its new place. (The
# ``train_digits`` and ``train_mnist`` scripts keep small files of their own, for ``python -m``.)
_MOVED: dict[str, _ModuleType] = {
    "base": base, "decoders": decoders, "encoder": encoder, "serialization": serialization,
    "vae": zoo.vae, "gan": zoo.gan, "gmmn": zoo.gmmn, "iwae": zoo.iwae,
    "mmd": mmd, "sigma": sigma,
    # ``training.train_vae`` is the function (re-exported over its module): take the modules
    **{name: _sys.modules[f"{training.__name__}.{name}"]
       for name in ("train_vae", "train_gan", "train_gmmn")},
    "linear_gaussian": linear_gaussian, "quadrature": quadrature, "rbm": rbm,
}
for _old, _module in _MOVED.items():
    _sys.modules.setdefault(f"{__name__}.{_old}", _module)
    globals().setdefault(_old, _module)
del _old, _module
