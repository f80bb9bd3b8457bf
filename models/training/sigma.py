r"""Choose the observation noise sigma of a Gaussian decoder model on validation data.

.. math:: \hat\sigma = \arg\max_{\sigma \in S} \frac1N \sum_{n=1}^N \widehat{\log p_\sigma}(x_n),

over a grid :math:`S`, on held-out validation examples (Wu et al. 2017, section 5.3.2 and
figure 2(a)). The estimator is passed in: with AIS the choice is sound; with KDE it is biased
towards large sigma, because KDE's error grows sharply as sigma shrinks (figure 2(a)). Choosing
sigma on the data that are then evaluated inflates the score; keep the two sets apart.

The whole grid can come from *one* annealing run: ``curve_fn`` returns every sigma at once, e.g.
``lambda m, x, s: pyrolik.sigma_curve(m, x, s, num_steps=1000, num_chains=4)``, which anneals down
to the smallest sigma and reads the others on the way (one run instead of one per candidate; the
estimates agree with per-sigma AIS, ``benchmarks/sigma_curve_onerun.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

__all__ = ["SigmaChoice", "choose_sigma"]

LogLikelihoodFn = Callable[[Any, Tensor, float], Tensor]
CurveFn = Callable[[Any, Tensor, list[float]], Any]


class SigmaChoice(NamedTuple):
    """The chosen sigma and the whole curve (means and standard errors over examples, nats)."""

    sigma: float
    sigmas: Tensor
    mean_log_likelihood: Tensor
    stderr: Tensor
    log_likelihood: Tensor  # (len(sigmas), N) per-example estimates


def choose_sigma(
    model: Any,
    x_valid: Tensor,
    sigmas: Sequence[float] | Tensor,
    log_likelihood_fn: LogLikelihoodFn | None = None,
    *,
    curve_fn: CurveFn | None = None,
) -> SigmaChoice:
    r"""Evaluate the grid of ``log p_sigma(x_valid)`` and keep the sigma with the best mean.

    Parameters
    ----------
    model : object
        Passed through to ``log_likelihood_fn``.
    x_valid : torch.Tensor, shape (N, ...)
        Validation examples, disjoint from the evaluated test set.
    sigmas : sequence of float
        Candidate standard deviations, all positive.
    log_likelihood_fn : callable, optional
        ``(model, x, sigma) -> Tensor`` of shape ``(N,)``: per-example estimates of
        :math:`\log p_\sigma(x)` in nats, e.g. from ``pyrolik.ais(model, x, model_kwargs={"sigma":
        sigma}, ...).log_likelihood``; called once per sigma.
    curve_fn : callable, optional
        ``(model, x, sigmas) -> curve``, called once for the whole grid: either a tensor ``(S, N)``
        in the order of ``sigmas``, or an object with ``.sigmas`` ``(S,)`` and ``.log_likelihood``
        ``(S, N)`` in any order (``pyrolik.sigma_curve``'s result). Pass exactly one of the two.

    Returns
    -------
    SigmaChoice
        ``sigma`` maximises ``mean_log_likelihood``; ``stderr`` is the standard error of each mean
        over the N examples (the estimator's own Monte Carlo error is not included).
    """
    if not isinstance(x_valid, Tensor):
        raise TypeError(f"x_valid must be a torch.Tensor, got {type(x_valid).__name__}")
    if x_valid.dim() < 1 or x_valid.shape[0] < 2:
        raise ValueError("x_valid needs at least 2 examples along dim 0 (for a standard error)")
    if (log_likelihood_fn is None) == (curve_fn is None):
        raise TypeError("pass exactly one callable: log_likelihood_fn (model, x, sigma) -> (N,) "
                        "tensor, or curve_fn (model, x, sigmas) -> (S, N)")
    fn = log_likelihood_fn if curve_fn is None else curve_fn
    if not callable(fn):
        raise TypeError("log_likelihood_fn must be callable as (model, x, sigma) -> (N,) tensor"
                        if curve_fn is None else
                        "curve_fn must be callable as (model, x, sigmas) -> (S, N) tensor or curve")
    grid = [float(s) for s in torch.as_tensor(sigmas, dtype=torch.float64).reshape(-1)]
    if not grid or any(not (math.isfinite(s) and s > 0) for s in grid):
        raise ValueError(f"sigmas must be a non-empty list of positive finite floats, got {sigmas}")
    n = x_valid.shape[0]
    if curve_fn is not None:
        table = _grid_table(curve_fn(model, x_valid, grid), grid, n)
    else:
        assert log_likelihood_fn is not None  # exactly one of the two was checked above
        rows = []
        for s in grid:
            ll = log_likelihood_fn(model, x_valid, s)
            if not isinstance(ll, Tensor) or ll.shape != (n,):
                raise ValueError(f"log_likelihood_fn must return a tensor of shape ({n},), got "
                                 f"{getattr(ll, 'shape', type(ll).__name__)} at sigma={s}")
            if not torch.isfinite(ll).all():
                raise ValueError(f"log_likelihood_fn returned non-finite values at sigma={s}")
            rows.append(ll.detach().to(torch.float64))
        table = torch.stack(rows)
    mean = table.mean(1)
    stderr = table.std(1) / math.sqrt(n)
    best = int(torch.argmax(mean))
    return SigmaChoice(grid[best], torch.tensor(grid, dtype=torch.float64), mean, stderr, table)


def _grid_table(out: Any, grid: list[float], n: int) -> Tensor:
    """``curve_fn``'s output as ``(S, N)`` float64 in the order of ``grid``."""
    if isinstance(out, Tensor):
        table = out
    elif hasattr(out, "sigmas") and hasattr(out, "log_likelihood"):
        have = torch.as_tensor(out.sigmas, dtype=torch.float64).reshape(-1)
        order = []
        for s in grid:
            close = torch.isclose(have, torch.tensor(s, dtype=torch.float64), rtol=1e-9)
            if not close.any():
                raise ValueError(f"curve_fn's curve has no sigma {s} (it has {have.tolist()})")
            order.append(int(close.nonzero()[0]))
        table = torch.as_tensor(out.log_likelihood)[order]
    else:
        raise TypeError(f"curve_fn must return a tensor (S, N) or a curve with .sigmas and "
                        f".log_likelihood, got {type(out).__name__}")
    if table.shape != (len(grid), n):
        raise ValueError(f"curve_fn must give shape ({len(grid)}, {n}), got {tuple(table.shape)}")
    if not torch.isfinite(table).all():
        raise ValueError("curve_fn returned non-finite values")
    return table.detach().to(torch.float64)
