r"""Which entries of ``x`` each observed site reads, and ``x`` put back together from their values."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from pyrolik.model.messenger import plate_frame
from pyrolik.model.observed import site_mask

__all__ = ["FILL", "ReadMapError", "read_map", "assemble", "coded"]

#: The value simulated ``x`` holds where no observed site scores an entry (masked out, not read).
FILL = 0.0


class ReadMapError(ValueError):
    """The observed sites' values are not a selection of the entries of ``x`` (``uncodable``: the
    dtype of ``x`` cannot number its entries, so the map could not be looked for)."""

    def __init__(self, message: str, uncodable: bool = False):
        super().__init__(message)
        self.uncodable = uncodable


def _exact_limit(dtype: torch.dtype) -> int:
    """The largest count of entries a tensor of ``dtype`` numbers exactly (0: it cannot)."""
    if dtype == torch.bool:
        return 0
    if dtype.is_floating_point:
        return 2 ** (round(-math.log2(torch.finfo(dtype).eps)) + 1)  # float32: 2^24
    return int(torch.iinfo(dtype).max) + 1


def coded(like: Tensor, mirrored: bool = False) -> Tensor | None:
    """``like``'s shape, each example's entries numbered ``0..E-1`` (with ``mirrored``, entry ``j``
    holds ``2E-1-j``: every number differs from the first coding's, also for ``E = 1``), in
    ``like``'s dtype; None when that dtype cannot number them exactly."""
    entries = like[0].numel() if like.shape[0] else 0
    if 2 * entries > _exact_limit(like.dtype):
        return None
    code = torch.arange(entries, device=like.device)
    if mirrored:
        code = 2 * entries - 1 - code
    return code.to(like.dtype).reshape(like.shape[1:]).expand(like.shape).contiguous()


def read_map(trace_fn: Callable[[Tensor], Any], like: Tensor, observed: tuple[str, ...]
             ) -> dict[str, Tensor]:
    """``{site: long tensor shaped like its value}``: the entry of its example's ``x`` (flattened)
    that each entry of each observed site reading ``x`` reads.

    ``trace_fn(x)`` traces the model (conditioned, as written) on ``x``. A site whose value is the
    same whatever ``x`` holds (a label observed from a per-example argument) reads no entry of ``x``
    and is left out. Raises :class:`ReadMapError` naming the site whose value is not a selection of
    entries of ``x``, or the sites when none reads ``x``.
    """
    a, b = coded(like), coded(like, mirrored=True)
    if a is None or b is None:
        raise ReadMapError(f"x of dtype {like.dtype} cannot number its {like[0].numel()} entries "
                           "per example, which is how pyrolik finds the entries each observed "
                           "site reads", uncodable=True)
    tr_a, tr_b = trace_fn(a), trace_fn(b)
    entries = like[0].numel()
    out = {}
    for name in observed:
        va, vb = tr_a.nodes[name]["value"], tr_b.nodes[name]["value"]
        if va.shape != vb.shape:
            raise ReadMapError(f"the observed site {name!r} changes shape with the values of x")
        if torch.equal(va, vb):
            continue  # observes something else than x (a per-example argument)
        index = va.double()
        whole = (index == index.round()) & (index >= 0) & (index < entries)
        # a selection reads j and 2E-1-j; a shift, a scale or any other computation does not
        if not bool(whole.all()) or not torch.equal(vb.double(), 2 * entries - 1 - index):
            raise ReadMapError(f"the observed site {name!r} reads x through a computation (its "
                               "value is not a selection of the entries of x: a slice, a gather, "
                               "an index, a reshape or a cast)")
        out[name] = index.long()
    if not out:
        raise ReadMapError(f"no observed site reads x: {list(observed)} hold the same values "
                           "whatever x holds")
    return out


def assemble(tr, index: dict[str, Tensor], like: Tensor, plate_name: str) -> Tensor:
    """``x`` shaped like ``like`` from the values of the observed sites of trace ``tr`` (drawn with
    the observations released), put where :func:`read_map` says each site reads them; masked and
    unread entries are :data:`FILL`. Raises ``ValueError`` when two scored values claim one entry."""
    n, entries = like.shape[0], like[0].numel()
    flat = torch.full((n * entries,), FILL, dtype=like.dtype, device=like.device)
    claimed = torch.zeros(n * entries, dtype=torch.bool, device=like.device)
    for name, idx in index.items():
        site = tr.nodes[name]
        value = site["value"]
        if tuple(value.shape) != tuple(idx.shape):
            raise ValueError(f"the observed site {name!r} draws values of shape "
                             f"{tuple(value.shape)} but reads x in shape {tuple(idx.shape)}")
        scored = site_mask(site).to(value.device) > 0
        pos = len(site["fn"].batch_shape) + plate_frame(site, plate_name).dim
        example = torch.arange(n, device=value.device).reshape(
            [n if i == pos else 1 for i in range(value.dim())])
        where = (example * entries + idx.to(value.device)).expand(value.shape)[scored]
        if bool(claimed[where].any()) or where.unique().numel() != where.numel():
            raise ValueError(f"the observed site {name!r} scores entries of x that another observed "
                             "entry scores too: the model's density of x would count them twice, "
                             "and simulated x cannot hold both draws")
        flat[where] = value[scored].to(like.dtype)
        claimed[where] = True
    return flat.reshape(like.shape)
