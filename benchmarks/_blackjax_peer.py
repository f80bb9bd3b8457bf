r"""BlackJAX's tempered SMC with resampling off, as forward and reverse AIS: the peer of bench_bdmc.

Optional (``pip install .[bench]``): imported only when jax and blackjax are importable. The decoder's
weights are copied from the torch model, so both tools anneal the *same* target on the *same*
simulated examples. Resampling is switched off by a resampling function that returns the identity.

BlackJAX's tempered SMC step moves the particles with an HMC kernel targeting the *current*
temperature, then weights them with :math:`(\lambda_{new} - \lambda)\log p(x \mid z)` at the moved
positions; it keeps only the normalised weights of that one increment and reports
:math:`\log \frac1K\sum_k e^{\Delta_t \ell_k}` as the step's increment, which assumes the previous
weights were uniform, i.e. that it resampled (a known trap: summing those increments is
not the AIS estimate when resampling is off). Here each chain's log-weight is accumulated from the
step's own increments, :math:`\Delta_t \ell_k = \log W_k + \mathrm{increment} + \log K` (exact: the
normalised weights are :math:`W_k = e^{\Delta_t\ell_k}/\sum_j e^{\Delta_t \ell_j}`), and reduced by
log-mean-exp once, at the end. Transitions run at :math:`\beta_0, \dots, \beta_{T-1}` (BlackJAX's
order), ours at :math:`\beta_1, \dots, \beta_T`: the same number of transitions, both exact AIS.
Reverse AIS is the same loop started at the simulated latents with the temperatures reversed.
"""

from __future__ import annotations

import os
import time

import numpy as np

__all__ = ["available", "configure_threads", "bdmc"]


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


def _layers(decoder) -> list[tuple[np.ndarray, np.ndarray]]:
    import torch

    return [(m.weight.detach().to(torch.float32).numpy().T.copy(),
             m.bias.detach().to(torch.float32).numpy().copy())
            for m in decoder if isinstance(m, torch.nn.Linear)]


def bdmc(decoder, x: np.ndarray, z_post: np.ndarray, *, num_chains: int, betas: np.ndarray,
         step_size: float, num_leapfrog: int, seed: int) -> dict:
    """Forward and reverse AIS with BlackJAX's tempered SMC (resampling off) on every example.

    ``decoder``: the torch ``nn.Sequential`` (Linear / ELU) giving Bernoulli logits; ``x`` (n, D) in
    {0, 1}; ``z_post`` (n, d) the simulated latents; ``betas`` (T+1,) from 0 to 1. Returns per
    example ``lower`` and ``upper`` (numpy float64), the compile and run seconds, and the gradient
    evaluations per chain and direction.
    """
    import blackjax
    import jax
    import jax.numpy as jnp
    from blackjax.smc import tempered

    layers = [(jnp.asarray(w), jnp.asarray(b)) for w, b in _layers(decoder)]
    d = z_post.shape[1]

    def logits(z):
        h = z
        for i, (w, b) in enumerate(layers):
            h = h @ w + b
            if i < len(layers) - 1:
                h = jax.nn.elu(h)
        return h

    def logprior(z):
        return -0.5 * jnp.sum(z * z) - 0.5 * d * jnp.log(2 * jnp.pi)

    def one(key, xi, z0, bs):
        def loglik(z):
            lg = logits(z)
            return jnp.sum(xi * lg - jnp.logaddexp(0.0, lg))

        kernel = tempered.build_kernel(
            logprior, loglik, blackjax.hmc.build_kernel(), blackjax.hmc.init,
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

    t0 = time.perf_counter()
    compiled = jax.jit(both).lower(kf, kr, xj, z_fwd, z_rev, bs).compile()
    t1 = time.perf_counter()
    fwd, rev = compiled(kf, kr, xj, z_fwd, z_rev, bs)
    fwd, rev = np.asarray(fwd.block_until_ready(), dtype=np.float64), np.asarray(rev, np.float64)
    t2 = time.perf_counter()
    if not (np.isfinite(fwd).all() and np.isfinite(rev).all()):
        raise FloatingPointError("BlackJAX log-weights are not finite (a weight underflowed)")

    def lme(v):
        m = v.max(1, keepdims=True)
        return (m + np.log(np.exp(v - m).mean(1, keepdims=True)))[:, 0]

    # one transition = L leapfrog gradients + 1 at the mcmc init of every tempered step
    return {"lower": lme(fwd), "upper": -lme(rev), "compile_s": t1 - t0, "run_s": t2 - t1,
            "grads_per_chain": (len(betas) - 1) * (num_leapfrog + 1)}
