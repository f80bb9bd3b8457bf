r"""The effect handler behind every evaluation: set the latents, sum each site's log-density per row.

.. math::
    \log p(u) = \sum_{\text{latent } s} \log p_s(T_s(u_s)) + \log |\det J_{T_s}(u_s)|,
    \qquad \log p(x \mid u) = \sum_{\text{observed } o} \log p_o(x_o \mid T(u)),

both per-row sums over every dimension but the data plate's. Each site's density comes from
:mod:`pyrolik.model.site_density` (fewer full-size operations for Bernoulli and Normal sites, and the
closed-form score of a Normal latent whose parameters need no gradient).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from pyro.distributions import constraints
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample
from torch import Tensor
from torch.distributions import biject_to

from pyrolik.model.site_density import normal_log_prob_and_score, per_row_log_prob, sum_to_rows

__all__ = ["SiteDensities", "SiteRecord", "is_real", "plate_frame"]


class SiteRecord(NamedTuple):
    """What one run said about one latent site (:mod:`pyrolik.model.guide_cache` reads these)."""

    name: str
    fn: object  # the site's distribution
    plate_dim: int
    scale: object
    mask: object
    transformed: bool  # the site's support is not the real line


def is_real(support: constraints.Constraint) -> bool:
    """Whether a support is the real line (possibly ``independent``): no transform needed."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support is constraints.real


def plate_frame(msg: dict, plate_name: str):
    """The frame of the plate ``plate_name`` around a site, or None."""
    for frame in msg["cond_indep_stack"]:
        if frame.name == plate_name:
            return frame
    return None


def _plus(total: Tensor | float, term: Tensor) -> Tensor:
    """Running per-row sum; the first term is taken as it is (no ``0.0 + x`` in the graph)."""
    return term if isinstance(total, float) else total + term


class SiteDensities(Messenger):
    """Set latent sites to given values (or let them sample) and accumulate per-row log-densities.

    ``values`` maps site names to unconstrained (``unconstrained=True``) or constrained values; when it
    is ``None`` the latents are sampled and recorded in ``self.values`` (constrained). After the run,
    ``log_latent`` and ``log_obs`` hold the per-row sums over latent and observed sites, ``scores``
    the closed-form scores (``scores=True``) and ``records`` what each latent site was (``record=True``).
    """

    def __init__(self, plate_name: str, rows: int, values: dict[str, Tensor] | None,
                 unconstrained: bool, scores: bool = False, memo: dict | None = None,
                 record: bool = False):
        super().__init__()
        self.records: list[SiteRecord] | None = [] if record else None
        self.memo = {} if memo is None else memo  # kept by the caller across evaluations
        self.want_scores = scores  # closed-form scores of Normal latents (see site_density)
        self.scores: dict[str, Tensor] = {}
        self.plate_name = plate_name
        self.rows = rows
        self.given = values
        self.unconstrained = unconstrained
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
        if site_is_subsample(msg):
            self._full_plate_indices(msg)
            return
        if msg["is_observed"] or self.given is None:
            return
        name = msg["name"]
        if name not in self.given:
            raise ValueError(
                f"latent site {name!r} appeared that was not in the first trace of the model; "
                "pyrolik needs a fixed set of latent sites per example"
            )
        value = self.given[name]
        if self.unconstrained:
            support = msg["fn"].support
            if not is_real(support):
                t = biject_to(support)
                z = t(value)
                self._ladj[name] = t.log_abs_det_jacobian(value, z)
                value = z
        msg["value"] = value

    def _full_plate_indices(self, msg: dict) -> None:
        """A plate that does not subsample gets ``arange(size)``: made once, not at every call."""
        fn = msg["fn"]
        if msg["value"] is not None or getattr(fn, "use_cuda", None) is not None \
                or not (fn.subsample_size is None or fn.subsample_size >= fn.size):
            return
        key = ("arange", fn.size, str(fn.device))
        if key not in self.memo:
            self.memo[key] = torch.arange(fn.size, device=fn.device)
        msg["value"] = self.memo[key]

    def _pyro_post_sample(self, msg: dict) -> None:
        if msg["infer"].get("_deterministic") or site_is_subsample(msg):
            return
        frame = plate_frame(msg, self.plate_name)
        name = msg["name"]
        if frame is None:
            kind = "observed" if msg["is_observed"] else "latent"
            raise ValueError(
                f"{kind} site {name!r} is outside the plate {self.plate_name!r} over the examples; "
                "pyrolik estimates per-example log p(x): put every sample site inside the data plate "
                "(global quantities belong in pyro.param)"
            )
        if self.records is not None and not msg["is_observed"]:
            self.records.append(SiteRecord(name, msg["fn"], frame.dim, msg["scale"], msg["mask"],
                                           name in self._ladj))
        if self.want_scores and not msg["is_observed"] and name not in self._ladj:
            found = normal_log_prob_and_score(msg["fn"], msg["value"], msg["scale"], msg["mask"],
                                              frame.dim, self.rows, name)
            if found is not None:
                self.log_latent = _plus(self.log_latent, found[0])
                self.scores[name] = found[1]
                return
        lp = per_row_log_prob(msg["fn"], msg["value"], msg["scale"], msg["mask"], frame.dim,
                              self.rows, name)
        if msg["is_observed"]:
            self.log_obs = _plus(self.log_obs, lp)
            return
        ladj = self._ladj.pop(name, None)
        if ladj is not None:
            # the Jacobian term, summed over the site's dims but the data plate's
            batch_ndim = len(msg["fn"].batch_shape)
            while ladj.dim() > batch_ndim:
                ladj = ladj.sum(-1)
            lp = lp + sum_to_rows(ladj, frame.dim, self.rows, name)
        self.log_latent = _plus(self.log_latent, lp)
        if self.given is None:
            self.values[name] = msg["value"]
