"""The cost of the batch-composition check (pyrolik.model.rows) on the shipped digits VAE.

``make_target`` runs the model once more on a probe of two rows to refuse a model whose density of
one example reads other rows of its batch. This times ``make_target`` (the model with its encoder as
guide, 100 digits x 10 chains) and a whole ``pyrolik.ais`` run (100 digits x 16 chains, 100 steps)
with the check and with it switched off, alternated, median of the rounds; the estimates must be the
same (the check draws no random numbers).

    python benchmarks/bench_rows_check.py [--rounds 5] [--steps 100] [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from unittest import mock

import torch

import pyrolik
from benchmarks._common import machine
from models.zoo.serialization import load
from pyrolik.io.datasets import load_digits
from pyrolik.model import target as target_module
from pyrolik.model.target import make_target


@contextlib.contextmanager
def check(on: bool):
    if on:
        yield
        return
    with mock.patch.object(target_module, "check_rows_independent", lambda *a, **k: None):
        yield


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"machine: {machine()}")
    model = load("vae", dtype=torch.float32)
    x = load_digits(dtype=torch.float32)[0][:100]
    build: dict[bool, list[float]] = {True: [], False: []}
    run: dict[bool, list[float]] = {True: [], False: []}
    estimates: dict[bool, set] = {True: set(), False: set()}
    for r in range(args.rounds):
        for on in (True, False) if r % 2 else (False, True):
            with check(on):
                t0 = time.perf_counter()
                make_target(model, x, 10, guide=model.guide)
                build[on].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                out = pyrolik.ais(model, x, num_steps=args.steps, num_chains=16, seed=0,
                                  progress=False)
                run[on].append(time.perf_counter() - t0)
                estimates[on].add(float(out.log_likelihood.mean()))
    assert estimates[True] == estimates[False] and len(estimates[True]) == 1, estimates
    for name, t in (("make_target (100 x 10, with guide)", build),
                    (f"pyrolik.ais (100 x 16, {args.steps} steps)", run)):
        on, off = statistics.median(t[True]), statistics.median(t[False])
        print(f"{name}: {on * 1e3:.1f} ms with the check, {off * 1e3:.1f} ms without: "
              f"ratio {on / off:.3f}")


if __name__ == "__main__":
    main()
