r"""Annealed importance sampling along the geometric path, batched over examples x chains.

Path: :math:`\log f_\beta(z) = (1-\beta) \log f_0(z) + \beta \log f_1(z)` with :math:`f_1 = p(z, x)`
and :math:`f_0 = p(z)` (prior path) or :math:`f_0 = q(z \mid x)` (encoder path, ``init=guide``).
Each annealing step does, for every chain at once (Neal 2001, Wu et al. 2017 eq. 4):

.. math::
    \log w \mathrel{+}= (\beta_t - \beta_{t-1})\,[\log f_1(z) - \log f_0(z)], \qquad
    z \sim \mathcal T_{\beta_t}(\cdot \mid z)

where :math:`\mathcal T_\beta` is an HMC transition leaving :math:`f_\beta` invariant. The weight update
reads the cached :math:`\log f_1 - \log f_0` of the current state, so it costs no model pass; a step
costs ``num_leapfrog`` passes. The running log-weights are kept per chain (float64) and reduced by
log-mean-exp once, at the end (``PEERS.md``). Memory does not grow with ``num_steps``: diagnostics are
recorded every ``record_every`` steps only.

Reverse AIS is the same loop on the reversed schedule, started from exact posterior draws: then
:math:`\mathbb E[w] = 1/p(x)` and :math:`-\log \frac1K\sum_k w_k` is a stochastic *upper* bound on
:math:`\log p(x)` (Grosse, Ghahramani & Adams 2015).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik.execution.batches import progress_bar
from pyrolik.execution.distributed import broadcast_seed, current_shard
from pyrolik.execution.faults import warn_failed
from pyrolik.execution.runner import run_batches
from pyrolik.infer._assembly import (
    expand_latents,
    finish,
    initial_draw,
    latents_to_flat,
    open_checkpoint,
    payload,
    prepare,
    settings_of,
    table_of,
)
from pyrolik.mcmc.adaptation import StepSizes, pilot
from pyrolik.mcmc.hmc import HMC, HMCState
from pyrolik.model.target import Target, make_target
from pyrolik.results import AISResult

__all__ = ["ais", "reverse_ais", "anneal", "AnnealOutput", "expand_latents", "latents_to_flat"]


class AnnealOutput(NamedTuple):
    """What one batched annealing pass returns (rows = chains x examples)."""

    log_weight: Tensor  # (rows,) float64
    state: HMCState
    acceptance_rate: Tensor  # (rows,) mean over steps
    num_divergent: Tensor  # (rows,)
    trace: dict[str, Tensor]  # each (R, C_or_rows...)
    trace_steps: Tensor  # (R,)


def _rows(per_chain: Tensor, k: int, n: int) -> Tensor:
    """Per-chain values ``(C,)`` (C = 1 or k) -> per-row ``(k * n,)`` in chain-major order."""
    return per_chain.expand(k).repeat_interleave(n)


def anneal(
    target: Target,
    path: str,
    z0: Tensor | None,
    betas: Tensor,
    kernel: HMC,
    generator: torch.Generator | None,
    *,
    step_sizes: StepSizes | None = None,
    record_every: int | None = None,
    record_states: bool = False,
    progress: bool = False,
    desc: str = "AIS",
    resume: dict[str, Any] | None = None,
    checkpoint_fn: Callable[[dict[str, Any]], None] | None = None,
    checkpoint_every: int | None = None,
) -> AnnealOutput:
    """Anneal every chain along its own column of ``betas`` ``(T + 1, C)``, C = 1 or num_chains.

    ``step_sizes`` (a pilot table) is required when ``kernel.adapt == "pilot"``. Every
    ``checkpoint_every`` steps (not after the last) ``checkpoint_fn`` receives the loop's state: a dict
    of tensors, lists and ints holding everything needed to continue, generator state included.
    Passed back as ``resume`` (``z0`` is then ignored), the loop continues bit for bit.
    """
    k, n = target.num_chains, target.num_examples
    rows = k * n
    num_steps = betas.shape[0] - 1
    stride = record_every or max(1, num_steps // 100)

    def fn(z):
        return target.value_and_grad(z, path)

    if resume is None:
        betas = betas.to(z0)
        state = kernel.init(z0, fn)
        log_w = torch.zeros(rows, dtype=torch.float64, device=z0.device)
        acc_sum = torch.zeros(rows, dtype=z0.dtype, device=z0.device)
        divergent = torch.zeros(rows, dtype=torch.long, device=z0.device)
        log_eps = z0.new_full((rows,), math.log(kernel.step_size))
        records: dict[str, list[Tensor]] = {"acceptance_rate": [], "step_size": [],
                                            "log_weight": [], "beta": [], "diverging": []}
        if record_states:
            records["z"] = []
        steps: list[int] = []
        first = 1
    else:
        state = HMCState(*resume["state"])
        betas = betas.to(state.z)
        log_w, acc_sum = resume["log_weight"], resume["acceptance_sum"]
        divergent, log_eps = resume["num_divergent"], resume["log_step_size"]
        records = {name: list(v) for name, v in resume["records"].items()}
        steps = list(resume["record_steps"])
        first = resume["step"] + 1
        if generator is not None:
            generator.set_state(resume["generator"].cpu())
    bar = progress_bar(num_steps, desc, progress)
    bar.update(first - 1)
    for t in range(first, num_steps + 1):
        beta_prev, beta = _rows(betas[t - 1], k, n), _rows(betas[t], k, n)
        log_w = log_w + ((beta - beta_prev) * state.log_ratio).double()
        inv_mass = None
        if kernel.adapt == "pilot":
            eps_c, mass_c = step_sizes.at(betas[t].expand(k))
            eps = eps_c.reshape(rows)
            inv_mass = None if mass_c is None else mass_c.reshape(rows, -1)
        else:
            eps = log_eps.exp()
        state, info = kernel.step(state, fn, beta, eps, generator, inv_mass)
        acc_sum = acc_sum + info.acceptance_rate
        divergent = divergent + info.is_divergent.long()
        if kernel.adapt == "online":
            log_eps = log_eps + kernel.adapt_gain * (info.acceptance_rate - kernel.target_accept)
        if t % stride == 0 or t == num_steps:
            steps.append(t)
            records["acceptance_rate"].append(info.acceptance_rate)
            records["step_size"].append(eps)
            records["log_weight"].append(log_w)
            records["beta"].append(betas[t].expand(k))
            records["diverging"].append(info.is_divergent)
            if record_states:
                records["z"].append(state.z)
        if checkpoint_fn is not None and t % checkpoint_every == 0 and t < num_steps:
            checkpoint_fn({
                "step": t, "state": tuple(state), "log_weight": log_w, "acceptance_sum": acc_sum,
                "num_divergent": divergent, "log_step_size": log_eps, "records": records,
                "record_steps": steps,
                "generator": None if generator is None else generator.get_state(),
            })
        if t % max(1, num_steps // 200) == 0 or t == num_steps:
            bar.update(t - bar.n)
    bar.close()
    trace = {name: torch.stack(v) for name, v in records.items()}
    return AnnealOutput(log_w, state, acc_sum / num_steps, divergent, trace,
                        torch.tensor(steps, dtype=torch.long))


def _fingerprint_settings(settings, kernel, path, record_every, record_states):
    return {**settings, "kernel": kernel, "path": path, "record_every": record_every,
            "record_states": record_states}


def ais(
    model: Callable[..., Any],
    x: Tensor,
    *,
    num_steps: int | None,
    num_chains: int,
    schedule: str | Tensor = "sigmoid",
    kernel: HMC | None = None,
    init: Callable[..., Any] | None = None,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    record_every: int | None = None,
    record_states: bool = False,
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 100,
    distributed: bool = False,
) -> AISResult | None:
    r"""Forward annealed importance sampling along the geometric path.

    .. math:: \log f_\beta(z) = \log p(z) + \beta \log p(x \mid z)

    or, with ``init=guide`` (AIS+encoder), :math:`\log f_\beta = (1-\beta)\log q(z \mid x)
    + \beta \log p(x, z)`, started from exact guide draws. :math:`\mathbb E[w] = p(x)`, so the
    log-mean-exp of the chains' weights is a stochastic lower bound on :math:`\log p(x)` [1]_, [2]_.

    Parameters
    ----------
    model : callable
        Pyro model ``model(x, *model_args, **model_kwargs)`` (``API.md`` convention).
    x : torch.Tensor, shape (N, *event_shape)
        Observations; the model's data plate runs over dim 0.
    num_steps : int
        Annealing steps T (transitions); ``None`` when ``schedule`` is a tensor.
    num_chains : int
        Independent AIS chains per example (K).
    schedule : {"sigmoid", "linear", "geometric"} or torch.Tensor
        Betas from exactly 0 to exactly 1 (see :mod:`pyrolik.mcmc.schedules`).
    kernel : pyrolik.HMC, optional
        Transition kernel and its adaptation mode (default ``HMC()``: 10 leapfrog steps, step sizes
        from a pilot run, frozen per temperature).
    init : callable, optional
        A Pyro guide ``q(z | x)``: start from it instead of the prior (AIS+encoder).
    seed : int, optional
        Makes the run reproducible (recorded in the result).
    batch_size : int, optional
        Examples per pass; results depend on it only through Monte Carlo noise.
    record_every : int, optional
        Stride of the recorded diagnostics (default: about 100 records).
    record_states : bool
        Also record the latent states at each recorded step (memory grows with the records).
    progress : bool
        Show a progress bar.
    checkpoint : str or path, optional
        Save the run's state to this file every ``checkpoint_every`` steps and after every batch
        (atomically); if the file exists, resume from it. The result is bit-identical (on CPU) to
        an uninterrupted run. A checkpoint of another run (model, parameters, data, settings or
        seed) raises ``ValueError``. See :mod:`pyrolik.io.checkpoint`.
    checkpoint_every : int
        Annealing steps between checkpoints.
    distributed : bool
        Shard whole batches round-robin across the processes of the initialised
        ``torch.distributed`` group; rank 0 returns the gathered result (bit-identical to one
        process with the same ``batch_size`` and ``seed``), the other ranks ``None``.

    Returns
    -------
    AISResult
        ``log_likelihood`` (N,), ``log_weights`` (K, N), ``bound == "lower"``, final states
        (``latents``: constrained, by site), recorded diagnostics in ``trace``, ``failed`` (N,).
        ``settings["evaluation"]`` is ``"replay"`` when the model's recorded operations were replayed
        (:mod:`pyrolik.model.replay`), else ``"eager"`` or ``"eager (why)"``: same numbers, slower.

    References
    ----------
    .. [1] R. M. Neal. Annealed importance sampling. Statistics and Computing, 2001.
    .. [2] Y. Wu, Y. Burda, R. Salakhutdinov, R. Grosse. On the quantitative analysis of
       decoder-based generative models. ICLR, 2017.
    """
    x, betas, kernel = prepare(model, x, num_steps, num_chains, schedule, kernel, init,
                               record_every)
    shard = current_shard(distributed)
    seed = broadcast_seed(resolve_seed(seed), shard)
    path = "prior" if init is None else "guide"
    start = time.perf_counter()
    k = num_chains
    settings = settings_of(num_steps or len(betas) - 1, k, schedule, kernel, batch_size, init)
    ckpt = open_checkpoint(
        "ais", checkpoint, checkpoint_every, model=model, x=x, seed=seed, guide=init,
        settings=_fingerprint_settings(settings, kernel, path, record_every, record_states),
        model_args=model_args, model_kwargs=model_kwargs, shard=shard, extra={"schedule": betas})

    def work(batch, resume, save):
        target = make_target(model, x[batch.start : batch.stop], k, model_args=model_args,
                             model_kwargs=model_kwargs, guide=init)
        z0 = loop = None
        if resume is None:
            table = None
            if kernel.adapt == "pilot":
                table = pilot(target, path, initial_draw(target, path, batch.generator), kernel,
                              betas, batch.generator)
            z0 = initial_draw(target, path, batch.generator)
        else:
            table, loop = table_of(resume["table"]), resume["loop"]
        keep = None if save is None else (lambda state: save({"table": tuple(table) if table
                                                               else None, "loop": state}))
        out = anneal(target, path, z0, betas.unsqueeze(-1), kernel, batch.generator,
                     step_sizes=table, record_every=record_every, record_states=record_states,
                     progress=progress, desc=f"AIS [{batch.start}:{batch.stop}]", resume=loop,
                     checkpoint_fn=keep, checkpoint_every=checkpoint_every)
        return payload(out, k, target.num_examples, table, target.unravel(out.state.z),
                       target.evaluation(path))

    parts = run_batches(x.shape[0], batch_size, seed, x.device, work, shard=shard,
                        rows_per_example=k, checkpoint=ckpt)
    if parts is None:
        return None
    result = finish("ais", "forward", path, x, parts, betas, kernel, seed, settings, start, k)
    warn_failed(result, "ais")
    return result


def reverse_ais(
    model: Callable[..., Any],
    x: Tensor,
    latents: Tensor | dict[str, Tensor],
    *,
    num_steps: int | None,
    num_chains: int,
    schedule: str | Tensor = "sigmoid",
    kernel: HMC | None = None,
    init: Callable[..., Any] | None = None,
    step_sizes: StepSizes | None = None,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    record_every: int | None = None,
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 100,
    distributed: bool = False,
) -> AISResult | None:
    r"""Reverse AIS from exact posterior draws ``latents``: a stochastic upper bound on log p(x).

    The same chain as :func:`ais` on the reversed schedule (:math:`\beta` from 1 to 0), started at
    ``latents``. If ``latents`` are exact draws of :math:`p(z \mid x)`, then
    :math:`\mathbb E[w] = 1/p(x)` and :math:`-\log\frac1K\sum_k w_k \ge \log p(x)` in expectation
    (Grosse et al. 2015; the BDMC form, tighter than the Theano code's, ``PEERS.md``).

    .. warning::
       The bound holds **only** when ``latents`` are exact posterior samples for ``x``, which in
       practice means ``(x, latents)`` were simulated from the model (:func:`pyrolik.simulate`).
       Started from any other point (an encoder's mean, an AIS final state, real data with a guessed
       latent) the result is not a bound on anything. Use it through :func:`pyrolik.bdmc`.

    Step sizes: with ``adapt="pilot"`` they come from ``step_sizes`` (e.g. ``forward.step_sizes`` of
    an :func:`ais` result on the same ``x`` and schedule) or, if absent, from a pilot run *forward*
    from the initial distribution, whose chains are independent of ``latents``: the estimator stays
    exact. With ``adapt="online"`` each chain adapts from its own history (slightly biased).

    Parameters are those of :func:`ais` plus ``latents``: a dict ``{site: tensor}`` (or a tensor for a
    single-site model) of shape ``(N, *site)`` (shared by all chains) or ``(num_chains, N, *site)``.
    ``checkpoint``, ``checkpoint_every`` and ``distributed`` work as in :func:`ais`.

    Returns
    -------
    AISResult
        ``log_likelihood = -logmeanexp(log_weights)``, ``bound == "upper"``, ``direction == "reverse"``.
    """
    x, betas, kernel = prepare(model, x, num_steps, num_chains, schedule, kernel, init,
                               record_every)
    shard = current_shard(distributed)
    seed = broadcast_seed(resolve_seed(seed), shard)
    path = "prior" if init is None else "guide"
    start = time.perf_counter()
    k = num_chains
    probe = make_target(model, x[:1], k, model_args=model_args, model_kwargs=model_kwargs)
    latents = expand_latents(probe, latents, x.shape[0])
    if step_sizes is not None and not isinstance(step_sizes, StepSizes):
        raise TypeError("step_sizes must be a StepSizes table (e.g. result.step_sizes of pyrolik.ais "
                        f"on the same x), got {type(step_sizes).__name__}")
    settings = settings_of(num_steps or len(betas) - 1, k, schedule, kernel, batch_size, init)
    extra = {"schedule": betas, **{f"latents.{n}": v for n, v in latents.items()}}
    if step_sizes is not None:
        extra.update({f"step_sizes.{i}": v for i, v in enumerate(step_sizes) if v is not None})
    ckpt = open_checkpoint(
        "reverse_ais", checkpoint, checkpoint_every, model=model, x=x, seed=seed, guide=init,
        settings=_fingerprint_settings(settings, kernel, path, record_every, False),
        model_args=model_args, model_kwargs=model_kwargs, shard=shard, extra=extra)

    def work(batch, resume, save):
        sl = slice(batch.start, batch.stop)
        target = make_target(model, x[sl], k, model_args=model_args, model_kwargs=model_kwargs,
                             guide=init)
        z0 = loop = None
        if resume is not None:
            table, loop = table_of(resume["table"]), resume["loop"]
        else:
            z0 = latents_to_flat(target, {name: v[:, sl] for name, v in latents.items()})
            table = None
            if kernel.adapt == "pilot" and step_sizes is not None:
                table = StepSizes(step_sizes.betas, step_sizes.log_step_size[:, sl],
                                  None if step_sizes.inv_mass is None else step_sizes.inv_mass[:, sl])
            elif kernel.adapt == "pilot":
                table = pilot(target, path, initial_draw(target, path, batch.generator), kernel,
                              betas, batch.generator)
        keep = None if save is None else (lambda state: save({"table": tuple(table) if table
                                                               else None, "loop": state}))
        out = anneal(target, path, z0, betas.flip(0).unsqueeze(-1), kernel, batch.generator,
                     step_sizes=table, record_every=record_every, progress=progress,
                     desc=f"reverse AIS [{batch.start}:{batch.stop}]", resume=loop,
                     checkpoint_fn=keep, checkpoint_every=checkpoint_every)
        # final states of a reverse run are (approximate) draws of the initial distribution
        return payload(out, k, target.num_examples, table, target.unravel(out.state.z),
                       target.evaluation(path))

    parts = run_batches(x.shape[0], batch_size, seed, x.device, work, shard=shard,
                        rows_per_example=k, checkpoint=ckpt)
    if parts is None:
        return None
    result = finish("reverse_ais", "reverse", path, x, parts, betas.flip(0), kernel, seed,
                    settings, start, k)
    warn_failed(result, "reverse_ais")
    return result
