"""Importance sampling estimators of log p(x): likelihood weighting and the IWAE bound."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from pyrolik._validate import check_count, shared_params, validate_data
from pyrolik.execution.batches import Batch, Execution, progress_bar, run_batches, warn_failed
from pyrolik.model.target import Target, make_target, prepare_inputs
from pyrolik.ops.resampling import RESAMPLING_STREAM, StreamingResampler
from pyrolik.ops.stats import RunningLogWeights
from pyrolik.results import EstimateResult

__all__ = ["likelihood_weighting", "iwae"]

KEEP_WEIGHTS_MAX = 10_000_000  # keep all log-weights by default up to this many numbers
ROWS_PER_CHUNK = 16_384  # default chunk: about this many (sample, example) rows per model pass


@shared_params
def likelihood_weighting(model: Callable[..., Any], x: Tensor, *, num_samples: int,
                         model_args: tuple = (), model_kwargs: dict | None = None,
                         seed: int | None = None, batch_size: int | None = None,
                         chunk_size: int | None = None, keep_weights: bool | None = None,
                         keep_samples: bool | None = None,
                         progress: bool = True) -> EstimateResult | None:
    r"""Likelihood weighting (Wu et al. 2017, eq. 6), :math:`\log \frac1K \sum_k p(x \mid z_k)` with
    :math:`z_k \sim p(z)`: a stochastic lower bound on :math:`\log p(x)`, accurate only when the
    prior overlaps the posterior (watch ``khat``).

    Returns
    -------
    EstimateResult
        ``log_likelihood`` (N,), ``bound == "lower"``, ``ess``, ``mcse``, ``khat`` per example.

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models.oracles.linear_gaussian import LinearGaussian
    >>> model = LinearGaussian.random(data_dim=5, latent_dim=2, seed=0)   # exact log p(x) known
    >>> x = model.sample(4, torch.Generator().manual_seed(0))
    >>> result = pyrolik.likelihood_weighting(model, x, num_samples=1000, seed=0, progress=False)
    >>> result.bound, result.log_likelihood.shape
    ('lower', torch.Size([4]))
    >>> bool((result.log_likelihood - model.exact_log_marginal(x)).abs().max() < 1.0)
    True
    """

    def log_weights(target: Target, generator: torch.Generator) -> tuple[Tensor, dict]:
        draw = target.program.sample_prior(generator)
        return draw.log_density, draw.values

    return _run_importance("likelihood_weighting", model, None, x, log_weights, num_samples,
                           model_args, model_kwargs, seed, batch_size, chunk_size, keep_weights,
                           keep_samples, progress)


@shared_params
def iwae(model: Callable[..., Any], x: Tensor, guide: Callable[..., Any], *, num_samples: int,
         model_args: tuple = (), model_kwargs: dict | None = None, seed: int | None = None,
         batch_size: int | None = None, chunk_size: int | None = None,
         keep_weights: bool | None = None, keep_samples: bool | None = None,
         progress: bool = True) -> EstimateResult | None:
    r"""The importance weighted bound (Burda et al. 2016), :math:`\log \frac1K \sum_k p(x, z_k) /
    q(z_k \mid x)` with :math:`z_k \sim q(z \mid x)` from a Pyro guide: a stochastic lower bound on
    :math:`\log p(x)`, increasing in :math:`K`.

    Parameters
    ----------
    guide : callable
        A Pyro guide with the model's signature sampling every latent site (or a mixture
        proposal, :mod:`pyrolik.model.autoguides`).

    Returns
    -------
    EstimateResult
        ``log_likelihood`` (N,), ``bound == "lower"``, ``ess``, ``mcse``, ``khat`` per example.

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models.oracles.linear_gaussian import LinearGaussian
    >>> model = LinearGaussian.random(data_dim=5, latent_dim=2, seed=0)   # exact log p(x) known
    >>> x = model.sample(4, torch.Generator().manual_seed(0))
    >>> result = pyrolik.iwae(model, x, model.exact_guide, num_samples=16, seed=0, progress=False)
    >>> result.bound
    'lower'
    >>> exact = model.exact_log_marginal(x)   # the exact posterior as guide: every weight is p(x)
    >>> bool(torch.allclose(result.log_likelihood, exact, atol=1e-3))
    True
    """
    if not callable(guide):
        raise TypeError(f"guide must be a callable Pyro guide, got {type(guide).__name__}")

    def log_weights(target: Target, generator: torch.Generator) -> tuple[Tensor, dict]:
        draw = target.program.sample_guide(generator)
        log_prior, log_obs = target.program.log_joint_constrained(draw.values)
        return log_prior + log_obs - draw.log_density, draw.values

    return _run_importance("iwae", model, guide, x, log_weights, num_samples, model_args,
                           model_kwargs, seed, batch_size, chunk_size, keep_weights, keep_samples,
                           progress)


def _run_importance(method, model, guide, x, log_weights_fn, num_samples, model_args,
                    model_kwargs, seed, batch_size, chunk_size, keep_weights, keep_samples,
                    progress) -> EstimateResult | None:
    if not callable(model):
        raise TypeError(f"model must be a callable Pyro model, got {type(model).__name__}")
    x = validate_data(x)
    check_count("num_samples", num_samples)
    if chunk_size is not None:
        check_count("chunk_size", chunk_size)
    execution = Execution.create(seed=seed, batch_size=batch_size, progress=progress, desc=method,
                                 method=method, supports=("distributed",))
    shard, seed = execution.shard, execution.seed
    n = x.shape[0]
    if keep_samples and keep_weights is False:
        raise ValueError("keep_samples=True needs the weights of the draws it keeps: pass "
                         "keep_weights=True (or leave it out)")
    if keep_weights is None:
        keep_weights = bool(keep_samples) or num_samples * n <= KEEP_WEIGHTS_MAX
    start_time = time.perf_counter()
    size = n if batch_size is None else batch_size
    chunk = chunk_size or max(1, min(num_samples, ROWS_PER_CHUNK // min(size, n)))
    num_chunks = -(-num_samples // chunk)
    owned = sum(shard.owns(i) for i in range(-(-n // size)))
    bar = progress_bar(num_chunks * owned, execution.desc, execution.progress)
    plate: dict[str, str] = {}  # the model's data plate, read off the first target made
    keep: dict[str, bool] = {}  # whether to keep the raw draws, decided on the first chunk

    inputs = prepare_inputs(model, x, model_args, model_kwargs, guide)

    def work(batch: Batch, resume: Any, save: Callable[[Any], None] | None) -> dict[str, Any]:
        xb = x[batch.start : batch.stop]
        b = inputs.batch(batch.start, batch.stop)
        running = RunningLogWeights(num_samples, keep_weights)
        # the resampling has its own stream: the draws and weights are those of earlier versions
        resampler = StreamingResampler(num_samples, xb.shape[0], torch.Generator(
            device=x.device).manual_seed((seed + RESAMPLING_STREAM * (batch.start + 1)) % 2**63))
        kept: dict[str, list[Tensor]] = {}
        targets: dict[int, Target] = {}
        done = 0
        while done < num_samples:
            k = min(chunk, num_samples - done)
            if k not in targets:
                targets[k] = make_target(model, xb, k, model_args=b.model_args,
                                         model_kwargs=b.model_kwargs, guide=b.guide)
                plate.setdefault("name", targets[k].layout.plate_name)
            lw, values = log_weights_fn(targets[k], batch.generator)
            lw = lw.reshape(k, xb.shape[0])
            running.update(lw.detach())
            values = {s: v.detach() for s, v in targets[k].layout.by_chain(values).items()}
            resampler.update(lw, values, done)
            if keep.setdefault("samples", keep_samples is not False and keep_weights and (
                    keep_samples or sum(v[0, 0].numel() for v in values.values()) * num_samples
                    * n <= KEEP_WEIGHTS_MAX)):
                for s, v in values.items():
                    kept.setdefault(s, []).append(v)
            done += k
            bar.update(1)
        return {"log_likelihood": running.log_mean, "ess": running.ess, "mcse": running.mcse,
                "khat": running.khat(), "log_weights": running.log_weights, **resampler.result(),
                **{f"sample:{s}": torch.cat(v) for s, v in kept.items()},
                "num_observed": next(iter(targets.values())).layout.num_observed}

    parts = run_batches(n, batch_size, seed, x.device, work, shard=shard,
                        rows_per_example=chunk)
    bar.close()
    if parts is None:
        return None
    cat: dict[str, Any] = {name: torch.cat([p[name] for p in parts])
                           for name in ("log_likelihood", "ess", "mcse", "khat")}
    if all(p.get("num_observed") is not None for p in parts):
        cat["num_observed"] = torch.cat([p["num_observed"] for p in parts])
    kept = torch.cat([p["log_weights"] for p in parts], dim=1) if keep_weights else None
    settings = {"num_samples": num_samples, "batch_size": batch_size, "chunk_size": chunk}
    by_name = {name: torch.cat([p[name] for p in parts], dim=1 if name.startswith("sample:")
                               else 2) for name in parts[0] if ":" in name or name.startswith(
                                   "draw_")}
    result = EstimateResult(
        method=method, bound="lower", log_weights=kept, x=x, settings=settings, seed=seed,
        wall_time=time.perf_counter() - start_time, example_dim=plate.get("name", "example"),
        samples={n[7:]: v for n, v in by_name.items() if n.startswith("sample:")} or None,
        draws={n[5:] if n.startswith("draw:") else n: v for n, v in by_name.items()
               if n.startswith("draw")}, **cat,
    )
    warn_failed(result, method)
    return result
