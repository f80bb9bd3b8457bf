"""Conservative sampling-based log-likelihood (CSL), its biased variant and the latent samples it
averages over: alternating chains (RBM block Gibbs, encoder/decoder) and prior draws (``docs/csl.md``)."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import pyro
import pyro.poutine as poutine
import torch
from pyro.poutine.util import site_is_subsample
from torch import Tensor
from torch.distributions import biject_to

from pyrolik._random import fork_rng_from, resolve_seed
from pyrolik._validate import check_count, shared_params, validate_data
from pyrolik.execution.batches import progress_bar, refuse_scope
from pyrolik.model.arguments import fit_rows, has_per_example, mark_arguments
from pyrolik.model.modules import eval_mode
from pyrolik.model.target import Target, make_target
from pyrolik.ops.stats import RunningLogWeights
from pyrolik.results import EstimateResult

__all__ = ["csl", "biased_csl", "AlternatingChain", "block_gibbs", "encoder_decoder",
           "iterate_chain", "sample_chain", "prior_samples"]

Latents = Tensor | Mapping[str, Tensor]  # one flat tensor, or constrained values by site name
LogObsFn = Callable[[Tensor, Latents], Tensor]


def _to_rows(v: Tensor, s: int, n: int, per_example: bool) -> Tensor:
    if per_example:
        return v.reshape(s * n, *v.shape[2:])
    return v.unsqueeze(1).expand(s, n, *v.shape[1:]).reshape(s * n, *v.shape[1:])


def model_log_obs(model: Callable, model_args: tuple = (), model_kwargs: dict[str, Any] | None = None
                  ) -> Callable[[Tensor, Latents, bool], Tensor]:
    r"""``log_obs(x, latents, per_example) -> (S, N)``, :math:`\log p(x_n \mid z_s)`; ``latents``
    ``{site: (S, *site_shape)}`` (or ``(S, N, ...)`` per example), scored as the rows of a target."""
    targets: dict[tuple, Target] = {}

    def log_obs(x: Tensor, latents: Latents, per_example: bool = False) -> Tensor:
        latents = _by_site(latents)
        n = x.shape[0]
        s = next(iter(latents.values())).shape[0]
        key = (s, tuple(x.shape))
        if key not in targets:
            targets[key] = make_target(model, x, s, model_args=model_args, model_kwargs=model_kwargs)
        target = targets[key]
        names = [site.name for site in target.layout.sites]
        missing = [k for k in names if k not in latents]
        extra = sorted(set(latents) - set(names))
        if missing or extra:
            raise ValueError(
                f"latents must hold exactly the model's latent sites {names}; missing {missing}, "
                f"unknown {extra} (draw them with pyrolik.infer.prior_samples or encoder_decoder)")
        for site in target.layout.sites:
            shape = biject_to(target.layout.supports[site.name]).forward_shape(site.shape)
            if latents[site.name].shape != ((s, n) if per_example else (s,)) + shape:
                raise ValueError(
                    f"latents[{site.name!r}] has shape {tuple(latents[site.name].shape)}; expected "
                    f"(S, *site shape) = {(s, *shape)} for draws shared by every example, or "
                    f"(S, N, *site shape) = {(s, n, *shape)} with per_example=True")
        values = {
            site.name: _to_rows(latents[site.name], s, n, per_example).movedim(0, site.plate_index)
            for site in target.layout.sites
        }
        _, log_p_obs = target.program.log_joint_constrained(values)
        return log_p_obs.reshape(s, n)

    return log_obs


def _by_site(latents: Latents) -> Mapping[str, Tensor]:
    """A Pyro model's latents: ``{site name: tensor}``, never one flat tensor."""
    if not isinstance(latents, Mapping):
        raise TypeError(f"a Pyro model's latents are a dict {{site name: tensor}}, got "
                        f"{type(latents).__name__}: draw them with pyrolik.infer.prior_samples "
                        "or encoder_decoder")
    return latents


def _trace(fn: Callable, x: Tensor, data: Mapping[str, Tensor] | None, args, kwargs):
    """Trace ``fn`` on ``x`` (modules in eval mode, per-example arguments fitted to its rows)."""
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


