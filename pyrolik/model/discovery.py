"""Discovery: trace a model once to find its latent sites, observed sites and plate over the
examples, and how many entries of each example it observes: the :math:`D` of bits per dimension
(``docs/units.md``)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyro
import torch
from pyro.distributions.torch_distribution import ExpandedDistribution, MaskedDistribution
from torch import Tensor
from torch.distributions import Independent

from pyrolik._random import fork_rng_from
from pyrolik.exceptions import IdiomWarning
from pyrolik.model.arguments import ModelFn, describe_arguments, repeat_arguments
from pyrolik.model.hints import ObservedShapeError, Refusal, explain, integer_data, short
from pyrolik.model.messenger import is_zero_density, plate_frame, sample_nodes, sum_to_rows
from pyrolik.model.modules import (
    Watch,
    check_index_free,
    check_masked_latents,
    check_sites,
    check_subsampling,
    eval_mode,
    subsampled_plates,
)
from pyrolik.model.supports import (
    Layout,
    SiteLayout,
    check_circular_guide,
    check_fixed_supports,
    check_guide_supports,
    circular_sites,
    mappable_support,
    to_unconstrained,
)

__all__ = ["Tracer", "alternative_data", "check_guide_sites", "count_observed", "discover",
           "entry_mask", "sample_sites", "site_mask", "trace_guide", "trace_or_explain",
           "warn_unread"]


@dataclass
class Tracer:
    """Traces a model or guide as pyrolik evaluates it: fixed plate indices, modules in eval mode,
    ``poutine.block`` watched; ``flipped`` collects the modules found in training mode."""

    watch: Watch = field(default_factory=Watch)
    flipped: list = field(default_factory=list)

    def __call__(self, fn: ModelFn, x: Tensor, args: tuple, kwargs: dict, shift: int = 0,
                 no_grad: bool = True, validate: bool = False):
        grad = torch.no_grad() if no_grad else contextlib.nullcontext()
        with fork_rng_from(None), grad, pyro.validation_enabled(validate), self.watch(shift), \
                eval_mode(self.flipped):
            return pyro.poutine.trace(fn).get_trace(x, *args, **kwargs)


def discover(model: ModelFn, x_rep: Tensor, num_chains: int, marked_args: tuple,
             marked_kwargs: dict) -> tuple[Layout, list]:
    """The :class:`Layout` of ``model`` run on ``x_rep`` (``num_chains`` stacked copies of the data,
    arguments marked), and the modules it calls that were in training mode."""
    rows = x_rep.shape[0]
    tracer = Tracer()
    about = describe_arguments(marked_args, marked_kwargs)
    args, kwargs = repeat_arguments(marked_args, marked_kwargs, num_chains)
    tr = trace_or_explain(tracer, model, x_rep, args, kwargs, "model", num_chains, about)
    args_2, kwargs_2 = repeat_arguments(marked_args, marked_kwargs, 2 * num_chains)
    tr_2 = trace_or_explain(tracer, model, torch.cat([x_rep, x_rep]), args_2, kwargs_2, "model",
                            2 * num_chains, about)
    tracer.watch.refuse_blocked("model")
    check_sites(tr, "model")
    check_subsampling(tr, tr_2, rows, None)
    plate_name = _find_plate(tr, tr_2, rows)
    check_subsampling(tr, tr_2, rows, plate_name)
    sites, enumerated = _layout(tr, plate_name, rows)
    if plate_name in subsampled_plates(tr):
        check_index_free(model, x_rep, args, kwargs, tr, plate_name, "model", tracer)
    names = [s.name for s in sites]
    check_masked_latents(model, x_rep, args, kwargs, tr, names, tracer)
    check_fixed_supports(model, x_rep, args, kwargs, tr, names, tracer)
    observed = tuple(s["name"] for s in sample_sites(tr) if s["is_observed"])
    warn_unread(lambda x_alt: Tracer()(model, x_alt, args, kwargs), x_rep, tr, observed)
    supports = {s.name: mappable_support(tr.nodes[s.name]["fn"].support) for s in sites}
    enum_dims = max(len(s["fn"].batch_shape) for s in sample_sites(tr)) if enumerated else None
    counts = count_observed([s for s in sample_sites(tr) if s["is_observed"]], plate_name, rows)
    layout = Layout(plate_name, num_chains, rows // num_chains, sites, observed, supports,
                    enumerated, enum_dims, circular_sites(tr, names), counts[: rows // num_chains])
    return layout, tracer.flipped


def trace_guide(guide: ModelFn, x_rep: Tensor, num_chains: int, marked_args: tuple,
                marked_kwargs: dict):
    """The guide's trace on ``x_rep`` (``num_chains`` copies of the data), or a ``ValueError``."""
    args, kwargs = repeat_arguments(marked_args, marked_kwargs, num_chains)
    return trace_or_explain(Tracer(), guide, x_rep, args, kwargs, "guide", num_chains,
                            describe_arguments(marked_args, marked_kwargs))


