"""pyrolik.evidence on a linear-Gaussian model with a global latent: accuracy and time against N x d.

mu ~ N(0, I_D) (global), z_n ~ N(0, I_d) (local), x_n ~ N(mu + W z_n, 0.5^2 I_D): the exact
log p(x_1..N) is closed form (pyrolik_models.oracles.GlobalLinearGaussian), with D + N d latents.
For each (N, D, d) and seed: the error of the estimate against the exact evidence, its MCSE, the
chains' ESS, the wall time and the process's CPU time (one torch thread: on a quiet machine the
wall time is about the CPU time; on a loaded one the CPU time is the figure to compare). The goal: within 0.2 nats at N = 50, D = 4, d = 2
(104 latents) in under 2 minutes on 2 cores, with an MCSE that covers the error.

PyMC 5.28's ``sample_smc`` on the same kind of model (issue 25's measurements, not rerun here: PyMC is
not installed): at N = 6 (16 latents) within 0.02-0.06 nats in 5-12 s; at N = 50 (104 latents) +4.05
nats at 2000 draws x 4 chains (130 s) with its chains agreeing to 0.1-0.6, +0.23 at 8000 draws
(~10 min) with a chain spread of 0.03; its MH kernel -83.

    PYTHONPATH=. python benchmarks/bench_evidence.py [--grid 6x4x2:1000,50x4x2:10000] [--chains 16]
        [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from pyrolik_models.oracles import GlobalLinearGaussian

import pyrolik
from benchmarks._common import machine

DEFAULT_GRID = "6x4x2:1000,20x4x2:3000,50x4x2:10000,50x8x4:10000,100x4x2:20000"


def run(n: int, data_dim: int, latent_dim: int, steps: int, chains: int, seed: int) -> dict:
    model = GlobalLinearGaussian.random(data_dim, latent_dim, s=0.5, seed=0)
    x = model.sample(n, seed=100 + seed)
    exact = float(model.exact_log_evidence(x))
    t0, c0 = time.perf_counter(), time.process_time()
    r = pyrolik.evidence(model, x, num_steps=steps, num_chains=chains, seed=seed, progress=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"N": n, "D": data_dim, "d": latent_dim, "latents": data_dim + n * latent_dim,
            "steps": steps, "chains": chains, "seed": seed, "exact": exact,
            "error": float(r.log_likelihood[0]) - exact, "mcse": float(r.mcse[0]),
            "ess": float(r.ess[0]), "wall_s": wall, "cpu_s": cpu}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grid", default=DEFAULT_GRID,
                   help="comma-separated NxDxd:steps (default: %(default)s)")
    p.add_argument("--chains", type=int, default=16)
    p.add_argument("--seeds", default="0,1,2")
    args = p.parse_args()
    torch.set_default_dtype(torch.float64)
    pyrolik.execution.set_threads(1)
    print(machine())
    print(f"{'N':>4} {'D':>2} {'d':>2} {'latents':>7} {'steps':>6} {'K':>3} {'seed':>4} "
          f"{'exact':>10} {'error':>7} {'MCSE':>6} {'|err|/MCSE':>10} {'ESS':>5} {'wall s':>7} "
          f"{'CPU s':>7}")
    for item in args.grid.split(","):
        shape, steps = item.split(":")
        n, data_dim, latent_dim = (int(v) for v in shape.split("x"))
        for seed in (int(s) for s in args.seeds.split(",")):
            row = run(n, data_dim, latent_dim, int(steps), args.chains, seed)
            print(f"{row['N']:>4} {row['D']:>2} {row['d']:>2} {row['latents']:>7} "
                  f"{row['steps']:>6} {row['chains']:>3} {row['seed']:>4} {row['exact']:>10.3f} "
                  f"{row['error']:>+7.3f} {row['mcse']:>6.3f} "
                  f"{abs(row['error']) / row['mcse']:>10.2f} {row['ess']:>5.1f} "
                  f"{row['wall_s']:>7.1f} {row['cpu_s']:>7.1f}", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
