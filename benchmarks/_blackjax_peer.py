r"""BlackJAX as the peer of bench_bdmc / frontier: AIS (resampling off) and tempered SMC, both directions.

Optional (``pip install .[bench]``): imported only when jax and blackjax are importable. The decoder's
weights are copied from the torch model and the observation model is rebuilt from the model (Bernoulli
logits, or a Gaussian of the model's ``sigma`` around a sigmoid output), so both tools anneal the *same*
target on the *same* simulated examples; :func:`check_target` compares log p(z) + log p(x | z) with the
Pyro model's own trace at a few z.

Three configurations (``method``):

``"ais"``: BlackJAX's tempered SMC step with resampling off (a resampling function returning the
identity), a fixed HMC step size, a given schedule: forward and reverse AIS. BlackJAX's step moves the
particles with an HMC kernel targeting the *current* temperature, then weights them with
:math:`(\lambda_{new} - \lambda)\log p(x \mid z)` at the moved positions; it keeps only the normalised
weights of that one increment and reports :math:`\log \frac1K\sum_k e^{\Delta_t \ell_k}` as the step's
increment, which assumes the previous weights were uniform, i.e. that it resampled (a known trap:
summing those increments is not the AIS estimate when resampling is off). Here each chain's log-weight
is accumulated from the step's own increments, :math:`\Delta_t \ell_k = \log W_k + \mathrm{increment} +
\log K`, and reduced by log-mean-exp once, at the end.

``"tempered"``: ``blackjax.inner_kernel_tuning`` around ``blackjax.tempered_smc`` (systematic resampling
at every temperature, as BlackJAX does) along a given schedule; log Z is the sum of BlackJAX's own
increments (exact with resampling).

``"adaptive"``: ``blackjax.inner_kernel_tuning`` around ``blackjax.adaptive_tempered_smc``: the next
temperature solves ESS = ``target_ess`` x K (dichotomy), systematic resampling at every temperature;
the loop runs until the temperature reaches 1 (``jax.lax.while_loop``, as in BlackJAX's examples;
under ``vmap`` over the examples it runs as long as the example with the most temperatures, so its
seconds pay for the maximum T while its gradient count is the mean). Its reverse run is *not*
adaptive: it follows the forward run's temperatures backwards (tempered SMC), because an adaptive
reverse run jumps to the prior in one step (its particles start identical, so any increment has
ESS = K); given those temperatures the reverse estimate is unbiased.

Tuning between temperatures (``tune``), from the population, by BlackJAX's own helpers
(``blackjax.smc.tuning``): ``"step"``: each particle's step size follows its acceptance rate towards
``target_accept`` (``update_scale_from_acceptance_rate``, per chain as BlackJAX's helper is written);
``"shared-step"``: the same rule averaged into one step size for all particles (the default);
``"mass+..."`` adds the inverse mass matrix from the particles' variances (diagonal, Buchholz et al.
2018 section 3.1, as ``inverse_mass_matrix_from_particles``); ``"none"``: fixed. With 10 particles
``step`` biases both bounds upwards (a slot's step size follows the acceptance of the particle
systematic resampling keeps in that slot: a position-dependent step size) and the mass matrix biases
them downwards by 1-1.7 nats on the digits VAE (``benchmarks/logs/frontier_peer_tuning_bias.log``).

Reverse (upper bound): the same loop started from the simulated latents (every particle at the
example's exact posterior draw) with the temperatures reversed. For the SMC methods that is a
tempering from the posterior to the prior: log-prior :math:`\log p(z) + \log p(x \mid z)`,
log-likelihood :math:`-\log p(x \mid z)`, :math:`\lambda: 0 \to 1` anneals
:math:`p(z)\,p(x \mid z)^{1-\lambda}`, and the SMC estimate of :math:`Z_{prior}/Z_{post} = 1/p(x)` is
unbiased for exact initial particles (each particle is marginally a posterior draw; SMC's
unbiasedness needs only that of the initial empirical measure), so minus its log is a stochastic upper
bound. Temperatures and tuning chosen from the particles make the estimates biased, as in any
adaptive SMC; with 10 particles per example the adaptive forward estimate's bias exceeds the BDMC gap
on the digits VAE (RESULTS.md).

Gradient evaluations per chain: every temperature re-initialises the HMC state
(``hmc.init``: one value-and-gradient), then ``num_mcmc_steps`` trajectories of ``num_leapfrog``
gradients: :math:`T (M L + 1)` for T temperatures (the adaptive T is random: its mean over examples).
Not gradients, also counted: the weights and the ESS solver evaluate log p(x | z) once each per
temperature (forward passes).
"""

