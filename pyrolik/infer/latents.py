"""Exact posterior draws given by the user, in the layouts the engine and the model need.

Reverse AIS and BDMC start from exact draws of :math:`p(z \\mid x)`; a user passes them as
constrained values by latent site, ``(N, *site)`` (shared by the chains) or ``(K, N, *site)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pyrolik.model.target import Target

__all__ = ["expand_latents", "latents_to_flat"]


def expand_latents(target: Target, latents: Tensor | dict[str, Tensor], num_examples: int
                   ) -> dict[str, Tensor]:
    """Exact posterior draws, one per example ``(N, *site)`` or per chain ``(K, N, *site)``, as a
    dict of ``(K, N, *site)`` tensors. A tensor is accepted for single-site models; values must
    lie in each site's support. ``target`` only supplies the site layout (any batch of the data).
    """
    k, n = target.num_chains, num_examples
    if isinstance(latents, Tensor):
        if len(target.sites) != 1:
            raise TypeError(f"the model has latent sites {[s.name for s in target.sites]}: pass "
                            "latents as a dict {site: tensor}")
        latents = {target.sites[0].name: latents}
    if not isinstance(latents, dict):
        raise TypeError(f"latents must be a dict {{site: tensor}} or a tensor, got "
                        f"{type(latents).__name__}")
    missing = [s.name for s in target.sites if s.name not in latents]
    if missing:
        raise ValueError(f"latents miss the site(s) {missing}; pass one value per latent site")
    probe = target.constrain(torch.zeros(target.rows, target.latent_dim, dtype=target.x.dtype))
    out = {}
    for s in target.sites:
        per_example = tuple(probe[s.name].movedim(s.plate_index, 0).shape[1:])
        v = torch.as_tensor(latents[s.name]).to(target.x)
        if tuple(v.shape) == (n,) + per_example:
            v = v.unsqueeze(0).expand(k, *v.shape)
        if tuple(v.shape) != (k, n) + per_example:
            raise ValueError(f"latents[{s.name!r}] has shape {tuple(v.shape)}; expected "
                             f"{(n,) + per_example} or {(k, n) + per_example}")
        ok = target.supports[s.name].check(v)
        if not bool(ok.all()):
            raise ValueError(f"latents[{s.name!r}] lie outside the site's support "
                             f"{target.supports[s.name]}")
        out[s.name] = v
    return out


def latents_to_flat(target: Target, latents: dict[str, Tensor]) -> Tensor:
    """``{site: (K, N, *site)}`` constrained values -> flat unconstrained ``u`` ``(K * N, d)``."""
    k, n = target.num_chains, target.num_examples
    values = {s.name: latents[s.name].reshape(k * n, *latents[s.name].shape[2:])
              .movedim(0, s.plate_index) for s in target.sites}
    return target.ravel(values)
