r"""How many entries of each example a model observes: the :math:`D` of bits per dimension (``docs/units.md``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from pyro.distributions.torch_distribution import ExpandedDistribution, MaskedDistribution
from torch import Tensor
from torch.distributions import Independent

from pyrolik.exceptions import IdiomWarning
from pyrolik.model.messenger import plate_frame
from pyrolik.model.site_density import sum_to_rows

__all__ = ["entry_mask", "site_mask", "site_entries", "count_observed", "warn_unread"]


def entry_mask(fn) -> Tensor:
    """``(*fn.batch_shape, *fn.event_shape)`` float64, 1 where an entry of the site's value is scored
    and 0 where a distribution-level mask (``.mask(m)``, also under ``.to_event``) leaves it out."""
    if isinstance(fn, MaskedDistribution):
        base = entry_mask(fn.base_dist)
        mask = fn._mask
        if isinstance(mask, bool):
            return base if mask else torch.zeros_like(base)
        mask = mask.reshape(tuple(mask.shape) + (1,) * len(fn.base_dist.event_shape))
        return base * mask.to(base.device, base.dtype)
    if isinstance(fn, Independent):
        return entry_mask(fn.base_dist)
    if isinstance(fn, ExpandedDistribution):
        return entry_mask(fn.base_dist).expand(tuple(fn.batch_shape) + tuple(fn.event_shape))
    return torch.ones(tuple(fn.batch_shape) + tuple(fn.event_shape), dtype=torch.float64)


def site_mask(site: dict) -> Tensor:
    """:func:`entry_mask` of a trace node times its ``poutine.mask``: shaped like its value."""
    fn, mask = site["fn"], site["mask"]
    entries = entry_mask(fn)
    if mask is False:
        return torch.zeros_like(entries)
    if mask is not None and mask is not True:
        mask = mask.reshape(tuple(mask.shape) + (1,) * len(fn.event_shape))
        entries = entries * mask.to(entries.device, entries.dtype)
    return entries.expand(tuple(fn.batch_shape) + tuple(fn.event_shape))


def site_entries(site: dict) -> Tensor:
    """Observed scalar entries per batch element of a trace node, shape ``fn.batch_shape``."""
    k = len(site["fn"].event_shape)
    mask = site_mask(site)
    return mask.sum(tuple(range(-k, 0))) if k else mask


def count_observed(sites: list[dict], plate_name: str, rows: int) -> Tensor:
    """``(rows,)`` float64: the entries the observed ``sites`` (trace nodes) score per row, masks
    included (:func:`site_mask`)."""
    total = torch.zeros(rows, dtype=torch.float64)
    for site in sites:
        entries = site_entries(site).cpu()
        total = total + sum_to_rows(entries, plate_frame(site, plate_name).dim, rows, site["name"])
    return total


def _shares_storage(value, x: Tensor) -> bool:
    return isinstance(value, Tensor) and value.device == x.device \
        and value.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def warn_unread(trace_fn: Callable[[Tensor], Any], x: Tensor, tr, observed: tuple[str, ...]
                ) -> None:
    """Warn when no observed site reads ``x``: none is a view of ``x`` or changes when ``x`` does
    (``trace_fn`` traces the model on other data; silent when the model fails on it)."""
    values = {name: tr.nodes[name]["value"] for name in observed}
    if any(_shares_storage(v, x) for v in values.values()):
        return
    try:
        other = trace_fn(alternative_data(x))
    except Exception:  # noqa: BLE001 - the check cannot tell; the estimate itself is unaffected
        return
    for name, value in values.items():
        moved = other.nodes.get(name, {}).get("value")
        if not isinstance(moved, Tensor) or moved.shape != value.shape \
                or not torch.equal(moved, value):
            return
    names = list(observed)
    warnings.warn(
        f"no observed site reads x: the observed site(s) {names} hold the same values whatever x "
        "holds (e.g. a conditional model called with its input as x and the observation as a "
        f"keyword, Pyro's CVAE model(xs, ys=ys)). The estimate is log p({names[0]} | x), but the "
        "rows, observed_data and bits/dim are those of x. Pass the observation as x and the input "
        "as a per-example keyword: def conditioned(ys, xs): return model(xs, ys=ys), then "
        "pyrolik.ais(conditioned, ys, model_kwargs={'xs': xs}, ...)",
        IdiomWarning, stacklevel=2)


def alternative_data(x: Tensor) -> Tensor:
    """Data that differ from ``x`` in every entry: ``x + 1`` (``~x`` for booleans)."""
    return ~x if x.dtype == torch.bool else x + 1
