r"""Pyro constructs, each evaluated as the model's density or refused in words (``docs/idioms.md``)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from unittest import mock

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions.torch_distribution import MaskedDistribution
from pyro.distributions.util import scale_and_mask
from pyro.poutine.block_messenger import BlockMessenger
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample
from torch import Tensor
from torch.distributions import Independent

from pyrolik.exceptions import IdiomWarning
from pyrolik.model.arguments import ModelFn
from pyrolik.model.messenger import is_subsample, is_zero_density, plate_indices

__all__ = ["IdiomWarning", "Watch", "check_sites", "check_subsampling", "check_index_free",
           "check_masked_latents", "subsampled_plates"]


class _FixedIndices(Messenger):
    """Give every plate fixed indices (:func:`~pyrolik.model.messenger.plate_indices`)."""

    def __init__(self, shift: int = 0):
        super().__init__()
        self.shift = shift

    def _pyro_sample(self, msg: dict) -> None:
        if is_subsample(msg) and msg["value"] is None:
            msg["value"] = plate_indices(msg["fn"], self.shift)


class Watch:
    """What a traced run hid from its tracer: the sample sites stopped by ``poutine.block``."""

    def __init__(self) -> None:
        self.blocked: list[tuple[str, bool]] = []  # (site, observed)

    @contextlib.contextmanager
    def __call__(self, shift: int = 0) -> Iterator[Watch]:
        original = BlockMessenger._process_message
        blocked = self.blocked

        def process(messenger, msg):
            original(messenger, msg)
            if msg["stop"] and msg["type"] == "sample" and not site_is_subsample(msg):
                blocked.append((msg["name"], bool(msg["is_observed"])))

        with mock.patch.object(BlockMessenger, "_process_message", process), _FixedIndices(shift):
            yield self

    def refuse_blocked(self, what: str) -> None:
        """Raise if a sample site of the ``what`` ("model"/"guide") was hidden by ``poutine.block``."""
        if not self.blocked:
            return
        name, observed = self.blocked[0]
        effect = ("its density would be left out of log p(x)" if observed else
                  "it would draw a new value at every evaluation, which pyrolik cannot integrate out")
        raise ValueError(
            f"poutine.block hides the {'observed' if observed else 'latent'} sample site {name!r} "
            f"of the {what} from pyrolik: {effect}; remove the block around it (hiding params is "
            "fine: poutine.block(hide_types=['param']))")


def subsampled_plates(tr) -> dict[str, tuple[int, int]]:
    """``{plate: (size, subsample_size)}`` for the plates of a trace that draw a subsample (or, with
    more rows than ``size``, would: chains x examples beyond a data set's size)."""
    out = {}
    for name, site in tr.nodes.items():
        if site["type"] == "sample" and site_is_subsample(site):
            fn = site["fn"]
            if fn.subsample_size is not None and fn.subsample_size != fn.size:
                out[name] = (fn.size, fn.subsample_size)
    return out


def check_subsampling(tr, tr_2, rows: int, plate_name: str | None) -> None:
    """Refuse subsampling plates other than one over the examples whose subsample is the rows."""
    doubled = subsampled_plates(tr_2)
    for name, (size, sub) in subsampled_plates(tr).items():
        if plate_name is None:
            if size == rows and doubled.get(name, (None,))[0] == 2 * rows:
                raise ValueError(
                    f"pyro.plate({name!r}, ..., subsample_size={sub}) draws {sub} of the examples "
                    "at each call: pyrolik evaluates every example of x, so run the plate over all "
                    f"of them when evaluating (subsample_size=None; e.g. make it an argument of the "
                    "model and pass model_kwargs)")
        elif name != plate_name:
            raise ValueError(
                f"pyro.plate({name!r}, {size}, subsample_size={sub}) subsamples inside each "
                f"example: pyrolik needs every example's full density; set subsample_size=None "
                "when evaluating")


def check_index_free(fn: ModelFn, x: Tensor, args: tuple, kwargs: dict, tr, plate: str,
                     what: str, trace: Callable) -> None:
    """Refuse a ``what`` whose density reads the indices of the subsampling ``plate``."""
    values = {name: site["value"] for name, site in tr.nodes.items()
              if site["type"] == "sample" and not site["is_observed"] and not site_is_subsample(site)
              and not site["infer"].get("_deterministic")}
    other = trace(pyro.poutine.condition(fn, data=values), x, args, kwargs, shift=1)
    size, _ = subsampled_plates(tr)[plate]
    for name, site in tr.nodes.items():
        if site["type"] != "sample" or site_is_subsample(site) or site["infer"].get("_deterministic"):
            continue
        again = other.nodes.get(name)
        if again is None or not _same_log_prob(site, again):
            raise ValueError(
                f"the {what} reads the subsample indices of pyro.plate({plate!r}, {size}, "
                f"subsample_size=...) (site {name!r} changes with them): they say which of the "
                f"{size} rows x holds, which pyrolik cannot know. Pass the rows' indices "
                f"explicitly: pyro.plate({plate!r}, {size}, subsample=idx) with idx a per-example "
                f"argument (a plate over x itself, pyro.plate({plate!r}, len(x)), would number the "
                "rows pyrolik runs, chains x examples, not the examples)")


def _same_log_prob(a: dict, b: dict) -> bool:
    with torch.no_grad():
        try:
            la = a["fn"].log_prob(a["value"])
            lb = b["fn"].log_prob(b["value"])
        except (ValueError, RuntimeError):
            return False
        return la.shape == lb.shape and torch.allclose(la, lb, equal_nan=True)


def check_sites(tr, what: str) -> None:
    """Refuse ``pyro.factor`` and point-mass latents; warn once when a scale is left out."""
    scaled = []
    for name, site in tr.nodes.items():
        if site["type"] != "sample" or site_is_subsample(site) or site["infer"].get("_deterministic"):
            continue
        fn = site["fn"]
        if isinstance(fn, dist.Unit) and site["is_observed"]:
            raise ValueError(
                f"pyro.factor({name!r}, ...) adds an unnormalised term to the {what}'s log density: "
                "pyrolik cannot tell a normalised log-likelihood of x (log p(x) is then defined) from "
                "a penalty or a prior term (it is not). If it is the log-likelihood of x, write it "
                f"as an observed site, pyro.sample({name!r}, SomeDistribution(...), obs=x)")
        if not site["is_observed"] and _is_point_mass(fn):
            raise ValueError(
                f"latent site {name!r} of the {what} is a point mass ({type(fn).__name__}): it has "
                f"no density over its values; write it as pyro.deterministic({name!r}, value)")
        if what == "model":
            factor = _user_scale(site)
            if factor is not None:
                scaled.append((name, factor))
            if site["is_observed"]:
                _warn_outside_support(name, site)
    if scaled:
        names = ", ".join(f"{n!r} (x{f})" for n, f in scaled[:4])
        warnings.warn(
            f"pyrolik evaluates the model unscaled: site(s) {names} carry a scale from "
            "poutine.scale or another scale messenger (KL annealing, a 1/N normaliser of the ELBO); "
            "the estimate is log p(x) of the model without it (a scale of 0 used as a mask: use "
            "poutine.mask instead)",
            IdiomWarning, stacklevel=4,
        )


def _warn_outside_support(name: str, site: dict) -> None:
    """Warn of an observed value outside its support that ``validate_args=False`` let through."""
    fn = site["fn"]
    if site["mask"] is not None or _value_mask(site) is not None:
        return
    try:
        with torch.no_grad():
            ok = bool(fn.support.check(site["value"]).all())
    except (RuntimeError, ValueError, NotImplementedError, TypeError):
        return
    if not ok:
        warnings.warn(
            f"observed site {name!r} has support {fn.support} and x holds values outside it "
            f"(its distribution was built with validate_args=False): pyrolik evaluates the model's "
            "log-density as written, which is not a normalised density of such x (for grey levels "
            "use dist.ContinuousBernoulli, or binarize x)",
            IdiomWarning, stacklevel=4,
        )


def _is_point_mass(fn) -> bool:
    while isinstance(fn, (Independent, MaskedDistribution)):
        fn = fn.base_dist
    return isinstance(fn, dist.Delta)


def _user_scale(site: dict) -> str | None:
    """The site's scale beyond its subsampling plates' ``size / subsample_size``, shown; None if 1."""
    scale = site["scale"]
    for frame in site["cond_indep_stack"]:
        full = getattr(frame, "full_size", None)
        if full is not None and frame.size not in (None, -1) and full != frame.size:
            scale = scale / (full / frame.size)
    if isinstance(scale, Tensor):
        if scale.numel() and bool(((scale - 1).abs() <= 1e-9).all()):
            return None
        return f"{float(scale.reshape(-1)[0]):.4g}" + ("..." if scale.numel() > 1 else "")
    return None if abs(float(scale) - 1.0) <= 1e-9 else f"{float(scale):.4g}"


def check_masked_latents(model: ModelFn, x: Tensor, args: tuple, kwargs: dict, tr,
                         latent_names: list[str], trace: Callable) -> None:
    """Refuse a masked latent whose masked entries affect another site; otherwise its mask is lifted.

    Checked by autograd: the log density must have zero gradient at the masked entries.
    """
    masks = {}
    for name in latent_names:
        site = tr.nodes[name]
        m = _value_mask(site)
        if m is not None and not bool(m.all()):
            masks[name] = m
    if not masks:
        return
    values = {name: tr.nodes[name]["value"].detach().clone().requires_grad_(name in masks)
              for name in latent_names}
    with torch.enable_grad():
        tr_c = trace(pyro.poutine.condition(model, data=values), x, args, kwargs, no_grad=False)
        total = 0.0
        for site in tr_c.nodes.values():
            if site["type"] != "sample" or site_is_subsample(site) or is_zero_density(site["fn"]) \
                    or site["infer"].get("_deterministic"):
                continue
            total = total + scale_and_mask(site["fn"].log_prob(site["value"]), 1.0,
                                           site["mask"]).sum()
        if not isinstance(total, Tensor) or not total.requires_grad:
            return  # nothing depends on the masked latents at all
        grads = torch.autograd.grad(total, [values[n] for n in masks], allow_unused=True)
    for (name, m), g in zip(masks.items(), grads, strict=True):
        if g is not None and bool((g.abs() * ~m).sum() > 0):
            raise ValueError(
                f"a mask (poutine.mask or .mask()) hides part of the prior density of latent site "
                f"{name!r}, and its masked entries affect other sites: the model's density is "
                "improper there, so log p(x) is not defined. Mask observed sites only (a masked "
                "observation is one that is not observed); give the latent its full prior")


def _value_mask(site: dict) -> Tensor | None:
    """The site's masks (``poutine.mask`` and ``.mask()``) as a boolean over its value; None if none."""
    value, fn = site["value"], site["fn"]
    m = None

    def combine(mask, pad: int):
        nonlocal m
        if mask is None or mask is True:
            return
        t = torch.as_tensor(mask, device=value.device).bool()
        t = t.reshape(t.shape + (1,) * pad)
        m = t if m is None else m & t

    combine(site["mask"], len(fn.event_shape))
    while isinstance(fn, (Independent, MaskedDistribution)):
        if isinstance(fn, MaskedDistribution):
            combine(fn._mask, len(fn.event_shape))
        fn = fn.base_dist
    return None if m is None else m.expand(value.shape)
