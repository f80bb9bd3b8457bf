"""Approximate posterior samples from forward AIS, and their decodings (Wu et al. fig. 4).

AIS's final states, resampled in proportion to their importance weights, are draws from an
approximation of :math:`p(z \\mid x)` that improves as the BDMC gap closes. Decoding them shows which
parts of an image the model can explain and which modes it misses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from pyrolik.results import AISResult

__all__ = ["posterior_samples", "plot_posterior_decodings"]


def posterior_samples(
    result: AISResult,
    num_samples: int,
    *,
    examples: Sequence[int] | None = None,
    seed: int | None = 0,
) -> dict[str, Tensor]:
    """Resample the final AIS states by weight: ``{site: (num_samples, len(examples), *site)}``."""
    if result.direction != "forward" or result.latents is None or result.log_weights is None:
        raise ValueError("posterior samples come from a forward AIS result (pyrolik.ais)")
    idx = torch.arange(result.num_examples) if examples is None else torch.as_tensor(examples)
    if (idx < 0).any() or (idx >= result.num_examples).any():
        raise ValueError(f"examples must lie in [0, {result.num_examples}), got {idx.tolist()}")
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    probs = torch.softmax(result.log_weights[:, idx].double().cpu(), dim=0).T  # (n, K)
    chains = torch.multinomial(probs, num_samples, replacement=True, generator=g).T  # (S, n)
    return {name: v[chains.to(v.device), idx.to(v.device)] for name, v in result.latents.items()}


def plot_posterior_decodings(
    result: AISResult,
    decode: Callable[[dict[str, Tensor]], Tensor],
    examples: Sequence[int] = (0, 1, 2, 3),
    num_samples: int = 8,
    image_shape: tuple[int, int] | None = None,
    seed: int | None = 0,
):
    """A grid: each row one example, its data first, then decodings of posterior samples.

    ``decode`` maps ``{site: (S * n, *site)}`` to decoded means ``(S * n, D)`` (e.g. the decoder's
    output). Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    samples = posterior_samples(result, num_samples, examples=examples, seed=seed)
    s, n = num_samples, len(examples)
    flat = {k: v.reshape(s * n, *v.shape[2:]) for k, v in samples.items()}
    with torch.no_grad():
        images = decode(flat).reshape(s, n, -1).detach().cpu().double().numpy()
    if result.x is None:
        raise ValueError("this AIS result holds no data x to show beside the decodings")
    data = result.x[torch.as_tensor(examples)].reshape(n, -1).cpu().double().numpy()
    d = data.shape[-1]
    shape = image_shape or (int(round(d**0.5)),) * 2
    if shape[0] * shape[1] != d:
        raise ValueError(f"image_shape {shape} does not hold {d} values; pass image_shape=")
    fig, axes = plt.subplots(n, s + 1, figsize=(1.1 * (s + 1), 1.1 * n), squeeze=False)
    for i in range(n):
        axes[i, 0].imshow(data[i].reshape(shape), cmap="gray")
        for j in range(s):
            axes[i, j + 1].imshow(images[j, i].reshape(shape), cmap="gray")
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0, 0].set_title("data", fontsize=8)
    for j in range(s):
        axes[0, j + 1].set_title(f"z~post {j + 1}", fontsize=7)
    fig.suptitle("decodings of AIS posterior samples", fontsize=9)
    fig.tight_layout()
    return fig
