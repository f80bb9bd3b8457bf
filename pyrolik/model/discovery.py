"""Discovery: trace a model once to find its latent sites, observed sites and plate over the examples.

The model is traced on the data as the estimators will run it (``K`` stacked copies of ``x``) and on
twice as many rows: the data plate is the plate around the observed sites whose size follows the
number of rows. What discovery finds is frozen in a :class:`~pyrolik.model.layout.Layout`. Every
failure is a ``ValueError``/``TypeError`` that names the site and the fix (``API.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyro
import torch
from pyro.poutine.util import site_is_subsample
from torch import Tensor
from torch.distributions import biject_to

from pyrolik._random import fork_rng_from
from pyrolik.model.layout import Layout, SiteLayout
from pyrolik.model.messenger import plate_frame

__all__ = ["discover", "check_guide_sites", "sample_sites", "trace_or_explain"]

ModelFn = Callable[..., Any]


def discover(model: ModelFn, x_rep: Tensor, num_chains: int, args: tuple, kwargs: dict) -> Layout:
    """The :class:`Layout` of ``model`` run on ``x_rep`` (``num_chains`` stacked copies of the data)."""
    rows = x_rep.shape[0]
    tr = trace_or_explain(model, x_rep, args, kwargs, "model", num_chains)
    tr_2 = trace_or_explain(model, torch.cat([x_rep, x_rep]), args, kwargs, "model",
                            2 * num_chains)
    plate_name = _find_plate(tr, tr_2, rows)
    sites = _layout(tr, plate_name, rows)
    observed = tuple(s["name"] for s in sample_sites(tr) if s["is_observed"])
    supports = {s.name: tr.nodes[s.name]["fn"].support for s in sites}
    return Layout(plate_name, num_chains, rows // num_chains, sites, observed, supports)


def check_guide_sites(guide: ModelFn, x_rep: Tensor, num_chains: int, args: tuple, kwargs: dict,
                      layout: Layout) -> None:
    """Raise unless ``guide`` samples exactly the model's latent sites."""
    tr_g = trace_or_explain(guide, x_rep, args, kwargs, "guide", num_chains)
    guide_latents = {s["name"] for s in sample_sites(tr_g) if not s["is_observed"]}
    missing = [s.name for s in layout.sites if s.name not in guide_latents]
    if missing:
        raise ValueError(
            f"the guide misses the latent site(s) {missing}: a guide must sample every latent "
            "site of the model, under the same name"
        )
    extra = sorted(guide_latents - {s.name for s in layout.sites})
    if extra:
        raise ValueError(f"the guide samples site(s) {extra} that are not latent in the model")


def sample_sites(tr) -> list[dict]:
    """The sample sites of a trace that carry a density (no deterministic or subsample sites)."""
    return [s for s in tr.nodes.values()
            if s["type"] == "sample" and not s["infer"].get("_deterministic")
            and not site_is_subsample(s)]


def _get_trace(fn: ModelFn, x: Tensor, args: tuple, kwargs: dict, validate: bool):
    with fork_rng_from(None), torch.no_grad(), pyro.validation_enabled(validate):
        tr = pyro.poutine.trace(fn).get_trace(x, *args, **kwargs)
        for s in sample_sites(tr):
            if s["is_observed"]:
                _check_observed_shape(s)
        tr.compute_log_prob()
    return tr


def _any_not_finite(tr) -> bool:
    """Whether some log-density of the trace is NaN or inf."""
    return any(bool((~torch.isfinite(s["log_prob"])).any()) for s in sample_sites(tr))


def _short(err: BaseException) -> str:
    """Pyro's error message without its tensor dumps and trace tables."""
    keep = []
    for line in str(err).strip().splitlines():
        text = line.strip()
        if text.startswith("Trace Shapes"):
            break
        if text and not text.startswith(("tensor(", "[", "(", "-")) and not text[0].isdigit():
            keep.append(text)
    return " ".join(keep)[:600] or type(err).__name__


