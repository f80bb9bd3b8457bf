r"""The effect handler behind every evaluation: set the latents, sum each site's log-density per row
(unscaled, unsubsampled, enumerated sites summed out: ``docs/idioms.md``); Bernoulli and Normal
sites take a path with fewer full-size operations (equal up to summation order)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, cast

import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import MaskedDistribution
from pyro.distributions.util import scale_and_mask
from pyro.poutine.messenger import Messenger
from pyro.poutine.runtime import Message
from pyro.poutine.util import site_is_subsample
from torch import Tensor
from torch.distributions import Bernoulli, Independent, Normal, biject_to
from torch.nn.functional import binary_cross_entropy_with_logits

from pyrolik.model.supports import is_real, mappable_support, pushed_forward

__all__ = ["HALF_LOG_2PI", "SiteDensities", "SiteRecord", "base_and_event_ndim", "is_normal",
           "is_subsample", "is_zero_density", "normal_log_prob_and_score",
           "per_row_log_prob", "plate_frame", "plate_indices", "sample_nodes", "sum_to_rows",
           "unmasked"]

class SiteRecord(NamedTuple):
    """One latent site as one run saw it (read by :class:`~pyrolik.model.evaluation.KeptGuide`)."""

    name: str
    fn: object  # the site's distribution
    plate_dim: int
    transformed: bool  # the site's support is not the real line


def plate_frame(msg: dict, plate_name: str):
    """The frame of the plate ``plate_name`` around a site, or None."""
    return next((f for f in msg["cond_indep_stack"] if f.name == plate_name), None)


def plate_indices(fn: Any, shift: int = 0) -> Tensor:
    """A plate's indices, never random: ``arange(size)``, or ``(arange(subsample_size) + shift) %
    size`` for a plate that subsamples."""
    if fn.subsample_size is None or fn.subsample_size == fn.size:
        return torch.arange(fn.size, device=fn.device)
    return (torch.arange(fn.subsample_size, device=fn.device) + shift) % fn.size


def is_subsample(msg: dict[str, Any]) -> bool:
    """Pyro's ``site_is_subsample`` for a message handled as a plain dict: a plate's subsample site."""
    return site_is_subsample(cast(Message, msg))


def sample_nodes(tr) -> Iterator[tuple[str, dict]]:
    """``(name, node)`` of a trace's sample sites, but subsample and deterministic ones."""
    return ((name, s) for name, s in tr.nodes.items() if s["type"] == "sample"
            and not site_is_subsample(s) and not s["infer"].get("_deterministic"))


def is_zero_density(fn) -> bool:
    """A site whose density is masked off entirely (``pyro.deterministic``, reparameterisers)."""
    return isinstance(fn, MaskedDistribution) and fn._mask is False


def unmasked(fn):
    """``fn`` without distribution-level masks (``.mask(m)``, also under ``.to_event``)."""
    if isinstance(fn, MaskedDistribution):
        return unmasked(fn.base_dist)
    if isinstance(fn, Independent) and isinstance(fn.base_dist, (MaskedDistribution, Independent)):
        base = unmasked(fn.base_dist)
        if base is not fn.base_dist:
            return type(fn)(base, fn.reinterpreted_batch_ndims, validate_args=False)
    return fn


HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def per_row_log_prob(fn, value: Tensor, mask, plate_dim: int, rows: int, site: str) -> Tensor:
    """``fn.log_prob(value)`` under Pyro's ``mask`` (sites are unscaled) summed over every dim but
    ``plate_dim`` (the data plate's, negative, in the site's batch shape): ``(rows,)``."""
    if mask is None:
        base, event_ndim = base_and_event_ndim(fn)
        neg = _neg_log_prob_sum(base, value, event_ndim)
        if neg is not None:
            return -sum_to_rows(neg, plate_dim, rows, site)
    lp = scale_and_mask(fn.log_prob(value), 1.0, mask)
    return sum_to_rows(lp, plate_dim, rows, site)


def normal_log_prob_and_score(fn, value: Tensor, plate_dim: int, rows: int, site: str
                              ) -> tuple[Tensor, Tensor] | None:
    r"""``(log_prob (rows,), score)`` of an unmasked Normal latent site whose ``loc`` and ``sigma``
    need no gradient, the score :math:`-(v - \mu) / \sigma^2` without autograd; None otherwise."""
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
    return log_prob if log_prob.dim() == 1 else log_prob.movedim(dim, 0).reshape(rows, -1).sum(-1)