class AlternatingChain(NamedTuple):
    """The two conditional samplers of an alternating chain: ``(x, generator) -> h`` and
    ``(h, x, generator) -> x'`` (``x``, the previous state, gives the shape)."""

    sample_latent_fn: Callable[[Tensor, torch.Generator | None], Latents]
    sample_obs_fn: Callable[[Latents, Tensor, torch.Generator | None], Tensor]


def block_gibbs(rbm: Any) -> AlternatingChain:
    """Block-Gibbs chain of an object with ``sample_hidden(v, g)`` and ``sample_visible(h, g)``.

    Parameters
    ----------
    rbm : object
        E.g. ``pyrolik_models.oracles.rbm.RBM``.
    """
    if not (hasattr(rbm, "sample_hidden") and hasattr(rbm, "sample_visible")):
        raise TypeError(f"block_gibbs needs an object with sample_hidden(v, generator) and "
                        f"sample_visible(h, generator) (e.g. models.oracles.rbm.RBM); got "
                        f"{type(rbm).__name__}")
    return AlternatingChain(lambda x, g: rbm.sample_hidden(x, g),
                            lambda h, x, g: rbm.sample_visible(h, g))


def encoder_decoder(model: Callable, guide: Callable, *, model_args: tuple = (),
                    model_kwargs: dict[str, Any] | None = None) -> AlternatingChain:
    r"""The chain :math:`z \sim q(z \mid x)` (``guide``), :math:`x \sim p(x \mid z)` (``model``);
    latents are ``{site: tensor}``.

    Parameters
    ----------
    model : callable
        Pyro model ``model(x, *model_args, **model_kwargs)`` with a single observed site, ``x``.
    guide : callable
        Pyro guide :math:`q(z \mid x)` with the model's signature.
    model_args, model_kwargs
        Further arguments of the model and the guide.
    """
    if not callable(model) or not callable(guide):
        raise TypeError("encoder_decoder needs a Pyro model and a Pyro guide (callables)")
    kwargs = model_kwargs or {}

    def sample_latent(x: Tensor, generator: torch.Generator | None) -> dict[str, Tensor]:
        with fork_rng_from(generator, x.device), torch.no_grad():
            trace = _trace(guide, x, None, model_args, kwargs)
        return {name: trace.nodes[name]["value"] for name in _latent_names(trace)[0]}

    def sample_obs(latents: Latents, x: Tensor, generator: torch.Generator | None) -> Tensor:
        latents = _by_site(latents)
        with torch.no_grad():
            trace = _trace(model, x, latents, model_args, kwargs)
            observed = _latent_names(trace, latents)[1]
            if len(observed) != 1 or trace.nodes[observed[0]]["value"].shape != x.shape:
                raise ValueError(
                    f"the alternating chain needs exactly one observed site whose value is x; "
                    f"found {observed}: write the model with a single pyro.sample(..., obs=x)")
            with fork_rng_from(generator, x.device):  # x' ~ p(x | z); x gives only the shape
                return trace.nodes[observed[0]]["fn"].sample()

    return AlternatingChain(sample_latent, sample_obs)


def _tree_map(fn: Callable[[Tensor], Tensor], tree: Latents) -> Latents:
    if isinstance(tree, Mapping):
        return {k: fn(v) for k, v in tree.items()}
    return fn(tree)


def _cat(trees: list[Any]) -> Latents:
    """One chain's kept draws (all dicts or all tensors) joined along dim 0, sample-major."""
    if isinstance(trees[0], Mapping):
        return {k: torch.cat([t[k] for t in trees]) for k in trees[0]}
    return torch.cat(trees)


