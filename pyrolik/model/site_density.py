r"""Per-example log-density of one Pyro sample site: ``fn.log_prob(value)`` summed over all but the
data plate; Bernoulli and Normal sites take a path with fewer full-size operations (equal up to
summation order)."""

from __future__ import annotations

import math

import torch
from pyro.distributions.util import scale_and_mask
from torch import Tensor
from torch.distributions import Bernoulli, Independent, Normal
from torch.nn.functional import binary_cross_entropy_with_logits

__all__ = ["HALF_LOG_2PI", "base_and_event_ndim", "is_normal", "is_unscaled",
           "normal_log_prob_and_score", "per_row_log_prob", "sum_to_rows"]

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def per_row_log_prob(fn, value: Tensor, scale, mask, plate_dim: int, rows: int, site: str) -> Tensor:
    """``scale_and_mask(fn.log_prob(value), scale, mask)`` summed over every dim but ``plate_dim``
    (the data plate's, negative, in the site's batch shape): ``(rows,)``."""
    if is_unscaled(scale, mask):
        base, event_ndim = base_and_event_ndim(fn)
        neg = _neg_log_prob_sum(base, value, event_ndim)
        if neg is not None:
            return -sum_to_rows(neg, plate_dim, rows, site)
    lp = scale_and_mask(fn.log_prob(value), scale, mask)
    return sum_to_rows(lp, plate_dim, rows, site)


def normal_log_prob_and_score(fn, value: Tensor, scale, mask, plate_dim: int, rows: int, site: str
                              ) -> tuple[Tensor, Tensor] | None:
    r"""``(log_prob (rows,), score)`` of a Normal latent site whose ``loc`` and ``sigma`` need no
    gradient, the score :math:`-(v - \mu) / \sigma^2` without autograd; None otherwise."""
    if not is_unscaled(scale, mask):
        return None
    base, event_ndim = base_and_event_ndim(fn)
    if not is_normal(base) or base.loc.requires_grad or base.scale.requires_grad:
        return None
    with torch.no_grad():
        w = (value - base.loc) / base.scale
        if w.shape != value.shape:
            return None
        neg = _normal_neg_log_prob_sum(w, base.scale, event_ndim)
        return -sum_to_rows(neg, plate_dim, rows, site), -(w / base.scale)


def sum_to_rows(log_prob: Tensor, dim: int, rows: int, site: str) -> Tensor:
    """Sum over every dim but ``dim`` (the data plate's): shape ``(rows,)``."""
    if log_prob.dim() < -dim or log_prob.shape[dim] != rows:
        raise ValueError(
            f"site {site!r}: its log-density has shape {tuple(log_prob.shape)}, which does not "
            f"broadcast over the data plate ({rows} rows at dim {dim}); sample it inside the plate")
    if log_prob.dim() == 1:
        return log_prob
    return log_prob.movedim(dim, 0).reshape(rows, -1).sum(-1)


def base_and_event_ndim(fn):
    """``(base distribution, number of event dims it sums)`` of a plain ``Independent`` wrapper."""
    if isinstance(fn, Independent) and type(fn).log_prob is Independent.log_prob:
        return fn.base_dist, fn.reinterpreted_batch_ndims
    return fn, 0


def is_unscaled(scale, mask) -> bool:
    """Whether a site's Pyro ``scale``/``mask`` leave its log-density as it is (the fast paths' premise)."""
    return mask is None and isinstance(scale, (int, float)) and scale == 1.0


def is_normal(d) -> bool:
    return isinstance(d, Normal) and type(d).log_prob is Normal.log_prob


def _neg_log_prob_sum(base, value: Tensor, event_ndim: int) -> Tensor | None:
    """``-base.log_prob(value)`` summed over the last ``event_ndim`` dims, or None without a fast path."""
    if isinstance(base, Bernoulli) and type(base).log_prob is Bernoulli.log_prob:
        logits = base.logits  # what torch's own log_prob uses, also for a probs-parametrised site
        if logits.shape != value.shape:
            logits, value = torch.broadcast_tensors(logits, value)
        nll = binary_cross_entropy_with_logits(logits, value, reduction="none")
        return _sum_last(nll, event_ndim)
    if is_normal(base):
        return _normal_neg_log_prob_sum((value - base.loc) / base.scale, base.scale, event_ndim)
    return None


def _normal_neg_log_prob_sum(w: Tensor, sigma: Tensor, event_ndim: int) -> Tensor:
    r""":math:`\sum (w^2/2 + \log\sigma + \log 2\pi / 2)` over the last ``event_ndim`` dims, ``w = (v-\mu)/\sigma``."""
    count = math.prod(w.shape[w.dim() - event_ndim:]) if event_ndim else 1
    if sigma.numel() > 0 and all(st == 0 for st in sigma.stride()):
        # one number broadcast (e.g. Normal(0., 1.)): its log once, not once per element
        log_sigma = count * torch.log(sigma.reshape(-1)[:1])
    else:
        log_sigma = _sum_last(torch.log(sigma).expand(w.shape), event_ndim)
    return 0.5 * _sum_last(w * w, event_ndim) + (log_sigma + count * HALF_LOG_2PI)


def _sum_last(t: Tensor, ndim: int) -> Tensor:
    return t.sum(tuple(range(-ndim, 0))) if ndim else t
