"""The cost of ``pyrolik.ais(num_steps=pyrolik.Tolerance(t))``: budget search + final run against
the final run alone.

On the shipped digits VAE (8-64-128-64, Gaussian noise) and the first ``--examples`` digits, runs
``ais(num_steps=Tolerance(...))`` and then ``ais(num_steps=<the budget it chose>)`` alone, same seed, same
threads, after a small warm-up call that takes one-time costs out of both timings. Reports the chosen budget, the search's rounds (gap +- se), the cost ratio in gradient
evaluations (pilots included) and in wall time, and, with ``--confirm``, the gap of a fresh BDMC at
the chosen budget on newly simulated data (another seed). The issue's target: search + final <= 1.5x
the final run alone when x has 1000 examples or more.

    PYTHONPATH=. python benchmarks/tolerance_cost.py --examples 1000 --tolerance 1.0 --confirm
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import warnings

import torch

import pyrolik
from benchmarks._common import add_repeat_option, machine, repeated_cpu_ratio
from models.zoo.serialization import load
from pyrolik.io.datasets import load_digits


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=1000)
    p.add_argument("--chains", type=int, default=8)
    p.add_argument("--tolerance", type=float, default=1.0)
    p.add_argument("--max-steps", type=int, default=3200)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--confirm", action="store_true")
    add_repeat_option(p)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"machine: {machine()}; torch threads {args.threads}; load {os.getloadavg()[0]:.1f}")
    tolerance = pyrolik.Tolerance(args.tolerance, max_steps=args.max_steps)
    model = load("vae", dtype=torch.float32)
    x = load_digits(dtype=torch.float32)[0][: args.examples]
    # one-time costs (imports, first recordings) out of both timings
    pyrolik.ais(model, x[:8], num_steps=5, num_chains=2, seed=1, progress=False)
    t0, c0 = time.perf_counter(), _cpu()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = pyrolik.ais(model, x, num_steps=tolerance, num_chains=args.chains, seed=args.seed,
                        progress=False)
    whole, whole_cpu = time.perf_counter() - t0, _cpu() - c0
    b = r.budget
    t0, c0 = time.perf_counter(), _cpu()
    alone = pyrolik.ais(model, x, num_steps=b.num_steps, num_chains=args.chains, seed=args.seed,
                        progress=False)
    alone_s, alone_cpu = time.perf_counter() - t0, _cpu() - c0
    assert torch.equal(alone.log_likelihood, r.log_likelihood)
    print(f"digits VAE, {len(x)} examples x {args.chains} chains, tolerance {args.tolerance} nats:"
          f" {b.num_steps} steps ({'within tolerance' if b.converged else 'CAP reached'}),"
          f" {b.num_simulated} simulated examples")
    print(b.table().to_string(float_format=lambda v: f"{v:.3f}"))
    if b.check is not None:
        c = b.check
        print(f"check on {c.num_examples} examples of x, {c.num_steps} -> {b.num_steps} steps: "
              f"rose by {c.change:.3f} +- {c.change_se:.3f} (simulated: {c.simulated_change})")
    print(f"gradient evaluations: search {b.search_gradient_evals:.3g}, check "
          f"{0 if b.check is None else b.check.gradient_evals:.3g}, final {b.final_gradient_evals:.3g}"
          f" -> (search + check + final) / final = {b.cost_ratio:.3f}")
    print(f"wall time: ais(num_steps=Tolerance) {whole:.1f} s (cpu {whole_cpu:.1f} s), the final run alone "
          f"{alone_s:.1f} s (cpu {alone_cpu:.1f} s) -> {whole / alone_s:.3f} "
          f"(cpu {whole_cpu / alone_cpu:.3f})")
    print(f"estimate {r.mean:.3f} +- {r.stderr:.3f} nats; warnings: "
          f"{[str(w.message)[:120] for w in caught]}")
    repeated_cpu_ratio(
        whole_cpu / alone_cpu,
        lambda: pyrolik.ais(model, x, num_steps=tolerance, num_chains=args.chains,
                            seed=args.seed, progress=False),
        lambda: pyrolik.ais(model, x, num_steps=b.num_steps, num_chains=args.chains,
                            seed=args.seed, progress=False), args.repeat)
    if args.confirm:
        fresh = pyrolik.bdmc(model, b.num_simulated, data_shape=tuple(x.shape[1:]),
                             num_steps=b.num_steps, num_chains=args.chains, seed=args.seed + 7,
                             progress=False)
        print(f"fresh BDMC at {b.num_steps} steps on {b.num_simulated} new simulated examples: gap "
              f"{fresh.gap:.3f} +- {fresh.gap_stderr:.3f} (tolerance {args.tolerance})")
    return b.cost_ratio, whole / alone_s


if __name__ == "__main__":
    main()
