r"""Latent supports pyrolik can sample on: one fixed map from the real line, a normalised density
there (which are mapped, and the fixes for those refused: ``docs/idioms.md``); and the
:class:`Layout`, where a model's latents live: row ``k * N + n`` of the flat unconstrained ``u``
holds chain ``k`` of example ``n``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import ExpandedDistribution, MaskedDistribution
from torch import Tensor
from torch.distributions import Independent, biject_to

from pyrolik.model.arguments import ModelFn

__all__ = ["Layout", "SiteLayout", "base_constraint", "check_circular_guide",
           "check_fixed_supports", "check_guide_supports", "circular_sites", "is_real",
           "mappable_support", "pushed_forward", "refuse_annealing", "to_unconstrained"]

_CIRCULAR = (dist.VonMises, dist.SineBivariateVonMises, dist.SineSkewed)


def _base(fn: Any) -> Any:
    """The distribution under ``.to_event``, ``.mask`` and ``.expand`` wrappers."""
    while isinstance(fn, (Independent, MaskedDistribution, ExpandedDistribution)):
        fn = fn.base_dist
    return fn


# torch >= 2.7 wraps a MixtureSameFamily's support in this constraint (earlier: the components')
_MIXTURE = getattr(constraints, "MixtureSameFamilyConstraint", None)


def mappable_support(support: constraints.Constraint) -> constraints.Constraint:
    """``support`` with every ``MixtureSameFamilyConstraint`` (also under ``.to_event``) replaced by
    its components' support, which ``biject_to`` maps; any other support as it is."""
    if _MIXTURE is not None and isinstance(support, _MIXTURE):
        return mappable_support(support.base_constraint)
    if isinstance(support, constraints.independent):
        base = mappable_support(support.base_constraint)
        if base is not support.base_constraint:
            return constraints.independent(base, support.reinterpreted_batch_ndims)
    return support


def pushed_forward(fn: Any) -> Any:
    """The map of a distribution pushed from the real line that torch reports as ``Real()``, or None."""
    fn = _base(fn)
    if not isinstance(fn, torch.distributions.TransformedDistribution) \
            or not is_real(fn.support) or not is_real(fn.base_dist.support):
        return None
    return torch.distributions.ComposeTransform(list(fn.transforms))


