r"""Pyro-model helpers for CSL and its chains: log p(x | z) for every pair, and the samplers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyro
import pyro.poutine as poutine
import torch
from pyro.poutine.util import site_is_subsample
from torch import Tensor

from pyrolik._random import fork_rng_from
from pyrolik.model.arguments import fit_rows, has_per_example, mark_arguments
from pyrolik.model.modules import eval_mode
from pyrolik.model.target import Target, make_target
from pyrolik.ops.types import Latents

__all__ = ["model_log_obs", "guide_sampler", "obs_sampler", "prior_draws"]


def _to_rows(v: Tensor, s: int, n: int, per_example: bool) -> Tensor:
    if per_example:
        return v.reshape(s * n, *v.shape[2:])
    return v.unsqueeze(1).expand(s, n, *v.shape[1:]).reshape(s * n, *v.shape[1:])


def model_log_obs(
    model: Callable, model_args: tuple = (), model_kwargs: dict[str, Any] | None = None
) -> Callable[[Tensor, Latents, bool], Tensor]:
    r"""Return ``log_obs(x, latents, per_example) -> (S, N)``: :math:`\log p(x_n \mid z_s)`.

    ``latents`` maps every latent site to ``(S, *site_shape)`` (every sample paired with every
    example) or, with ``per_example=True``, ``(S, N, *site_shape)``. The ``S * N`` pairs are the
    rows of a :class:`~pyrolik.model.target.Target` with ``S`` chains (row ``s * N + n``).
    """
    targets: dict[tuple, Target] = {}

    def log_obs(x: Tensor, latents: Latents, per_example: bool = False) -> Tensor:
        latents = _by_site(latents)
        n = x.shape[0]
        s = next(iter(latents.values())).shape[0]
        key = (s, tuple(x.shape))
        if key not in targets:
            targets[key] = make_target(model, x, s, model_args=model_args,
                                       model_kwargs=model_kwargs)
        target = targets[key]
        names = [site.name for site in target.sites]
        missing = [k for k in names if k not in latents]
        extra = sorted(set(latents) - set(names))
        if missing or extra:
            raise ValueError(
                f"latents must hold exactly the model's latent sites {names}; missing {missing}, "
                f"unknown {extra} (draw them with pyrolik.infer.chains.prior_samples or encoder_decoder)"
            )
        values = {
            site.name: _to_rows(latents[site.name], s, n, per_example).movedim(0, site.plate_index)
            for site in target.sites
        }
        _, log_p_obs = target.log_joint_constrained(values)
        return log_p_obs.reshape(s, n)

    return log_obs


def _by_site(latents: Latents) -> Mapping[str, Tensor]:
    """A Pyro model's latents: ``{site name: tensor}``, never one flat tensor."""
    if not isinstance(latents, Mapping):
        raise TypeError(f"a Pyro model's latents are a dict {{site name: tensor}}, got "
                        f"{type(latents).__name__}: draw them with pyrolik.infer.chains."
                        "prior_samples or encoder_decoder")
    return latents


def _trace(fn: Callable, x: Tensor, data: Mapping[str, Tensor] | None, args, kwargs):
    """Trace ``fn`` on ``x`` with modules in eval mode; per-example arguments marked with
    ``pyrolik.model.per_example`` are repeated to the rows of ``x`` (whole copies of the examples)."""
    fn = poutine.condition(fn, data=dict(data)) if data else fn
    args, kwargs = fit_rows(args, kwargs, x.shape[0])
    with pyro.validation_enabled(False), eval_mode():
        return poutine.trace(fn).get_trace(x, *args, **kwargs)


def _latent_names(trace: poutine.Trace, given: Mapping[str, Tensor] | None = None) -> tuple:
    latent, observed = [], []
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or site_is_subsample(site):
            continue
        if site["is_observed"] and not (given and name in given):
            observed.append(name)
        elif not site["is_observed"]:
            latent.append(name)
    return latent, observed


def guide_sampler(
    guide: Callable, model_args: tuple = (), model_kwargs: dict[str, Any] | None = None
) -> Callable[[Tensor, torch.Generator | None], dict[str, Tensor]]:
    r"""Return ``(x, generator) -> {site: z}`` drawing :math:`z \sim q(z \mid x)` from a guide."""
    kwargs = model_kwargs or {}

    def sample(x: Tensor, generator: torch.Generator | None) -> dict[str, Tensor]:
        with fork_rng_from(generator, x.device), torch.no_grad():
            trace = _trace(guide, x, None, model_args, kwargs)
        latent, _ = _latent_names(trace)
        return {name: trace.nodes[name]["value"] for name in latent}

    return sample


def obs_sampler(
    model: Callable, model_args: tuple = (), model_kwargs: dict[str, Any] | None = None
) -> Callable[[Latents, Tensor, torch.Generator | None], Tensor]:
    r"""Return ``(z, x, generator) -> x'`` drawing :math:`x' \sim p(x \mid z)`.

    ``x`` gives only the shape. The model must have exactly one observed site, whose value is ``x``.
    """
    kwargs = model_kwargs or {}

    def sample(latents: Latents, x: Tensor, generator: torch.Generator | None) -> Tensor:
        latents = _by_site(latents)
        with torch.no_grad():
            trace = _trace(model, x, latents, model_args, kwargs)
            _, observed = _latent_names(trace, latents)
            if len(observed) != 1 or trace.nodes[observed[0]]["value"].shape != x.shape:
                raise ValueError(
                    f"the alternating chain needs exactly one observed site whose value is x; "
                    f"found {observed}: write the model with a single pyro.sample(..., obs=x)"
                )
            with fork_rng_from(generator, x.device):
                return trace.nodes[observed[0]]["fn"].sample()

    return sample


def prior_draws(
    model: Callable, x: Tensor, num_samples: int, generator: torch.Generator | None,
    model_args: tuple = (), model_kwargs: dict[str, Any] | None = None,
) -> dict[str, Tensor]:
    """``num_samples`` prior draws of every latent site, ``{site: (S, *site_shape)}``."""
    marked = mark_arguments(tuple(model_args), dict(model_kwargs or {}), x.shape[0])
    per_example = has_per_example(*marked)
    if per_example:
        raise ValueError(f"prior samples shared by all examples cannot follow the per-example "
                         f"argument(s) {per_example}: the prior may depend on them; estimate with "
                         "pyrolik.likelihood_weighting (prior draws per example) instead")
    target = make_target(model, x[:1], num_samples, model_args=marked[0], model_kwargs=marked[1])
    draw = target.sample_prior(generator)
    return {k: v.squeeze(1) for k, v in target.unravel(draw.u).items()}
