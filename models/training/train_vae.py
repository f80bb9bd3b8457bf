r"""Train a VAE or IWAE by SVI: the ELBO (Trace_ELBO) or the IWAE bound (RenyiELBO, alpha=0).

.. math::
    \mathcal L_1 = \mathbb E_{q}\big[\log p(x, z) - \log q(z \mid x)\big], \qquad
    \mathcal L_k = \mathbb E\Big[\log \frac1k \sum_{i=1}^k \frac{p(x, z_i)}{q(z_i \mid x)}\Big],
    \quad z_i \sim q(z \mid x),

both lower bounds on :math:`\log p(x)` per example, with :math:`\mathcal L_1 \le \mathcal L_k \le
\log p(x)` (Kingma & Welling 2014; Burda, Grosse & Salakhutdinov 2016). Pyro's ``RenyiELBO`` with
``alpha=0`` is :math:`\mathcal L_k`: its log-mean-exp over particles is taken per example, because
every site lies in the ``"data"`` plate. Wu et al. (2017) trained their VAEs with Adam (learning
rate from a grid of 1e-3, 1e-4, 1e-5) and their binarized-MNIST IWAE with k = 50 after Burda et al.
(Adam, beta2 = 0.999, eps = 1e-4, batch 20, learning rate decayed by 10^(-1/7) over stages of 3^i
epochs, 3280 epochs in all); ``lr_decay`` gives an exponential approximation of that schedule.
"""

from __future__ import annotations

from typing import Any

import pyro
import pyro.optim
import torch
from pyro.infer import SVI, RenyiELBO, Trace_ELBO
from torch import Tensor

from ..zoo.iwae import IWAE
from ..zoo.vae import VAE
from .common import (
    Timer,
    TrainHistory,
    _positive_int,
    check_training_args,
    epochs,
    minibatches,
    training_mode,
)

__all__ = ["train_vae", "make_elbo"]


def make_elbo(objective: str = "elbo", num_particles: int = 1) -> Trace_ELBO | RenyiELBO:
    """``Trace_ELBO`` for ``"elbo"``; ``RenyiELBO(alpha=0)`` with k particles for ``"iwae"``."""
    _positive_int(num_particles, "num_particles")
    if objective == "elbo":
        return Trace_ELBO(num_particles=num_particles, vectorize_particles=num_particles > 1,
                          max_plate_nesting=1)
    if objective == "iwae":
        return RenyiELBO(alpha=0.0, num_particles=num_particles,
                         vectorize_particles=num_particles > 1, max_plate_nesting=1)
    raise ValueError(f"objective must be 'elbo' or 'iwae', got {objective!r}")


def train_vae(
    model: VAE | IWAE,
    data: Tensor,
    *,
    num_epochs: int = 10,
    batch_size: int = 100,
    lr: float = 1e-3,
    objective: str = "elbo",
    num_particles: int = 1,
    sigma: float | None = None,
    lr_decay: float = 1.0,
    adam_eps: float = 1e-8,
    valid: Tensor | None = None,
    seed: int | None = None,
    progress: bool = False,
) -> TrainHistory:
    """Fit a :class:`~models.zoo.vae.VAE` or :class:`~models.zoo.iwae.IWAE` in place by SVI with Adam.

    Parameters
    ----------
    model : VAE or IWAE
        Trained in place; returned to ``eval()`` mode.
    data : torch.Tensor, shape (N, data_dim)
        Training data (values in [0, 1] for a VAE, in {0, 1} for an IWAE).
    num_epochs, batch_size : int
        Passes over the data and examples per step.
    lr : float
        Adam learning rate.
    objective : {"elbo", "iwae"}
        ``Trace_ELBO`` or the IWAE bound (``RenyiELBO(alpha=0)``).
    num_particles : int
        Samples per example (k of the IWAE bound; 50 in the paper).
    sigma : float or None
        Observation noise used in training (VAE only; default ``model.sigma``).
    lr_decay : float
        Learning rate multiplier applied after every epoch.
    adam_eps : float
        Adam's epsilon (Burda et al. used 1e-4).
    valid : torch.Tensor or None
        Validation data: its loss is recorded after every epoch.
    seed : int or None
        Makes the run reproducible; the caller's RNG state is left untouched.
    progress : bool
        Show a progress bar.

    Returns
    -------
    TrainHistory
        ``losses``: mean negative bound per example (nats) over each epoch; ``valid_losses`` the
        same on ``valid``, computed with the model in ``eval()`` mode.
    """
    data = check_training_args(model, data, (VAE, IWAE), num_epochs=num_epochs,
                               batch_size=batch_size, lr=lr)
    if valid is not None:
        valid = check_training_args(model, valid, (VAE, IWAE), num_epochs=num_epochs,
                                    batch_size=batch_size, lr=lr)
    if not 0 < lr_decay <= 1:
        raise ValueError(f"lr_decay must lie in (0, 1], got {lr_decay!r}")
    kwargs: dict[str, Any] = {}
    if isinstance(model, VAE):
        kwargs["sigma"] = model.sigma if sigma is None else sigma
    elif sigma is not None:
        raise ValueError("sigma applies to Gaussian-observation models only; an IWAE is Bernoulli")
    elbo = make_elbo(objective, num_particles)
    data = data.to(model.param_dtype)
    valid = None if valid is None else valid.to(model.param_dtype)
    timer = Timer()
    losses: list[float] = []
    valid_losses: list[float] = []
    num_steps = 0
    # A private parameter store: training never reads or clobbers the caller's Pyro params.
    with pyro.get_param_store().scope(), training_mode(model, seed) as generator:
        optim = pyro.optim.PyroLRScheduler(torch.optim.lr_scheduler.ExponentialLR, {
            "optimizer": torch.optim.Adam, "optim_args": {"lr": lr, "eps": adam_eps},
            "gamma": lr_decay})  # what pyro.optim.ExponentialLR builds
        svi = SVI(model.model, model.guide, optim, elbo)
        for _ in epochs(num_epochs, progress, f"{model.kind} ({objective})"):
            total = 0.0
            for batch in minibatches(data, batch_size, generator):
                total += svi.step(batch, **kwargs)
                num_steps += 1
            optim.step()
            losses.append(total / data.shape[0])
            if valid is not None:
                model.eval()
                with torch.no_grad():
                    v = sum(svi.evaluate_loss(b, **kwargs) for b in valid.split(batch_size))
                valid_losses.append(v / valid.shape[0])
                model.train()
    return TrainHistory(objective, losses, valid_losses, {}, num_steps, timer())
