r"""Train a GAN generator and its discriminator on the minimax objective (Wu et al. 2017, eq. 2).

.. math::
    \min_G \max_D\; V(D, G) = \mathbb E_{x \sim p_{\rm data}}[\log D(x)]
    + \mathbb E_{z \sim p(z)}[\log(1 - D(G(z)))].

The discriminator takes one Adam step up :math:`V` per batch; the generator then takes one step
down. By default the generator uses the usual *non-saturating* loss :math:`-\mathbb E \log D(G(z))`
(Goodfellow et al. 2014, section 3), which has the same fixed points as :math:`V` but does not
vanish when the discriminator wins early; ``generator_loss="minimax"`` descends :math:`V` itself.
Neither involves the observation noise: sigma is chosen afterwards, on validation data.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..zoo.gan import GAN
from .common import (
    Timer,
    TrainHistory,
    _positive_int,
    check_training_args,
    epochs,
    minibatches,
    training_mode,
)

__all__ = ["train_gan"]

bce = F.binary_cross_entropy_with_logits


def train_gan(
    model: GAN,
    data: Tensor,
    *,
    num_epochs: int = 10,
    batch_size: int = 100,
    lr: float = 2e-4,
    discriminator_lr: float | None = None,
    betas: tuple[float, float] = (0.5, 0.999),
    generator_loss: str = "non_saturating",
    discriminator_steps: int = 1,
    seed: int | None = None,
    progress: bool = False,
) -> TrainHistory:
    r"""Fit a :class:`~models.zoo.gan.GAN` in place by alternating Adam steps.

    Parameters
    ----------
    model : GAN
        Must have a discriminator; trained in place and returned in ``eval()`` mode.
    data : torch.Tensor, shape (N, data_dim)
        Training data in [0, 1].
    num_epochs, batch_size : int
        Passes over the data and real examples per step (as many fakes are drawn).
    lr, discriminator_lr : float
        Adam learning rates of the generator and of the discriminator (default: ``lr``).
    betas : tuple of float
        Adam's betas.
    generator_loss : {"non_saturating", "minimax"}
        ``-E log D(G(z))`` or ``E log(1 - D(G(z)))``.
    discriminator_steps : int
        Discriminator steps per generator step.
    seed : int or None
        Makes the run reproducible; the caller's RNG state is left untouched.
    progress : bool
        Show a progress bar.

    Returns
    -------
    TrainHistory
        ``losses``: the discriminator loss :math:`-V(D, G)` averaged over each epoch (nats;
        :math:`2 \log 2 \approx 1.386` at the game's equilibrium); ``extra["generator"]`` the
        generator loss; ``extra["real_accuracy"]`` / ``extra["fake_accuracy"]`` the fraction of
        real / fake batch examples the discriminator classifies correctly.
    """
    data = check_training_args(model, data, (GAN,), num_epochs=num_epochs,
                               batch_size=batch_size, lr=lr)
    if model.discriminator is None:
        raise ValueError("this GAN has no discriminator; build it with discriminator_hidden=...")
    if generator_loss not in ("non_saturating", "minimax"):
        raise ValueError(f"generator_loss must be 'non_saturating' or 'minimax', "
                         f"got {generator_loss!r}")
    _positive_int(discriminator_steps, "discriminator_steps")
    data = data.to(model.param_dtype)
    timer = Timer()
    opt_g = torch.optim.Adam(model.decoder.parameters(), lr=lr, betas=betas)
    opt_d = torch.optim.Adam(model.discriminator.parameters(), lr=discriminator_lr or lr,
                             betas=betas)
    history: dict[str, list[float]] = {"generator": [], "real_accuracy": [], "fake_accuracy": []}
    losses: list[float] = []
    num_steps = 0
    with training_mode(model, seed) as generator:
        for _ in epochs(num_epochs, progress, "gan"):
            sums = torch.zeros(5, dtype=torch.float64)
            for real in minibatches(data, batch_size, generator):
                n = real.shape[0]
                for _ in range(discriminator_steps):
                    with torch.no_grad():
                        fake = model.decode(model.prior_sample(n))
                    logit_real, logit_fake = model.discriminate(real), model.discriminate(fake)
                    # -V(D, G) on this batch: binary cross-entropy, real = 1, fake = 0
                    d_loss = (bce(logit_real, torch.ones_like(logit_real))
                              + bce(logit_fake, torch.zeros_like(logit_fake)))
                    opt_d.zero_grad()
                    d_loss.backward()
                    opt_d.step()
                logit = model.discriminate(model.decode(model.prior_sample(n)))
                if generator_loss == "non_saturating":
                    g_loss = bce(logit, torch.ones_like(logit))
                else:  # descend V: E log(1 - D(G(z))) = -BCE(logit, 0)
                    g_loss = -bce(logit, torch.zeros_like(logit))
                opt_g.zero_grad()
                g_loss.backward()
                opt_g.step()
                num_steps += 1
                sums += torch.tensor([n * d_loss.item(), n * g_loss.item(),
                                      (logit_real > 0).sum().item(),
                                      (logit_fake < 0).sum().item(), n], dtype=torch.float64)
            losses.append(float(sums[0] / sums[4]))
            history["generator"].append(float(sums[1] / sums[4]))
            history["real_accuracy"].append(float(sums[2] / sums[4]))
            history["fake_accuracy"].append(float(sums[3] / sums[4]))
    return TrainHistory("gan-" + generator_loss, losses, [], history, num_steps, timer())
