"""Issue 34, part 4: what a user's real job costs, all 10,000 binarized-MNIST test images.

The reference model (``benchmarks/checkpoints/reference_iwae.pt``, a 50-200-200-784 ELU IWAE after
Wu et al.), the real test images, pyrolik's DEFAULT settings (``pyrolik.HMC()``: L = 3, the pilot,
the adaptive schedule) at ``--steps`` annealing steps (333: ~1000 gradient evaluations per chain,
plus the pilot's) x 16 chains, one torch thread per process. In one run:

(a) CPU seconds per image of ``pyrolik.ais(model, x, num_steps=..., num_chains=16, seed=0)`` on the
    first ``--ais-images`` test images (one batch), against the floor: as many forward+backward
    passes of the bare decoder in plain torch (``bench_ais.floor_per_step``) as the run spent
    gradient evaluations (``result.settings``: the 16 chains' and the pilot's, each on its own
    batch shape), and bench_ais's floor of L + 1 passes per step; extrapolated to 10,000 images.
(b) the wall time of ``torchrun --nproc-per-node 2 -m pyrolik evaluate benchmarks.test_set:model
    --weights <checkpoint> --data <unpacked test set> --limit N --num-steps S --num-chains 16
    --threads 1`` (and ``python -m pyrolik evaluate`` in 1 process, ``--procs 2,1``), extrapolated
    to 10,000 images; the CPU time of the command's process tree.

The data file is bit-packed (``../shared/data/README.md``); (b) writes an unpacked copy of the
test images to a temporary folder first. ``benchmarks.test_set:model`` with its ``load(path)``
hook is the model file a user of ``pyrolik evaluate`` writes.

    PYTHONPATH=. python benchmarks/test_set.py --data ../shared/data/binarized_mnist.npz \
        [--steps 333] [--ais-images 500] [--cli-images 1000] [--procs 2,1] [--skip a|b]
    (or PYROLIK_DATA=../shared/data/binarized_mnist.npz instead of --data; a folder holding
    binarized_mnist.npz is accepted too)
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import pyrolik
from benchmarks._common import machine
from benchmarks.bench_ais import floor_per_step

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "benchmarks" / "checkpoints" / "reference_iwae.pt"
TEST_IMAGES = 10_000

MODEL = None  # filled in by load(path): the `pyrolik evaluate --weights` hook


def load(path: str) -> None:
    """The ``--weights`` hook of ``pyrolik evaluate``: read the reference checkpoint."""
    global MODEL
    from models.zoo.serialization import load as load_checkpoint

    MODEL = load_checkpoint("iwae", path, dtype=torch.float32)


def model(x):
    """The reference IWAE as a Pyro model (``benchmarks.test_set:model`` on the command line)."""
    if MODEL is None:
        raise RuntimeError("benchmarks.test_set:model needs --weights (its load(path) hook)")
    return MODEL(x)


def test_images(path: str | None) -> np.ndarray:
    """The 10,000 binarized-MNIST test images, unpacked: (10000, 784) uint8 of 0/1."""
    path = path or os.environ.get("PYROLIK_DATA")
    if not path:
        raise SystemExit("give the data file: --data path/to/binarized_mnist.npz or PYROLIK_DATA")
    p = Path(path)
    if p.is_dir():
        p = p / "binarized_mnist.npz"
    if not p.is_file():
        raise SystemExit(f"{p} does not exist (binarized_mnist.npz, see ../shared/data/README.md)")
    with np.load(p) as f:
        x = np.unpackbits(f["test"], axis=1)[:, :784]
    assert x.shape == (TEST_IMAGES, 784), x.shape
    print(f"data: {p}, test images {x.shape}, pixel mean {x.mean():.4f} (README: 0.1325)")
    return x


def cpu_per_pass(dec, rows: torch.Tensor, repeats: int) -> tuple[float, float]:
    """(CPU seconds, median wall seconds) of one forward+backward pass of the bare decoder on
    ``rows``, with bench_ais's floor (``floor_per_step`` with L = 0: one pass per call; its 3
    warm-up calls are counted in the CPU mean)."""
    c0 = time.process_time()
    wall = floor_per_step(dec, rows, 0, "cpu", repeats=repeats)
    return (time.process_time() - c0) / (repeats + 3), wall


def part_a(x_all: np.ndarray, n: int, steps: int, chains: int, repeats: int) -> None:
    load(str(CHECKPOINT))
    dec = MODEL.decoder
    x = torch.as_tensor(x_all[:n], dtype=torch.float32)
    kernel = pyrolik.HMC()
    pyrolik.ais(model, x[:4], num_steps=10, num_chains=chains, progress=False, seed=0)  # warm-up
    # floor / AIS / floor: the floor's mean brackets the run, in case the machine's load moves
    rows_main, rows_pilot = x.repeat(chains, 1), None
    floor = [cpu_per_pass(dec, rows_main, repeats)]
    c0, t0 = time.process_time(), time.perf_counter()
    res = pyrolik.ais(model, x, num_steps=steps, num_chains=chains, progress=False, seed=0)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    floor.append(cpu_per_pass(dec, rows_main, repeats))
    s = res.settings
    pilot_chains = kernel.adaptation.pilot_chains(chains)
    rows_pilot = x.repeat(pilot_chains, 1)
    pilot_pass = cpu_per_pass(dec, rows_pilot, repeats)[0] if s["pilot_gradient_evals_per_example"] else 0.0
    main_pass = 0.5 * (floor[0][0] + floor[1][0])
    g_main = s["gradient_evals_per_example"] / chains  # per chain: one pass of all rows each
    g_pilot = s["pilot_gradient_evals_per_example"] / pilot_chains if pilot_chains else 0
    floor_g = g_main * main_pass + g_pilot * pilot_pass
    pilot_steps = kernel.adaptation.pilot_transitions(steps)
    L = kernel.num_leapfrog
    floor_l1 = steps * (L + 1) * main_pass + pilot_steps * (L + 1) * pilot_pass
    per_chain = (s["gradient_evals_per_example"] + s["pilot_gradient_evals_per_example"]) / chains
    lp = res.log_likelihood
    print(f"(a) pyrolik.ais, default kernel {kernel}")
    print(f"    {n} test images x {chains} chains, {steps} steps, one batch, seed 0: "
          f"CPU {cpu:.1f} s, wall {wall:.1f} s")
    print(f"    gradient evaluations per chain: {g_main:.0f} (annealing) + "
          f"{s['pilot_gradient_evals_per_example'] / chains:.1f} (pilot: {pilot_steps} "
          f"transitions on {pilot_chains} chains) = {per_chain:.1f}")
    print(f"    floor: one decoder forward+backward pass {1e3 * main_pass:.1f} ms CPU on "
          f"{rows_main.shape[0]} rows (before {1e3 * floor[0][0]:.1f}, after "
          f"{1e3 * floor[1][0]:.1f}; median wall {1e3 * floor[0][1]:.1f} / {1e3 * floor[1][1]:.1f}),"
          f" {1e3 * pilot_pass:.1f} ms on {rows_pilot.shape[0]} rows (the pilot's)")
    print(f"    floor at the gradient count ({g_main:.0f} + {g_pilot:.0f} passes): {floor_g:.1f} s"
          f" CPU -> ratio {cpu / floor_g:.3f}")
    print(f"    floor at L + 1 passes per step ({steps} x {L + 1} + {pilot_steps} x {L + 1}): "
          f"{floor_l1:.1f} s CPU -> ratio {cpu / floor_l1:.3f}")
    print(f"    CPU per image: {cpu / n:.3f} s (floor {floor_g / n:.3f} s); 10,000 images: "
          f"{cpu / n * TEST_IMAGES / 60:.1f} CPU min (floor {floor_g / n * TEST_IMAGES / 60:.1f})")
    ess = "" if res.ess is None else f" (ESS median {res.ess.median():.1f} of {chains})"
    print(f"    mean log p(x) lower bound {lp.mean():.2f} nats{ess}")


def part_b(x_all: np.ndarray, n: int, steps: int, chains: int, procs: list[int]) -> None:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "binarized_mnist_test.npy"
        np.save(data, x_all)  # the unpacked test set, uint8 0/1 (evaluate: float32)
        for p in procs:
            result = Path(tmp) / f"p{p}.nc"
            launcher = (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(p)]
                        if p > 1 else [])
            cmd = [sys.executable, *launcher, "-m", "pyrolik", "evaluate",
                   "benchmarks.test_set:model", "--weights", str(CHECKPOINT), "--data", str(data),
                   "--limit", str(n), "--num-steps", str(steps), "--num-chains", str(chains),
                   "--threads", "1", "--seed", "0", "-q", "-o", str(result)]
            env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
            shown = ("torchrun --nproc-per-node " + str(p) if p > 1 else "python") + " " + \
                " ".join(cmd[len(launcher) + 1:])
            print(f"(b) {shown}\n    load before: {os.getloadavg()}", flush=True)
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
            total = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode:
                raise SystemExit(proc.stderr[-3000:])
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            res = pyrolik.load(result)
            out[p] = res
            est = res.wall_time
            fixed = total - est
            full = est * TEST_IMAGES / n + fixed
            per_chain = (res.settings["gradient_evals_per_example"]
                         + res.settings["pilot_gradient_evals_per_example"]) / chains
            print(f"    {p} process{'es' if p > 1 else ''}, {n} images: whole command {total:.1f} s"
                  f" wall (estimation {est:.1f} s, the rest {fixed:.1f} s: start, model, data, "
                  f"writing), CPU of the process tree {cpu:.1f} s ({cpu / n:.3f} s per image); "
                  f"{per_chain:.1f} gradient evaluations per chain; mean log p(x) "
                  f"{res.log_likelihood.mean():.2f}")
            print(f"    extrapolated to {TEST_IMAGES} images: {full / 60:.1f} min wall "
                  f"(estimation x {TEST_IMAGES / n:g} + the rest once), "
                  f"{cpu / n * TEST_IMAGES / 60:.1f} CPU min; load after: {os.getloadavg()}",
                  flush=True)
    if len(out) > 1:
        a, b = (out[p] for p in procs[:2])
        print(f"    {procs[0]} vs {procs[1]} processes: log p(x) bit-identical "
              f"{torch.equal(a.log_likelihood, b.log_likelihood)} (by default a process's batch "
              f"is its shard, and the adaptive schedule is the batch's: batch sizes "
              f"{a.settings['batch_size']} and {b.settings['batch_size']}), estimation "
              f"{b.wall_time / a.wall_time:.2f}x faster with {procs[0]}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None,
                   help="binarized_mnist.npz (or its folder); default: PYROLIK_DATA")
    p.add_argument("--steps", type=int, default=333,
                   help="annealing steps (333 x L = 3: ~1000 gradient evaluations per chain)")
    p.add_argument("--chains", type=int, default=16)
    p.add_argument("--ais-images", type=int, default=500, help="(a): the first N test images")
    p.add_argument("--cli-images", type=int, default=1000, help="(b): --limit N")
    p.add_argument("--procs", default="2,1", help="(b): processes (1: plain python, no torchrun)")
    p.add_argument("--floor-repeats", type=int, default=20, help="(a): timed floor passes")
    p.add_argument("--skip", default="", help="a or b: skip that part")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    x_all = test_images(args.data)
    print(f"machine: {machine()}; {os.cpu_count()} cores; load {os.getloadavg()}; "
          f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}", flush=True)
    if "a" not in args.skip:
        part_a(x_all, args.ais_images, args.steps, args.chains, args.floor_repeats)
        print(f"    load after (a): {os.getloadavg()}", flush=True)
    if "b" not in args.skip:
        part_b(x_all, args.cli_images, args.steps, args.chains,
               [int(v) for v in args.procs.split(",")])
        print(f"    load after (b): {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