from __future__ import annotations

import functools
import os
import time

import numpy as np

__all__ = ["available", "configure_threads", "check_target", "bdmc", "smc"]


def configure_threads(threads: int) -> None:
    """Limit XLA's CPU threads; must run before jax is imported."""
    if threads == 1 and "XLA_FLAGS" not in os.environ:
        os.environ["XLA_FLAGS"] = ("--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")


def available() -> str | None:
    """The versions ``"jax x, blackjax y"`` when both import, else None."""
    try:
        import blackjax
        import jax
    except ImportError:
        return None
    return f"jax {jax.__version__}, blackjax {blackjax.__version__}"


_ACTIVATIONS = {"Tanh": "tanh", "ELU": "elu", "ReLU": "relu", "Sigmoid": "sigmoid",
                "Softplus": "softplus"}


def _target(model):
    """``(logprior, loglik, d)``: jax functions of one latent z (and the example x for loglik)."""
    import jax
    import jax.numpy as jnp
    import torch

    fns = {"tanh": jnp.tanh, "elu": jax.nn.elu, "relu": jax.nn.relu, "sigmoid": jax.nn.sigmoid,
           "softplus": jax.nn.softplus}
    ops = []
    for m in model.decoder:
        if isinstance(m, torch.nn.Linear):
            ops.append((jnp.asarray(m.weight.detach().to(torch.float32).numpy().T.copy()),
                        jnp.asarray(m.bias.detach().to(torch.float32).numpy().copy())))
        elif type(m).__name__ in _ACTIVATIONS:
            if type(m).__name__ == "ELU" and m.alpha != 1.0:
                raise ValueError("ELU with alpha != 1")
            ops.append(fns[_ACTIVATIONS[type(m).__name__]])
        else:
            raise ValueError(f"decoder layer {m!r} has no jax counterpart here")
    d = model.decoder[0].in_features

    def decode(z):
        h = z
        for op in ops:
            h = h @ op[0] + op[1] if isinstance(op, tuple) else op(h)
        return h

    def logprior(z):
        return -0.5 * jnp.sum(z * z) - 0.5 * d * jnp.log(2 * jnp.pi)

    if hasattr(model, "sigma"):  # GaussianDecoderModel: x ~ N(g(z), sigma^2 I), g sigmoid-ended
        s = float(model.sigma)

        def loglik(z, x):
            r = (x - decode(z)) / s
            return -0.5 * jnp.sum(r * r) - x.shape[-1] * (np.log(s) + 0.5 * np.log(2 * np.pi))
    else:  # BernoulliDecoderModel: the decoder gives logits

        def loglik(z, x):
            lg = decode(z)
            return jnp.sum(x * lg - jnp.logaddexp(0.0, lg))

    return logprior, loglik, d


def check_target(model, x: np.ndarray, z: np.ndarray, rtol: float = 1e-4) -> float:
    """Largest relative difference of the jax log p(z) + log p(x|z) from the Pyro model's trace.

    ``x`` (n, D) and ``z`` (n, d) float32; raises when it exceeds ``rtol`` (relative to max(1, |value|)).
    """
    import jax
    import pyro.poutine as poutine
    import torch

    logprior, loglik, _ = _target(model)
    xt, zt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(z, dtype=torch.float32)
    tr = poutine.trace(poutine.condition(model, data={"z": zt})).get_trace(xt)
    tr.compute_log_prob()
    ref = np.stack([tr.nodes["z"]["log_prob"].detach().double().numpy(),
                    tr.nodes["x"]["log_prob"].detach().double().numpy()])
    mine = np.stack([np.asarray(jax.vmap(logprior)(z), np.float64),
                     np.asarray(jax.vmap(loglik)(z, x), np.float64)])
    err = float(np.max(np.abs(mine - ref) / np.maximum(1.0, np.abs(ref))))
    if not err <= rtol:
        raise AssertionError(f"jax target differs from the Pyro model's by {err:.2e} (relative)")
    return err


def _lme(v):
    m = v.max(1, keepdims=True)
    return (m + np.log(np.exp(v - m).mean(1, keepdims=True)))[:, 0]


