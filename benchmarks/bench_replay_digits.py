"""Replayed evaluations on a small model: pyrolik.ais on the shipped digits VAE, replay on and off.

On a small decoder (8-64-128-64, 100 digits x 16 chains) Pyro's Python is a large share of each
evaluation, so replaying the recorded operations (``pyrolik/model/reuse.py``) shows most here. Whole runs
(set-up, recording and the default pilot included), alternated, median of the rounds; the estimates
must be identical.

    python benchmarks/bench_replay_digits.py [--rounds 3] [--steps 300] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import pyrolik
from benchmarks._common import machine
from models.zoo.serialization import load
from pyrolik.io.datasets import load_digits


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {machine()}")
    model = load("vae", dtype=torch.float32)
    x = load_digits(dtype=torch.float32)[0][:100]
    times: dict[str, list[float]] = {"1": [], "0": []}
    estimates = set()
    old = os.environ.get("PYROLIK_REPLAY")
    try:
        for r in range(args.rounds):
            for flag in ("1", "0") if r % 2 else ("0", "1"):
                os.environ["PYROLIK_REPLAY"] = flag
                t0 = time.perf_counter()
                out = pyrolik.ais(model, x, num_steps=args.steps, num_chains=16, seed=0, progress=False)
                times[flag].append(time.perf_counter() - t0)
                estimates.add(float(out.log_likelihood.mean()))
    finally:
        if old is None:
            os.environ.pop("PYROLIK_REPLAY", None)
        else:
            os.environ["PYROLIK_REPLAY"] = old
    replay, eager = statistics.median(times["1"]), statistics.median(times["0"])
    print(f"pyrolik.ais, digits VAE, 100 x 16 chains, {args.steps} steps: replay {replay:.2f} s, "
          f"program each call {eager:.2f} s: {eager / replay:.2f}x faster with replay")
    print(f"estimates (mean log-likelihood, every run): {sorted(estimates)}")
    return eager / replay


if __name__ == "__main__":
    main()
