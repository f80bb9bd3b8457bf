"""Simple representations (callables ``x -> features`` ``(N, d)``) to compare on a loss-data curve."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

__all__ = ["raw", "random_projection", "pca"]


def _flat(x) -> Tensor:
    if not isinstance(x, Tensor | np.ndarray):
        raise TypeError(f"data must be a torch.Tensor or numpy array; got {type(x).__name__}")
    t = torch.as_tensor(x)
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    return t.reshape(len(t), -1)


def raw() -> Callable[[Tensor], Tensor]:
    """The identity representation: the data flattened to ``(N, D)`` (the source's baseline)."""
    return _flat


def random_projection(dim: int, *, seed: int = 0) -> Callable[[Tensor], Tensor]:
    r"""A fixed Gaussian random projection :math:`\phi(x) = x R`, :math:`R_{ij} \sim N(0, 1/d)`, drawn
    from ``seed`` (the same on training and validation data).

    Parameters
    ----------
    dim : int
        The projection's dimension.
    seed : int
        The seed of :math:`R`.

    Returns
    -------
    callable
        ``x -> x R``, for ``x`` of shape ``(N, ...)`` (flattened).
    """
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive integer; got {dim!r}")

    def project(x) -> Tensor:
        x = _flat(x)
        g = torch.Generator().manual_seed(seed)
        r = torch.randn(x.shape[1], dim, generator=g, dtype=x.dtype) / dim**0.5
        return x @ r

    return project


def pca(fit_data, dim: int) -> Callable[[Tensor], Tensor]:
    """Projection on the top ``dim`` principal components of ``fit_data`` (labels unused); fit it on the
    training pool only.

    Parameters
    ----------
    fit_data : Tensor or ndarray, shape (N, ...)
        The data the components are fitted on.
    dim : int
        How many components.

    Returns
    -------
    callable
        ``x -> features`` of shape ``(N, dim)``.
    """
    x = _flat(fit_data)
    if not isinstance(dim, int) or not 1 <= dim <= min(x.shape):
        raise ValueError(f"dim must be an integer in 1..{min(x.shape)} (rank limit); got {dim!r}")
    if not torch.isfinite(x).all():
        raise ValueError("fit_data contains NaN or inf")
    mean = x.mean(0)
    _, _, vh = torch.linalg.svd(x - mean, full_matrices=False)
    components = vh[:dim].T.clone()

    def project(z) -> Tensor:
        z = _flat(z)
        return (z - mean.to(z.dtype)) @ components.to(z.dtype)

    return project