def check_guide_sites(guide: ModelFn, x_rep: Tensor, num_chains: int, marked_args: tuple,
                      marked_kwargs: dict, layout: Layout) -> tuple[list, int | None]:
    """Raise unless ``guide`` samples exactly the model's latent sites, with a density pyrolik can
    evaluate; return the modules it calls that were in training mode, and the batch dims right of
    the enumeration dims when the guide samples discrete sites the model sums out (an M2-style
    guide: a mixture proposal, :mod:`pyrolik.model.autoguides`), else None."""
    tracer = Tracer()
    args, kwargs = repeat_arguments(marked_args, marked_kwargs, num_chains)
    tr_g = trace_or_explain(tracer, guide, x_rep, args, kwargs, "guide", num_chains,
                            describe_arguments(marked_args, marked_kwargs))
    tracer.watch.refuse_blocked("guide")
    check_sites(tr_g, "guide")
    guide_latents = {s["name"] for s in sample_sites(tr_g) if not s["is_observed"]}
    missing = [s.name for s in layout.sites if s.name not in guide_latents]
    if missing:
        raise ValueError(
            f"the guide misses the latent site(s) {missing}: a guide must sample every latent "
            "site of the model, under the same name")
    summed = sorted(guide_latents & set(layout.enumerated))
    continuous = [n for n in summed if not tr_g.nodes[n]["fn"].support.is_discrete]
    if continuous:
        raise ValueError(f"the guide samples {continuous} from a continuous distribution, where "
                         "the model sums them out by enumeration: give the guide's site the "
                         "model's discrete support (its q(y | x)), or remove it from the guide")
    extra = sorted(guide_latents - {s.name for s in layout.sites} - set(summed))
    if extra:
        aux = [n for n in extra if tr_g.nodes[n]["infer"].get("is_auxiliary")]
        why = (f" ({aux} marked infer={{'is_auxiliary': True}}: an auxiliary variable makes the "
               "guide's density of the model's latents an integral over it, which pyrolik cannot "
               "evaluate; use a guide without auxiliary sites)" if aux else "")
        raise ValueError(f"the guide samples site(s) {extra} that are not latent in the model{why}")
    _check_guide_layout(tr_g, layout)
    check_guide_supports(tr_g, layout)
    check_circular_guide(tr_g, layout.circular)
    if layout.plate_name in subsampled_plates(tr_g):
        check_index_free(guide, x_rep, args, kwargs, tr_g, layout.plate_name, "guide", tracer)
    enum_dims = max(len(s["fn"].batch_shape) for s in sample_sites(tr_g)) if summed else None
    return tracer.flipped, enum_dims


def _check_guide_layout(tr_g, layout: Layout) -> None:
    """Refuse guide latents outside the model's data plate or of another shape than the model's."""
    like = next(iter(tr_g.nodes[s.name]["value"] for s in layout.sites))
    expected = layout.constrain(torch.zeros(layout.rows, layout.latent_dim, dtype=like.dtype,
                                            device=like.device))
    for s in layout.sites:
        site = tr_g.nodes[s.name]
        if plate_frame(site, layout.plate_name) is None:
            plates = [f.name for f in site["cond_indep_stack"]]
            raise ValueError(
                f"the guide samples {s.name!r} outside the model's plate {layout.plate_name!r} over "
                f"the examples (the guide's plates there: {plates}): pyrolik folds chains into that "
                "plate, in the model and the guide alike; sample it in the guide inside a plate of "
                f"the model's name, pyro.plate({layout.plate_name!r}, x.shape[0])")
        shape, want = tuple(site["value"].shape), tuple(expected[s.name].shape)
        if shape != want:
            raise ValueError(
                f"the guide samples {s.name!r} with shape {shape} where the model's has {want} (on "
                f"{layout.num_chains} chain(s) of {layout.num_examples} examples): give the guide's "
                "site the model's plate dims and event shape (the same dim for "
                f"pyro.plate({layout.plate_name!r}, ...), the same .to_event)")


