r"""Guides as proposals: Pyro's Gaussian AutoGuides fitted on the evaluated examples, read once as
per-example Gaussians in unconstrained space (other AutoGuides are refused), and M2-style guides,
whose discrete latent the model sums out: a mixture proposal (``docs/idioms.md``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyro.poutine as poutine
import torch
from pyro.infer import autoguide
from torch import Tensor
from torch.distributions import biject_to

from pyrolik.model.arguments import ModelFn
from pyrolik.model.messenger import HALF_LOG_2PI, plate_frame
from pyrolik.model.supports import Layout

__all__ = ["FittedGaussian", "enumerated_in_guide", "fitted_gaussian", "is_autoguide",
           "mark_enumerated"]

_SUPPORTED = (autoguide.AutoNormal, autoguide.AutoDiagonalNormal,
              autoguide.AutoMultivariateNormal, autoguide.AutoLowRankMultivariateNormal)


def is_autoguide(guide: Any) -> bool:
    """Whether ``guide`` is an AutoGuide (read as per-example Gaussians); refuses AutoMessengers."""
    if isinstance(guide, autoguide.AutoMessenger):
        raise TypeError(
            f"{type(guide).__name__} is an AutoMessenger: it runs the model inside the guide, with "
            "parameters shaped for the rows it was fitted on, and pyrolik cannot read it as one "
            "proposal density per example (it runs chains x examples rows). Fit AutoNormal (or "
            "AutoDiagonalNormal, AutoMultivariateNormal, AutoLowRankMultivariateNormal) by SVI on "
            "the examples you evaluate instead, or write an amortised guide (an encoder)")
    return isinstance(guide, autoguide.AutoGuide)


@dataclass(frozen=True)
class FittedGaussian:
    """Per-example Gaussians over pyrolik's flat unconstrained latent: ``loc`` ``(N, d)`` with a
    diagonal ``scale`` ``(N, d)`` or a ``scale_tril`` ``(N, d, d)``."""

    loc: Tensor
    scale: Tensor | None
    scale_tril: Tensor | None
    source: str  # the AutoGuide class(es), for messages

    @property
    def num_examples(self) -> int:
        return self.loc.shape[0]

    def examples(self, start: int, stop: int) -> FittedGaussian:
        """The proposals of examples ``start:stop``."""
        return FittedGaussian(self.loc[start:stop],
                              None if self.scale is None else self.scale[start:stop],
                              None if self.scale_tril is None else self.scale_tril[start:stop],
                              self.source)

    def log_prob_and_score(self, u: Tensor) -> tuple[Tensor, Tensor]:
        """``log q(u)`` per row and its score, rows chain-major (row ``k * N + n`` -> example ``n``)."""
        n, d = self.loc.shape
        diff = (u.detach().reshape(-1, n, d) - self.loc)  # (K, N, d)
        if self.scale is not None:
            w = diff / self.scale
            log_det = torch.log(self.scale).sum(-1)
            score = -w / self.scale
        else:
            tril = self.scale_tril
            assert tril is not None  # there whenever scale is not
            w = torch.linalg.solve_triangular(tril, diff.unsqueeze(-1), upper=False)
            score = -torch.linalg.solve_triangular(tril.mT, w, upper=True).squeeze(-1)
            w = w.squeeze(-1)
            log_det = torch.log(torch.diagonal(tril, dim1=-2, dim2=-1)).sum(-1)
        log_q = -0.5 * (w * w).sum(-1) - log_det - d * HALF_LOG_2PI
        return log_q.reshape(-1), score.reshape(u.shape)

    def sample(self, num_chains: int, generator: torch.Generator | None) -> Tensor:
        """``num_chains`` draws per example, flat ``(num_chains * N, d)``, chain-major."""
        n, d = self.loc.shape
        eps = torch.randn(num_chains, n, d, generator=generator, dtype=self.loc.dtype,
                          device=self.loc.device)
        if self.scale is not None:
            u = self.loc + self.scale * eps
        else:
            assert self.scale_tril is not None  # there whenever scale is not
            u = self.loc + (self.scale_tril @ eps.unsqueeze(-1)).squeeze(-1)
        return u.reshape(num_chains * n, d)


def fitted_gaussian(guide: Any, layout: Layout, num_examples: int, like: Tensor) -> FittedGaussian:
    """The per-example Gaussians of a fitted AutoGuide, in ``layout``'s flat order, dtype of ``like``."""
    parts = list(guide) if isinstance(guide, autoguide.AutoGuideList) else [guide]
    names = ", ".join(type(p).__name__ for p in parts)
    d, n = layout.latent_dim, num_examples
    loc = like.new_zeros(n, d)
    cov = like.new_zeros(n, d, d)
    diagonal = True
    covered: list[str] = []
    with torch.no_grad():
        for part in parts:
            _check_part(part)
            columns, mean, var = _part_gaussian(part, layout, n)
            covered += [name for name, _ in columns]
            offsets = {s.name: s.offset for s in layout.sites}
            cols = torch.cat([torch.arange(offsets[name], offsets[name] + size)
                              for name, size in columns])
            loc[:, cols] = mean.to(like)
            if var.dim() == 2:
                cov[:, cols, cols] = var.to(like)
            else:
                diagonal = False
                cov[:, cols.unsqueeze(-1), cols] = var.to(like)
    missing = [s.name for s in layout.sites if s.name not in covered]
    if missing or len(covered) != len(set(covered)):
        raise ValueError(f"the AutoGuide ({names}) covers the latent sites {sorted(covered)}, the "
                         f"model has {[s.name for s in layout.sites]}: each latent site needs "
                         "exactly one Gaussian part")
    if diagonal:
        return FittedGaussian(loc, torch.diagonal(cov, dim1=-2, dim2=-1).sqrt(), None, names)
    return FittedGaussian(loc, None, torch.linalg.cholesky(cov), names)


