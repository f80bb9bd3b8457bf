r"""Forward and reverse annealed importance sampling: front ends of the annealing driver.

Path: :math:`\log f_\beta(z) = (1-\beta) \log f_0(z) + \beta \log f_1(z)` with :math:`f_1 = p(z, x)`
and :math:`f_0 = p(z)` (prior path) or :math:`f_0 = q(z \mid x)` (encoder path, ``init=guide``).
:func:`ais` anneals one forward leg of chains from exact draws of :math:`f_0`; :func:`reverse_ais` one
reverse leg, on the reversed schedule, from exact posterior draws, so that :math:`\mathbb E[w] =
1/p(x)` and :math:`-\log \frac1K\sum_k w_k` is a stochastic *upper* bound on :math:`\log p(x)`
(Grosse, Ghahramani & Adams 2015). The transition and its loop are in :mod:`pyrolik.annealing.engine`;
the run's description in :mod:`pyrolik.annealing.run`; batches, tuning and results in
:mod:`pyrolik.annealing.driver`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik.annealing.driver import drive
from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.run import Recording, describe
from pyrolik.annealing.step_sizes import StepSizes
from pyrolik.execution.batches import Execution
from pyrolik.execution.faults import warn_failed
from pyrolik.infer.tolerance import MAX_STEPS, budget, check_tolerance, gradient_evals
from pyrolik.results import AISResult

__all__ = ["ais", "reverse_ais", "posterior_samples", "plot_posterior_decodings"]


def ais(
    model: Callable[..., Any],
    x: Tensor,
    *,
    num_steps: int | None = None,
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
    tolerance: float | None = None,
    max_steps: int = MAX_STEPS,
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
        Annealing steps T (transitions); ``None`` when ``schedule`` is a tensor or with
        ``tolerance``.
    num_chains : int
        Independent AIS chains per example (K).
    schedule : {"auto", "adaptive", "adaptive_per_example", "sigmoid", "linear", "geometric"} or torch.Tensor
        Betas from exactly 0 to exactly 1 (see :mod:`pyrolik.annealing.schedules`). ``"adaptive"``:
        built per batch from the pilot run's variance of :math:`\log p(x \mid z)` along
        :math:`\beta` (pooled over the batch's examples), at constant thermodynamic speed
        (:func:`pyrolik.annealing.schedules.adaptive`); it needs ``adapt="pilot"`` and at least 2 pilot
        chains. ``"adaptive_per_example"``: the same, one schedule per example from its own
        variances (``schedule`` on the result is then ``(T + 1, N)``; on well-trained decoders
        no better than the pooled one, whose variances are less noisy). ``"auto"`` (default):
        adaptive when the kernel runs such a pilot, else sigmoid. ``settings["schedule"]`` records which, and
        ``schedule`` on the result the betas visited.
    kernel : pyrolik.HMC, optional
        Transition kernel and its adaptation mode (default ``HMC()``: 3 leapfrog steps with half
        the momentum kept between steps, step sizes from a pilot run, frozen per temperature; a
        step costs ``num_leapfrog`` gradient evaluations per chain).
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
    tolerance : float, optional
        Instead of ``num_steps``: choose the number of steps by BDMC on data simulated from the
        model, shaped like ``x`` (:mod:`pyrolik.infer.tolerance`): the steps double from 25 until the
        BDMC gap's upper confidence bound (mean + 2 standard errors over the simulated examples) is
        within ``tolerance`` nats, then forward AIS runs on ``x`` with that budget and the same
        kernel, schedule, chains and path. This bounds the average error **on simulated data**;
        real data can be harder (Wu et al. 2017, section 4): a check on a subset of ``x`` (the
        estimate's rise when the steps double) warns (``BudgetWarning``) when they disagree.
        ``result.budget`` (:class:`pyrolik.infer.tolerance.Budget`) records the rounds, the
        simulated examples and the cost of the search against the final run.
    max_steps : int
        With ``tolerance``: the search's cap; reaching it first warns and keeps the estimate at
        the cap.

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
    chosen = None
    if tolerance is not None:
        if distributed:
            raise ValueError("tolerance= runs its budget search on one process: choose num_steps "
                             "with pyrolik.budget on one process, then pass num_steps= with "
                             "distributed=True")
        check_tolerance(tolerance, num_steps, schedule, max_steps)
        seed = resolve_seed(seed)  # one seed for the search and the run
        chosen = budget(model, x, tolerance, num_chains=num_chains, schedule=schedule,
                        kernel=kernel, init=init, model_args=model_args,
                        model_kwargs=model_kwargs, seed=seed, batch_size=batch_size,
                        max_steps=max_steps, progress=progress)
        num_steps = chosen.num_steps
    if num_steps is None and isinstance(schedule, str):
        raise ValueError("num_steps is required with a named schedule: pass num_steps= "
                         "(annealing steps, e.g. 200), or tolerance= (nats) to choose them by BDMC "
                         "on simulated data, or a schedule tensor")
    problem = describe(model, x, directions=("forward",), num_steps=num_steps,
                       num_chains=num_chains, schedule=schedule, kernel=kernel, init=init,
                       model_args=model_args, model_kwargs=model_kwargs, record_every=record_every)
    execution = Execution.create(seed=seed, distributed=distributed, batch_size=batch_size,
                                 progress=progress, desc="AIS", checkpoint=checkpoint,
                                 checkpoint_every=checkpoint_every)
    results = drive("ais", problem, execution, Recording(record_every, record_states))
    if results is None:
        return None
    warn_failed(results[0], "ais")
    if chosen is None:
        return results[0]
    return replace(results[0], budget=chosen.with_final(gradient_evals(results[0]),
                                                        results[0].wall_time))


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
    (Grosse et al. 2015).

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
    problem = describe(model, x, directions=("reverse",), num_steps=num_steps,
                       num_chains=num_chains, schedule=schedule, kernel=kernel, init=init,
                       latents=latents, model_args=model_args, model_kwargs=model_kwargs,
                       step_sizes=step_sizes, record_every=record_every)
    execution = Execution.create(seed=seed, distributed=distributed, batch_size=batch_size,
                                 progress=progress, desc="reverse AIS", checkpoint=checkpoint,
                                 checkpoint_every=checkpoint_every)
    results = drive("reverse_ais", problem, execution, Recording(record_every))
    if results is None:
        return None
    # final states of a reverse run are (approximate) draws of the initial distribution
    warn_failed(results[0], "reverse_ais")
    return results[0]



def posterior_samples(
    result: AISResult,
    num_samples: int,
    *,
    examples: Sequence[int] | None = None,
    seed: int | None = 0,
) -> dict[str, Tensor]:
    """Resample the final AIS states by weight: ``{site: (num_samples, len(examples), *site)}``."""
    if result.direction != "forward" or result.latents is None or result.log_weights is None:
        raise ValueError("posterior samples come from a forward AIS result (pyrolik.ais)")
    idx = torch.arange(result.num_examples) if examples is None else torch.as_tensor(examples)
    if (idx < 0).any() or (idx >= result.num_examples).any():
        raise ValueError(f"examples must lie in [0, {result.num_examples}), got {idx.tolist()}")
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    probs = torch.softmax(result.log_weights[:, idx].double().cpu(), dim=0).T  # (n, K)
    chains = torch.multinomial(probs, num_samples, replacement=True, generator=g).T  # (S, n)
    return {name: v[chains.to(v.device), idx.to(v.device)] for name, v in result.latents.items()}


def plot_posterior_decodings(
    result: AISResult,
    decode: Callable[[dict[str, Tensor]], Tensor],
    examples: Sequence[int] = (0, 1, 2, 3),
    num_samples: int = 8,
    image_shape: tuple[int, int] | None = None,
    seed: int | None = 0,
):
    """A grid: each row one example, its data first, then decodings of posterior samples.

    ``decode`` maps ``{site: (S * n, *site)}`` to decoded means ``(S * n, D)`` (e.g. the decoder's
    output). Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    samples = posterior_samples(result, num_samples, examples=examples, seed=seed)
    s, n = num_samples, len(examples)
    flat = {k: v.reshape(s * n, *v.shape[2:]) for k, v in samples.items()}
    with torch.no_grad():
        images = decode(flat).reshape(s, n, -1).detach().cpu().double().numpy()
    if result.x is None:
        raise ValueError("this AIS result holds no data x to show beside the decodings")
    data = result.x[torch.as_tensor(examples)].reshape(n, -1).cpu().double().numpy()
    d = data.shape[-1]
    shape = image_shape or (int(round(d**0.5)),) * 2
    if shape[0] * shape[1] != d:
        raise ValueError(f"image_shape {shape} does not hold {d} values; pass image_shape=")
    fig, axes = plt.subplots(n, s + 1, figsize=(1.1 * (s + 1), 1.1 * n), squeeze=False)
    for i in range(n):
        axes[i, 0].imshow(data[i].reshape(shape), cmap="gray")
        for j in range(s):
            axes[i, j + 1].imshow(images[j, i].reshape(shape), cmap="gray")
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0, 0].set_title("data", fontsize=8)
    for j in range(s):
        axes[0, j + 1].set_title(f"z~post {j + 1}", fontsize=7)
    fig.suptitle("decodings of AIS posterior samples", fontsize=9)
    fig.tight_layout()
    return fig