def bdmc(model, x: np.ndarray, z_post: np.ndarray, *, num_chains: int, betas: np.ndarray,
         step_size: float, num_leapfrog: int, seed: int) -> dict:
    """Forward and reverse AIS with BlackJAX's tempered SMC (resampling off) on every example.

    ``x`` (n, D); ``z_post`` (n, d) the simulated latents; ``betas`` (T+1,) from 0 to 1. Returns per
    example ``lower`` and ``upper`` (numpy float64), the compile and run seconds, and the gradient
    evaluations per chain and direction.
    """
    import blackjax
    import jax
    import jax.numpy as jnp
    from blackjax.smc import tempered

    logprior, loglik_x, d = _target(model)

    def one(key, xi, z0, bs):
        kernel = tempered.build_kernel(
            logprior, lambda z: loglik_x(z, xi), blackjax.hmc.build_kernel(), blackjax.hmc.init,
            lambda key, w, n: jnp.arange(n))
        params = {"step_size": jnp.array([step_size], dtype=jnp.float32),
                  "inverse_mass_matrix": jnp.ones((1, d), dtype=jnp.float32),
                  "num_integration_steps": jnp.array([num_leapfrog])}
        state = tempered.TemperedSMCState(z0, jnp.full(num_chains, 1.0 / num_chains), bs[0])

        def body(carry, inp):
            st, logw = carry
            k, b = inp
            st, info = kernel(k, st, 1, b, params)
            inc = jnp.log(st.weights) + info.log_likelihood_increment + jnp.log(num_chains)
            return (st, logw + inc), None

        keys = jax.random.split(key, len(bs) - 1)
        (st, logw), _ = jax.lax.scan(body, (state, jnp.zeros(num_chains)), (keys, bs[1:]))
        return logw

    n = x.shape[0]
    key = jax.random.PRNGKey(seed)
    kf, kr, kz = jax.random.split(key, 3)
    z_fwd = jax.random.normal(kz, (n, num_chains, d), dtype=jnp.float32)
    z_rev = jnp.broadcast_to(jnp.asarray(z_post, dtype=jnp.float32)[:, None], (n, num_chains, d))
    bs = jnp.asarray(betas, dtype=jnp.float32)
    xj = jnp.asarray(x, dtype=jnp.float32)

    def both(kf, kr, xj, z_fwd, z_rev, bs):
        run = jax.vmap(one, in_axes=(0, 0, 0, None))
        fwd = run(jax.random.split(kf, n), xj, z_fwd, bs)
        rev = run(jax.random.split(kr, n), xj, z_rev, bs[::-1])
        return fwd, rev

    t0, c0 = time.perf_counter(), time.process_time()
    compiled = jax.jit(both).lower(kf, kr, xj, z_fwd, z_rev, bs).compile()
    t1, c1 = time.perf_counter(), time.process_time()
    fwd, rev = compiled(kf, kr, xj, z_fwd, z_rev, bs)
    fwd, rev = np.asarray(fwd.block_until_ready(), dtype=np.float64), np.asarray(rev, np.float64)
    t2, c2 = time.perf_counter(), time.process_time()
    if not (np.isfinite(fwd).all() and np.isfinite(rev).all()):
        raise FloatingPointError("BlackJAX log-weights are not finite (a weight underflowed)")
    # one transition = L leapfrog gradients + 1 at the mcmc init of every tempered step
    return {"lower": _lme(fwd), "upper": -_lme(rev), "compile_s": t1 - t0, "run_s": t2 - t1,
            "compile_cpu_s": c1 - c0, "run_cpu_s": c2 - c1,
            "grads_per_chain": (len(betas) - 1) * (num_leapfrog + 1)}


_COMPILED: dict = {}  # smc's compiled programs, by model and settings


