r"""Forward and reverse annealed importance sampling: front ends of the annealing driver.

Path: :math:`\log f_\beta(z) = (1-\beta) \log f_0(z) + \beta \log f_1(z)` with :math:`f_1 = p(z, x)`
and :math:`f_0 = p(z)` (prior path) or :math:`f_0 = q(z \mid x)` (encoder path, ``init=guide``).
:func:`ais` anneals one forward leg of chains from exact draws of :math:`f_0`; :func:`reverse_ais` one
reverse leg, on the reversed schedule, from exact posterior draws, so that :math:`\mathbb E[w] =
1/p(x)` and :math:`-\log \frac1K\sum_k w_k` is a stochastic *upper* bound on :math:`\log p(x)`
(Grosse, Ghahramani & Adams 2015). The transition and its loop are in :mod:`pyrolik.infer.engine`;
batches, tuning and results in :mod:`pyrolik.infer.driver`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik.execution.distributed import broadcast_seed, current_shard
from pyrolik.execution.faults import warn_failed
from pyrolik.infer.driver import (
    Leg,
    Run,
    adaptive_of,
    anneal,
    finish,
    open_checkpoint,
    prepare,
    settings_of,
)
from pyrolik.infer.latents import expand_latents
from pyrolik.mcmc.hmc import HMC
from pyrolik.mcmc.step_sizes import StepSizes
from pyrolik.model.target import make_target, prepare_inputs
from pyrolik.results import AISResult

__all__ = ["ais", "reverse_ais"]


def ais(
    model: Callable[..., Any],
    x: Tensor,
    *,
    num_steps: int | None,
    num_chains: int,
    schedule: str | Tensor = "auto",
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
        Pyro model ``model(x, *model_args, **model_kwargs)`` (the model convention of the README).
    x : torch.Tensor, shape ``(N, *event_shape)``
        Observations; the model's data plate runs over dim 0.
    num_steps : int
        Annealing steps T (transitions); ``None`` when ``schedule`` is a tensor.
    num_chains : int
        Independent AIS chains per example (K).
    schedule : {"auto", "adaptive", "sigmoid", "linear", "geometric"} or torch.Tensor
        Betas from exactly 0 to exactly 1 (see :mod:`pyrolik.mcmc.schedules`). ``"adaptive"``:
        built per batch from the pilot run's variance of :math:`\log p(x \mid z)` along
        :math:`\beta`, at constant thermodynamic speed (:func:`pyrolik.mcmc.schedules.adaptive`);
        it needs ``adapt="pilot"`` and at least 2 pilot chains. ``"auto"`` (default): adaptive when
        the kernel runs such a pilot, else sigmoid. ``settings["schedule"]`` records which, and
        ``schedule`` on the result the betas visited.
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
        seed) raises ``ValueError``. See :mod:`pyrolik.execution.checkpoint`.
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
    start = time.perf_counter()
    settings = settings_of(num_steps or len(betas) - 1, num_chains, schedule, kernel, batch_size,
                           init)
    run = Run("ais", model, x, betas, kernel, (Leg("forward", num_chains),), seed, shard,
              settings, guide=init, adaptive=adaptive_of(schedule, kernel, num_chains),
              model_args=tuple(model_args),
              model_kwargs=dict(model_kwargs or {}), batch_size=batch_size,
              record_every=record_every, record_states=record_states, progress=progress,
              desc="AIS", checkpoint_every=checkpoint_every)
    parts = anneal(run, open_checkpoint(run, checkpoint, {"schedule": betas}))
    if parts is None:
        return None
    result = finish("ais", "forward", run, parts[0], start, num_chains)
    warn_failed(result, "ais")
    return result


def reverse_ais(
    model: Callable[..., Any],
    x: Tensor,
    latents: Tensor | dict[str, Tensor],
    *,
    num_steps: int | None,
    num_chains: int,
    schedule: str | Tensor = "auto",
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
    start = time.perf_counter()
    first = prepare_inputs(model, x, model_args, model_kwargs).batch(0, 1)
    probe = make_target(model, x[:1], num_chains, model_args=first.model_args,
                        model_kwargs=first.model_kwargs)
    latents = expand_latents(probe, latents, x.shape[0])
    if step_sizes is not None and not isinstance(step_sizes, StepSizes):
        raise TypeError("step_sizes must be a StepSizes table (e.g. result.step_sizes of pyrolik.ais "
                        f"on the same x), got {type(step_sizes).__name__}")
    settings = settings_of(num_steps or len(betas) - 1, num_chains, schedule, kernel, batch_size,
                           init)
    extra = {"schedule": betas, **{f"latents.{n}": v for n, v in latents.items()}}
    if step_sizes is not None:
        extra.update({f"step_sizes.{i}": v for i, v in enumerate(step_sizes) if v is not None})
    run = Run("reverse_ais", model, x, betas, kernel, (Leg("reverse", num_chains, latents),),
              seed, shard, settings, guide=init, adaptive=adaptive_of(schedule, kernel, num_chains),
              model_args=tuple(model_args),
              model_kwargs=dict(model_kwargs or {}), batch_size=batch_size,
              record_every=record_every, progress=progress, desc="reverse AIS",
              step_sizes=step_sizes, checkpoint_every=checkpoint_every)
    parts = anneal(run, open_checkpoint(run, checkpoint, extra))
    if parts is None:
        return None
    # final states of a reverse run are (approximate) draws of the initial distribution
    result = finish("reverse_ais", "reverse", run, parts[0], start, num_chains)
    warn_failed(result, "reverse_ais")
    return result
