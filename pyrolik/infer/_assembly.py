"""Shared plumbing of the AIS estimators: argument checks, per-batch payloads, the final result.

A batch's *payload* is what is checkpointed and gathered across processes: per-chain tensors of
shape ``(K, n, ...)`` (``trace`` entries ``(R, K, n, ...)``), the pilot table as a tuple, and the
constrained final states. :func:`finish` concatenates payloads along the example dim and reduces
them once, so a run assembled from checkpoints or from several processes is the same result.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pyrolik._validate import check_count, validate_data
from pyrolik.diagnostics.stats import (
    effective_sample_size,
    log_mean_exp,
    mcse_log_mean_exp,
    pareto_khat,
)
from pyrolik.execution.distributed import Shard
from pyrolik.io.checkpoint import Checkpoint, fingerprint
from pyrolik.mcmc import schedules as _schedules
from pyrolik.mcmc.adaptation import StepSizes
from pyrolik.mcmc.hmc import HMC
from pyrolik.model.target import Target
from pyrolik.results import AISResult

__all__ = ["prepare", "settings_of", "payload", "finish", "table_of", "open_checkpoint",
           "checkpoint_path", "initial_draw", "expand_latents", "latents_to_flat"]


def prepare(model, x, num_steps, num_chains, schedule, kernel, init, record_every=None):
    """Validate the common arguments; return ``(x, betas, kernel)``."""
    if not callable(model):
        raise TypeError(f"model must be a callable Pyro model, got {type(model).__name__}")
    x = validate_data(x)
    check_count("num_chains", num_chains)
    if num_steps is not None:
        check_count("num_steps", num_steps)
    if record_every is not None:
        check_count("record_every", record_every)
    betas = _schedules.resolve(schedule, num_steps)
    kernel = HMC() if kernel is None else kernel
    if not isinstance(kernel, HMC):
        raise TypeError(f"kernel must be a pyrolik.HMC, got {type(kernel).__name__}")
    if init is not None and not callable(init):
        raise TypeError(f"init must be a Pyro guide (callable) or None, got {type(init).__name__}")
    return x, betas, kernel


def initial_draw(target: Target, path: str, generator) -> Tensor:
    return (target.sample_guide(generator) if path == "guide" else target.sample_prior(generator)).u


def settings_of(num_steps, num_chains, schedule, kernel, batch_size, init):
    return {"num_steps": num_steps, "num_chains": num_chains,
            "schedule": schedule if isinstance(schedule, str) else "custom",
            "num_leapfrog": kernel.num_leapfrog, "adapt": str(kernel.adapt),
            "target_accept": kernel.target_accept, "initial_step_size": kernel.step_size,
            "mass_matrix": kernel.mass_matrix, "batch_size": batch_size,
            "init": "prior" if init is None else getattr(init, "__name__", "guide")}


def table_of(saved: tuple | None) -> StepSizes | None:
    return None if saved is None else StepSizes(*saved)


def payload(out, k: int, n: int, table: StepSizes | None,
            latents: dict[str, Tensor] | None = None, evaluation: str | None = None) -> dict[str, Any]:
    """One batch's ``AnnealOutput`` as per-chain tensors (see the module docstring); ``evaluation``:
    how its target evaluated the model (:meth:`pyrolik.model.target.Target.evaluation`)."""
    def per_chain(name: str, t: Tensor) -> Tensor:
        return t if name == "beta" else t.reshape(t.shape[0], k, n, *t.shape[2:])

    return {
        "log_weight": out.log_weight.reshape(k, n),
        "z": out.state.z.reshape(k, n, -1),
        "acceptance_rate": out.acceptance_rate.reshape(k, n),
        "num_divergent": out.num_divergent.reshape(k, n),
        "trace": {name: per_chain(name, v) for name, v in out.trace.items()},
        "trace_steps": out.trace_steps,
        "table": None if table is None else tuple(table),
        "latents": latents,
        "evaluation": evaluation,
    }


def _evaluation(parts: list[dict]) -> str:
    """``"replay"`` if every batch replayed its recorded evaluation, else the first other status."""
    found = [p.get("evaluation") or "eager" for p in parts]
    return next((e for e in found if e != "replay"), "replay")


def finish(method, direction, path, x, parts, betas, kernel, seed, settings, start, k
           ) -> AISResult:
    """Concatenate the batches' payloads along the examples and reduce them into an AISResult."""
    lw = torch.cat([p["log_weight"] for p in parts], dim=1)
    ll = log_mean_exp(lw) if direction == "forward" else -log_mean_exp(lw)
    trace = {name: torch.cat([p["trace"][name] for p in parts], dim=2)
             for name in parts[0]["trace"] if name != "beta"}
    trace["beta"] = parts[0]["trace"]["beta"]
    table = None
    if parts[0]["table"] is not None:
        tabs = [table_of(p["table"]) for p in parts]
        table = StepSizes(tabs[0].betas, torch.cat([t.log_step_size for t in tabs], dim=1),
                          None if tabs[0].inv_mass is None
                          else torch.cat([t.inv_mass for t in tabs], dim=1))
    settings = {**settings, "evaluation": _evaluation(parts)}
    latents = None
    if parts[0]["latents"] is not None:
        latents = {name: torch.cat([p["latents"][name] for p in parts], dim=1)
                   for name in parts[0]["latents"]}
    return AISResult(
        method=method, log_likelihood=ll.to(x.dtype if x.is_floating_point() else ll.dtype),
        bound="lower" if direction == "forward" else "upper", log_weights=lw,
        ess=effective_sample_size(lw), mcse=mcse_log_mean_exp(lw), khat=pareto_khat(lw), x=x,
        settings=settings, seed=seed, wall_time=time.perf_counter() - start,
        direction=direction, path=path, schedule=betas, step_sizes=table,
        final_state=torch.cat([p["z"] for p in parts], dim=1),
        acceptance_rate=torch.cat([p["acceptance_rate"] for p in parts], dim=1),
        num_divergent=torch.cat([p["num_divergent"] for p in parts], dim=1),
        trace=trace, trace_steps=parts[0]["trace_steps"], kernel=kernel, latents=latents,
    )


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


def checkpoint_path(path: str | os.PathLike, shard: Shard) -> Path:
    """Each process of a multi-process run keeps its own checkpoint: ``ckpt.rank1-of-4.pt``."""
    path = Path(path)
    if shard.world_size == 1:
        return path
    return path.with_name(f"{path.stem}.rank{shard.rank}-of-{shard.world_size}{path.suffix}")


def open_checkpoint(method: str, path, every, *, model, x, seed, settings, guide, model_args,
                    model_kwargs, shard: Shard, extra: dict[str, Any]) -> Checkpoint | None:
    """The run's :class:`Checkpoint` (checked against an existing file), or ``None``."""
    check_count("checkpoint_every", every)
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"checkpoint must be a file path, got {type(path).__name__}")
    fp = fingerprint(method, model=model, x=x, seed=seed, settings=settings, guide=guide,
                     model_args=model_args, model_kwargs=model_kwargs, extra=extra,
                     shard=tuple(shard))
    return Checkpoint(checkpoint_path(path, shard), every, fp, x.device)
