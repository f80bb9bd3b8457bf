r"""Draw ``(x, latents)`` from a model's joint :math:`p(z)\,p(x \mid z)`, as Pyro users expect.

A Pyro model conditioned with ``obs=x`` samples that site when ``x`` is ``None``: the usual way to
simulate. :func:`draw_joint` first runs the model so, with ``x=None`` (the number of examples then
comes from the model's arguments, e.g. per-example labels); if the model cannot run without data, it
runs the model on a placeholder ``x`` of zeros of the requested shape with the observed site released
(``poutine.uncondition``). A model whose structure reads the data (ProdLDA's ``total_count =
x.sum(-1)``) cannot be simulated from a placeholder: then the error says so and points to
``bdmc(model, data=(x, latents))`` with data simulated by the user's own code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyro
import torch
from torch import Tensor

from pyrolik._random import fork_rng_from
from pyrolik.model.arguments import mark_arguments, unwrap
from pyrolik.model.hints import short
from pyrolik.model.modules import eval_mode

__all__ = ["draw_joint"]

_DATA_HINT = ("simulate (x, latents) with your own code (latents: {site: (N, *site_shape)}, exact "
              "draws given x) and pass them as pyrolik.bdmc(model, data=(x, latents), ...)")


def draw_joint(model: Callable[..., Any], placeholder: Tensor, seed: int, model_args: tuple = (),
               model_kwargs: dict | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """``(x, {site: (N, *site)})`` drawn from the joint; ``placeholder`` gives ``x``'s shape.

    Randomness comes from a generator seeded by ``seed`` (the same draws whichever way the model
    runs first); the user's global RNG is left alone.
    """
    from pyrolik.model.target import make_target  # the adapter's facade imports this layer's peers

    try:
        target = make_target(model, placeholder, 1, model_args=model_args,
                             model_kwargs=model_kwargs)
    except ValueError as err:
        raise ValueError(f"simulating from the model failed: it does not run on a placeholder x of "
                         f"zeros of shape {tuple(placeholder.shape)} ({err}); {_DATA_HINT}") from err
    if len(target.observed) != 1:
        raise ValueError(f"simulate needs a model with one observed site holding all of x; this one "
                         f"has {list(target.observed)}: {_DATA_HINT}")
    site = target.observed[0]
    args, kwargs = unwrap(*mark_arguments(tuple(model_args), dict(model_kwargs or {}),
                                          placeholder.shape[0]))

    def run(x: Tensor | None, fn: Callable) -> Any:
        generator = torch.Generator(device=placeholder.device).manual_seed(seed)
        with fork_rng_from(generator, placeholder.device), torch.no_grad(), \
                pyro.validation_enabled(False), eval_mode():
            return pyro.poutine.trace(fn).get_trace(x, *args, **kwargs)

    tr = None
    try:  # the obs=x idiom: with x=None the observed site samples
        tr = run(None, model)
        found = tr.nodes.get(site)
        if found is None or found["is_observed"] or found["value"] is None \
                or tuple(found["value"].shape) != tuple(placeholder.shape):
            tr = None
    except Exception:  # noqa: BLE001 - a model that needs its data: simulate on the placeholder
        tr = None
    if tr is None:
        try:
            tr = run(placeholder, pyro.poutine.uncondition(model))
        except Exception as err:  # noqa: BLE001 - whatever broke, say how to go around it
            raise ValueError(
                f"simulating from the model failed: it ran neither with x=None nor on a "
                f"placeholder x of zeros of shape {tuple(placeholder.shape)} ({short(err)}), e.g. "
                f"because its structure reads the data; {_DATA_HINT}") from err
    x = tr.nodes[site]["value"].detach()
    if tuple(x.shape) != tuple(placeholder.shape):
        raise ValueError(f"the observed site {site!r} draws values of shape {tuple(x.shape)}, not "
                         f"(num_examples, *data_shape) = {tuple(placeholder.shape)}")
    latents = {s.name: tr.nodes[s.name]["value"].detach().movedim(s.plate_index, 0)
               for s in target.sites}
    return x.to(placeholder.dtype), latents
