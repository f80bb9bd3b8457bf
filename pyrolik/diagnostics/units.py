r"""Units for log-likelihoods (higher is better, natural log; floats, arrays or tensors): nats and
bits/dim, rescaled or affinely mapped data, dequantization (``docs/units.md``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from pyrolik.model.target import make_target

__all__ = ["LN2", "nats_to_bits", "bits_to_nats", "nats_to_bits_per_dim", "bits_per_dim_to_nats",
           "rescale_log_density", "affine_log_density", "discrete_log_prob_bound", "nll_bits_per_dim",
           "observed_dims"]

LN2 = math.log(2.0)


def _positive_int(name: str, value: Any, what: str = "the number of data dimensions") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int ({what}); got {value!r}")
    return int(value)


def _dims(name: str, value: Any) -> Any:
    """A positive int, or per-example counts (positive whole numbers) that divide elementwise."""
    if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim > 0:
        arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
        if not (np.all(arr >= 1) and np.all(arr == np.round(arr))):
            raise ValueError(f"{name} must hold positive whole numbers (the entries each example "
                             f"observes); got values from {arr.min()!r} to {arr.max()!r}: an "
                             "example that observes nothing has no bits/dim, leave it out")
        return value
    if isinstance(value, (torch.Tensor, np.ndarray)):
        value = value.item()
    return _positive_int(name, value)


def observed_dims(model: Any, x: Any, *, model_args: tuple = (),
                  model_kwargs: dict | None = None) -> torch.Tensor:
    r"""``(N,)``: the entries of each example that ``model``'s observed sites score, masks included
    (:math:`D_n` of bits/dim; results carry it as ``result.observed_dims``).

    Parameters
    ----------
    model : callable
        The Pyro model, as the estimators take it.
    x : torch.Tensor, shape (N, ...)
        The data.
    model_args, model_kwargs
        Further arguments of the model.

    Returns
    -------
    torch.Tensor, shape (N,)
    """
    counts = make_target(model, x, 1, model_args=model_args,
                         model_kwargs=model_kwargs).layout.num_observed
    if counts is None:  # discovery always counts; a target built otherwise has no count
        raise ValueError("the model's observed entries could not be counted")
    return counts


def nats_to_bits(nats: Any) -> Any:
    r"""Nats to bits: :math:`b = n / \ln 2`.

    Parameters
    ----------
    nats : float, array or tensor

    Returns
    -------
    The same type, in bits.
    """
    return nats / LN2


def bits_to_nats(bits: Any) -> Any:
    r"""Bits to nats: :math:`n = b \ln 2`.

    Parameters
    ----------
    bits : float, array or tensor

    Returns
    -------
    The same type, in nats.
    """
    return bits * LN2


def nats_to_bits_per_dim(nats: Any, num_dims: Any) -> Any:
    r"""A quantity in nats for a whole ``num_dims``-dimensional example, in bits per dimension,
    :math:`n / (D \ln 2)` (for images see :func:`nll_bits_per_dim`).

    Parameters
    ----------
    nats : float, array or tensor
        Per example (a log-likelihood, or its negative).
    num_dims : int or array of int
        :math:`D`, the dimensions of an example, or one count per example.

    Returns
    -------
    The same type, in bits per dimension.

    Examples
    --------
    >>> import math
    >>> from pyrolik.diagnostics.units import nats_to_bits_per_dim
    >>> round(nats_to_bits_per_dim(784 * math.log(2), 784), 6)   # 784 nats ln 2 over 784 pixels
    1.0
    """
    return nats / (_dims("num_dims", num_dims) * LN2)


def bits_per_dim_to_nats(bits_per_dim: Any, num_dims: Any) -> Any:
    r"""Bits per dimension back to nats per example: :math:`n = \text{bits/dim} \cdot D \ln 2`.

    Parameters
    ----------
    bits_per_dim : float, array or tensor
    num_dims : int or array of int
        :math:`D`, the dimensions of an example, or one count per example.

    Returns
    -------
    The same type, in nats per example.
    """
    return bits_per_dim * _dims("num_dims", num_dims) * LN2


def rescale_log_density(log_p_scaled: Any, scale: Any, num_dims: Any = None) -> Any:
    r"""Log-density of the original data from that of data scaled by ``1 / scale``,
    :math:`\log \tilde p(x / \sigma) - k \log \sigma` (``docs/units.md``).

    Parameters
    ----------
    log_p_scaled : float, array or tensor
        :math:`\log \tilde p(\tilde x)` in nats, per example.
    scale : float or 1-D array/tensor
        :math:`\sigma`, one for all dimensions or one per dimension (:math:`\sum_i \log \sigma_i`).
    num_dims : int or array of int, optional
        :math:`k` (per example when an array); required when ``scale`` is a single number.
    """
    scale_t = torch.as_tensor(scale, dtype=torch.float64)
    if not bool((scale_t > 0).all()):
        raise ValueError("scale must be positive: the data were divided by it")
    if scale_t.dim() == 0:
        if num_dims is None:
            raise ValueError("give num_dims (k) with a scalar scale: the correction is k log scale")
        correction = _dims("num_dims", num_dims) * math.log(float(scale_t))
    elif scale_t.dim() == 1:
        if num_dims is not None and not isinstance(num_dims, int | np.integer):
            raise ValueError("a scale per dimension needs every example to observe all of them: pass "
                             "num_dims as one int (or None), not per example")
        if num_dims is not None and num_dims != scale_t.numel():
            raise ValueError(f"num_dims={num_dims} but scale has {scale_t.numel()} entries")
        correction = float(scale_t.log().sum())
    else:
        raise ValueError("scale must be a number or a 1-D array of per-dimension scales")
    return log_p_scaled - correction


def affine_log_density(log_p_transformed: Any, A: Any, num_dims: int | None = None) -> Any:
    r"""Log-density of the original data from that of affinely transformed data :math:`y = A x + c`,
    :math:`\log p_y(A x + c) + \log |\det A|` (invertible :math:`A`).

    Parameters
    ----------
    log_p_transformed : float, array or tensor
        :math:`\log p_y(y)` in nats, per example.
    A : float, 1-D or 2-D array/tensor
        A number (times the identity), the diagonal, or the full square matrix.
    num_dims : int, optional
        :math:`k`; required when ``A`` is a single number.
    """
    a = torch.as_tensor(A, dtype=torch.float64)
    if a.dim() == 0:
        if num_dims is None:
            raise ValueError("give num_dims with a scalar A: log|det(a I_k)| = k log|a|")
        logdet = _positive_int("num_dims", num_dims) * math.log(abs(float(a)))
    elif a.dim() == 1:
        logdet = float(a.abs().log().sum())
    elif a.dim() == 2 and a.shape[0] == a.shape[1]:
        logdet = float(torch.linalg.slogdet(a).logabsdet)
    else:
        raise ValueError(f"A must be a number, a diagonal or a square matrix; got shape "
                         f"{tuple(a.shape)}")
    if not math.isfinite(logdet):
        raise ValueError("A is singular: the transformed data have no density")
    return log_p_transformed + logdet


def discrete_log_prob_bound(log_p_dequantized: Any, num_dims: Any, levels: int = 256,
                            rescaled: bool = True) -> Any:
    r"""Lower bound on the log-probability of integer data from a density on dequantized data,
    :math:`\log P(k) \ge \mathbb E_u[\log p((k + u)/L)] - D \log L` (``docs/units.md``).

    Parameters
    ----------
    log_p_dequantized : float, array or tensor
        :math:`\log p(x)` on :math:`[0, 1]` (``rescaled=True``) or :math:`\log \tilde p(k+u)` (nats).
    num_dims : int or array of int
        :math:`D` (per example when an array).
    levels : int
        :math:`L`, 256 for 8-bit images.
    rescaled : bool
        The density is of the data rescaled to :math:`[0, 1]` (else of :math:`k + u`, returned as
        it is).
    """
    d = _dims("num_dims", num_dims)
    levels = _positive_int("levels", levels, "the integer data's number of levels, 256 for 8-bit")
    return log_p_dequantized - d * math.log(levels) if rescaled else log_p_dequantized


def nll_bits_per_dim(log_likelihood: Any, num_dims: Any, *, levels: int | None = None,
                     scale: Any = None) -> Any:
    r"""The figure papers report: NLL in bits per dimension of the original data; with ``levels``,
    an upper bound on the discrete bits/dim, :math:`-\log p(x) / (D \ln 2) + \log_2 L`.

    Parameters
    ----------
    log_likelihood : float, array or tensor
        :math:`\log p(x)` per example, in nats, of the data as the model saw them.
    num_dims : int or array of int
        :math:`D`.
    levels : int, optional
        :math:`L`: the data were integers dequantized to :math:`(k + u)/L`
        (:func:`discrete_log_prob_bound`).
    scale : float or 1-D array/tensor, optional
        The data were divided by ``scale`` before modelling (:func:`rescale_log_density`).

    Returns
    -------
    The same type: the negative log-likelihood in bits per dimension.
    """
    ll = log_likelihood
    if scale is not None:
        ll = rescale_log_density(ll, scale, num_dims)
    if levels is not None:
        ll = discrete_log_prob_bound(ll, num_dims, levels)
    return nats_to_bits_per_dim(-ll, num_dims)
