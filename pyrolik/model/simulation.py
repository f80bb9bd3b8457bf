r"""Draw ``(x, latents)`` from a model's joint :math:`p(z)\,p(x \mid z)`, as Pyro users expect, with
``x`` put back together from the entries each observed site reads (``docs/idioms.md``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pyro
import torch
from pyro.poutine.uncondition_messenger import UnconditionMessenger
from torch import Tensor

from pyrolik._random import fork_rng_from
from pyrolik.model.arguments import mark_arguments, unwrap
from pyrolik.model.discovery import alternative_data, site_mask
from pyrolik.model.hints import short
from pyrolik.model.messenger import plate_frame
from pyrolik.model.modules import eval_mode
from pyrolik.model.target import make_target

__all__ = ["FILL", "ReadMapError", "assemble", "coded", "draw_joint", "read_map"]

#: The value simulated ``x`` holds where no observed site scores an entry (masked out, not read).
FILL = 0.0

_DATA_HINT = ("simulate (x, latents) with your own code (latents: {site: (N, *site_shape)}, exact "
              "draws given x) and pass them as pyrolik.bdmc(model, (x, latents), ...)")


def draw_joint(model: Callable[..., Any], placeholder: Tensor, seed: int, model_args: tuple = (),
               model_kwargs: dict | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """``(x, {site: (N, *site)})`` drawn from the joint; ``placeholder`` gives ``x``'s shape."""
    args, kwargs = unwrap(*mark_arguments(tuple(model_args), dict(model_kwargs or {}),
                                          placeholder.shape[0]))

    def run(x: Tensor | None, fn: Callable, seeded: bool = True) -> Any:
        generator = torch.Generator(device=placeholder.device).manual_seed(seed)
        with fork_rng_from(generator if seeded else None, placeholder.device), torch.no_grad(), \
                pyro.validation_enabled(False), eval_mode():
            return pyro.poutine.trace(fn).get_trace(x, *args, **kwargs)

    layout = _structure(model, placeholder, model_args, model_kwargs, run)
    index = _read_map(model, placeholder, layout, run)
    try:  # the obs=x idiom: with x=None the observed sites sample
        tr = run(None, model)
        for site in index:
            found = tr.nodes.get(site)
            if found is None or found["is_observed"] or found["value"] is None \
                    or tuple(found["value"].shape) != tuple(index[site].shape):
                tr = None
                break
    except Exception:  # noqa: BLE001 - a model that needs its data: simulate on the placeholder
        tr = None
    if tr is None:
        released = _Release(frozenset(index))(model)
        try:
            tr = run(placeholder, released)
            other = run(coded(placeholder) if coded(placeholder) is not None
                        else alternative_data(placeholder), released)
        except Exception as err:  # noqa: BLE001 - whatever broke, say how to go around it
            raise ValueError(
                f"simulating from the model failed: it ran neither with x=None nor on a "
                f"placeholder x of zeros of shape {tuple(placeholder.shape)} ({short(err)}), e.g. "
                f"because its structure reads the data; {_DATA_HINT}") from err
        moved = _differs(tr, other)
        if moved:
            raise ValueError(
                f"simulating from the model failed: its structure reads the data (site {moved!r} "
                f"draws differently on two placeholders x with the same seed), so no placeholder "
                f"gives its joint; {_DATA_HINT}")
    x = assemble(tr, index, placeholder, layout.plate_name)
    latents = {s.name: tr.nodes[s.name]["value"].detach().movedim(s.plate_index, 0)
               for s in layout.sites}
    return x, latents


class _Release(UnconditionMessenger):
    """``poutine.uncondition`` of the sites that read ``x`` only (M2's labels stay observed)."""

    def __init__(self, names: frozenset[str]):
        super().__init__()
        self.names = names

    def _pyro_sample(self, msg) -> None:
        if msg["name"] in self.names:
            super()._pyro_sample(msg)


def _structure(model: Callable[..., Any], placeholder: Tensor, model_args: tuple,
               model_kwargs: dict | None, run: Callable):
    """The model's layout on the placeholder, or pyrolik's refusal (or the ``data=`` pointer)."""
    try:
        return make_target(model, placeholder, 1, model_args=model_args,
                           model_kwargs=model_kwargs).layout
    except ValueError as err:
        try:
            run(placeholder, model, seeded=False)
        except Exception:  # noqa: BLE001 - it does not run on a placeholder: say how to go around
            raise ValueError(f"simulating from the model failed: it does not run on a placeholder x "
                             f"of zeros of shape {tuple(placeholder.shape)} ({err}); "
                             f"{_DATA_HINT}") from err
        raise ValueError(f"pyrolik cannot simulate from this model: {err}") from err


def _read_map(model: Callable[..., Any], placeholder: Tensor, layout, run: Callable
              ) -> dict[str, Tensor]:
    """:func:`read_map`, or all of ``x`` in order for a single site holding it (boolean ``x``)."""
    try:
        return read_map(lambda coded_x: run(coded_x, model, seeded=False), placeholder,
                        layout.observed)
    except ReadMapError as err:
        if not err.uncodable:
            raise ValueError(_unread(err)) from err
        failure: Exception = err
    except Exception as err:  # noqa: BLE001 - the model does not run on coded data
        failure = err
    tr = run(placeholder, model, seeded=False)
    if len(layout.observed) == 1:
        value = tr.nodes[layout.observed[0]]["value"]
        if tuple(value.shape) == tuple(placeholder.shape):
            order = torch.arange(placeholder[0].numel(), device=placeholder.device)
            return {layout.observed[0]: order.reshape(placeholder.shape[1:]).expand(
                placeholder.shape)}
    raise ValueError(_unread(failure)) from failure


def _unread(err: Exception) -> str:
    return (f"simulate puts x together from the values its observed sites draw, by the entries of "
            f"x each one reads; here {short(err)}. Observe x by selection (obs=x, obs=x[:, t], "
            f"obs=x[:, idx]) with any computation on it in the distribution (for a conditional "
            f"model pass the observation as x, the input as a keyword argument); or {_DATA_HINT}")


def _differs(tr_a, tr_b) -> str | None:
    """The first sample site whose value differs between two traces (same seed), or None."""
    for name, node in tr_a.nodes.items():
        if node["type"] != "sample" or node["infer"].get("_deterministic"):
            continue
        other = tr_b.nodes.get(name)
        if other is None or not isinstance(node["value"], Tensor) \
                or tuple(node["value"].shape) != tuple(other["value"].shape) \
                or not torch.equal(node["value"], other["value"]):
            return name
    return None


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
    that each entry of each observed site reads; ``trace_fn(x)`` traces the model on ``x``. A site
    whose value does not change with ``x`` (a per-example label) is left out; :class:`ReadMapError`
    names a site whose value is not a selection of the entries of ``x``, or the sites if none is."""
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
