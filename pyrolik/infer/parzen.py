"""The Parzen window (Gaussian kernel density) estimate of log p(x): the misleading baseline."""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import Tensor

from pyrolik._validate import check_count, validate_data
from pyrolik.execution.batches import progress_bar, refuse_scope
from pyrolik.results import EstimateResult

__all__ = ["kde", "kde_log_density"]


def _like_x(name: str, t: Any, x: Tensor) -> Tensor:
    """:func:`validate_data` naming ``name``; its examples must have x's event shape."""
    t = validate_data(t, name)
    if t.shape[1:] != x.shape[1:]:
        raise ValueError(f"{name} has event shape {tuple(t.shape[1:])} but x has "
                         f"{tuple(x.shape[1:])}; pass {name} shaped like x, (rows, *x.shape[1:])")
    return t


def kde_log_density(samples: Tensor, x: Tensor, bandwidths: Tensor, *, chunk_size: int = 1024,
                    progress: bool = False) -> Tensor:
    """Gaussian Parzen log-density of each ``x`` for each bandwidth, ``(len(bandwidths), N)``, streamed."""
    # |x - s|^2 expanded as |x|^2 + |s|^2 - 2 x.s, in float64 about the samples' mean: in float32
    # it lost the digits of data far from the origin next to h (grey levels 0..255: tens of nats)
    if not len(samples):
        raise ValueError("a kernel density estimate needs at least one sample")
    s = samples.reshape(samples.shape[0], -1)
    chunks = range(0, len(s), chunk_size)
    centre = sum(s[i : i + chunk_size].double().sum(0) for i in chunks) / len(s)
    xf = x.reshape(x.shape[0], -1).double() - centre
    d = xf.shape[1]
    h = bandwidths.double().reshape(-1, 1, 1)
    x_sq = (xf * xf).sum(-1, keepdim=True)
    acc = None
    bar = progress_bar(len(chunks), "kde", progress)
    for start in chunks:
        sc = s[start : start + chunk_size].double() - centre
        sq = (x_sq + (sc * sc).sum(-1) - 2 * xf @ sc.T).clamp_min(0.0)  # (N, S_c)
        lse = torch.logsumexp(-sq / (2 * h**2), dim=-1)  # (H, N)
        acc = lse if acc is None else torch.logaddexp(acc, lse)
        bar.update(1)
    bar.close()
    assert acc is not None  # at least one chunk
    norm = math.log(s.shape[0]) + 0.5 * d * torch.log(2 * math.pi * h.reshape(-1, 1) ** 2)
    return (acc - norm).to(x.dtype)


def kde(samples: Tensor, x: Tensor, *, bandwidth: float | Tensor | list[float],
        validation: Tensor | None = None, chunk_size: int = 1024, progress: bool = True
        ) -> EstimateResult:
    r"""Parzen window estimate of log p(x), :math:`\log \frac1S \sum_s \mathcal N(x;\, x_s,\, h^2 I)`
    over model samples :math:`x_s`, the bandwidth chosen on validation data: the density of the
    smoothed samples, not of the model, so no bound (``bound is None``; Wu et al. 2017).

    Parameters
    ----------
    samples : torch.Tensor, shape ``(S, *event_shape)``
        Draws from the model.
    x : torch.Tensor, shape ``(N, *event_shape)``
        The examples to evaluate.
    bandwidth : float or sequence of floats
        h, or a grid of candidates.
    validation : torch.Tensor, optional
        Held-out examples to choose a grid's bandwidth on (never ``x``).
    chunk_size : int
        Samples per pass (memory: ``bandwidths x N x chunk_size`` float64 terms).
    progress : bool
        Show a progress bar on stderr.

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models.oracles.linear_gaussian import LinearGaussian
    >>> model = LinearGaussian.random(data_dim=5, latent_dim=2, seed=0)   # exact log p(x) known
    >>> x = model.sample(4, torch.Generator().manual_seed(0))
    >>> samples = model.sample(500, torch.Generator().manual_seed(1))   # draws from the model
    >>> valid = model.sample(50, torch.Generator().manual_seed(2))      # held out, never x
    >>> result = pyrolik.kde(samples, x, bandwidth=[0.1, 0.3, 1.0], validation=valid, progress=False)
    >>> result.bound is None   # no bound: the density of the smoothed samples
    True
    >>> result.settings["bandwidth"] in (0.1, 0.3, 1.0)
    True
    """
    refuse_scope("kde")
    x = validate_data(x)
    samples = _like_x("samples", samples, x)
    check_count("chunk_size", chunk_size)
    grid = torch.as_tensor(bandwidth, dtype=x.dtype).reshape(-1)
    if isinstance(bandwidth, bool) or len(grid) == 0 or not (grid > 0).all() \
            or not torch.isfinite(grid).all():
        raise ValueError("bandwidth must be a positive finite number or a non-empty list of them, "
                         f"got {bandwidth!r}")
    start_time = time.perf_counter()
    scores = None
    if len(grid) > 1:
        if validation is None:
            raise ValueError("a bandwidth grid needs validation= data (--validation on the command "
                             "line) to choose from; choosing it on the evaluated data inflates the "
                             "estimate")
        validation = _like_x("validation", validation, x)
        if validation is x or (validation.shape == x.shape and torch.equal(validation, x)):
            raise ValueError("validation= must be held-out data, not the evaluated x: choosing the "
                             "bandwidth on the evaluated data inflates the estimate")
        scores = kde_log_density(samples, validation, grid, chunk_size=chunk_size,
                                 progress=progress).mean(-1)
        best = grid[int(torch.argmax(scores))]
    else:
        best = grid[0]
    ll = kde_log_density(samples, x, best.reshape(1), chunk_size=chunk_size, progress=progress)[0]
    settings = {"bandwidth": float(best), "bandwidth_grid": grid.tolist(),
                "validation_log_likelihood": None if scores is None else scores.tolist(),
                "num_model_samples": samples.shape[0]}
    # a bandwidth at the edge of the grid is reported by the result's warnings()
    return EstimateResult(method="kde", log_likelihood=ll, bound=None, x=x, settings=settings,
                          wall_time=time.perf_counter() - start_time)
