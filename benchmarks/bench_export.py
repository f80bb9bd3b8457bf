"""Cost of the ArviZ export against the run it exports: time and memory.

A real AIS run of the binarized-MNIST VAE decoder (50-200-200-784, random weights, random binary
data): 100 examples x 16 chains x 200 annealing steps (fixed step size, ``--leapfrog`` steps per
transition, 100 recorded steps), then ``to_datatree``, ``to_inference_data`` (resampling, per-draw
stats, particles, evidence, annealing), ``pyrolik.save`` and ``pyrolik.load``. Memory: the export's
peak of Python/numpy allocations (tracemalloc) against the bytes of the result's tensors and the
process's peak resident size after the run. Target: export <= 5% of the run's time.

    PYTHONPATH=. python benchmarks/bench_export.py [--leapfrog 10] [--steps 200]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import torch

import pyrolik
from benchmarks._common import decoder, machine, pyro_model


def timed(fn, repeats: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def peak_bytes(fn) -> int:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def tensor_bytes(result) -> int:
    seen = 0
    for value in vars(result).values():
        tensors = value.values() if isinstance(value, dict) else [value]
        seen += sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--chains", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--leapfrog", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(args.examples, 784, generator=g) < 0.5).float()
    kernel = pyrolik.HMC(num_leapfrog=args.leapfrog, step_size=0.05, adapt=None)
    start = time.perf_counter()
    r = pyrolik.ais(pyro_model(decoder()), x, num_steps=args.steps, num_chains=args.chains,
                    kernel=kernel, seed=0, progress=False)
    t_run = time.perf_counter() - start
    rss_run = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # MiB (Linux: KiB)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ais.nc"
        t_tree, tree = timed(r.to_datatree)
        t_idata, _ = timed(r.to_inference_data)
        t_save, _ = timed(lambda: pyrolik.save(r, path))
        t_load, _ = timed(lambda: pyrolik.load(path))
        size = path.stat().st_size / 2**20
    peak = peak_bytes(r.to_inference_data) / 2**20
    print(f"machine: {machine()}")
    print(f"AIS run: N={args.examples}, K={args.chains}, {args.steps} steps, "
          f"{args.leapfrog} leapfrog, {len(r.trace_steps)} records: {t_run:.1f} s, "
          f"peak RSS {rss_run:.0f} MiB, result tensors {tensor_bytes(r) / 2**20:.1f} MiB")
    print(f"posterior {dict(tree['posterior'].sizes)}; netCDF {size:.1f} MiB")
    print(f"to_datatree {t_tree:.3f} s | to_inference_data {t_idata:.3f} s | save {t_save:.3f} s "
          f"| load {t_load:.3f} s (median of 3)")
    print(f"export peak allocation (tracemalloc, to_inference_data) {peak:.1f} MiB = "
          f"{100 * peak / rss_run:.1f}% of the run's peak RSS")
    print(f"to_inference_data = {100 * t_idata / t_run:.2f}% of the run; "
          f"to_datatree + save = {100 * (t_tree + t_save) / t_run:.2f}% (target <= 5%)")


if __name__ == "__main__":
    main()
