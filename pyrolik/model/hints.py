"""Why running a model on the data failed, in the user's words: dtype, support, event shape, arguments."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

import pyro
import torch
from pyro.distributions import constraints
from torch import Tensor, nn
from torch.nn.modules.module import register_module_forward_pre_hook

from pyrolik.model.messenger import sample_nodes
from pyrolik.model.supports import base_constraint

__all__ = ["ObservedShapeError", "Refusal", "explain", "integer_data", "short"]

_CAST = {torch.float32: "x.float()", torch.float64: "x.double()", torch.float16: "x.half()"}


class Refusal(ValueError):
    """A construct refused while the program runs, in a message that names it and its fix: passed on
    as it is, not explained as a failed run on ``x`` (:func:`explain`)."""


class ObservedShapeError(ValueError):
    """An observed site whose value's shape is not its distribution's (read by :func:`explain`)."""

    def __init__(self, site: dict):
        fn, value = site["fn"], site["value"]
        self.site = site["name"]
        self.value_shape = tuple(value.shape)
        self.dist_shape = tuple(fn.batch_shape + fn.event_shape)
        self.plates = [(f.name, f.size) for f in site["cond_indep_stack"] if f.dim is not None]
        super().__init__(f"observed site {self.site!r} has a distribution of shape {self.dist_shape} "
                         f"but its value has shape {self.value_shape}")

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
    """The message for a failed run of the ``what`` on ``x`` (``copies`` stacked copies of the
    data); ``unvalidated``: the run's trace without validation (or None), ``run()`` reruns it."""
    n = x.shape[0] // copies
    shape = (n,) + tuple(x.shape[1:])
    found = (_observed_rows(err, x, n, copies) if isinstance(err, ObservedShapeError) else None) \
        or (_support(unvalidated) if unvalidated is not None else None) \
        or _dtype(err, run, x) or _event_shape(err, x, n, copies)
    if found:
        return found
    stacked = f" (run as {copies} stacked copies: shape {tuple(x.shape)})" if copies > 1 else ""
    return (f"running the {what} on x of shape {shape}{stacked} failed ({short(err)}); check that "
            f"x has shape (N, *event_shape) matching the observed site, and model_args/model_kwargs"
            f"{about_args}")


def integer_data(err: BaseException, x: Tensor, what: str, runs: Callable[[Tensor], bool]
                 ) -> str | None:
    """Integer (or boolean) ``x`` where the program needs floats: it failed on ``x`` and ``runs``
    (the program run again) succeeds on ``x`` cast to a floating dtype. None otherwise."""
    if x.is_floating_point() or x.is_complex():
        return None
    casts = [_CAST[dtype] for dtype in (torch.float32, torch.float64) if runs(x.to(dtype))]
    if not casts:
        return None
    fix = casts[0] + (f" (or {casts[1]}, to compute in float64)" if len(casts) > 1 else "")
    return (f"x is {str(x.dtype).replace('torch.', '')} and running the {what} on it failed "
            f"({short(err)}): the {what} computes with floating-point values where it reads x, and "
            f"it runs on {' and '.join(casts)}; pass {fix}")


def _observed_rows(err: ObservedShapeError, x: Tensor, n: int, copies: int) -> str | None:
    """An observed value that does not follow the rows of x, or a data plate sized from elsewhere."""
    value, dist, rows, name = err.value_shape, err.dist_shape, x.shape[0], err.site
    if not value or len(value) != len(dist) or value[1:] != dist[1:]:
        return None
    run_as = (f"{copies} {'copy' if copies == 1 else 'copies'} of {n} examples: pyrolik folds "
              "its chains into the plate over the examples and evaluates x in batches")
    if dist[0] == rows and value[0] != rows:
        return (f"the value of observed site {name!r} has {value[0]} rows, but the model runs on "
                f"{rows} rows ({run_as}): the value was fixed outside the model's argument x, e.g. "
                "by pyro.condition(model, data=...) or poutine.condition, and cannot follow those "
                f"rows. Observe the model's argument instead: pyro.sample({name!r}, ..., obs=x)")
    if value[0] == rows and dist[0] != rows:
        plate = next((p for p, size in err.plates if size == dist[0]), "data")
        return (f"the distribution of observed site {name!r} has {dist[0]} rows, but x is run as "
                f"{rows} rows ({run_as}): the model sizes its plate over the examples from something "
                f"other than x (an argument, a constant); size the plate from x, "
                f"pyro.plate({plate!r}, x.shape[0])")
    return None


def _support(tr) -> str | None:
    """An observed site whose value lies outside its distribution's support."""
    for name, site in sample_nodes(tr):
        if not site["is_observed"]:
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
               if base_constraint(fn.support) is constraints.boolean else
               "transform x into the support, or use a likelihood whose support holds x")
        return (f"observed site {name!r} has support {fn.support} but x holds values outside it "
                f"(x ranges over [{lo:.4g}, {hi:.4g}], e.g. {example:.4g}): {fix}")
    return None


def _dtype(err: BaseException, run: Callable[[], Any], x: Tensor) -> str | None:
    """x of one floating dtype, the program's parameters of another."""
    if "type" not in str(err).lower():  # also "dtype"
        return None
    params: dict[str, torch.dtype] = {}

    def hook(module: nn.Module, args) -> None:
        for pname, p in module.named_parameters(recurse=False):
            if p.is_floating_point():
                params.setdefault(f"{type(module).__name__}.{pname}", p.dtype)

    handle = register_module_forward_pre_hook(hook)
    try:  # the run fails again; the hook saw what it called
        with torch.no_grad(), torch.random.fork_rng(), contextlib.suppress(Exception):
            run()
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
    cast = _CAST.get(dtype, f"x.to({dtype})")
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
    if copies > 1 and int(site_size) == n and n not in x.shape[1:]:  # a row per example, unstacked
        return (f"site {site!r} has {n} rows, one per example of x, where pyro.plate({plate!r}) "
                f"runs over the {plate_size} rows of {copies} stacked copies of x: a per-example "
                "tensor the program reads itself (a pyro.param of shape (N, ...), a global tensor) "
                "does not follow the copies. Pass such a tensor in model_args/model_kwargs; for a "
                "guide fitted per example, use a Pyro AutoGuide (AutoNormal) fitted on x, or an "
                "amortised encoder (docs/idioms.md)")
    event = x.dim() - 1
    return (f"site {site!r} has {site_size} values along dim {dim}, where pyro.plate({plate!r}) runs "
            f"over the {n} examples of x: the data dimensions of a site are event dimensions, so "
            f"declare them with .to_event, e.g. dist.Normal(loc, scale).to_event({max(event, 1)})"
            + (f" (the data were run as {copies} stacked copies)" if copies > 1 else ""))
