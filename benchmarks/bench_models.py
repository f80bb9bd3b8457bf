"""models/: training-step cost of the digits models, and the effect of torch's thread count.

For each digits model, one call trains one epoch of 10 mini-batches of 64 examples (float32). A tiny
AIS run on the digits GAN (20 examples x 2 chains, 50 steps) is timed too. Each is timed with 1 and
with 2 torch threads, in alternation within one run, so that shared load hits both alike.

    PYTHONPATH=. python benchmarks/bench_models.py [--repeats 5]
"""

from __future__ import annotations

import argparse

import pyro
import torch

import models as pm
import pyrolik
from benchmarks._common import interleaved, machine
from models.training.train_digits import digits_split


def with_threads(n, fn):
    def run():
        old = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            fn()
        finally:
            torch.set_num_threads(old)
    return run


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2, help="the multi-threaded side")
    args = p.parse_args(argv)
    data = digits_split(dtype=torch.float32)
    binary = digits_split(binarize=True, dtype=torch.float32)
    pyro.set_rng_seed(0)
    models = {k: pm.build(f"digits-{k}").float() for k in ("vae", "iwae", "gan", "gmmn")}
    x, xb = data.train[:640], binary.train[:640]
    jobs = {
        "vae (ELBO)": lambda: pm.train_vae(models["vae"], x, num_epochs=1, batch_size=64, seed=0),
        "iwae (k=10)": lambda: pm.train_vae(models["iwae"], xb, num_epochs=1, batch_size=64,
                                            objective="iwae", num_particles=10, seed=0),
        "gan": lambda: pm.train_gan(models["gan"], x, num_epochs=1, batch_size=64, seed=0),
        "gmmn": lambda: pm.train_gmmn(models["gmmn"], x, num_epochs=1, batch_size=64, seed=0),
        "ais, digits GAN": lambda: pyrolik.ais(pm.load("gan"), data.valid[:20], num_steps=50,
                                               num_chains=2, seed=0, progress=False),
    }
    fns = {}
    for name, fn in jobs.items():
        fns[(name, 1)] = with_threads(1, fn)
        fns[(name, args.threads)] = with_threads(args.threads, fn)
    times = interleaved(fns, repeats=args.repeats, warmup=1)
    print(machine())
    print(f"{'job':18s} {'1 thread':>10s} {str(args.threads) + ' threads':>11s} {'ratio':>7s}")
    for name in jobs:
        one, many = times[(name, 1)], times[(name, args.threads)]
        per = " ms/step" if name != "ais, digits GAN" else " ms/run"
        div = 10 if per == " ms/step" else 1
        print(f"{name:18s} {1e3 * one / div:9.1f}{per} {1e3 * many / div:9.1f}{per} "
              f"{many / one:6.2f}x")


if __name__ == "__main__":
    main()
