r"""Train a GMMN generator by minimising the maximum mean discrepancy to the data.

.. math::
    \min_\theta \sqrt{\widehat{\mathrm{MMD}}^2\big(\{x_i\}, \{G_\theta(z_j)\}\big)}, \qquad
    z_j \sim \mathcal N(0, I),

with the RBF-mixture kernel of :mod:`models.training.mmd` (Li, Swersky & Zemel 2015; Dziugaite et al.
2015). Wu et al. (2017) used Li's implementation with SGD and momentum 0.9 (learning rate from
0.1, 0.5, 1, 2); ``optimizer="sgd"`` does the same, and ``"adam"`` (the default) converges faster
on small data.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..zoo.gmmn import GMMN
from .common import (
    Timer,
    TrainHistory,
    check_training_args,
    epochs,
    minibatches,
    training_mode,
)
from .mmd import default_bandwidths, mmd2

__all__ = ["train_gmmn"]


def train_gmmn(
    model: GMMN,
    data: Tensor,
    *,
    num_epochs: int = 10,
    batch_size: int = 1000,
    lr: float = 1e-3,
    optimizer: str = "adam",
    momentum: float = 0.9,
    bandwidths: Sequence[float] | None = None,
    seed: int | None = None,
    progress: bool = False,
) -> TrainHistory:
    """Fit a :class:`~models.zoo.gmmn.GMMN` in place.

    Parameters
    ----------
    model : GMMN
        Trained in place and returned in ``eval()`` mode.
    data : torch.Tensor, shape (N, data_dim)
        Training data in [0, 1].
    num_epochs, batch_size : int
        Passes over the data and real examples per step (as many samples are drawn).
    lr : float
        Learning rate.
    optimizer : {"adam", "sgd"}
        Adam, or SGD with ``momentum`` as in the paper.
    bandwidths : sequence of float or None
        RBF bandwidths; default :func:`models.training.mmd.default_bandwidths` for the data size.
    seed : int or None
        Makes the run reproducible; the caller's RNG state is left untouched.
    progress : bool
        Show a progress bar.

    Returns
    -------
    TrainHistory
        ``losses``: the batch square-root MMD averaged over each epoch.
    """
    data = check_training_args(model, data, (GMMN,), num_epochs=num_epochs,
                               batch_size=batch_size, lr=lr)
    bandwidths = tuple(default_bandwidths(model.data_dim) if bandwidths is None else bandwidths)
    if optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(model.decoder.parameters(), lr=lr)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(model.decoder.parameters(), lr=lr, momentum=momentum)
    else:
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    data = data.to(model.param_dtype)
    timer = Timer()
    losses: list[float] = []
    num_steps = 0
    with training_mode(model, seed) as generator:
        for _ in epochs(num_epochs, progress, "gmmn"):
            total = 0.0
            for real in minibatches(data, batch_size, generator):
                fake = model.decode(model.prior_sample(real.shape[0]))
                # the tiny floor keeps the square root differentiable when the MMD estimate is 0
                loss = torch.sqrt(mmd2(fake, real, bandwidths) + 1e-12)
                opt.zero_grad()
                loss.backward()
                opt.step()
                num_steps += 1
                total += loss.item() * real.shape[0]
            losses.append(total / data.shape[0])
    return TrainHistory(f"gmmn-{optimizer}", losses, [], {}, num_steps, timer())
