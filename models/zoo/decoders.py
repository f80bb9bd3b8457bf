r"""Fully connected networks (decoders, encoders, discriminators) and the paper's layer sizes.

Wu et al. (2017), section 5.2 and appendix A: all layers are fully connected; the decoders are
10-64-256-256-1024-784 ("-10" models) and 50-1024-1024-1024-784 ("-50" models). VAE and GAN
decoders use tanh hidden units, GMMN decoders ReLU, and every continuous-data decoder ends in a
sigmoid so that its output (the mean of the Gaussian observation model) lies in :math:`[0, 1]`.
The binarized-MNIST IWAE (appendix A.2, after Burda et al. 2016) has a 50-200-200-784 tanh decoder
whose last layer gives Bernoulli logits.

No network here uses batch normalisation, so a decoder applied to a batch treats every row
independently: the estimators fold chains into the batch and rely on this.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

__all__ = [
    "ACTIVATIONS",
    "PAPER_SIZES",
    "mlp",
    "check_sizes",
]

#: Hidden-layer nonlinearities by name; the name is what a checkpoint records.
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "softplus": nn.Softplus,
    "sigmoid": nn.Sigmoid,
}

#: Decoder layer sizes (latent first, pixels last) from Wu et al. (2017), section 5.2 / A.2.
PAPER_SIZES: dict[str, tuple[int, ...]] = {
    "10": (10, 64, 256, 256, 1024, 784),
    "50": (50, 1024, 1024, 1024, 784),
    "iwae": (50, 200, 200, 784),
}


def check_sizes(sizes: Sequence[int], what: str = "sizes") -> tuple[int, ...]:
    """Validate a list of layer widths (at least input and output, all positive integers)."""
    sizes = tuple(sizes)
    if len(sizes) < 2:
        raise ValueError(f"{what} needs at least an input and an output width, got {sizes!r}")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"{what} must be integers, got {sizes!r}")
        if s <= 0:
            raise ValueError(f"{what} must be positive, got {sizes!r}")
    return sizes


def mlp(
    sizes: Sequence[int],
    activation: str = "tanh",
    output: str | None = None,
    dropout: float = 0.0,
    input_dropout: float = 0.0,
) -> nn.Sequential:
    """A fully connected network ``sizes[0] -> ... -> sizes[-1]``.

    Parameters
    ----------
    sizes : sequence of int
        Layer widths, input first.
    activation : str
        Hidden nonlinearity, a key of :data:`ACTIVATIONS`.
    output : str or None
        Output nonlinearity (a key of :data:`ACTIVATIONS`), or ``None`` for a linear output.
    dropout : float
        Dropout probability after every hidden layer (active only in ``train()`` mode).
    input_dropout : float
        Dropout probability on the input.

    Returns
    -------
    torch.nn.Sequential
        Applies to any leading batch shape ``(..., sizes[0]) -> (..., sizes[-1])``.
    """
    sizes = check_sizes(sizes)
    for name in (activation, output):
        if name is not None and name not in ACTIVATIONS:
            raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}")
    for p in (dropout, input_dropout):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probabilities must lie in [0, 1), got {p!r}")
    layers: list[nn.Module] = []
    if input_dropout > 0:
        layers.append(nn.Dropout(input_dropout))
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(ACTIVATIONS[activation]())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
    if output is not None:
        layers.append(ACTIVATIONS[output]())
    return nn.Sequential(*layers)
