r"""Data loaders: scikit-learn digits (always there), binarized MNIST and the MNIST test set, read
from ``data_dir`` or ``$PYROLIK_DATA`` (never downloaded)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

__all__ = ["Split", "find_data_dir", "load_digits", "load_binarized_mnist", "load_mnist_test",
           "dequantize", "split_mnist_test"]

BINARIZED_MNIST = "binarized_mnist.npz"
MNIST_TEST = "mnist_test.npz"


class Split(NamedTuple):
    """A train / valid / test split of one data set (tensors with examples along dim 0)."""

    train: Tensor
    valid: Tensor
    test: Tensor


def find_data_dir(data_dir: str | os.PathLike | None = None, filename: str = MNIST_TEST) -> Path | None:
    """Resolve the MNIST data directory from ``data_dir`` or ``$PYROLIK_DATA``.

    Parameters
    ----------
    data_dir : str or path-like, optional
        The folder holding the file (default: ``$PYROLIK_DATA``).
    filename : str
        The file that must be in the folder.

    Returns
    -------
    pathlib.Path or None
        The folder, or None when neither names one that holds ``filename``.
    """
    return next((Path(c) for c in (data_dir, os.environ.get("PYROLIK_DATA"))
                 if c and (Path(c) / filename).is_file()), None)


def _require(data_dir: str | os.PathLike | None, filename: str) -> Path:
    found = find_data_dir(data_dir, filename)
    if found is None:
        raise FileNotFoundError(f"{filename} not found in data_dir={data_dir!r} or $PYROLIK_DATA="
                                f"{os.environ.get('PYROLIK_DATA')!r}; pass data_dir= or set "
                                "PYROLIK_DATA to the folder holding it (pyrolik never downloads data).")
    return found / filename


def dequantize(k: Tensor | np.ndarray, levels: int = 256, generator: torch.Generator | None = None,
               dtype: torch.dtype | None = None) -> Tensor:
    r"""Uniform dequantization: :math:`x = (k + u) / \text{levels}`, :math:`u \sim U[0, 1)`.

    Parameters
    ----------
    k : Tensor or ndarray
        Integer levels ``0 .. levels - 1``.
    levels : int
        The number of levels (256 for 8-bit images).
    generator : torch.Generator, optional
        The random stream of ``u``.
    dtype : torch.dtype, optional
        Default: torch's default dtype.

    Returns
    -------
    torch.Tensor
        In :math:`[0, 1)`, the shape of ``k``.
    """
    k = torch.as_tensor(np.asarray(k)).to(dtype or torch.get_default_dtype())
    u = torch.rand(k.shape, generator=generator, dtype=k.dtype)
    return (k + u) / levels


def load_digits(*, scale: bool = True, dequantize_seed: int | None = None,
                dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    r"""scikit-learn's 1,797 8x8 digits (levels 0..16) as ``(images (1797, 64), labels (1797,))``.

    Parameters
    ----------
    scale : bool
        Divide the levels by 16 (ignored with ``dequantize_seed``).
    dequantize_seed : int, optional
        Dequantize with this seed: :math:`(k + u) / 17`.
    dtype : torch.dtype, optional
        Of the images (default: torch's default dtype).

    Returns
    -------
    tuple of torch.Tensor
        ``(images, labels)``.

    Examples
    --------
    >>> from pyrolik.io.datasets import load_digits
    >>> x, y = load_digits(dequantize_seed=0)
    >>> tuple(x.shape), tuple(y.shape), bool((x >= 0).all() and (x < 1).all())
    ((1797, 64), (1797,), True)
    """
    from sklearn.datasets import load_digits as _load

    bunch = _load()
    k = bunch.data.astype(np.float64)
    dtype = dtype or torch.get_default_dtype()
    labels = torch.as_tensor(bunch.target, dtype=torch.long)
    if dequantize_seed is not None:
        g = torch.Generator().manual_seed(dequantize_seed)
        return dequantize(k, levels=17, generator=g, dtype=dtype), labels
    x = torch.as_tensor(k, dtype=dtype)
    return (x / 16.0 if scale else x), labels


def load_binarized_mnist(data_dir: str | os.PathLike | None = None, *,
                         dtype: torch.dtype | None = None) -> Split:
    """The fixed binarization of Larochelle & Murray (2011): 50k/10k/10k images of 784 {0,1} pixels.

    Parameters
    ----------
    data_dir, dtype
        As in :func:`find_data_dir` and :func:`load_digits`.

    Returns
    -------
    Split
        ``(train, valid, test)`` images.
    """
    path = _require(data_dir, BINARIZED_MNIST)
    dtype = dtype or torch.get_default_dtype()
    with np.load(path) as f:
        return Split(*(torch.as_tensor(np.unpackbits(f[k], axis=1)[:, :784].astype(np.float32))
                       .to(dtype) for k in ("train", "valid", "test")))


def load_mnist_test(data_dir: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The 10,000 MNIST test images as uint8 grey levels ``(10000, 784)`` and labels ``(10000,)``.

    Parameters
    ----------
    data_dir
        As in :func:`find_data_dir`.

    Returns
    -------
    tuple of numpy.ndarray
        ``(images, labels)``.
    """
    path = _require(data_dir, MNIST_TEST)
    with np.load(path) as f:
        return f["images"], f["labels"]


def split_mnist_test(data_dir: str | os.PathLike | None = None, *,
                     sizes: tuple[int, int, int] = (8000, 1000, 1000), seed: int = 0,
                     dtype: torch.dtype | None = None) -> tuple[Split, Split]:
    """Continuous MNIST from the 10,000 test images: a fixed random split, dequantized to [0, 1].

    Parameters
    ----------
    data_dir, dtype
        As in :func:`find_data_dir` and :func:`load_digits`.
    sizes : tuple of three int
        Train, valid and test sizes.
    seed : int
        The seed of the permutation and of the dequantization.

    Returns
    -------
    tuple of Split
        ``(images, labels)``, each a ``(train, valid, test)`` split.
    """
    images, labels = load_mnist_test(data_dir)
    if sum(sizes) > len(images):
        raise ValueError(f"sizes {sizes} ask for more than the {len(images)} images available")
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(images), generator=g).numpy()
    x = dequantize(images[perm], generator=g, dtype=dtype)
    y = torch.as_tensor(labels[perm].astype(np.int64))
    a, b, c = sizes
    return (Split(x[:a], x[a : a + b], x[a + b : a + b + c]),
            Split(y[:a], y[a : a + b], y[a + b : a + b + c]))
