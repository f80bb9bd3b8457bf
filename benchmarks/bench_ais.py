"""Issue 3: wall time per annealing step of pyrolik.ais against the torch floor, in one run.

(a) the floor: L+1 fused forward+backward passes of the bare decoder (plain torch) per step;
(b) pyrolik.ais on the same decoder written as an ordinary Pyro program, same batch, same L.
50-200-200-784 ELU decoder, Bernoulli observations, 100 examples x 10 chains, the default kernel's
L and momentum persistence (``--leapfrog 10 --persistence 0`` for the kernel of Wu et al.;
``--resample T`` runs the kernel with resampling and also times it against plain AIS).
Also: float64, the pilot's overhead, and the scaling with examples x chains.

    python benchmarks/bench_ais.py [--steps 20] [--rounds 5] [--device cuda]
"""

from __future__ import annotations

import argparse
import time

import torch

import pyrolik
from benchmarks._common import (
    decoder,
    encoder_guide,
    hand_value_and_grad,
    machine,
    median_time,
    pyro_model,
)


def floor_per_step(dec, x, leapfrog, device, repeats=10):
    hand = hand_value_and_grad(dec, x)
    z = torch.randn(x.shape[0], 50, dtype=x.dtype, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step():
        for _ in range(leapfrog + 1):
            hand(z)
        sync()

    return median_time(step, repeats=repeats)


PERSISTENCE = pyrolik.HMC().momentum_persistence  # set by --persistence
RESAMPLE = None  # set by --resample


def ais_per_step(model, x, steps, chains, leapfrog, adapt="none", init=None, resample="global"):
    move = pyrolik.HMC(num_leapfrog=leapfrog, step_size=0.05,
                       adapt=None if adapt == "none" else adapt, momentum_persistence=PERSISTENCE)
    threshold = RESAMPLE if resample == "global" else resample
    kernel = pyrolik.SMC(move, resample=threshold, islands=None if threshold is None else 1)
    t0 = time.perf_counter()
    pyrolik.ais(model, x, num_steps=steps, num_chains=chains, kernel=kernel, init=init, seed=0,
                progress=False)
    if x.is_cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=20, help="annealing steps per timed AIS run")
    p.add_argument("--rounds", type=int, default=5, help="floor / AIS / floor rounds per dtype")
    p.add_argument("--examples", type=int, default=100)
    p.add_argument("--chains", type=int, default=10)
    p.add_argument("--leapfrog", type=int, default=pyrolik.HMC().num_leapfrog,
                   help="leapfrog steps (default: the default kernel's)")
    p.add_argument("--persistence", type=float, default=pyrolik.HMC().momentum_persistence,
                   help="momentum persistence (default: the default kernel's)")
    p.add_argument("--resample", type=float, default=None,
                   help="SMC(resample=, islands=1): resampling threshold (default: none, plain AIS)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--pilot-steps", type=lambda v: [int(t) for t in v.split(",")], default=[200],
                   help="annealing steps at which the default kernel's cost is also timed")
    p.add_argument("--scaling", default="250,500,1000,2000,4000",
                   help="batch sizes (examples x chains) for the scaling table")
    args = p.parse_args(argv)
    global PERSISTENCE, RESAMPLE
    PERSISTENCE, RESAMPLE = args.persistence, args.resample

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {machine()}; device {args.device}")
    g = torch.Generator().manual_seed(0)
    rows = []
    for dtype in (torch.float32, torch.float64):
        dec = decoder().to(dtype).to(args.device)
        x = (torch.rand(args.examples, 784, generator=g) < 0.13).to(dtype).to(args.device)
        model = pyro_model(dec)
        x_rep = x.repeat(args.chains, 1)
        ais_per_step(model, x, 3, args.chains, args.leapfrog)  # warm-up
        # rounds of floor / pyrolik.ais / floor, so that a change of the machine's load between
        # the two sides cannot masquerade as a ratio; the median round is reported
        rounds = []
        for _ in range(args.rounds):
            a = floor_per_step(dec, x_rep, args.leapfrog, args.device, repeats=3)
            b = ais_per_step(model, x, args.steps, args.chains, args.leapfrog)
            a2 = floor_per_step(dec, x_rep, args.leapfrog, args.device, repeats=3)
            rounds.append((b / (0.5 * (a + a2)), 0.5 * (a + a2), b))
        ratio, floor, b = sorted(rounds)[len(rounds) // 2]
        rows.append((str(dtype).split(".")[-1], floor, b))
        spread = ", ".join(f"{r[0]:.3f}" for r in rounds)
        print(f"{rows[-1][0]}: floor {1e3 * floor:.1f} ms/step (L+1={args.leapfrog + 1} passes), "
              f"pyrolik.ais {1e3 * b:.1f} ms/step, ratio {ratio:.3f} (target <= 1.10; "
              f"median of {args.rounds} rounds: {spread})")
    f32, f64 = rows
    print(f"float64 / float32 cost of pyrolik.ais: {f64[2] / f32[2]:.2f}x")
    dec = decoder().to(args.device)
    x = (torch.rand(args.examples, 784, generator=g) < 0.13).float().to(args.device)
    model = pyro_model(dec)
    for steps in sorted({args.steps, *args.pilot_steps}):
        fixed = ais_per_step(model, x, steps, args.chains, args.leapfrog)
        piloted = ais_per_step(model, x, steps, args.chains, args.leapfrog, adapt="pilot")
        print(f"the default kernel (pilot of 20% + 20 transitions on 4 chains per example, adaptive "
              f"schedule): {piloted / fixed:.2f}x the cost of fixed step sizes at {steps} steps")
    guide = encoder_guide()
    pairs = [(ais_per_step(model, x, args.steps, args.chains, args.leapfrog, init=guide),
              ais_per_step(model, x, args.steps, args.chains, args.leapfrog)) for _ in range(3)]
    enc = sorted(e / p for e, p in pairs)[1]
    print(f"AIS+encoder (mean-field encoder guide of the decoder's size) / AIS from the prior: "
          f"{enc:.2f}x per step (median of 3 pairs)")
    if args.resample is not None:
        pairs = [(ais_per_step(model, x, args.steps, args.chains, args.leapfrog),
                  ais_per_step(model, x, args.steps, args.chains, args.leapfrog, resample=None))
                 for _ in range(5)]
        print(f"resample={args.resample} / plain AIS: "
              f"{sorted(r / a for r, a in pairs)[2]:.3f}x per step (median of 5 pairs)")
    print("scaling (float32): rows = examples x chains, ms per annealing step, us per row-step")
    for total in [int(s) for s in args.scaling.split(",")]:
        n = max(1, total // args.chains)
        xs = (torch.rand(n, 784, generator=g) < 0.13).float().to(args.device)
        t = ais_per_step(model, xs, max(5, args.steps // 5), args.chains, args.leapfrog)
        print(f"  {n * args.chains:6d} rows: {1e3 * t:8.1f} ms/step, {1e6 * t / (n * args.chains):7.2f} us/row")


if __name__ == "__main__":
    main()