def smc(model, x: np.ndarray, z_post: np.ndarray | None, *, num_chains: int, method: str,
        num_leapfrog: int, num_mcmc_steps: int = 1, step_size: float = 0.1,
        tune: str = "shared-step", target_accept: float = 0.65, target_ess: float = 0.5,
        betas: np.ndarray | None = None, seed: int = 0, max_temps: int = 4000,
        solver_rtol: float | None = 0.01) -> dict:
    """BlackJAX tempered SMC (``method="tempered"``, along ``betas``) or adaptive tempered SMC
    (``"adaptive"``), with inner-kernel tuning, forward and (when ``z_post`` is given) reverse.

    ``step_size`` is the initial HMC step size. ``solver_rtol`` (adaptive): the tolerance of the ESS
    root solver (BlackJAX's ``solver.dichotomy``, passed as its ``root_solver``) as a fraction of
    ``-log(target_ess)``; None keeps BlackJAX's default, an absolute ``eps = 1e-4`` on log ESS, which
    returns the lower end of its bracket: above ``target_ess`` ~ 0.9999 that end is often 0, a
    temperature that does not advance (counted in ``stalls``), so T overshoots and, above ~0.99995,
    the run never reaches 1. Returns per example ``lower`` and ``upper`` (numpy
    float64; ``upper`` None without ``z_post``), the number of temperatures per example and
    direction (``temps_fwd``, ``temps_rev``), the gradient evaluations per chain
    (``grads_per_chain``: mean over examples and directions), the last step size and acceptance
    rate (means), and the compile / run seconds.
    """
    import blackjax
    import jax
    import jax.numpy as jnp
    from blackjax.smc import extend_params, resampling, solver
    from blackjax.smc.tuning.from_kernel_info import update_scale_from_acceptance_rate
    from blackjax.smc.tuning.from_particles import particles_stds

    if method not in ("tempered", "adaptive"):
        raise ValueError(f"method {method!r}: 'tempered' or 'adaptive'")
    if method == "tempered" and betas is None:
        raise ValueError("method='tempered' needs betas")
    tunes = ("shared-step", "step", "mass+shared-step", "mass+step", "none")
    if tune not in tunes:
        raise ValueError(f"tune {tune!r}: one of {tunes}")
    logprior, loglik_x, d = _target(model)
    K, M, L = num_chains, num_mcmc_steps, num_leapfrog
    unit = jnp.ones((1, d), jnp.float32)

    def update(key, state, info):
        """mcmc_parameter_update_fn: the next temperature's inverse mass matrix from the particles."""
        inv_mass = (extend_params(jnp.maximum(particles_stds(state.particles) ** 2, 1e-8))
                    if tune.startswith("mass") else unit)
        return {"inverse_mass_matrix": inv_mass, "num_integration_steps": jnp.array([L]),
                "step_size": jnp.zeros(K, jnp.float32)}  # set by the loop from the acceptance

    def algorithm(xi, reverse, adaptive, ess=None):
        def ll(z):
            return loglik_x(z, xi)

        if reverse:  # posterior -> prior: p(z) p(x|z)^(1 - lambda)
            def lp(z):
                return logprior(z) + ll(z)

            def lk(z):
                return -ll(z)
        else:
            lp, lk = logprior, ll
        common = dict(logprior_fn=lp, loglikelihood_fn=lk, mcmc_step_fn=blackjax.hmc.build_kernel(),
                      mcmc_init_fn=blackjax.hmc.init, resampling_fn=resampling.systematic,
                      mcmc_parameter_update_fn=update, num_mcmc_steps=M,
                      initial_parameter_value={"inverse_mass_matrix": unit,
                                               "num_integration_steps": jnp.array([L]),
                                               "step_size": jnp.full(K, step_size, jnp.float32)})
        if adaptive:
            if solver_rtol is not None:
                common["root_solver"] = functools.partial(solver.dichotomy,
                                                          eps=solver_rtol * -jnp.log(ess))
            alg = blackjax.inner_kernel_tuning(smc_algorithm=blackjax.adaptive_tempered_smc,
                                               target_ess=ess, **common)
        else:
            alg = blackjax.inner_kernel_tuning(smc_algorithm=blackjax.tempered_smc, **common)

        def step(st, k, **extra):
            """One temperature; then each particle's step size follows its acceptance rate."""
            old = st.parameter_override["step_size"]
            new, info = alg.step(k, st, **extra)
            acc = info.update_info.acceptance_rate.reshape(K, -1).mean(1)
            s = (update_scale_from_acceptance_rate(old, acc, target_acceptance_rate=target_accept)
                 if tune != "none" else old)
            if tune.endswith("shared-step"):  # one step size for all particles: BlackJAX's rule, averaged
                s = jnp.full_like(s, s.mean())
            new = new._replace(parameter_override={**new.parameter_override, "step_size": s})
            return new, info.log_likelihood_increment, acc.mean()

        return alg.init, step

    def forward(key, xi, z0, bs, ess):
        init, step = algorithm(xi, False, method == "adaptive", ess)
        state0 = init(z0)
        if method == "adaptive":  # the temperatures are kept for the reverse run
            def cond(c):
                return (c[1].sampler_state.tempering_param < 1.0) & (c[0] < max_temps)

            def body(c):
                i, st, k, logz, _, lams = c
                k, sub = jax.random.split(k)
                st, inc, acc = step(st, sub)
                lams = lams.at[i + 1].set(st.sampler_state.tempering_param)
                return i + 1, st, k, logz + inc, acc, lams

            lams0 = jnp.ones(max_temps + 1, jnp.float32).at[0].set(0.0)
            i, st, _, logz, acc, lams = jax.lax.while_loop(
                cond, body, (0, state0, key, jnp.float32(0.0), jnp.float32(0.0), lams0))
            return logz, i, st.parameter_override["step_size"].mean(), acc, lams

        def sbody(c, inp):
            st, logz, _ = c
            k, b = inp
            st, inc, acc = step(st, k, tempering_param=b)
            return (st, logz + inc, acc), None

        keys = jax.random.split(key, bs.shape[0] - 1)
        (st, logz, acc), _ = jax.lax.scan(
            sbody, (state0, jnp.float32(0.0), jnp.float32(0.0)), (keys, bs[1:]))
        return logz, jnp.int32(bs.shape[0] - 1), st.parameter_override["step_size"].mean(), acc, bs

    def reverse(key, xi, z0, num, lams):
        """Tempered SMC from the posterior to the prior along 1 - lams[num - j], j = 1..num."""
        init, step = algorithm(xi, True, False)

        def body(c):
            j, st, k, logz, _ = c
            k, sub = jax.random.split(k)
            st, inc, acc = step(st, sub, tempering_param=1.0 - lams[num - j])
            return j + 1, st, k, logz + inc, acc

        j, st, _, logz, acc = jax.lax.while_loop(
            lambda c: c[0] <= num, body, (1, init(z0), key, jnp.float32(0.0), jnp.float32(0.0)))
        return logz, j - 1, st.parameter_override["step_size"].mean(), acc

    n = x.shape[0]
    kf, kr, kz = jax.random.split(jax.random.PRNGKey(seed), 3)
    xj = jnp.asarray(x, dtype=jnp.float32)
    z_fwd = jax.random.normal(kz, (n, K, d), dtype=jnp.float32)
    bs = jnp.asarray(np.zeros(2) if betas is None else betas, dtype=jnp.float32)
    z_rev = (None if z_post is None else
             jnp.broadcast_to(jnp.asarray(z_post, dtype=jnp.float32)[:, None], (n, K, d)))

    def both(kf, kr, xj, z_fwd, z_rev, bs, ess):
        fwd = jax.vmap(forward, in_axes=(0, 0, 0, None, None))(jax.random.split(kf, n), xj, z_fwd,
                                                               bs, ess)
        if z_rev is None:
            return fwd, None
        # the forward run's temperatures backwards (lambda' = 1 - beta): fixed given the forward run,
        # so the reverse estimate of 1/p(x) is unbiased given them
        rev = jax.vmap(reverse)(jax.random.split(kr, n), xj, z_rev, fwd[1], fwd[4])
        return fwd, rev

    t0, c0 = time.perf_counter(), time.process_time()
    ess = jnp.float32(target_ess)
    # one compilation serves every call that differs only in target_ess, the seed and the data
    # (the placement pilots' rounds, the budgets of one max_temps)
    key = (id(model), method, K, M, L, step_size, tune, target_accept, max_temps, solver_rtol,
           z_rev is None, xj.shape, bs.shape)
    hit = _COMPILED.get(key)
    compiled = hit[1] if hit is not None and hit[0] is model else None
    if compiled is None:
        compiled = jax.jit(both).lower(kf, kr, xj, z_fwd, z_rev, bs, ess).compile()
        _COMPILED[key] = (model, compiled)
    t1, c1 = time.perf_counter(), time.process_time()
    fwd, rev = jax.block_until_ready(compiled(kf, kr, xj, z_fwd, z_rev, bs, ess))
    t2, c2 = time.perf_counter(), time.process_time()
    lower = np.asarray(fwd[0], np.float64)
    temps_fwd = np.asarray(fwd[1])
    out = {"lower": lower, "upper": None, "temps_fwd": temps_fwd, "temps_rev": None,
           "step_size": float(fwd[2].mean()), "accept": float(fwd[3].mean()),
           "compile_s": t1 - t0, "run_s": t2 - t1, "compile_cpu_s": c1 - c0, "run_cpu_s": c2 - c1}
    if method == "adaptive":
        lams = np.asarray(fwd[4])
        live = np.arange(lams.shape[1] - 1)[None] < temps_fwd[:, None]
        out["stalls"] = float(((np.diff(lams, axis=1) <= 0) & live).sum(1).mean())
        if temps_fwd.max() >= max_temps:
            raise RuntimeError(f"adaptive tempered SMC reached max_temps={max_temps} temperatures "
                               f"({out['stalls']:.0f} of them not advancing, mean over examples)")
    temps = [temps_fwd]
    if rev is not None:
        out["upper"] = -np.asarray(rev[0], np.float64)
        out["temps_rev"] = np.asarray(rev[1])
        temps.append(out["temps_rev"])
    if not all(np.isfinite(v).all() for v in (out["lower"], out["upper"]) if v is not None):
        raise FloatingPointError("BlackJAX log Z estimates are not finite")
    out["grads_per_chain"] = float(np.mean([t.mean() for t in temps])) * (M * L + 1)
    return out
