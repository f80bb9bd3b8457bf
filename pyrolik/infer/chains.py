"""Latent samples for CSL: alternating chains (RBM block Gibbs, encoder/decoder), prior draws."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import validate_data
from pyrolik.model import sampling as _pyro
from pyrolik.ops.types import Latents

__all__ = [
    "AlternatingChain",
    "block_gibbs",
    "encoder_decoder",
    "as_chain",
    "iterate_chain",
    "sample_chain",
    "prior_samples",
]



class AlternatingChain(NamedTuple):
    """The two conditional samplers of an alternating chain.

    ``sample_latent_fn(x, generator) -> h`` and ``sample_obs_fn(h, x, generator) -> x'`` (``x``: the
    previous state, for its shape).
    """

    sample_latent_fn: Callable[[Tensor, torch.Generator | None], Latents]
    sample_obs_fn: Callable[[Latents, Tensor, torch.Generator | None], Tensor]


def block_gibbs(rbm: Any) -> AlternatingChain:
    """Block-Gibbs chain of an object with ``sample_hidden(v, g)`` and ``sample_visible(h, g)``."""
    if not (hasattr(rbm, "sample_hidden") and hasattr(rbm, "sample_visible")):
        raise TypeError(
            f"block_gibbs needs an object with sample_hidden(v, generator) and "
            f"sample_visible(h, generator) (e.g. models.oracles.rbm.RBM); got {type(rbm).__name__}"
        )
    return AlternatingChain(
        lambda x, g: rbm.sample_hidden(x, g), lambda h, x, g: rbm.sample_visible(h, g)
    )


def encoder_decoder(
    model: Callable, guide: Callable, *, model_args: tuple = (),
    model_kwargs: dict[str, Any] | None = None,
) -> AlternatingChain:
    r"""The chain :math:`z \sim q(z \mid x)` (``guide``), :math:`x \sim p(x \mid z)` (``model``).

    The model needs a single observed site whose value is ``x``. Latents are ``{site: tensor}``.
    """
    if not callable(model) or not callable(guide):
        raise TypeError("encoder_decoder needs a Pyro model and a Pyro guide (callables)")
    return AlternatingChain(_pyro.guide_sampler(guide, model_args, model_kwargs),
                            _pyro.obs_sampler(model, model_args, model_kwargs))


def as_chain(chain: Any) -> AlternatingChain:
    """Accept an :class:`AlternatingChain` or an RBM-like object (made into :func:`block_gibbs`)."""
    if isinstance(chain, AlternatingChain):
        return chain
    return block_gibbs(chain)


def _tree_map(fn: Callable[[Tensor], Tensor], tree: Latents) -> Latents:
    if isinstance(tree, Mapping):
        return {k: fn(v) for k, v in tree.items()}
    return fn(tree)


def _stack(trees: list[Latents]) -> Latents:
    # one chain's draws are all dicts or all tensors
    if isinstance(trees[0], Mapping):
        dicts = cast(list[Mapping[str, Tensor]], trees)
        return {k: torch.stack([t[k] for t in dicts]) for k in dicts[0]}
    return torch.stack(cast(list[Tensor], trees))


def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative int; got {value!r}")


def iterate_chain(
    chain: Any,
    x0: Tensor,
    *,
    num_samples: int,
    thin: int = 1,
    burn_in: int = 0,
    chunk_size: int = 100,
    seed: int | None = None,
) -> Iterator[Latents]:
    r"""Run ``x0.shape[0]`` chains and yield their kept latent states in chunks ``(k * C, ...)``.

    Step :math:`t` draws :math:`h_t \sim P(h \mid x_{t-1})`, then :math:`x_t \sim P(x \mid h_t)`;
    :math:`h_t` is kept after ``burn_in``, every ``thin`` steps; the global RNG is left alone.
    """
    _check_counts(num_samples=num_samples, burn_in=burn_in)
    if not isinstance(thin, int) or thin < 1 or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"thin and chunk_size must be positive ints; got {thin!r}, {chunk_size!r}")
    chain = as_chain(chain)
    gen = torch.Generator(device=x0.device).manual_seed(resolve_seed(seed))
    x, kept, buffer, t = x0, 0, [], 0
    while kept < num_samples:
        t += 1
        # no_grad only around the draws: held across a yield it would leak into the consumer
        with torch.no_grad():
            h = chain.sample_latent_fn(x, gen)
            x = chain.sample_obs_fn(h, x, gen)
        if t > burn_in and (t - burn_in) % thin == 0:
            buffer.append(h)
            kept += 1
            if len(buffer) == chunk_size or kept == num_samples:
                yield _tree_map(lambda v: v.reshape(-1, *v.shape[2:]), _stack(buffer))
                buffer = []


def sample_chain(
    chain: Any,
    x0: Tensor,
    *,
    num_samples: int,
    thin: int = 1,
    burn_in: int = 0,
    seed: int | None = None,
    flatten: bool = False,
) -> Latents:
    """The kept latents of :func:`iterate_chain`: ``(num_samples, C, ...)``, or flattened."""
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int; got {num_samples!r}")
    (out,) = iterate_chain(chain, x0, num_samples=num_samples, thin=thin, burn_in=burn_in,
                           chunk_size=num_samples, seed=seed)
    if flatten:
        return out
    c = x0.shape[0]
    return _tree_map(lambda v: v.reshape(num_samples, c, *v.shape[1:]), out)


def prior_samples(
    model: Callable,
    x: Tensor,
    num_samples: int,
    *,
    model_args: tuple = (),
    model_kwargs: dict[str, Any] | None = None,
    seed: int | None = None,
) -> dict[str, Tensor]:
    """I.i.d. prior draws of every latent site, ``{site: (num_samples, *site_shape)}``."""
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int; got {num_samples!r}")
    x = validate_data(x)
    gen = torch.Generator(device=x.device).manual_seed(resolve_seed(seed))
    return _pyro.prior_draws(model, x, num_samples, gen, model_args, model_kwargs)
