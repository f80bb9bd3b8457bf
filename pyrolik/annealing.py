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
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from pyrolik import schedules as _schedules
from pyrolik._batching import batches, progress_bar, resolve_seed
from pyrolik.adaptation import StepSizes, pilot
from pyrolik.hmc import HMC, HMCState
from pyrolik.results import AISResult
from pyrolik.stats import effective_sample_size, log_mean_exp, mcse_log_mean_exp, pareto_khat
from pyrolik.target import Target, check_count, make_target, validate_data

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
    z0: Tensor,
    betas: Tensor,
    kernel: HMC,
    generator: torch.Generator | None,
    *,
    step_sizes: StepSizes | None = None,
    record_every: int | None = None,
    record_states: bool = False,
    progress: bool = False,
    desc: str = "AIS",
) -> AnnealOutput:
    """Anneal every chain along its own column of ``betas`` ``(T + 1, C)``, C = 1 or num_chains.

    ``step_sizes`` (a pilot table) is required when ``kernel.adapt == "pilot"``.
    """
    k, n = target.num_chains, target.num_examples
    rows = k * n
    num_steps = betas.shape[0] - 1
    stride = record_every or max(1, num_steps // 100)
    betas = betas.to(z0)

    def fn(z):
        return target.value_and_grad(z, path)

    state = kernel.init(z0, fn)
    log_w = torch.zeros(rows, dtype=torch.float64, device=z0.device)
    acc_sum = torch.zeros(rows, dtype=z0.dtype, device=z0.device)
    divergent = torch.zeros(rows, dtype=torch.long, device=z0.device)
    log_eps = z0.new_full((rows,), math.log(kernel.step_size))
    records: dict[str, list[Tensor]] = {"acceptance_rate": [], "step_size": [], "log_weight": [],
                                        "beta": [], "diverging": []}
    if record_states:
        records["z"] = []
    steps = []
    bar = progress_bar(num_steps, desc, progress)
    for t in range(1, num_steps + 1):
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
        acc_sum += info.acceptance_rate
        divergent += info.is_divergent.long()
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
        if t % max(1, num_steps // 200) == 0 or t == num_steps:
            bar.update(t - bar.n)
    bar.close()
    trace = {name: torch.stack(v) for name, v in records.items()}
    return AnnealOutput(log_w, state, acc_sum / num_steps, divergent, trace,
                        torch.tensor(steps, dtype=torch.long))


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


def _prepare(model, x, num_steps, num_chains, schedule, kernel, init):
    x = validate_data(x)
    check_count("num_chains", num_chains)
    betas = _schedules.resolve(schedule, num_steps)
    kernel = HMC() if kernel is None else kernel
    if not isinstance(kernel, HMC):
        raise TypeError(f"kernel must be a pyrolik.HMC, got {type(kernel).__name__}")
    if init is not None and not callable(init):
        raise TypeError(f"init must be a Pyro guide (callable) or None, got {type(init).__name__}")
    if not callable(model):
        raise TypeError(f"model must be a callable Pyro model, got {type(model).__name__}")
    return x, betas, kernel


def _initial_draw(target: Target, path: str, generator) -> Tensor:
    return (target.sample_guide(generator) if path == "guide" else target.sample_prior(generator)).u


def _finish(method, direction, path, x, outs, betas, kernel, tables, seed, settings, start, k):
    lw = torch.cat([o.log_weight.reshape(k, -1) for o in outs], dim=1)
    sign = 1.0 if direction == "forward" else -1.0
    ll = sign * log_mean_exp(lw)
    z = torch.cat([o.state.z.reshape(k, -1, o.state.z.shape[-1]) for o in outs], dim=1)
    trace = {name: torch.cat([_per_chain(o.trace[name], k) for o in outs], dim=-1)
             for name in outs[0].trace if name != "beta"}
    trace["beta"] = outs[0].trace["beta"]
    table = None
    if tables and tables[0] is not None:
        table = StepSizes(tables[0].betas, torch.cat([t.log_step_size for t in tables], dim=1),
                          None if tables[0].inv_mass is None
                          else torch.cat([t.inv_mass for t in tables], dim=1))
    return AISResult(
        method=method, log_likelihood=ll.to(x.dtype if x.is_floating_point() else ll.dtype),
        bound="lower" if direction == "forward" else "upper", log_weights=lw,
        ess=effective_sample_size(lw), mcse=mcse_log_mean_exp(lw), khat=pareto_khat(lw), x=x,
        settings=settings, seed=seed, wall_time=time.perf_counter() - start,
        direction=direction, path=path, schedule=betas, step_sizes=table, final_state=z,
        acceptance_rate=torch.cat([o.acceptance_rate.reshape(k, -1) for o in outs], dim=1),
        num_divergent=torch.cat([o.num_divergent.reshape(k, -1) for o in outs], dim=1),
        trace=trace, trace_steps=outs[0].trace_steps, kernel=kernel,
    )


def _per_chain(t: Tensor, k: int) -> Tensor:
    """Recorded ``(R, rows[, d])`` -> ``(R, K, N[, d])``."""
    return t.reshape(t.shape[0], k, -1, *t.shape[2:])


def _settings(num_steps, num_chains, schedule, kernel, batch_size, init):
    return {"num_steps": num_steps, "num_chains": num_chains,
            "schedule": schedule if isinstance(schedule, str) else "custom",
            "num_leapfrog": kernel.num_leapfrog, "adapt": str(kernel.adapt),
            "target_accept": kernel.target_accept, "initial_step_size": kernel.step_size,
            "mass_matrix": kernel.mass_matrix, "batch_size": batch_size,
            "init": "prior" if init is None else getattr(init, "__name__", "guide")}


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
) -> AISResult:
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
        Betas from exactly 0 to exactly 1 (see :mod:`pyrolik.schedules`).
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

    Returns
    -------
    AISResult
        ``log_likelihood`` (N,), ``log_weights`` (K, N), ``bound == "lower"``, final states
        (``latents``: constrained, by site), recorded diagnostics in ``trace``.

    References
    ----------
    .. [1] R. M. Neal. Annealed importance sampling. Statistics and Computing, 2001.
    .. [2] Y. Wu, Y. Burda, R. Salakhutdinov, R. Grosse. On the quantitative analysis of
       decoder-based generative models. ICLR, 2017.
    """
    x, betas, kernel = _prepare(model, x, num_steps, num_chains, schedule, kernel, init)
    seed = resolve_seed(seed)
    path = "prior" if init is None else "guide"
    start = time.perf_counter()
    outs, tables, latents = [], [], []
    for batch in batches(x.shape[0], batch_size, seed, x.device):
        target = make_target(model, x[batch.start : batch.stop], num_chains, model_args=model_args,
                             model_kwargs=model_kwargs, guide=init)
        table = None
        if kernel.adapt == "pilot":
            table = pilot(target, path, _initial_draw(target, path, batch.generator), kernel,
                          betas, batch.generator)
        z0 = _initial_draw(target, path, batch.generator)
        out = anneal(target, path, z0, betas.unsqueeze(-1), kernel, batch.generator,
                     step_sizes=table, record_every=record_every, record_states=record_states,
                     progress=progress, desc=f"AIS [{batch.start}:{batch.stop}]")
        outs.append(out)
        tables.append(table)
        latents.append(target.unravel(out.state.z))
    settings = _settings(num_steps or len(betas) - 1, num_chains, schedule, kernel, batch_size, init)
    result = _finish("ais", "forward", path, x, outs, betas, kernel, tables, seed, settings, start,
                     num_chains)
    result.latents = {name: torch.cat([lat[name] for lat in latents], dim=1) for name in latents[0]}
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
) -> AISResult:
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

    Returns
    -------
    AISResult
        ``log_likelihood = -logmeanexp(log_weights)``, ``bound == "upper"``, ``direction == "reverse"``.
    """
    x, betas, kernel = _prepare(model, x, num_steps, num_chains, schedule, kernel, init)
    seed = resolve_seed(seed)
    path = "prior" if init is None else "guide"
    start = time.perf_counter()
    outs, tables = [], []
    probe = make_target(model, x[:1], num_chains, model_args=model_args, model_kwargs=model_kwargs)
    latents = expand_latents(probe, latents, x.shape[0])
    for batch in batches(x.shape[0], batch_size, seed, x.device):
        sl = slice(batch.start, batch.stop)
        target = make_target(model, x[sl], num_chains, model_args=model_args,
                             model_kwargs=model_kwargs, guide=init)
        z0 = latents_to_flat(target, {name: v[:, sl] for name, v in latents.items()})
        table = None
        if kernel.adapt == "pilot":
            if step_sizes is not None:
                table = StepSizes(step_sizes.betas, step_sizes.log_step_size[:, sl],
                                  None if step_sizes.inv_mass is None else step_sizes.inv_mass[:, sl])
            else:
                table = pilot(target, path, _initial_draw(target, path, batch.generator), kernel,
                              betas, batch.generator)
        out = anneal(target, path, z0, betas.flip(0).unsqueeze(-1), kernel, batch.generator,
                     step_sizes=table, record_every=record_every, progress=progress,
                     desc=f"reverse AIS [{batch.start}:{batch.stop}]")
        outs.append(out)
        tables.append(table)
    settings = _settings(num_steps or len(betas) - 1, num_chains, schedule, kernel, batch_size, init)
    return _finish("reverse_ais", "reverse", path, x, outs, betas.flip(0), kernel, tables, seed,
                   settings, start, num_chains)