def base_constraint(support: Any) -> Any:
    """``support`` under its ``independent`` wrappers (``.to_event``)."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support


def is_real(support: constraints.Constraint | None) -> bool:
    """Whether a support is the real line (possibly ``independent``): no transform needed."""
    return base_constraint(support) is constraints.real


def to_unconstrained(name: str, fn: Any, value: Tensor) -> Tensor:
    """``biject_to(support).inv(value)`` (the :func:`mappable_support` of ``fn``), or a
    ``ValueError`` naming the site and the fix."""
    try:
        t = biject_to(mappable_support(fn.support))
    except NotImplementedError as err:
        kind = type(_base(fn)).__name__
        fix = (f"poutine.reparam(config={{{name!r}: ProjectedNormalReparam()}}) samples it as a "
               "Normal latent, projected onto the sphere"
               if base_constraint(fn.support) is constraints.sphere else
               "reparameterise it (poutine.reparam) or give the latent a distribution whose support "
               "torch can map")
        raise ValueError(
            f"latent site {name!r} ({kind}) has support {fn.support}, which torch cannot map to the "
            f"real line (biject_to): pyrolik moves every latent in unconstrained space; {fix}"
        ) from err
    return t.inv(value)


class SiteLayout(NamedTuple):
    """Where one latent site lives in the flat unconstrained vector of an example."""

    name: str
    offset: int  # first column in u
    size: int  # number of unconstrained values per example
    shape: tuple[int, ...]  # unconstrained value shape per example, the data-plate dim removed
    plate_index: int  # position of the data-plate dim in the site's value


def _first_rows(c: constraints.Constraint, rows: int, keep: int, dim: int) -> constraints.Constraint:
    """``c`` with each bound that has ``rows`` rows at ``dim`` from the right cut to ``keep``."""
    if isinstance(c, constraints.independent):
        return constraints.independent(_first_rows(c.base_constraint, rows, keep, dim),
                                       c.reinterpreted_batch_ndims)
    bounds = {k: v.narrow(v.dim() - dim, 0, keep) for k, v in vars(c).items()
              if isinstance(v, Tensor) and v.dim() >= dim and v.shape[v.dim() - dim] == rows}
    if not bounds:
        return c
    cut = copy.copy(c)
    vars(cut).update(bounds)
    return cut


@dataclass(frozen=True)
class Layout:
    """The latent sites, observed sites and data plate of a model run on ``num_chains`` copies of x."""

    plate_name: str
    num_chains: int
    num_examples: int
    sites: tuple[SiteLayout, ...]
    observed: tuple[str, ...]
    supports: Mapping[str, constraints.Constraint]
    enumerated: tuple[str, ...] = ()  # discrete latents summed out (infer={"enumerate": "parallel"})
    enum_dims: int | None = None  # batch dims right of Pyro's enumeration dims; None: none summed
    circular: tuple[str, ...] = ()  # circular latents (VonMises): not annealed (pyrolik.model.supports)
    # (num_examples,) float64: entries of each example the observed sites score (masks included),
    # the D of bits/dim (pyrolik.model.discovery); None where not counted
    num_observed: Tensor | None = field(default=None, compare=False)

    @property
    def rows(self) -> int:
        return self.num_chains * self.num_examples

    @property
    def latent_dim(self) -> int:
        return sum(s.size for s in self.sites)

    def first_chains(self, k: int) -> Layout:
        """The same layout with ``k`` chains (rows are chain-major, so the first ``k * N`` rows);
        supports bounded per row (``Uniform(0, h_n)``) keep the bounds of those rows."""
        keep = k * self.num_examples
        return replace(self, num_chains=k, supports={
            s.name: _first_rows(self.supports[s.name], self.rows, keep, 1 + len(s.shape) -
                                s.plate_index) for s in self.sites})

    def split(self, u: Tensor) -> dict[str, Tensor]:
        """Flat ``(rows, d)`` -> per-site tensors in the model's own layout (unconstrained)."""
        out = {}
        for s in self.sites:
            v = u if s.size == u.shape[1] else u[:, s.offset : s.offset + s.size]
            if v.shape[1:] != s.shape:
                v = v.reshape((u.shape[0],) + s.shape)
            out[s.name] = v.movedim(0, s.plate_index) if s.plate_index else v
        return out

    def join(self, parts: Mapping[str, Tensor], fill: Tensor | None = None) -> Tensor:
        """Per-site tensors (unconstrained, model layout) -> flat ``(rows, d)``; a site missing from
        ``parts`` is zero there (only with ``fill``, a tensor giving dtype and device)."""
        rows = self.rows
        flat = [parts[s.name].movedim(s.plate_index, 0).reshape(rows, -1)
                if fill is None or s.name in parts else fill.new_zeros(rows, s.size)
                for s in self.sites]
        return torch.cat(flat, dim=-1) if len(flat) > 1 else flat[0]

    def constrain(self, u: Tensor) -> dict[str, Tensor]:
        """Flat unconstrained ``u`` -> constrained site values in the model's own layout."""
        return {k: biject_to(self.supports[k])(v) for k, v in self.split(u).items()}

    def unconstrain(self, values: Mapping[str, Tensor]) -> Tensor:
        """Constrained site values (model layout) -> flat unconstrained ``u``."""
        return self.join({s.name: biject_to(self.supports[s.name]).inv(values[s.name])
                          for s in self.sites})

    def log_abs_det_jacobian(self, u: Tensor) -> Tensor:
        r"""Per-row :math:`\log|\det \partial T(u) / \partial u|` of :meth:`constrain`, ``(rows,)``."""
        total = u.new_zeros(u.shape[0])
        for s, part in zip(self.sites, self.split(u).values(), strict=True):
            if is_real(self.supports[s.name]):
                continue
            t = biject_to(self.supports[s.name])
            ladj = t.log_abs_det_jacobian(part, t(part))
            total = total + ladj.movedim(s.plate_index, 0).reshape(u.shape[0], -1).sum(-1)
        return total

    def by_chain(self, values: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Per-site values in the model's layout -> ``{site: (num_chains, num_examples, *site)}``."""
        out = {}
        for s in self.sites:
            z = values[s.name].movedim(s.plate_index, 0)
            out[s.name] = z.reshape((self.num_chains, self.num_examples) + z.shape[1:])
        return out


def circular_sites(tr, names: Sequence[str]) -> tuple[str, ...]:
    """The latent sites among ``names`` whose distribution is circular (``VonMises`` and kin)."""
    return tuple(n for n in names if isinstance(_base(tr.nodes[n]["fn"]), _CIRCULAR))


def refuse_annealing(circular: Sequence[str]) -> None:
    """Raise if the model has a circular latent: HMC would move it along the whole real line."""
    if not circular:
        return
    name = circular[0]
    raise ValueError(
        f"latent site {name!r} is circular (VonMises or kin): its density repeats every 2*pi, so "
        "it is normalised on one turn [-pi, pi) and not on the real line, where annealing's HMC "
        "moves it (over many turns: a wrong number). Estimate log p(x) by importance sampling, "
        "pyrolik.iwae or pyrolik.likelihood_weighting (their draws stay on one turn), or write the "
        f"angle as a point on the circle, a ProjectedNormal latent with poutine.reparam(config="
        f"{{{name!r}: ProjectedNormalReparam()}})")


def check_circular_guide(tr_g, circular: Sequence[str]) -> None:
    """Refuse a guide that samples a circular latent from a distribution over the whole line."""
    for name in circular:
        kind = type(_base(tr_g.nodes[name]["fn"])).__name__
        if not isinstance(_base(tr_g.nodes[name]["fn"]), _CIRCULAR):
            raise ValueError(
                f"the guide samples {name!r} from {kind}, but the model's {name!r} is circular "
                "(VonMises or kin): its density repeats every 2*pi and is normalised on one turn "
                "[-pi, pi) only, so the importance weights of draws beyond it are wrong. Sample it "
                "in the guide from a circular distribution (dist.VonMises), whose draws stay on "
                "one turn")


def check_guide_supports(tr_g, layout: Layout) -> None:
    """Refuse a guide whose site maps the unconstrained line otherwise than the model's site."""
    like = tr_g.nodes[layout.sites[0].name]["value"]
    probe = torch.linspace(-2.0, 1.5, layout.rows * layout.latent_dim, dtype=like.dtype,
                           device=like.device).reshape(layout.rows, layout.latent_dim)
    for name, u in layout.split(probe).items():
        fn, model_support = tr_g.nodes[name]["fn"], layout.supports[name]
        try:
            t_guide = pushed_forward(fn) or biject_to(mappable_support(fn.support))
        except NotImplementedError:
            continue  # evaluated through the model's map (pyrolik.model.messenger)
        try:
            same = bool(torch.allclose(t_guide(u), biject_to(model_support)(u)))
        except (RuntimeError, ValueError):
            same = False
        if not same:
            raise ValueError(
                f"the guide samples {name!r} from {type(_base(fn)).__name__} with support "
                f"{fn.support}, where the model's {name!r} has support {model_support}: pyrolik "
                "evaluates the guide in the model's unconstrained space, so the two must map it "
                "alike. Give the guide's site the model's support, e.g. a Normal pushed through "
                f"the model's map, dist.TransformedDistribution(dist.Normal(loc, scale), "
                "biject_to(support)), as AutoNormal does")


def _bound_tensors(support: Any) -> list[Tensor]:
    """The tensors a constraint holds (``Interval``'s bounds, ...), through ``independent``."""
    out = []
    for value in vars(support).values():
        if isinstance(value, Tensor):
            out.append(value)
        elif isinstance(value, constraints.Constraint):
            out += _bound_tensors(value)
    return out


def check_fixed_supports(model: ModelFn, x: Tensor, args: tuple, kwargs: dict, tr,
                         latent_names: Sequence[str], trace: Callable) -> None:
    """Refuse a latent whose support's bounds depend on the values of other latents."""
    moving = [n for n in latent_names if _bound_tensors(tr.nodes[n]["fn"].support)]
    if not moving:
        return
    values = {n: tr.nodes[n]["value"].detach().clone().requires_grad_(True) for n in latent_names}
    with torch.enable_grad():
        tr_c = trace(pyro.poutine.condition(model, data=values), x, args, kwargs, no_grad=False)
        for name in moving:
            support = tr_c.nodes[name]["fn"].support
            bounds = [b for b in _bound_tensors(support) if b.requires_grad]
            if not bounds:
                continue
            others = [n for n in latent_names if n != name]
            grads = torch.autograd.grad(sum((b.sum() for b in bounds[1:]), bounds[0].sum()),
                                        [values[n] for n in others],
                                        allow_unused=True, retain_graph=True) if others else []
            depends = [n for n, g in zip(others, grads, strict=True) if g is not None]
            if depends:
                kind = type(support).__name__.lstrip("_")
                article = "an" if kind[:1].lower() in "aeiou" else "a"
                raise ValueError(
                    f"the support of latent site {name!r} ({article} {kind} constraint) depends on "
                    f"the values of other latents ({depends}): pyrolik moves every latent in "
                    "unconstrained space and maps it with one fixed transform, biject_to(support), "
                    "so a support that moves cannot be mapped. Give the site a fixed support and "
                    f"move its value instead, e.g. for Uniform(low, high): {name} = low + (high - "
                    f"low) * pyro.sample('{name}_unit', dist.Uniform(0., 1.))")
