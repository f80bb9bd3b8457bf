r"""Mean-field Gaussian guides evaluated without rerunning the guide (AIS+encoder's hot loop): one
qualifies when its Normal parameters depend on ``x`` only (checked by autograd and a second run)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import pyro.distributions as dist
import torch
from torch import Tensor

from pyrolik.model.messenger import SiteRecord
from pyrolik.model.site_density import (
    base_and_event_ndim,
    is_normal,
    is_unscaled,
    normal_log_prob_and_score,
)

if TYPE_CHECKING:
    from pyrolik.model.evaluation import Program

__all__ = ["CachedGuide", "KeptGuide", "cache_guide"]


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
            found = normal_log_prob_and_score(fn, values[name], 1.0, None, plate_dim, rows, name)
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
        if rec.transformed or not is_unscaled(rec.scale, rec.mask):
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
