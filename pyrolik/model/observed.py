r"""How many entries of each example a model observes: the :math:`D` of bits per dimension.

A model's :math:`\log p(x_n)` is a density of the entries its observed sites score, which need not be
all of ``x[n]``: a mask (``poutine.mask``, ``.mask(m)``, ``obs_mask=``, ragged sequences) leaves
entries out, and a gathered observation (``obs=x[:, idx]``) reads some of them. Bits per dimension
divides by the entries observed,

.. math:: D_n = \sum_{\text{observed } o}\ \sum_{j \in \text{entries of } o \text{ in example } n}
          m_{o,j}, \qquad \text{bits/dim} = \frac{-\sum_n \log p(x_n)}{\ln 2\, \sum_n D_n},

where :math:`m_{o,j} \in \{0, 1\}` is the site's mask (its ``poutine.mask`` times every
distribution-level mask, broadcast over the event entries). For a model that observes every entry of
``x`` once, :math:`D_n` is ``x[n].numel()``.
"""

from __future__ import annotations

import torch
from pyro.distributions.torch_distribution import ExpandedDistribution, MaskedDistribution
from torch import Tensor
from torch.distributions import Independent

from pyrolik.model.messenger import plate_frame
from pyrolik.model.site_density import sum_to_rows

__all__ = ["site_entries", "count_observed"]


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def site_entries(fn) -> Tensor:
    """Observed scalar entries per batch element of a site's distribution, shape ``fn.batch_shape``:
    the event's entries, times its distribution-level masks."""
    if isinstance(fn, MaskedDistribution):
        base = site_entries(fn.base_dist)
        mask = fn._mask
        if isinstance(mask, bool):
            return base if mask else torch.zeros_like(base)
        return (base * mask.to(base.dtype)).expand(fn.batch_shape)
    if isinstance(fn, Independent):
        base = site_entries(fn.base_dist)
        k = fn.reinterpreted_batch_ndims
        return base.sum(tuple(range(-k, 0))) if k else base
    if isinstance(fn, ExpandedDistribution):
        return site_entries(fn.base_dist).expand(fn.batch_shape)
    return torch.full(tuple(fn.batch_shape), float(_numel(fn.event_shape)), dtype=torch.float64)


def count_observed(sites: list[dict], plate_name: str, rows: int) -> Tensor:
    """``(rows,)`` float64: the entries the observed ``sites`` (trace nodes) score per row, each
    site's ``poutine.mask`` included (:func:`site_entries` for the distribution's own masks)."""
    total = torch.zeros(rows, dtype=torch.float64)
    for site in sites:
        fn = site["fn"]
        entries = site_entries(fn).to(total.device)
        mask = site["mask"]
        if mask is not None and not isinstance(mask, bool):
            entries = entries * mask.to(entries.device, entries.dtype)
        elif mask is False:
            entries = torch.zeros_like(entries)
        frame = plate_frame(site, plate_name)
        shape = tuple(fn.batch_shape)
        entries = entries.expand(shape) if shape else entries
        total = total + sum_to_rows(entries, frame.dim, rows, site["name"]).to(total.device)
    return total