def sample_sites(tr) -> list[dict]:
    """The sample sites of a trace that carry a density (no deterministic or subsample sites)."""
    return [s for _, s in sample_nodes(tr) if not is_zero_density(s["fn"])]


def _get_trace(tracer: Tracer, fn: ModelFn, x: Tensor, args: tuple, kwargs: dict, validate: bool):
    tr = tracer(fn, x, args, kwargs, validate=validate)
    with fork_rng_from(None), torch.no_grad(), pyro.validation_enabled(validate):
        for s in sample_sites(tr):
            d = s["fn"]
            if s["is_observed"] and tuple(s["value"].shape) != tuple(d.batch_shape + d.event_shape):
                raise ObservedShapeError(s)
        tr.compute_log_prob()
    return tr


def trace_or_explain(tracer: Tracer, fn: ModelFn, x: Tensor, args: tuple, kwargs: dict, what: str,
                     copies: int = 1, about_args: str = ""):
    """Trace ``fn`` on ``x`` (``copies`` stacked copies of the user's data), or raise a
    ``ValueError`` that names the cause (:func:`pyrolik.model.hints.explain`)."""
    try:
        return _get_trace(tracer, fn, x, args, kwargs, validate=True)
    except Refusal:
        raise
    except NotImplementedError as err:
        raise ValueError(
            integer_data(err, x, what, lambda xf: _runs(tracer, fn, xf, args, kwargs))
            or f"running the {what} failed: a site cannot be sampled ({type(err).__name__}: "
               f"{short(err)}); pyrolik draws every latent from its prior, so an improper prior "
               "(e.g. ImproperUniform) cannot be evaluated: give the latent a proper prior") from err
    except (ValueError, RuntimeError, IndexError) as err:
        # A model whose density is NaN for some examples fails Pyro's validation; let it through
        # (the structure is all discovery needs) so that the estimators flag those examples.
        try:
            tr = _get_trace(tracer, fn, x, args, kwargs, validate=False)
        except (ValueError, RuntimeError, IndexError):
            tr = None
        if tr is not None and any(bool((~torch.isfinite(s["log_prob"])).any())
                                  for s in sample_sites(tr)):
            return tr
        raise ValueError(integer_data(err, x, what, lambda xf: _runs(tracer, fn, xf, args, kwargs))
                         or explain(err, tr, lambda: tracer(fn, x, args, kwargs), x, what, copies,
                                    about_args)) from err


def _runs(tracer: Tracer, fn: ModelFn, x: Tensor, args: tuple, kwargs: dict) -> bool:
    """Whether ``fn`` runs on ``x`` (integer data cast to floats, to name the cause)."""
    try:
        _get_trace(tracer, fn, x, args, kwargs, validate=True)
    except (ValueError, RuntimeError, IndexError, NotImplementedError, TypeError):
        return False
    return True


def _find_plate(tr_n, tr_2n, n: int) -> str:
    """The data plate: the plate around the observed sites whose size follows the number of examples."""
    observed = [s for s in sample_sites(tr_n) if s["is_observed"]]
    if not observed:
        raise ValueError(
            "the model has no observed site: condition its observation-noise site on the data, "
            "e.g. pyro.sample('x', dist.Normal(decoder(z), sigma).to_event(1), obs=x)")
    per_site: dict[str, set] = {}
    for s in observed:  # the plates around it whose size follows the number of examples
        sizes, sizes_2n = _plate_sizes(s), _plate_sizes(tr_2n.nodes[s["name"]])
        per_site[s["name"]] = {k for k, v in sizes.items() if v == n and sizes_2n.get(k) == 2 * n}
    names = set.intersection(*per_site.values())
    if not names:
        _refuse_outside(per_site)
        raise ValueError(
            "no plate over the examples: wrap the model's sample sites in "
            "`with pyro.plate('data', x.shape[0]):` so that dim 0 of x indexes examples")
    if len(names) > 1:
        raise ValueError(f"several plates {sorted(names)} follow the number of examples; use one")
    name = names.pop()
    frame = plate_frame(observed[0], name)
    if frame.dim is None:
        raise ValueError(
            f"the plate {name!r} over the examples is sequential (for i in pyro.plate(...)): "
            "pyrolik folds chains into a vectorised plate; write it as "
            f"`with pyro.plate({name!r}, x.shape[0]):` with batched sample sites")
    return name