def iterate_chain(chain: Any, x0: Tensor, *, num_samples: int, thin: int = 1, burn_in: int = 0,
                  chunk_size: int = 100, seed: int | None = None) -> Iterator[Latents]:
    r"""Run ``x0.shape[0]`` chains (:math:`h_t \sim P(h \mid x_{t-1})`, :math:`x_t \sim
    P(x \mid h_t)`) and yield their kept :math:`h_t` in chunks ``(k * C, ...)``; the global RNG is
    left alone.

    Parameters
    ----------
    chain : AlternatingChain or RBM-like
        :func:`block_gibbs` (or an RBM) or :func:`encoder_decoder`.
    x0 : torch.Tensor, shape ``(C, *event_shape)``
        The chains' start states, one chain per row.
    num_samples : int
        Latent states to keep per chain.
    thin, burn_in : int
        Keep every ``thin``-th state after discarding ``burn_in`` steps.
    chunk_size : int
        Kept states per chain in each yielded chunk (k; the last chunk may hold fewer).
    seed : int, optional
        Seeds the chains' own generator.
    """
    for name, value in (("num_samples", num_samples), ("burn_in", burn_in)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative int; got {value!r}")
    check_count("thin", thin)
    check_count("chunk_size", chunk_size)
    chain = chain if isinstance(chain, AlternatingChain) else block_gibbs(chain)
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
                yield _cat(buffer)
                buffer = []


def sample_chain(chain: Any, x0: Tensor, *, num_samples: int, thin: int = 1, burn_in: int = 0,
                 seed: int | None = None, flatten: bool = False) -> Latents:
    """The kept latents of :func:`iterate_chain`: ``(num_samples, C, ...)``, or flattened.

    Parameters
    ----------
    chain, x0, num_samples, thin, burn_in, seed
        As in :func:`iterate_chain`.
    flatten : bool
        Return ``(num_samples * C, ...)`` instead (sample-major).
    """
    check_count("num_samples", num_samples)
    (out,) = iterate_chain(chain, x0, num_samples=num_samples, thin=thin, burn_in=burn_in,
                           chunk_size=num_samples, seed=seed)
    return out if flatten else _tree_map(lambda v: v.reshape(num_samples, x0.shape[0], *v.shape[1:]),
                                         out)


@shared_params
def prior_samples(model: Callable, x: Tensor, num_samples: int, *, model_args: tuple = (),
                  model_kwargs: dict[str, Any] | None = None, seed: int | None = None
                  ) -> dict[str, Tensor]:
    """I.i.d. prior draws of every latent site, ``{site: (num_samples, *site_shape)}``.

    Parameters
    ----------
    x : torch.Tensor, shape ``(N, *event_shape)``
        Observations; the first gives the model its shapes.
    num_samples : int
        Draws of each site (S).
    model_args, model_kwargs
        Further arguments of the model; none may be per example.
    """
    check_count("num_samples", num_samples)
    x = validate_data(x)
    gen = torch.Generator(device=x.device).manual_seed(resolve_seed(seed))
    marked = mark_arguments(tuple(model_args), dict(model_kwargs or {}), x.shape[0])
    if per_example := has_per_example(*marked):
        raise ValueError(f"prior samples shared by all examples cannot follow the per-example "
                         f"argument(s) {per_example}: the prior may depend on them; estimate with "
                         "pyrolik.likelihood_weighting (prior draws per example) instead")
    target = make_target(model, x[:1], num_samples, model_args=marked[0], model_kwargs=marked[1])
    layout = target.layout
    draws = layout.by_chain(layout.constrain(target.program.sample_prior(gen).u))
    return {k: v.squeeze(1) for k, v in draws.items()}


def _resolve(fn: Any, is_dict: bool, model_args: tuple, model_kwargs: dict | None,
             per_example: bool) -> LogObsFn:
    """Turn the first argument of :func:`csl` into ``log_obs(x, h) -> (S, N)``."""
    if callable(getattr(fn, "log_obs", None)):
        return fn.log_obs
    if not callable(fn):
        raise TypeError("csl needs a log_obs_fn(x, h) -> (S, N), an object with such a log_obs "
                        f"method, or a Pyro model; got {type(fn).__name__}")
    if is_dict:
        log_obs = model_log_obs(fn, model_args, model_kwargs)
        return lambda x, h: log_obs(x, h, per_example)
    return fn


def _chunks(latents: Latents | Iterable[Latents], chunk_size: int):
    if isinstance(latents, Tensor):
        yield from latents.split(chunk_size)
    elif isinstance(latents, Mapping):
        for pieces in zip(*(v.split(chunk_size) for v in latents.values()), strict=True):
            yield dict(zip(latents, pieces, strict=True))
    else:
        yield from latents


def _lead(h: Latents) -> Tensor:
    if isinstance(h, Mapping) and not h:
        raise ValueError("latents is an empty dict: give the model's latent sites by name, each "
                         "a tensor of samples along dim 0 (e.g. {'z': z})")
    return next(iter(h.values())) if isinstance(h, Mapping) else h


def _count(latents: Any) -> int | None:
    """Number of samples when it is known before streaming (tensor, dict, list of chunks)."""
    if isinstance(latents, (list, tuple)):
        return sum(_lead(h).shape[0] for h in latents)
    return _lead(latents).shape[0] if isinstance(latents, (Tensor, Mapping)) else None


@shared_params
def csl(log_obs_fn_or_model: Any, x: Tensor, latents: Latents | Iterable[Latents], *,
        per_example: bool = False, chunk_size: int = 1024, model_args: tuple = (),
        model_kwargs: dict[str, Any] | None = None, keep_weights: bool = False, khat: bool = True,
        progress: bool = False) -> EstimateResult:
    r"""Conservative sampling-based log-likelihood (Bengio, Yao & Cho 2014, arXiv:1311.6184),
    :math:`\log \frac{1}{|S|} \sum_{h \in S} P(x \mid h)` over the latent states :math:`S` of a
    chain: a stochastic lower bound on the chain's stationary data marginal (``docs/csl.md``).

    Parameters
    ----------
    log_obs_fn_or_model : callable or object
        ``log_obs_fn(x, h) -> (S, N)``, :math:`\log P(x_n \mid h_s)`; an object with such a
        ``log_obs``; or a Pyro model (``latents`` then ``{site: tensor}``).
    latents : Tensor, dict of Tensors, or an iterable of either (chunks, e.g. :func:`iterate_chain`)
        ``(S, *latent_shape)``, or ``(S, N, *latent_shape)`` with ``per_example=True``.
    per_example : bool
        ``latents`` hold samples per example (dim 1).
    chunk_size : int
        Samples per pass when ``latents`` is a tensor or dict.
    keep_weights, khat : bool
        Keep the ``(S, N)`` log-weights; compute Pareto k-hat (off for large test sets).

    Returns
    -------
    EstimateResult
        ``bound="lower"``; ``ess``, ``mcse``, ``khat`` treat the samples as independent.

    Examples
    --------
    The latent states of 100 alternating chains (the exact posterior as encoder), 20 from each:

    >>> import torch, pyrolik
    >>> from pyrolik_models import LinearGaussian
    >>> lg = LinearGaussian.random(data_dim=3, latent_dim=2, seed=0)   # exact log p(x) known
    >>> x = lg.sample(4, torch.Generator().manual_seed(0))
    >>> chain = pyrolik.infer.encoder_decoder(lg, lg.exact_guide)
    >>> starts = lg.sample(100, torch.Generator().manual_seed(1))
    >>> states = pyrolik.infer.sample_chain(chain, starts, num_samples=20, burn_in=10, thin=2,
    ...                                     seed=0, flatten=True)
    >>> result = pyrolik.csl(lg, x, states)
    >>> result.bound, result.log_likelihood.shape
    ('lower', torch.Size([4]))
    >>> bool((result.log_likelihood - lg.exact_log_marginal(x)).abs().max() < 1.0)
    True
    """
    refuse_scope("csl")
    x = validate_data(x)
    check_count("chunk_size", chunk_size)
    start_time = time.perf_counter()
    known = _count(latents)
    chunks = iter(_chunks(latents, chunk_size))
    first = next(chunks, None)
    if first is None or known == 0:
        raise ValueError("latents hold no samples; pass at least one")
    chunks = itertools.chain([first], chunks)
    fn = _resolve(log_obs_fn_or_model, isinstance(first, Mapping), model_args, model_kwargs,
                  per_example)
    n = x.shape[0]
    running = RunningLogWeights(known or 1, keep_weights)
    bar = progress_bar(-(-known // chunk_size) if known else 0, "csl", progress)
    with torch.no_grad():
        for h in chunks:
            lead = _lead(h)
            s = lead.shape[0]
            if per_example and (lead.dim() < 2 or lead.shape[1] != n):
                raise ValueError(f"per_example latents must have shape (S, N={n}, ...); got "
                                 f"{tuple(lead.shape)}")
            try:
                log_w = fn(x, h)
            except TypeError as e:
                raise TypeError(f"calling log_obs(x, h) failed ({e}); a Pyro model needs latents "
                                "as {site: tensor} dicts, a function must take (x, h)") from e
            if not torch.is_tensor(log_w) or tuple(log_w.shape) != (s, n):
                got = tuple(log_w.shape) if torch.is_tensor(log_w) else type(log_w).__name__
                raise ValueError(f"log_obs returned {got}, expected (S={s}, N={n}): log P(x_n | h_s) "
                                 "for every sample and example (for a Pyro model pass latents as "
                                 "{site: tensor})")
            if torch.isnan(log_w).any():
                raise ValueError("log_obs returned NaN; check the latents and the model")
            running.update(log_w.detach())
            bar.update(1)
    bar.close()
    # k-hat needs the sample count up front (its tail size) or every weight
    khat_values = (running.khat() if khat and (known is not None or keep_weights)
                   else torch.full_like(running.log_mean, float("nan")))
    # a Pyro model: bits/dim divides by the entries it observes (masks included)
    is_model = isinstance(first, Mapping) and not callable(getattr(log_obs_fn_or_model, "log_obs",
                                                                   None))
    num_observed = (make_target(log_obs_fn_or_model, x, 1, model_args=model_args,
                                model_kwargs=model_kwargs).layout.num_observed if is_model else None)
    return EstimateResult(
        method="csl", num_observed=num_observed, log_likelihood=running.log_mean, bound="lower",
        log_weights=running.log_weights, ess=running.ess, mcse=running.mcse, khat=khat_values, x=x,
        settings={"num_samples": running.count, "chunk_size": chunk_size,
                  "per_example": per_example},
        wall_time=time.perf_counter() - start_time,
    )


@shared_params
def biased_csl(log_obs_fn_or_model: Any, x: Tensor, chain: Any, *, num_chains: int = 10,
               num_steps: int = 1, seed: int | None = None, chunk_size: int = 1024,
               model_args: tuple = (), model_kwargs: dict[str, Any] | None = None,
               keep_weights: bool = False) -> EstimateResult:
    """Biased CSL (section 6 of Bengio et al. 2014): :func:`csl` on the states of short chains
    **started at** each example. **Not a bound** (it over-estimates, ``bound=None``): rank models
    with it, don't report it (``docs/csl.md``).

    Parameters
    ----------
    log_obs_fn_or_model, chunk_size, keep_weights
        As in :func:`csl` (a function receives per-example latents ``(S, N, ...)``).
    chain : AlternatingChain or RBM-like
        :func:`block_gibbs` (or an RBM) or :func:`encoder_decoder`.
    num_chains, num_steps : int
        Chains started at each example; steps per chain, each state kept.
    """
    refuse_scope("biased_csl")
    x = validate_data(x)
    check_count("num_chains", num_chains)
    check_count("num_steps", num_steps)
    seed = resolve_seed(seed)
    start_time = time.perf_counter()
    n = x.shape[0]
    x0 = x.unsqueeze(0).expand(num_chains, *x.shape).reshape(num_chains * n, *x.shape[1:])
    h = sample_chain(chain, x0, num_samples=num_steps, seed=seed)  # (T, C*N, ...)

    h = _tree_map(lambda v: v.reshape(num_steps * num_chains, n, *v.shape[2:]), h)
    result = csl(
        log_obs_fn_or_model, x, h, per_example=True, chunk_size=chunk_size,
        model_args=model_args, model_kwargs=model_kwargs, keep_weights=keep_weights,
        khat=False,  # a handful of local, correlated samples: no importance-sampling tail to fit
    )
    return dataclasses.replace(
        result, method="biased_csl", bound=None, seed=seed, wall_time=time.perf_counter() - start_time,
        settings={**result.settings, "num_chains": num_chains, "num_steps": num_steps})
