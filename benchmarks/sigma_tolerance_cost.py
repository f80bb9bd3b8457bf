"""The cost of ``pyrolik.sigma_curve(num_steps=pyrolik.Tolerance(t))``: budget search + final curve
against the final curve alone.

On the shipped digits GAN (Gaussian observation site) and the first ``--examples`` digits (or, with
``--model lg``, a 5-d linear-Gaussian decoder and data simulated from it), runs
``sigma_curve(num_steps=Tolerance(...))`` and then ``sigma_curve(num_steps=<the budget it chose>)`` alone, same
seed, same threads, after a small warm-up call that takes one-time costs out of both timings.
Reports the chosen budget, the search's rounds (the deciding grid point's gap +- se), the cost ratio
in gradient evaluations (pilots included) and in CPU and wall time, and, with ``--confirm``, the gaps
of a fresh ``distortion_bdmc`` at the chosen budget on newly simulated data (another seed). With
``--model lg``, also the error of the curve against the exact log p_sigma(x) at every grid sigma.

    PYTHONPATH=. python benchmarks/sigma_tolerance_cost.py --examples 1000 --tolerance 1.0 --confirm
    PYTHONPATH=. python benchmarks/sigma_tolerance_cost.py --model lg --examples 1000
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import torch

import pyrolik
from benchmarks._common import add_repeat_option, machine, repeated_cpu_ratio


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _setup(name: str, examples: int):
    if name == "gan":
        from models.zoo.serialization import load
        from pyrolik.io.datasets import load_digits

        return load("gan", dtype=torch.float32), load_digits(dtype=torch.float32)[0][:examples]
    from pyrolik_models import LinearGaussian

    torch.set_default_dtype(torch.float64)
    lg = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0, dtype=torch.float64)
    return lg, pyrolik.simulate(lg, examples, data_shape=(5,), seed=5).x


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("gan", "lg"), default="gan")
    p.add_argument("--examples", type=int, default=1000)
    p.add_argument("--sigmas", default="0.1,0.14,0.2,0.28")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--tolerance", type=float, default=1.0)
    p.add_argument("--max-steps", type=int, default=1600)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--confirm", action="store_true")
    add_repeat_option(p)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    sigmas = [float(s) for s in args.sigmas.split(",")]
    print(f"machine: {machine()}; torch threads {args.threads}; load {os.getloadavg()[0]:.1f}")
    model, x = _setup(args.model, args.examples)
    common = dict(num_chains=args.chains, seed=args.seed, progress=False)
    tolerance = pyrolik.Tolerance(args.tolerance, max_steps=args.max_steps)
    # one-time costs (imports, first recordings) out of both timings
    pyrolik.sigma_curve(model, x[:8], sigmas, num_steps=5, num_chains=2, seed=1, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c, whole, whole_cpu = _timed(lambda: pyrolik.sigma_curve(
            model, x, sigmas, num_steps=tolerance, **common))
    b = c.budget
    alone, alone_s, alone_cpu = _timed(lambda: pyrolik.sigma_curve(
        model, x, sigmas, num_steps=b.num_steps, **common))
    assert torch.equal(alone.log_weights, c.log_weights)
    print(f"{args.model}, {len(x)} examples x {args.chains} chains, sigmas {sigmas}, tolerance "
          f"{args.tolerance} nats: {b.num_steps} base steps "
          f"({'within tolerance' if b.converged else 'CAP reached'}), {b.num_simulated} simulated "
          f"examples ({b.num_simulated // len(sigmas)} per grid sigma)")
    print(b.table().to_string(float_format=lambda v: f"{v:.3f}"))
    if b.check is not None:
        k = b.check
        print(f"check on {k.num_examples} examples of x, {k.num_steps} -> {b.num_steps} steps, "
              f"largest at {k.point}: rose by {k.change:.3f} +- {k.change_se:.3f} (simulated: "
              f"{k.simulated_change})")
    print(f"gradient evaluations: search {b.search_gradient_evals:.3g}, check "
          f"{0 if b.check is None else b.check.gradient_evals:.3g}, final "
          f"{b.final_gradient_evals:.3g} -> (search + check + final) / final = {b.cost_ratio:.3f}")
    print(f"time: sigma_curve(num_steps=Tolerance) {whole:.1f} s wall (cpu {whole_cpu:.1f} s), the final "
          f"curve alone {alone_s:.1f} s (cpu {alone_cpu:.1f} s) -> {whole / alone_s:.3f} wall, "
          f"{whole_cpu / alone_cpu:.3f} cpu")
    print(f"warnings: {[str(w.message)[:160] for w in caught]}")
    repeated_cpu_ratio(
        whole_cpu / alone_cpu,
        lambda: pyrolik.sigma_curve(model, x, sigmas, num_steps=tolerance, **common),
        lambda: pyrolik.sigma_curve(model, x, sigmas, num_steps=b.num_steps, **common),
        args.repeat)
    if args.model == "lg":
        from pyrolik_models import LinearGaussian

        for j, s in enumerate(c.sigmas.tolist()):
            exact = LinearGaussian(model.W, model.b, s).exact_log_marginal(x)
            err = float((c.log_likelihood[j] - exact).mean())
            se = float(c.mcse[j].pow(2).sum().sqrt() / len(x))
            print(f"sigma {s:g}: error against exact log p_sigma(x) {err:.3f} +- {se:.3f} nats")
    if args.confirm:
        fresh = pyrolik.distortion_bdmc(
            model, b.num_simulated // len(sigmas), sigmas=sigmas, data_shape=tuple(x.shape[1:]),
            num_steps=b.num_steps, num_chains=args.chains, seed=args.seed + 7, progress=False)
        gaps = ", ".join(f"sigma {s:g}: {g:.3f} +- {e:.3f}" for s, g, e in zip(
            fresh.sigmas.tolist(), fresh.gap.tolist(), fresh.gap_stderr.tolist(), strict=True))
        print(f"fresh distortion_bdmc at {b.num_steps} base steps on new simulated data: {gaps} "
              f"(tolerance {args.tolerance})")
    return b.cost_ratio, whole / alone_s


if __name__ == "__main__":
    main()
