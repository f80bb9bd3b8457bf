r"""The plain evaluation: run the Pyro program at given latents and read off its per-row
log-densities; a mean-field Gaussian guide is evaluated without rerunning it (AIS+encoder's hot
loop) when its Normal parameters depend on ``x`` only (checked by autograd and a second run):
:class:`KeptGuide`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

from pyrolik._random import fork_rng_from
from pyrolik.model.arguments import ModelFn, repeat_arguments, take_rows
from pyrolik.model.autoguides import FittedGaussian
from pyrolik.model.messenger import (
    SiteDensities,
    SiteRecord,
    base_and_event_ndim,
    is_normal,
    normal_log_prob_and_score,
)
from pyrolik.model.modules import eval_mode
from pyrolik.model.supports import Layout

__all__ = ["CachedGuide", "Draw", "GuideDensity", "KeptGuide", "Program", "ValueAndGrad",
           "cache_guide"]

GuideDensity = Callable[[Tensor], "tuple[Tensor, Tensor | None]"]  # u -> (log q per row, score)


class Draw(NamedTuple):
    """Exact draws of the latents: flat unconstrained, constrained by site, and a log-density."""

    u: Tensor  # (rows, d)
    values: dict[str, Tensor]  # constrained, model layout
    log_density: Tensor  # (rows,)


class ValueAndGrad(NamedTuple):
    """Values and gradients of the two terms of a tempered density, per row."""

    log_init: Tensor  # (rows,)
    log_ratio: Tensor  # (rows,): log_final - log_init
    grad_init: Tensor  # (rows, d)
    grad_ratio: Tensor  # (rows, d)


@dataclass(frozen=True)
class Program:
    """A model (and optional guide) bound to ``x`` (``rows`` stacked copies of the data) and its
    arguments; ``memo``: what calls reuse (param store tensors, plate indices)."""

    layout: Layout
    model: ModelFn
    x: Tensor  # (rows, *event_shape)
    marked_args: tuple = ()  # per-example tensors marked (pyrolik.model.arguments), one copy
    marked_kwargs: dict = field(default_factory=dict)
    guide: ModelFn | FittedGaussian | None = None  # an AutoGuide comes as its fitted Gaussians
    eval_modules: bool = False
    guide_enum_dims: int | None = None  # an M2-style guide: its discrete sites are summed out
    memo: dict = field(default_factory=dict, repr=False, compare=False)
    model_args: tuple = field(init=False)  # what the program is called with: per-example tensors
    model_kwargs: dict = field(init=False)  # repeated over the chains, as x is

    def __post_init__(self) -> None:
        args, kwargs = repeat_arguments(self.marked_args, self.marked_kwargs,
                                        self.layout.num_chains)
        object.__setattr__(self, "model_args", args)
        object.__setattr__(self, "model_kwargs", kwargs)

    @property
    def rows(self) -> int:
        return self.layout.rows

    def first_chains(self, k: int) -> Program:
        """The same program on the first ``k`` chains, with a memo of its own."""
        return replace(self, layout=self.layout.first_chains(k),
                       x=self.x[: k * self.layout.num_examples], memo={})

    def on_rows(self, index: Tensor, x: Tensor | None = None) -> Program:
        """The same program, with a memo of its own, on the rows ``index`` of its batch as one chain
        of ``len(index)`` examples (per-example arguments follow; ``x`` replaces the rows' data)."""
        args, kwargs = take_rows(self.marked_args, self.marked_kwargs, self.layout.num_chains, index)
        counts = self.layout.num_observed
        if counts is not None:
            counts = counts[index.cpu() % self.layout.num_examples]
        layout = replace(self.layout, num_chains=1, num_examples=len(index), num_observed=counts)
        return replace(self, layout=layout, x=self.x[index] if x is None else x, marked_args=args,
                       marked_kwargs=kwargs, memo={})

    def guide_or_raise(self) -> ModelFn | FittedGaussian:
        """The guide; ``ValueError`` if the program was built without one."""
        if self.guide is None:
            raise ValueError("this target was built without a guide")
        return self.guide

    def run(self, fn: ModelFn, values: dict[str, Tensor] | None, unconstrained: bool,
            scores: bool = False, record: bool = False) -> SiteDensities:
        """Run ``fn`` (model or guide) once with the latents set to ``values`` (sampled if None)."""
        enum_dims = None
        if values is not None:
            enum_dims = self.layout.enum_dims if fn is self.model else self.guide_enum_dims
        ev = SiteDensities(self.layout.plate_name, self.rows, values, unconstrained, scores,
                           self.memo, record, enum_dims, self.layout.supports)
        modules = eval_mode() if self.eval_modules else contextlib.nullcontext()
        with pyro.validation_enabled(False), modules, ev:
            if enum_dims is not None:
                fn = pyro.poutine.enum(fn, first_available_dim=-1 - enum_dims)
            fn(self.x, *self.model_args, **self.model_kwargs)
        return ev

    def log_prior_and_obs(self, u: Tensor) -> tuple[Tensor, Tensor]:
        """``(log p(u) incl. log|det J|, log p(x | u))``, each ``(rows,)``, in one model pass."""
        ev = self.run(self.model, self.layout.split(u), True)
        return as_rows(ev.log_latent, u), as_rows(ev.log_obs, u)

    def log_guide(self, u: Tensor) -> Tensor:
        """Per-row log density of ``u`` under the guide, including the log-det-Jacobian."""
        guide = self.guide_or_raise()
        if isinstance(guide, FittedGaussian):
            return guide.log_prob_and_score(u)[0]
        return as_rows(self.run(guide, self.layout.split(u), True).log_latent, u)

    def guide_density(self, u: Tensor) -> tuple[Tensor, Tensor | None]:
        """``log q(u | x)`` per row and its closed-form score (None: all by autograd from ``u``)."""
        guide = self.guide_or_raise()
        if isinstance(guide, FittedGaussian):
            return guide.log_prob_and_score(u)
        evq = self.run(guide, self.layout.split(u), True, scores=True)
        return as_rows(evq.log_latent, u), self.flat_score(evq.scores, u)

    def log_joint_constrained(self, values: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(log p(z), log p(x | z))`` of constrained site values (no Jacobian), ``(rows,)`` each."""
        with torch.no_grad():
            ev = self.run(self.model, values, False)
        return as_rows(ev.log_latent, self.x), as_rows(ev.log_obs, self.x)

    def flat_score(self, scores: dict[str, Tensor], u: Tensor) -> Tensor | None:
        """Per-site closed-form scores as one ``(rows, d)`` tensor (zero where a site has none)."""
        return self.layout.join(scores, fill=u) if scores else None

    # -- the one callable the annealing path evaluates ------------------------------------------
    def value_and_grad(self, u: Tensor, guide_density: GuideDensity | None = None) -> ValueAndGrad:
        r"""Both terms of :math:`\log f_\beta` and their gradients, by running the Pyro program:
        :math:`\log f_0 = \log p(u)` and the ratio :math:`\log p(x \mid u)`, or with
        ``guide_density`` :math:`\log q(u \mid x)` and :math:`\log p(x, u) - \log q(u \mid x)`."""
        with torch.enable_grad():
            u = u.detach().requires_grad_(True)
            ev = self.run(self.model, self.layout.split(u), True, scores=True)
            lp, lo = as_rows(ev.log_latent, u), as_rows(ev.log_obs, u)
            score_p = self.flat_score(ev.scores, u)  # closed-form part of d log p(u) / du
            if guide_density is None:
                init, ratio = lp, lo
                g_ratio = _grad(ratio, u, retain=init.requires_grad)
                g_init = _add(_grad(init, u, retain=False), score_p)
            else:
                init, score_q = guide_density(u)
                ratio = lp + lo - init
                g_ratio = _add(_grad(ratio, u, retain=True), score_p,
                               None if score_q is None else -score_q)
                g_init = _add(_grad(init, u, retain=False), score_q)
        if g_init is None or g_ratio is None:  # a term that does not depend on u: zero gradient
            zero = torch.zeros_like(u)
            g_init = zero if g_init is None else g_init
            g_ratio = zero if g_ratio is None else g_ratio
        return ValueAndGrad(init.detach(), ratio.detach(), g_init, g_ratio)

    def sample_prior(self, generator: torch.Generator | None = None) -> Draw:
        """Draw ``z ~ p(z)``; ``log_density`` is ``log p(x | z)``, all from one model pass."""
        with fork_rng_from(generator, self.x.device), torch.no_grad():
            ev = self.run(self.model, None, False)
        u = self.layout.unconstrain(ev.values)
        if self.layout.enum_dims is not None:  # log p(x | z) with the discrete latents summed out
            with torch.no_grad():
                return Draw(u, ev.values, self.log_prior_and_obs(u)[1])
        return Draw(u, ev.values, as_rows(ev.log_obs, self.x))

    def sample_guide(self, generator: torch.Generator | None = None) -> Draw:
        """Draw ``z ~ q(z | x)``; ``log_density`` is ``log q(z | x)`` of the constrained ``z``."""
        guide = self.guide_or_raise()
        if isinstance(guide, FittedGaussian):
            with torch.no_grad():
                u = guide.sample(self.layout.num_chains, generator)
                log_q = guide.log_prob_and_score(u)[0] - self.layout.log_abs_det_jacobian(u)
            return Draw(u, self.layout.constrain(u), log_q)
        with fork_rng_from(generator, self.x.device), torch.no_grad():
            ev = self.run(guide, None, False)
        u = self.layout.unconstrain(ev.values)
        if self.guide_enum_dims is not None:  # the mixture's density, its discrete sites summed out
            with torch.no_grad():
                log_q = self.log_guide(u) - self.layout.log_abs_det_jacobian(u)
            return Draw(u, ev.values, log_q)
        return Draw(u, ev.values, as_rows(ev.log_latent, self.x))


def as_rows(value: Tensor | float, like: Tensor) -> Tensor:
    """A per-row sum as a ``(rows,)`` tensor (a model without such sites gives a constant)."""
    return value if isinstance(value, Tensor) else like.new_full((like.shape[0],), float(value))


def _grad(out: Tensor, u: Tensor, retain: bool) -> Tensor | None:
    """``d out.sum() / du`` by autograd, or None where ``out`` does not depend on ``u``."""
    if not out.requires_grad:
        return None
    (g,) = torch.autograd.grad(out.sum(), u, retain_graph=retain, allow_unused=True)
    return g


def _add(*terms: Tensor | None) -> Tensor | None:
    """Sum of the terms that are not None; None if all are."""
    present = [t for t in terms if t is not None]
    return sum(present[1:], present[0]) if present else None


class KeptGuide:
    """A program's guide density (as ``Program.guide_density``) from kept Normal parameters where it
    qualifies, rechecked when a parameter changes in place (``epoch`` counts the derivations)."""

    def __init__(self, program: Program):
        self.program = program
        self.cached: CachedGuide | Literal[False] | None = None  # None: not checked; False: not kept
        self.epoch = 0

    def current(self, u: Tensor) -> CachedGuide | None:
        """The kept parameters, derived (again) if needed; None if the guide does not qualify."""
        cached, guide = self.cached, self.program.guide
        if not callable(guide):  # a FittedGaussian (an AutoGuide): already kept
            return None
        if cached is None or (cached is not False and not cached.is_current()):
            program = self.program
            z = u.detach().requires_grad_(True)
            with torch.enable_grad():
                first = program.run(guide, program.layout.split(z), True, record=True).records
                with torch.no_grad():  # at other latent values: catches detached dependences too
                    second = program.run(guide, program.layout.split(z.detach() + 0.5), True,
                                         record=True).records
                assert first is not None and second is not None  # record=True keeps the records
                cached = cache_guide(first, second, z)
            self.cached = False if cached is None else cached
            self.epoch += 1
        return cached or None

    def __call__(self, u: Tensor) -> tuple[Tensor, Tensor | None]:
        cached = self.current(u)
        if cached is None:
            return self.program.guide_density(u)
        log_q, scores = cached.log_prob_and_score(self.program.layout.split(u.detach()),
                                                  self.program.rows)
        return log_q, self.program.flat_score(scores, u)


@dataclass(frozen=True)
class CachedGuide:
    """A mean-field Normal guide's parameters, detached, with the versions of the tensors behind them."""

    sites: tuple[tuple[str, object, int], ...]  # (name, Normal or Independent(Normal), plate dim)
    leaves: tuple[Tensor, ...]
    versions: tuple[int, ...]

    def is_current(self) -> bool:
        """False once a parameter the guide's outputs were computed from has changed in place."""
        return all(t._version == v for t, v in zip(self.leaves, self.versions, strict=True))

    def log_prob_and_score(self, values: dict[str, Tensor], rows: int
                           ) -> tuple[Tensor, dict[str, Tensor]]:
        """``(log q(z | x) per row, {site: d log q / dz})`` at the site values ``values``."""
        total: Tensor | None = None
        scores: dict[str, Tensor] = {}
        for name, fn, plate_dim in self.sites:
            found = normal_log_prob_and_score(fn, values[name], plate_dim, rows, name)
            assert found is not None  # cache_guide keeps only detached, unscaled Normal sites
            lp, scores[name] = found
            total = lp if total is None else total + lp
        assert total is not None  # cache_guide keeps a guide with at least one site
        return total, scores


def cache_guide(first: list[SiteRecord], second: list[SiteRecord], z: Tensor) -> CachedGuide | None:
    """The guide's Normal parameters from two runs of it, or None if it does not qualify."""
    if not first or [r.name for r in first] != [r.name for r in second]:
        return None
    sites, leaves = [], []
    for rec, again in zip(first, second, strict=True):
        if rec.transformed:
            return None
        base, event_ndim = base_and_event_ndim(rec.fn)
        base2, _ = base_and_event_ndim(again.fn)
        if not (is_normal(base) and is_normal(base2)):
            return None
        loc, sigma = base.loc, base.scale
        if _depends_on(z, loc, sigma):
            return None
        if not (torch.equal(loc, base2.loc) and torch.equal(sigma, base2.scale)):
            return None  # a random guide (dropout, noise): rerun it every time
        leaves += _leaf_tensors(loc, sigma)
        fn = dist.Normal(loc.detach(), sigma.detach(), validate_args=False)
        sites.append((rec.name, fn.to_event(event_ndim) if event_ndim else fn, rec.plate_dim))
    unique = tuple({id(t): t for t in leaves}.values())
    return CachedGuide(tuple(sites), unique, tuple(t._version for t in unique))


def _depends_on(z: Tensor, *outputs: Tensor) -> bool:
    """Whether any of ``outputs`` has a gradient path back to ``z``."""
    outs = [t for t in outputs if t.requires_grad]
    if not outs:
        return False
    grads = torch.autograd.grad(outs, z, [torch.ones_like(t) for t in outs], retain_graph=True,
                                allow_unused=True)
    return any(g is not None for g in grads)


def _leaf_tensors(*outputs: Tensor) -> list[Tensor]:
    """The leaf tensors (parameters) the autograd graphs of ``outputs`` start from."""
    found = [t for t in outputs if t.requires_grad and t.grad_fn is None]
    stack, seen = [t.grad_fn for t in outputs if t.grad_fn is not None], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, Tensor):
            found.append(variable)
        stack += [nxt for nxt, _ in node.next_functions if nxt is not None]
    return found