def trace_or_explain(fn: ModelFn, x: Tensor, args: tuple, kwargs: dict, what: str, copies: int = 1):
    """Trace ``fn`` on ``x`` (``copies`` stacked copies of the user's data, for the message)."""
    try:
        return _get_trace(fn, x, args, kwargs, validate=True)
    except (ValueError, RuntimeError, IndexError) as err:
        # A model whose density is NaN for some examples fails Pyro's validation; let it through
        # (the structure is all discovery needs) so that the estimators flag those examples.
        try:
            tr = _get_trace(fn, x, args, kwargs, validate=False)
        except (ValueError, RuntimeError, IndexError):
            tr = None
        if tr is not None and _any_not_finite(tr):
            return tr
        shape = (x.shape[0] // copies,) + tuple(x.shape[1:])
        stacked = f" (run as {copies} stacked copies: shape {tuple(x.shape)})" if copies > 1 else ""
        raise ValueError(
            f"running the {what} on x of shape {shape}{stacked} failed ({_short(err)}); check that "
            "x has shape (N, *event_shape) matching the observed site, and model_args/model_kwargs"
        ) from err


def _check_observed_shape(site: dict) -> None:
    fn, value = site["fn"], site["value"]
    expected = tuple(fn.batch_shape + fn.event_shape)
    if tuple(value.shape) != expected:
        raise ValueError(
            f"observed site {site['name']!r} has a distribution of shape {expected} but its value "
            f"has shape {tuple(value.shape)}"
        )


def _find_plate(tr_n, tr_2n, n: int) -> str:
    """The data plate: the plate around the observed sites whose size follows the number of examples."""
    observed = [s for s in sample_sites(tr_n) if s["is_observed"]]
    if not observed:
        raise ValueError(
            "the model has no observed site: condition its observation-noise site on the data, "
            "e.g. pyro.sample('x', dist.Normal(decoder(z), sigma).to_event(1), obs=x)"
        )
    names = None
    for s in observed:
        sizes_n = {f.name: f.size for f in s["cond_indep_stack"]}
        sizes_2n = {f.name: f.size for f in tr_2n.nodes[s["name"]]["cond_indep_stack"]}
        cand = {k for k, v in sizes_n.items() if v == n and sizes_2n.get(k) == 2 * n}
        names = cand if names is None else names & cand
    if not names:
        raise ValueError(
            "no plate over the examples: wrap the model's sample sites in "
            "`with pyro.plate('data', x.shape[0]):` so that dim 0 of x indexes examples"
        )
    if len(names) > 1:
        raise ValueError(f"several plates {sorted(names)} follow the number of examples; use one")
    return names.pop()


def _layout(tr, plate_name: str, n: int) -> tuple[SiteLayout, ...]:
    sites, offset = [], 0
    for s in sample_sites(tr):
        if s["is_observed"]:
            continue
        fn, name = s["fn"], s["name"]
        if fn.support.is_discrete:
            raise TypeError(
                f"latent site {name!r} is discrete ({type(fn).__name__}); pyrolik's samplers need "
                "continuous latents: marginalise it out in the model (sum over its values)"
            )
        frame = plate_frame(s, plate_name)
        if frame is None:
            raise ValueError(
                f"latent site {name!r} is outside the plate {plate_name!r} over the examples; "
                "every latent must be per-example (global quantities belong in pyro.param)"
            )
        u = biject_to(fn.support).inv(s["value"])
        batch_ndim = len(fn.batch_shape)
        plate_index = batch_ndim + frame.dim
        per_example = u.movedim(plate_index, 0)
        if per_example.shape[0] != n:
            raise ValueError(f"latent site {name!r} has {per_example.shape[0]} rows, expected {n}")
        shape = tuple(per_example.shape[1:])
        size = int(per_example[0].numel())
        sites.append(SiteLayout(name, offset, size, shape, plate_index))
        offset += size
    if not sites:
        raise ValueError("the model has no latent site: there is nothing to integrate out")
    return tuple(sites)