def _check_part(part: Any) -> None:
    if not isinstance(part, _SUPPORTED):
        raise TypeError(
            f"{type(part).__name__} is not a Gaussian AutoGuide pyrolik can evaluate at any latent: "
            "use AutoNormal, AutoDiagonalNormal, AutoMultivariateNormal or "
            "AutoLowRankMultivariateNormal (or an AutoGuideList of them), or an ordinary Pyro guide"
        )
    if part.prototype_trace is None:
        raise ValueError(f"the {type(part).__name__} has not been fitted (it never ran): fit it with "
                         "SVI on the examples you evaluate before using it as a proposal")


def _part_gaussian(part: Any, layout: Layout, n: int) -> tuple[list, Tensor, Tensor]:
    """``([(site, size)], loc (n, dp), var (n, dp) or cov (n, dp, dp))`` of one AutoGuide part."""
    sites = {s.name: s for s in layout.sites}
    blocks, pos = [], 0
    for name, site in part.prototype_trace.iter_stochastic_nodes():
        ushape = biject_to(site["fn"].support).inv(site["value"]).shape
        if isinstance(part, autoguide.AutoNormal):
            ushape = part._get_loc_and_scale(name)[0].shape  # full size when fitted on a subsample
        if name not in sites:
            raise ValueError(f"the AutoGuide has a site {name!r} that is not a continuous latent "
                             f"site of the model ({sorted(sites)})")
        frame = plate_frame(site, layout.plate_name)
        index = len(site["fn"].batch_shape) + frame.dim if frame is not None else None
        fitted_on = ushape[index] if index is not None else None
        if fitted_on != n or index != sites[name].plate_index \
                or tuple(ushape[:index]) + tuple(ushape[index + 1:]) != tuple(sites[name].shape):
            raise ValueError(
                f"the AutoGuide was fitted on other examples: its site {name!r} has shape "
                f"{tuple(ushape)} (plate {layout.plate_name!r} of size {fitted_on}), and x has {n} "
                "examples. An AutoGuide's parameters belong to the examples it was fitted on: fit it "
                "by SVI on these examples (all of them, without subsampling), or use an amortised "
                "guide (an encoder)")
        size = math.prod(ushape)
        blocks.append((name, index, ushape, pos, size))
        pos += size
    columns = [(name, sites[name].size) for name, *_ in blocks]
    if isinstance(part, autoguide.AutoNormal):
        locs, scales = [], []
        for name, index, _, _, _ in blocks:
            loc, scale = part._get_loc_and_scale(name)
            locs.append(loc.detach().movedim(index, 0).reshape(n, -1))
            scales.append(scale.detach().movedim(index, 0).reshape(n, -1))
        return columns, torch.cat(locs, -1), torch.cat(scales, -1) ** 2
    idx = torch.cat([torch.arange(p, p + size).reshape(ushape).movedim(index, 0).reshape(n, -1)
                     for _, index, ushape, p, size in blocks], -1)  # (n, dp) packed positions
    post = part.get_posterior()
    if isinstance(part, autoguide.AutoDiagonalNormal):
        base = post.base_dist
        return columns, base.loc.detach()[idx], base.scale.detach()[idx] ** 2
    if isinstance(part, autoguide.AutoMultivariateNormal):
        rows = post.scale_tril.detach()[idx]  # (n, dp, D)
        return columns, post.loc.detach()[idx], rows @ rows.mT
    factor = post.cov_factor.detach()[idx]  # (n, dp, rank)
    return columns, post.loc.detach()[idx], factor @ factor.mT + torch.diag_embed(
        post.cov_diag.detach()[idx])


def enumerated_in_guide(tr_g) -> tuple[str, ...]:
    """The discrete latent sites of a guide's trace marked ``infer={"enumerate": "parallel"}``."""
    return tuple(s["name"] for s in tr_g.nodes.values()
                 if s["type"] == "sample" and not s["is_observed"]
                 and s["infer"].get("enumerate") == "parallel"
                 and getattr(s["fn"], "support", None) is not None and s["fn"].support.is_discrete)


class mark_enumerated:  # noqa: N801 - used like a Pyro handler (lower case, as config_enumerate)
    """``fn`` with the sample sites ``names`` marked ``infer={"enumerate": "parallel"}``."""

    def __init__(self, fn: ModelFn, names: Iterable[str]):
        self.fn = fn
        self.names = frozenset(names)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__wrapped__ = fn

    def _config(self, msg: Any) -> Any:
        chosen = msg["type"] == "sample" and msg["name"] in self.names and not msg["is_observed"]
        return {"enumerate": "parallel"} if chosen else {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return poutine.infer_config(self.fn, config_fn=self._config)(*args, **kwargs)
