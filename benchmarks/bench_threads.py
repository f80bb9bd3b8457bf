"""Issue 19: 1 or 2 torch threads for pyrolik's work, on a quiet machine and beside busy processes.

Workloads (float32, one process):

- ``vae``, ``gan``, ``gmmn``: ``pyrolik.ais(model, x[:297], num_steps=100, num_chains=4)`` on the
  shipped digits models (``pyrolik_models.load(kind)``), default ``HMC()`` (pilot included), the call
  of issue 19;
- ``iwae``: ``pyrolik.iwae(vae, vae.guide, x[:100], num_samples=1000)`` on the digits VAE;
- ``mnist``: ``pyrolik.ais`` on the 50-200-200-784 ELU Bernoulli decoder of Wu et al. written as a
  Pyro program (``benchmarks/_common.py``), 100 examples x 10 chains, 20 steps, L = 10, ``adapt=None``.

Each workload runs with 1 and with 2 threads in alternation (``torch.set_num_threads`` between
runs), so that shared load hits both alike; the figure is the median wall time. With ``--busy B``
the script first starts B processes that spin (``python -c "while True: pass"``) and stops them
at the end, to show what a loaded laptop or a shared server does to each thread count.

    PYTHONPATH=. python benchmarks/bench_threads.py [--busy 0|2] [--repeats 3] [--only vae,mnist]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

import torch

import pyrolik
from benchmarks._common import decoder, machine, pyro_model

WORKLOADS = ("vae", "gan", "gmmn", "iwae", "mnist")


def _models():
    try:
        import pyrolik_models as pm
    except ImportError:  # a source checkout run without installing
        import models as pm
    return pm


def workloads(names: list[str]) -> dict[str, object]:
    pm = _models()
    from importlib import import_module

    split = import_module(pm.__name__ + ".train_digits").digits_split(dtype=torch.float32)
    x = split.train[:297]
    jobs: dict[str, object] = {}
    for kind in ("vae", "gan", "gmmn"):
        if kind in names:
            model = pm.load(kind, dtype=torch.float32)
            jobs[kind] = (lambda m=model: pyrolik.ais(m, x, num_steps=100, num_chains=4, seed=0,
                                                      progress=False))
    if "iwae" in names:
        vae = pm.load("vae", dtype=torch.float32)
        jobs["iwae"] = lambda: pyrolik.iwae(vae, x[:100], vae.guide, num_samples=1000, seed=0,
                                            progress=False)
    if "mnist" in names:
        model = pyro_model(decoder())
        xb = torch.bernoulli(torch.full((100, 784), 0.3), generator=torch.Generator().manual_seed(0))
        kernel = pyrolik.HMC(num_leapfrog=10, step_size=0.05, adapt=None)
        jobs["mnist"] = lambda: pyrolik.ais(model, xb, num_steps=20, num_chains=10, kernel=kernel,
                                            seed=0, progress=False)
    return jobs


def time_threads(job, threads: tuple[int, ...], repeats: int) -> dict[int, float]:
    """Median seconds of ``job()`` at each thread count, alternating the order every round."""
    times: dict[int, list[float]] = {t: [] for t in threads}
    order = list(threads)
    torch.set_num_threads(threads[0])
    job()  # warm-up: imports, first-call allocations
    for _ in range(repeats):
        for t in order:
            torch.set_num_threads(t)
            t0 = time.perf_counter()
            job()
            times[t].append(time.perf_counter() - t0)
        order.reverse()
    return {t: statistics.median(v) for t, v in times.items()}


def start_busy(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def stop_busy(procs: list[subprocess.Popen]) -> None:
    for p in procs:  # only the processes this script started, by their handle
        p.terminate()
    for p in procs:
        p.wait(timeout=10)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--busy", type=int, default=0, help="busy processes to start beside (default 0)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per thread count (default 3)")
    p.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads")
    p.add_argument("--threads", default="1,2", help="thread counts to compare (default 1,2)")
    args = p.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    threads = tuple(int(t) for t in args.threads.split(","))
    jobs = workloads(names)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the busy processes on kill too
    busy = start_busy(args.busy)
    try:
        time.sleep(2 if busy else 0)
        load0 = os.getloadavg()
        print(f"machine: {machine()}, {os.cpu_count()} cores, nice {os.nice(0)}; {args.busy} busy "
              f"processes started (same nice); "
              f"load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
        print(f"{'workload':<8} " + " ".join(f"{f'{t} thr [s]':>11}" for t in threads)
              + f" {'ratio':>8}")
        for name, job in jobs.items():
            res = time_threads(job, threads, args.repeats)
            ratio = res[threads[-1]] / res[threads[0]]
            print(f"{name:<8} " + " ".join(f"{res[t]:11.2f}" for t in threads)
                  + f" {ratio:7.2f}x", flush=True)
        load1 = os.getloadavg()
        print(f"load average after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; ratio = "
              f"{threads[-1]} threads / {threads[0]} thread (above 1: {threads[0]} is faster)")
    finally:
        stop_busy(busy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
