"""Why running a model on the data failed, in the user's words: dtype, support, event shape, arguments.

When discovery cannot run a model on ``x`` (:mod:`pyrolik.model.discovery`), torch and Pyro say what
broke deep inside the program ("mat1 and mat2 must have the same dtype", "Shape mismatch inside
plate('data') at site x dim -1, 24 vs 64"). :func:`explain` names the cause and the fix instead,
counting rows as the user counts them (examples, not chains x examples).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pyro
import torch
from pyro.distributions import constraints
from pyro.poutine.util import site_is_subsample
from torch import Tensor, nn
from torch.nn.modules.module import register_module_forward_pre_hook

__all__ = ["explain", "short"]

_PLATE_MISMATCH = re.compile(r"Shape mismatch inside plate\('([^']+)'\) at site (\S+) dim (-?\d+), "
                             r"(\d+) vs (\d+)")


def short(err: BaseException) -> str:
    """Pyro's error message without its tensor dumps and trace tables."""
    keep = []
    for line in str(err).strip().splitlines():
        text = line.strip()
        if text.startswith("Trace Shapes"):
            break
        if text and not text.startswith(("tensor(", "[", "(", "-")) and not text[0].isdigit():
            keep.append(text)
    return " ".join(keep)[:600] or type(err).__name__


def explain(err: BaseException, unvalidated, run: Callable[[], Any], x: Tensor, what: str,
            copies: int, about_args: str) -> str:
    """The message for a failed run of the ``what`` on ``x`` (``copies`` stacked copies of the data).

    ``unvalidated`` is the trace of the run with Pyro's validation off (None if that failed too);
    ``run()`` runs the program once more (to see which parameters it uses).
    """
    n = x.shape[0] // copies
    shape = (n,) + tuple(x.shape[1:])
    found = (_support(unvalidated) if unvalidated is not None else None) \
        or _dtype(err, run, x) or _event_shape(err, x, n, copies)
    if found:
        return found
    stacked = f" (run as {copies} stacked copies: shape {tuple(x.shape)})" if copies > 1 else ""
    return (f"running the {what} on x of shape {shape}{stacked} failed ({short(err)}); check that "
            f"x has shape (N, *event_shape) matching the observed site, and model_args/model_kwargs"
            f"{about_args}")


def _support(tr) -> str | None:
    """An observed site whose value lies outside its distribution's support."""
    for name, site in tr.nodes.items():
        if site["type"] != "sample" or not site["is_observed"] or site_is_subsample(site) \
                or site["infer"].get("_deterministic"):
            continue
        fn, value = site["fn"], site["value"]
        try:
            ok = fn.support.check(value)
        except (RuntimeError, ValueError, NotImplementedError):
            continue
        if bool(ok.all()):
            continue
        bad = value[~ok] if ok.shape == value.shape else value.reshape(-1)
        lo, hi = float(value.min()), float(value.max())
        example = float(bad.reshape(-1)[0]) if bad.numel() else float("nan")
        fix = ("binarize x (e.g. (x > 0.5).float()), or observe grey levels with a likelihood on "
               "[0, 1] such as dist.ContinuousBernoulli"
               if _base(fn.support) in (constraints.boolean,) else
               "transform x into the support, or use a likelihood whose support holds x")
        return (f"observed site {name!r} has support {fn.support} but x holds values outside it "
                f"(x ranges over [{lo:.4g}, {hi:.4g}], e.g. {example:.4g}): {fix}")
    return None


def _base(support):
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support


def _dtype(err: BaseException, run: Callable[[], Any], x: Tensor) -> str | None:
    """x of one floating dtype, the program's parameters of another."""
    text = str(err)
    if "dtype" not in text and "type" not in text.lower():
        return None
    params: dict[str, torch.dtype] = {}

    def hook(module: nn.Module, args) -> None:
        for pname, p in module.named_parameters(recurse=False):
            if p.is_floating_point():
                params.setdefault(f"{type(module).__name__}.{pname}", p.dtype)

    handle = register_module_forward_pre_hook(hook)
    try:
        with torch.no_grad(), torch.random.fork_rng():
            run()
    except Exception:  # noqa: BLE001, S110 - the run fails again; the hook saw what it called
        pass
    finally:
        handle.remove()
    for pname, p in pyro.get_param_store().named_parameters():
        if p.is_floating_point():
            params.setdefault(f"pyro.param {pname!r}", p.dtype)
    other = {k: v for k, v in params.items() if v != x.dtype}
    if not other or not x.is_floating_point():
        return None
    name, dtype = next(iter(other.items()))
    want = str(dtype).replace("torch.", "")
    cast = {"float32": "x.float()", "float64": "x.double()", "float16": "x.half()"}.get(want,
                                                                                    f"x.to({dtype})")
    return (f"x is {str(x.dtype).replace('torch.', '')} but the model's parameters are {want} "
            f"({name}): pass {cast} (command line: --dtype {want}), or convert the model to "
            f"{str(x.dtype).replace('torch.', '')}")


def _event_shape(err: BaseException, x: Tensor, n: int, copies: int) -> str | None:
    """A data dimension left in the batch shape where the plate over the examples runs."""
    m = _PLATE_MISMATCH.search(str(err))
    if m is None:
        return None
    plate, site, dim, plate_size, site_size = m.groups()
    if int(plate_size) != x.shape[0]:
        return None
    event = x.dim() - 1
    return (f"site {site!r} has {site_size} values along dim {dim}, where pyro.plate({plate!r}) runs "
            f"over the {n} examples of x: the data dimensions of a site are event dimensions, so "
            f"declare them with .to_event, e.g. dist.Normal(loc, scale).to_event({max(event, 1)})"
            + (f" (the data were run as {copies} stacked copies)" if copies > 1 else ""))
