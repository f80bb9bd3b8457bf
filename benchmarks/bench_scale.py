"""Issue 7: the cost of checkpointing, and multi-process scaling with torchrun, in one run.

(a) pyrolik.ais with and without ``pyrolik.checkpoint()`` (every 10 and every 50 steps), timed in
    alternation; the size of the checkpoint and the time of one write.
(b) ``torchrun --nproc-per-node P -m pyrolik evaluate`` for P = 1, 2, 4 (gloo, CPU; each process
    gets cores / P threads): wall time of the estimation (``result.wall_time``, rank 0, gather
    included) and of the whole command; the results must be bit-identical across P.
50-200-200-784 ELU decoder with Bernoulli observations (random weights), 10 leapfrog steps.

    python benchmarks/bench_scale.py [--examples 64] [--chains 16] [--steps 100] [--device cpu]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import pyrolik
from benchmarks._common import decoder, machine, pyro_model

ROOT = Path(__file__).resolve().parents[1]


def model(x):
    """The benchmark model with fixed weights (importable by every torchrun process)."""
    return _MODEL(x)


DECODER = decoder()
_MODEL = pyro_model(DECODER)


def data(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.bernoulli(torch.full((n, 784), 0.3), generator=g)


def checkpoint_cost(x, chains, steps, device, rounds=3):
    kernel = pyrolik.HMC(num_leapfrog=10)
    x = x.to(device)
    DECODER.to(device)
    times: dict[str, list[float]] = {"none": [], "every 50": [], "every 10": []}
    sizes, ref = {}, None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for name in times:
                path = None if name == "none" else Path(tmp) / f"{name.replace(' ', '')}-{r}.ckpt"
                every = 50 if name == "every 50" else 10
                t0 = time.perf_counter()
                block = (contextlib.nullcontext() if path is None
                         else pyrolik.checkpoint(path, every=every))
                with block:
                    res = pyrolik.ais(model, x, num_steps=steps, num_chains=chains, kernel=kernel,
                                      seed=0, progress=False)
                if device == "cuda":
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - t0)
                if path is not None:
                    sizes[name] = path.stat().st_size + sum(
                        f.stat().st_size for f in (Path(str(path) + ".batches")).iterdir())
                    assert torch.equal(res.log_weights, ref.log_weights)
                else:
                    ref = res
    base = min(times["none"])
    print(f"(a) checkpoint cost: {x.shape[0]} examples x {chains} chains, {steps} steps, "
          f"device {device}")
    for name, t in times.items():
        extra = f", files {sizes[name] / 1e6:.2f} MB" if name in sizes else ""
        print(f"    {name:>9}: {min(t):7.2f} s  ({min(t) / base:.3f}x){extra}")
    # one write of the in-progress state, measured directly
    from pyrolik.execution.checkpoint import _dump, atomic_write_bytes
    state = {"z": torch.randn(x.shape[0] * chains, 50), "lw": torch.randn(x.shape[0] * chains)}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for _ in range(20):
            atomic_write_bytes(Path(tmp) / "s", _dump(state))
        print(f"    one atomic write of the state of {x.shape[0] * chains} chains (fsync "
              f"included): {(time.perf_counter() - t0) / 20 * 1e3:.1f} ms")


def scaling(x, chains, steps, procs, device, threads=None):
    cores = os.cpu_count() or 1
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "x.npy", x.numpy())
        for p in procs:
            result = Path(tmp) / f"r{p}.nc"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(p), "-m", "pyrolik", "evaluate",
                   "benchmarks.bench_scale:model", "--data", str(Path(tmp) / "x.npy"),
                   "--num-steps", str(steps), "--num-chains", str(chains),
                   "--batch-size", str(x.shape[0] // max(procs)), "--threads",
                   str(threads or max(1, cores // p)), "--device", device, "-q", "-o", str(result)]
            env = {**os.environ, "PYTHONPATH": str(ROOT),
                   "OMP_NUM_THREADS": str(threads or max(1, cores // p))}
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
            total = time.perf_counter() - t0
            if proc.returncode:
                raise SystemExit(proc.stderr[-3000:])
            out[p] = (pyrolik.load(result), total)
    base = out[procs[0]][0]
    print(f"(b) torchrun scaling: {x.shape[0]} examples x {chains} chains, {steps} steps, "
          f"batch {x.shape[0] // max(procs)}, {cores} cores, device {device}")
    for p, (res, total) in out.items():
        same = torch.equal(res.log_weights, base.log_weights)
        print(f"    P={p}: estimation {res.wall_time:7.2f} s ({base.wall_time / res.wall_time:.2f}x"
              f" faster than P={procs[0]}), whole command {total:6.1f} s, "
              f"bit-identical to P={procs[0]}: {same}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--examples", type=int, default=64)
    p.add_argument("--chains", type=int, default=16)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--procs", default="1,2,4")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per process (default: cores / processes)")
    p.add_argument("--skip", default="", help="a, b or both to skip parts")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {machine()}; {os.cpu_count()} cores")
    x = data(args.examples)
    if "a" not in args.skip:
        checkpoint_cost(x, args.chains, args.steps, args.device)
    if "b" not in args.skip:
        scaling(x, args.chains, args.steps, [int(v) for v in args.procs.split(",")], args.device,
                args.threads)


if __name__ == "__main__":
    main()