def _refuse_outside(per_site: dict[str, set]) -> None:
    """Name the observed sites outside the one plate over the examples that the others share."""
    inside = [c for c in per_site.values() if c]
    common = set.intersection(*inside) if inside else set()
    outside = [name for name, c in per_site.items() if not c]
    if outside and len(common) == 1:
        plate = common.pop()
        raise ValueError(
            f"observed site(s) {outside} are outside the plate {plate!r} over the examples: pyrolik "
            "estimates log p(x_n) per example, and an observation shared by all examples is no "
            f"part of any one of them; put every observed site inside pyro.plate({plate!r}, "
            "x.shape[0]) (one value per example), or leave the shared one out when evaluating")


def _plate_sizes(site: dict) -> dict[str, int]:
    """``{plate: size}`` around a site (a plate without a size: the site's batch dim there)."""
    out = {}
    shape = site["fn"].batch_shape
    for f in site["cond_indep_stack"]:
        size = f.size
        if (size is None or size == -1) and f.dim is not None and len(shape) >= -f.dim:
            size = shape[f.dim]
        out[f.name] = size
    return out


def _layout(tr, plate_name: str, n: int) -> tuple[tuple[SiteLayout, ...], tuple[str, ...]]:
    """The continuous latent sites in flat order, and the discrete ones summed out by enumeration."""
    sites, enumerated, offset = [], [], 0
    for s in sample_sites(tr):
        if s["is_observed"]:
            continue
        fn, name = s["fn"], s["name"]
        frame = plate_frame(s, plate_name)
        if fn.support.is_discrete:
            if s["infer"].get("enumerate") != "parallel":
                raise TypeError(
                    f"latent site {name!r} is discrete ({type(fn).__name__}); pyrolik's samplers "
                    "need continuous latents: mark it infer={'enumerate': 'parallel'} (pyrolik then "
                    "sums it out exactly), or marginalise it in the model by hand")
            if frame is None:
                raise ValueError(
                    f"the enumerated site {name!r} is outside the plate {plate_name!r} over the "
                    "examples; pyrolik sums out per-example discrete latents only")
            if "_markov_scope" in s["infer"]:
                raise ValueError(
                    f"the enumerated site {name!r} is inside pyro.markov: pyrolik sums enumerated "
                    "sites jointly and cannot reuse enumeration dimensions along a Markov chain; "
                    "use pyro.markov only around continuous latents")
            enumerated.append(name)
            continue
        if frame is None:
            raise ValueError(
                f"latent site {name!r} is outside the plate {plate_name!r} over the examples: a "
                "global latent, shared by all examples, makes them dependent, so per-example "
                "log p(x_n) is not defined; estimate the evidence of the whole data set, "
                "log p(x_1..N), with pyrolik.evidence(model, x, num_steps=..., num_chains=...) "
                "(and check it with pyrolik.evidence_bdmc), or make the site a pyro.param if it is "
                "a fitted quantity rather than a latent")
        u = to_unconstrained(name, fn, s["value"])
        plate_index = len(fn.batch_shape) + frame.dim
        per_example = u.movedim(plate_index, 0)
        if per_example.shape[0] != n:
            raise ValueError(f"latent site {name!r} has {per_example.shape[0]} rows, expected {n}")
        shape = tuple(per_example.shape[1:])
        size = int(per_example[0].numel())
        sites.append(SiteLayout(name, offset, size, shape, plate_index))
        offset += size
    if not sites:
        raise ValueError("the model has no latent site: there is nothing to integrate out"
                         + (" (its discrete latents are summed out exactly: compute log p(x) "
                            "directly)" if enumerated else ""))
    return tuple(sites), tuple(enumerated)


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


def count_observed(sites: list[dict], plate_name: str, rows: int) -> Tensor:
    """``(rows,)`` float64: the entries the observed ``sites`` (trace nodes) score per row, masks
    included (:func:`site_mask`)."""
    total = torch.zeros(rows, dtype=torch.float64)
    for site in sites:  # the observed scalar entries per batch element (fn.batch_shape)
        k, entries = len(site["fn"].event_shape), site_mask(site)
        entries = (entries.sum(tuple(range(-k, 0))) if k else entries).cpu()
        total = total + sum_to_rows(entries, plate_frame(site, plate_name).dim, rows, site["name"])
    return total


def warn_unread(trace_fn: Callable[[Tensor], Any], x: Tensor, tr, observed: tuple[str, ...]
                ) -> None:
    """Warn when no observed site reads ``x``: none is a view of ``x`` or changes when ``x`` does
    (``trace_fn`` traces the model on other data; silent when the model fails on it)."""
    values = {name: tr.nodes[name]["value"] for name in observed}
    if any(isinstance(v, Tensor) and v.device == x.device  # a view of x
           and v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
           for v in values.values()):
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
