r"""Where a model's latents live: the frozen description of its sites, data plate and transforms;
row ``k * N + n`` of the flat unconstrained ``u`` holds chain ``k`` of example ``n``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import torch
from pyro.distributions import constraints
from torch import Tensor
from torch.distributions import biject_to

from pyrolik.model.messenger import is_real

__all__ = ["Layout", "SiteLayout"]


class SiteLayout(NamedTuple):
    """Where one latent site lives in the flat unconstrained vector of an example."""

    name: str
    offset: int  # first column in u
    size: int  # number of unconstrained values per example
    shape: tuple[int, ...]  # unconstrained value shape per example, the data-plate dim removed
    plate_index: int  # position of the data-plate dim in the site's value


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
        """The same layout with ``k`` chains (rows are chain-major, so the first ``k * N`` rows)."""
        return replace(self, num_chains=k)

    # -- flat unconstrained <-> per-site unconstrained -------------------------------------------
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

    # -- flat unconstrained <-> per-site constrained ---------------------------------------------
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

    # -- model layout -> (chain, example, *site) -------------------------------------------------
    def by_chain(self, values: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Per-site values in the model's layout -> ``{site: (num_chains, num_examples, *site)}``."""
        out = {}
        for s in self.sites:
            z = values[s.name].movedim(s.plate_index, 0)
            out[s.name] = z.reshape((self.num_chains, self.num_examples) + z.shape[1:])
        return out
