r"""Pyro-model adapters for CSL and its chains: log p(x | z) for every pair, and the site samplers.

A model follows the API convention (``model(x, *model_args, **model_kwargs)`` with a plate over
dim 0 of ``x``); latent values travel as ``{site name: tensor}`` dicts whose leading dimension is
the sample (and, per example, the example) dimension. These helpers run the model under
``poutine.condition`` / ``poutine.trace`` with the samples folded into the data plate, the same
folding as ``target.make_target``; they should be replaced by it once it exists on main.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyro.poutine as poutine
import torch
from pyro.poutine.util import site_is_subsample
from torch import Tensor

__all__ = ["model_log_obs", "guide_sampler", "obs_sampler", "prior_sampler"]


def _sample_sites(trace: poutine.Trace) -> tuple[list[str], list[str]]:
    latent, observed = [], []
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or site_is_subsample(site):
            continue
        (observed if site["is_observed"] else latent).append(name)
    return latent, observed


def _trace(model: Callable, x: Tensor, data: Mapping[str, Tensor] | None, args, kwargs):
    fn = poutine.condition(model, data=dict(data)) if data else model
    return poutine.trace(fn).get_trace(x, *args, **kwargs)


def model_log_obs(
    model: Callable, model_args: tuple = (), model_kwargs: dict[str, Any] | None = None
) -> Callable[[Tensor, Mapping[str, Tensor], bool], Tensor]:
    r"""Return ``log_obs(x, latents, per_example) -> (S, N)``: :math:`\log p(x_n \mid z_s)`.

    ``latents`` maps every latent site to a tensor of shape ``(S, *site_shape)`` (every sample
    paired with every example) or, with ``per_example=True``, ``(S, N, *site_shape)``. The
    ``S * N`` pairs are folded into the model's data plate and the observed sites'
    log-probabilities are summed over everything but that plate dimension.
    """
    kwargs = model_kwargs or {}

    def log_obs(x: Tensor, latents: Mapping[str, Tensor], per_example: bool = False) -> Tensor:
        n = x.shape[0]
        s = next(iter(latents.values())).shape[0]
        if per_example:
            data = {k: v.reshape(s * n, *v.shape[2:]) for k, v in latents.items()}
        else:
            data = {
                k: v.unsqueeze(1).expand(s, n, *v.shape[1:]).reshape(s * n, *v.shape[1:])
                for k, v in latents.items()
            }
        x_rep = x.unsqueeze(0).expand(s, *x.shape).reshape(s * n, *x.shape[1:])
        trace = _trace(model, x_rep, data, model_args, kwargs)
        missing, observed = _sample_sites(trace)  # conditioned latents count as observed here
        observed = [name for name in observed if name not in latents]
        if missing:
            raise ValueError(
                f"latents miss the model's latent site(s) {missing}; give a value for every latent "
                "sample site (e.g. from pyrolik.chains.prior_samples or encoder_decoder)"
            )
        if not observed:
            raise ValueError("the model has no observed sample site: condition one on x (obs=x)")
        trace.compute_log_prob()
        total = x.new_zeros(s * n)
        for name in observed:
            lp = trace.nodes[name]["log_prob"]
            if lp.dim() == 0 or lp.shape[0] != s * n:
                raise ValueError(
                    f"observed site {name!r} has log_prob shape {tuple(lp.shape)}, not "
                    "(batch, ...): put the observed site inside a pyro.plate over dim 0 of x"
                )
            total = total + lp.reshape(s * n, -1).sum(-1)
        return total.reshape(s, n)

    return log_obs


def guide_sampler(
    guide: Callable, model_args: tuple = (), model_kwargs: dict[str, Any] | None = None
) -> Callable[[Tensor], dict[str, Tensor]]:
    r"""Return ``x -> {site: z}``, :math:`z \sim q(z \mid x)` from a Pyro guide (global RNG)."""
    kwargs = model_kwargs or {}

    def sample(x: Tensor) -> dict[str, Tensor]:
        trace = _trace(guide, x, None, model_args, kwargs)
        latent, _ = _sample_sites(trace)
        return {name: trace.nodes[name]["value"].detach() for name in latent}

    return sample


def obs_sampler(
    model: Callable, model_args: tuple = (), model_kwargs: dict[str, Any] | None = None
) -> Callable[[Mapping[str, Tensor], Tensor], Tensor]:
    r"""Return ``(z, x) -> x'`` drawing :math:`x' \sim p(x \mid z)` (``x`` gives only the shape).

    The model must have exactly one observed site whose value is ``x`` itself.
    """
    kwargs = model_kwargs or {}

    def sample(latents: Mapping[str, Tensor], x: Tensor) -> Tensor:
        trace = _trace(model, x, latents, model_args, kwargs)
        _, observed = _sample_sites(trace)
        observed = [name for name in observed if name not in latents]
        if len(observed) != 1 or trace.nodes[observed[0]]["value"].shape != x.shape:
            raise ValueError(
                f"the alternating chain needs exactly one observed site whose value is x; found "
                f"{observed}: write the model with a single pyro.sample(..., obs=x)"
            )
        with torch.no_grad():
            return trace.nodes[observed[0]]["fn"].sample().detach()

    return sample


def prior_sampler(
    model: Callable, model_args: tuple = (), model_kwargs: dict[str, Any] | None = None
) -> Callable[[Tensor, int], dict[str, Tensor]]:
    r"""Return ``(x, S) -> {site: z}``: ``S`` i.i.d. prior draws (the model run on ``S`` rows)."""
    kwargs = model_kwargs or {}

    def sample(x: Tensor, num_samples: int) -> dict[str, Tensor]:
        x_rep = x[:1].expand(num_samples, *x.shape[1:])
        trace = _trace(model, x_rep, None, model_args, kwargs)
        latent, _ = _sample_sites(trace)
        return {name: trace.nodes[name]["value"].detach() for name in latent}

    return sample