def base_and_event_ndim(fn):
    """``(base distribution, number of event dims it sums)`` of a plain ``Independent`` wrapper."""
    if isinstance(fn, Independent) and type(fn).log_prob is Independent.log_prob:
        return fn.base_dist, fn.reinterpreted_batch_ndims
    return fn, 0


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


def enum_to_rows(log_prob: Tensor, plate_dim: int, batch_dims: int) -> Tensor:
    """Sum over the last ``batch_dims`` dims but the data plate's, keeping ``(*enum, rows)``."""
    while log_prob.dim() < batch_dims:
        log_prob = log_prob.unsqueeze(0)
    log_prob = log_prob.movedim(plate_dim, -1)
    if batch_dims > 1:
        log_prob = log_prob.sum(tuple(range(-batch_dims, -1)))
    return log_prob


def _plus(total: Tensor | float, term: Tensor) -> Tensor:
    """Running per-row sum; the first term is taken as it is (no ``0.0 + x`` in the graph)."""
    return term if isinstance(total, float) else total + term


class SiteDensities(Messenger):
    """Set latent sites to ``values`` (``None``: sample and record them) and accumulate per-row
    log-densities in ``log_latent`` and ``log_obs``; ``scores`` and ``records`` as asked for."""

    def __init__(self, plate_name: str, rows: int, values: dict[str, Tensor] | None,
                 unconstrained: bool, scores: bool = False, memo: dict | None = None,
                 record: bool = False, enum_dims: int | None = None,
                 supports: Mapping[str, constraints.Constraint] | None = None):
        super().__init__()
        self.supports = supports  # the model's supports (the layout's), for guides
        self.enum_dims = enum_dims  # batch dims right of Pyro's enumeration dims; None: no sums
        self._enum_latent: Tensor | float = 0.0
        self._enum_obs: Tensor | float = 0.0
        self.records: list[SiteRecord] | None = [] if record else None
        self.memo = {} if memo is None else memo  # kept by the caller across evaluations
        self.want_scores = scores  # Normal latents' closed-form scores (normal_log_prob_and_score)
        self.scores: dict[str, Tensor] = {}
        self.plate_name, self.rows = plate_name, rows
        self.given, self.unconstrained = values, unconstrained
        self.values: dict[str, Tensor] = {}
        self.log_latent: Tensor | float = 0.0
        self.log_obs: Tensor | float = 0.0
        self._ladj: dict[str, Tensor] = {}

    def _pyro_param(self, msg: dict) -> None:
        # pyro.module registers each parameter at every call; the store hands back the module's own
        # tensor, so once seen, hand it back directly (saves the store's bookkeeping in the hot loop)
        args = msg["args"]
        if len(args) > 1 and args[1] is not None and self.memo.get(("param", msg["name"])) is args[1]:
            msg["value"] = args[1]

    def _pyro_post_param(self, msg: dict) -> None:
        args = msg["args"]
        if len(args) > 1 and isinstance(args[1], Tensor) and msg["value"] is args[1]:
            self.memo[("param", msg["name"])] = args[1]

    def _pyro_sample(self, msg: dict) -> None:
        if is_subsample(msg):
            self._full_plate_indices(msg)
            return
        if msg["is_observed"] or self.given is None \
                or msg["infer"].get("_enumerate_dim") is not None:
            return
        name = msg["name"]
        if name not in self.given:
            raise ValueError(
                f"latent site {name!r} appeared that was not in the first trace of the model; "
                "pyrolik needs a fixed set of latent sites per example")
        value = self.given[name]
        if self.unconstrained:
            t = self._transform(msg["fn"], name)
            if t is not None:
                z = t(value)
                self._ladj[name] = t.log_abs_det_jacobian(value, z)
                value = z
        msg["value"] = value

    def _transform(self, fn: Any, name: str):
        """``biject_to(support)`` of ``fn``, None on the real line; else the model's (layout's) map."""
        support = mappable_support(fn.support)
        if is_real(support) and self.supports is not None and name in self.supports \
                and pushed_forward(fn) is not None:
            support = self.supports[name]
        if is_real(support):
            return None
        try:
            return biject_to(support)
        except NotImplementedError:
            if self.supports is None or name not in self.supports:
                raise
            support = self.supports[name]
            return None if is_real(support) else biject_to(support)

    def _full_plate_indices(self, msg: dict) -> None:
        """A plate's fixed indices (:func:`plate_indices`), made once, not at every call."""
        fn = msg["fn"]
        if msg["value"] is not None or getattr(fn, "use_cuda", None) is not None:
            return
        key = ("plate", fn.size, fn.subsample_size, str(fn.device))
        if key not in self.memo:
            self.memo[key] = plate_indices(fn)
        msg["value"] = self.memo[key]

    def _pyro_post_sample(self, msg: dict) -> None:
        if msg["infer"].get("_deterministic") or is_subsample(msg) or is_zero_density(msg["fn"]):
            return
        frame = plate_frame(msg, self.plate_name)
        name = msg["name"]
        if frame is None:
            kind = "observed" if msg["is_observed"] else "latent"
            raise ValueError(
                f"{kind} site {name!r} is outside the plate {self.plate_name!r} over the examples; "
                "pyrolik estimates per-example log p(x): put every sample site inside the data plate "
                "(for a model with global latents, pyrolik.evidence estimates log p(x_1..N) of the "
                "whole data set)")
        # unscaled; masks kept on observed sites only (``docs/idioms.md``)
        observed = msg["is_observed"]
        fn = msg["fn"] if observed else unmasked(msg["fn"])
        mask = msg["mask"] if observed else None
        if self.records is not None and not observed:
            self.records.append(SiteRecord(name, fn, frame.dim, name in self._ladj))
        if self.enum_dims is not None:
            self._add_enumerated(msg, fn, mask, frame.dim, self.enum_dims)
            return
        if self.want_scores and not observed and name not in self._ladj:
            found = normal_log_prob_and_score(fn, msg["value"], frame.dim, self.rows, name)
            if found is not None:
                self.log_latent = _plus(self.log_latent, found[0])
                self.scores[name] = found[1]
                return
        lp = per_row_log_prob(fn, msg["value"], mask, frame.dim, self.rows, name)
        if observed:
            self.log_obs = _plus(self.log_obs, lp)
            return
        ladj = self._ladj.pop(name, None)
        if ladj is not None:
            lp = lp + sum_to_rows(self._ladj_to_batch(ladj, fn), frame.dim, self.rows, name)
        self.log_latent = _plus(self.log_latent, lp)
        if self.given is None:
            self.values[name] = msg["value"]

    @staticmethod
    def _ladj_to_batch(ladj: Tensor, fn) -> Tensor:
        """The Jacobian term summed over the site's event dims (to its batch shape)."""
        batch_ndim = len(fn.batch_shape)
        while ladj.dim() > batch_ndim:
            ladj = ladj.sum(-1)
        return ladj

    def _add_enumerated(self, msg: dict, fn, mask, plate_dim: int, enum_dims: int) -> None:
        """Accumulate a site's log-density keeping Pyro's enumeration dims (summed in ``__exit__``)."""
        lp = enum_to_rows(scale_and_mask(fn.log_prob(msg["value"]), 1.0, mask), plate_dim,
                          enum_dims)
        if msg["is_observed"]:
            self._enum_obs = _plus(self._enum_obs, lp)
            return
        ladj = self._ladj.pop(msg["name"], None)
        if ladj is not None:
            lp = lp + enum_to_rows(self._ladj_to_batch(ladj, fn), plate_dim, enum_dims)
        self._enum_latent = _plus(self._enum_latent, lp)

    def __exit__(self, *args, **kwargs):
        if self.enum_dims is not None and isinstance(self._enum_latent, Tensor):
            latent = self._enum_latent
            joint = latent + self._enum_obs if isinstance(self._enum_obs, Tensor) else latent
            rows = joint.shape[-1]
            self.log_latent = latent.reshape(-1, latent.shape[-1]).logsumexp(0).expand(rows)
            self.log_obs = joint.reshape(-1, rows).logsumexp(0) - self.log_latent
        return super().__exit__(*args, **kwargs)
