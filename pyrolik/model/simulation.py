r"""Draw ``(x, latents)`` from a model's joint :math:`p(z)\,p(x \mid z)`, as Pyro users expect (``docs/idioms.md``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyro
import torch
from pyro.poutine.uncondition_messenger import UnconditionMessenger
from torch import Tensor

from pyrolik._random import fork_rng_from
from pyrolik.model.arguments import mark_arguments, unwrap
from pyrolik.model.hints import short
from pyrolik.model.modules import eval_mode
from pyrolik.model.observed import alternative_data
from pyrolik.model.readmap import ReadMapError, assemble, coded, read_map
from pyrolik.model.target import make_target

__all__ = ["draw_joint"]

_DATA_HINT = ("simulate (x, latents) with your own code (latents: {site: (N, *site_shape)}, exact "
              "draws given x) and pass them as pyrolik.bdmc(model, (x, latents), ...)")


def draw_joint(model: Callable[..., Any], placeholder: Tensor, seed: int, model_args: tuple = (),
               model_kwargs: dict | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """``(x, {site: (N, *site)})`` drawn from the joint; ``placeholder`` gives ``x``'s shape."""
    args, kwargs = unwrap(*mark_arguments(tuple(model_args), dict(model_kwargs or {}),
                                          placeholder.shape[0]))

    def run(x: Tensor | None, fn: Callable, seeded: bool = True) -> Any:
        generator = torch.Generator(device=placeholder.device).manual_seed(seed)
        with fork_rng_from(generator if seeded else None, placeholder.device), torch.no_grad(), \
                pyro.validation_enabled(False), eval_mode():
            return pyro.poutine.trace(fn).get_trace(x, *args, **kwargs)

    layout = _structure(model, placeholder, model_args, model_kwargs, run)
    index = _read_map(model, placeholder, layout, run)
    tr = None
    try:  # the obs=x idiom: with x=None the observed sites sample
        tr = run(None, model)
        for site in index:
            found = tr.nodes.get(site)
            if found is None or found["is_observed"] or found["value"] is None \
                    or tuple(found["value"].shape) != tuple(index[site].shape):
                tr = None
                break
    except Exception:  # noqa: BLE001 - a model that needs its data: simulate on the placeholder
        tr = None
    if tr is None:
        released = _Release(frozenset(index))(model)
        try:
            tr = run(placeholder, released)
            other = run(coded(placeholder) if coded(placeholder) is not None
                        else alternative_data(placeholder), released)
        except Exception as err:  # noqa: BLE001 - whatever broke, say how to go around it
            raise ValueError(
                f"simulating from the model failed: it ran neither with x=None nor on a "
                f"placeholder x of zeros of shape {tuple(placeholder.shape)} ({short(err)}), e.g. "
                f"because its structure reads the data; {_DATA_HINT}") from err
        moved = _differs(tr, other)
        if moved:
            raise ValueError(
                f"simulating from the model failed: its structure reads the data (site {moved!r} "
                f"draws differently on two placeholders x with the same seed), so no placeholder "
                f"gives its joint; {_DATA_HINT}")
    x = assemble(tr, index, placeholder, layout.plate_name)
    latents = {s.name: tr.nodes[s.name]["value"].detach().movedim(s.plate_index, 0)
               for s in layout.sites}
    return x, latents


class _Release(UnconditionMessenger):
    """``poutine.uncondition`` of the observed sites that read ``x`` only: an observation of a
    per-example argument (M2's labels) stays conditioned, so the draws are of the joint given it."""

    def __init__(self, names: frozenset[str]):
        super().__init__()
        self.names = names

    def _pyro_sample(self, msg) -> None:
        if msg["name"] in self.names:
            super()._pyro_sample(msg)


def _structure(model: Callable[..., Any], placeholder: Tensor, model_args: tuple,
               model_kwargs: dict | None, run: Callable):
    """The model's layout on the placeholder, or the refusal: pyrolik's own (naming its fix) when the
    model runs, the pointer to ``data=`` when it does not run on a placeholder at all."""
    try:
        return make_target(model, placeholder, 1, model_args=model_args,
                           model_kwargs=model_kwargs).layout
    except ValueError as err:
        try:
            run(placeholder, model, seeded=False)
        except Exception:  # noqa: BLE001 - it does not run on a placeholder: say how to go around
            raise ValueError(f"simulating from the model failed: it does not run on a placeholder x "
                             f"of zeros of shape {tuple(placeholder.shape)} ({err}); "
                             f"{_DATA_HINT}") from err
        raise ValueError(f"pyrolik cannot simulate from this model: {err}") from err


def _read_map(model: Callable[..., Any], placeholder: Tensor, layout, run: Callable
              ) -> dict[str, Tensor]:
    """Where each observed site reads ``x`` (:func:`~pyrolik.model.readmap.read_map`); a single site
    holding all of ``x`` reads it in order even where the map cannot be found (boolean ``x``)."""
    try:
        return read_map(lambda coded_x: run(coded_x, model, seeded=False), placeholder,
                        layout.observed)
    except ReadMapError as err:
        if not err.uncodable:
            raise ValueError(_unread(err)) from err
        failure: Exception = err
    except Exception as err:  # noqa: BLE001 - the model does not run on coded data
        failure = err
    tr = run(placeholder, model, seeded=False)
    if len(layout.observed) == 1:
        value = tr.nodes[layout.observed[0]]["value"]
        if tuple(value.shape) == tuple(placeholder.shape):
            order = torch.arange(placeholder[0].numel(), device=placeholder.device)
            return {layout.observed[0]: order.reshape(placeholder.shape[1:]).expand(
                placeholder.shape)}
    raise ValueError(_unread(failure)) from failure


def _unread(err: Exception) -> str:
    return (f"simulate puts x together from the values its observed sites draw, by the entries of "
            f"x each one reads; here {short(err)}. Observe x by selection (obs=x, obs=x[:, t], "
            f"obs=x[:, idx]) with any computation on it in the distribution (for a conditional "
            f"model pass the observation as x, the input as a keyword argument); or {_DATA_HINT}")


def _differs(tr_a, tr_b) -> str | None:
    """The first sample site whose value differs between two traces (same seed), or None."""
    for name, node in tr_a.nodes.items():
        if node["type"] != "sample" or node["infer"].get("_deterministic"):
            continue
        other = tr_b.nodes.get(name)
        if other is None or not isinstance(node["value"], Tensor) \
                or tuple(node["value"].shape) != tuple(other["value"].shape) \
                or not torch.equal(node["value"], other["value"]):
            return name
    return None
