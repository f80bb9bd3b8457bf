"""Issue 10 item 2 and issue 4's target: BDMC on examples simulated from the trained binarized-MNIST VAE.

The peers' budget: simulated examples x 10 chains, 200 annealing steps of 10 leapfrog steps. Peers on
their own pretrained 50-200-200-784 VAE: 19.6 nats (public PyTorch code, linear), 6.3 (same, sigmoid),
0.72 (BlackJAX, sigmoid). Parts (``--parts``, comma-separated, so that they can run in parallel):

- ``main``: the gap with the sigmoid and linear schedules on the prior path, and the encoder path;
- ``variants``: HMC(mass_matrix=True) and target_accept=0.8 on the prior path (sigmoid);
- ``convergence``: the gap against annealing steps on a subset (figure 2(b)), the steps needed for
  a gap under 1 nat, and the cost of one ``bdmc`` against two forward ``ais`` runs.

Claims (exit 1 if one fails): every gap is >= -2 s.e. (upper above lower); prior-path gaps at most half
of the PyTorch code's at the same budget (sigmoid <= 3.15, linear <= 9.8); encoder-path gap < 1 nat.

    PYTHONPATH=. python benchmarks/bdmc_mnist.py /work/shared/data --parts main
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import pyrolik
from benchmarks._mnist import (
    CHECKPOINTS,
    FIGURES,
    Claims,
    data_dir_or_exit,
    load_avg,
    load_or_train,
)


def report(name: str, r, claims: Claims, limit: float | None, peer: str) -> float:
    acc = float(r.lower.acceptance_rate.mean())
    print(f"{name}: lower {r.lower.mean:.2f}, upper {r.upper.mean:.2f}, gap {r.gap:.2f} +- "
          f"{r.gap_stderr:.2f} nats (peers: {peer}); acceptance {acc:.2f}; {r.wall_time:.0f} s",
          flush=True)
    claims.check(f"{name}: upper bound above lower bound (gap {r.gap:.2f} >= -2 s.e.)",
                 r.gap >= -2 * r.gap_stderr)
    if limit is not None:
        claims.check(f"{name}: gap {r.gap:.2f} <= {limit}", r.gap <= limit)
    return r.gap


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("data_dir", nargs="?", default=None)
    p.add_argument("--checkpoint", default=str(CHECKPOINTS / "iwae_mnist.pt"))
    p.add_argument("--train-args", default="--epochs 4 --batch-size 100 --particles 5 --threads 1")
    p.add_argument("--parts", default="main,variants,convergence")
    p.add_argument("--examples", type=int, default=100)
    p.add_argument("--chains", type=int, default=10)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--leapfrog", type=int, default=10)
    p.add_argument("--conv-examples", type=int, default=20)
    p.add_argument("--conv-steps", default="20,60,200")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--plot", default=str(FIGURES / "bdmc_mnist_convergence.png"))
    p.add_argument("--quick", action="store_true", help="tiny settings for the slow test")
    args = p.parse_args(argv)
    if args.quick:
        args.examples, args.chains, args.steps = 5, 3, 50
        args.conv_examples, args.conv_steps = 5, "10,40"
    data_dir = data_dir_or_exit(args.data_dir, "binarized_mnist.npz")
    torch.set_num_threads(args.threads)
    model = load_or_train("iwae", Path(args.checkpoint), data_dir, args.train_args.split())
    parts = set(args.parts.split(","))
    data = pyrolik.simulate(model, args.examples, data_shape=(784,), seed=0)
    print(f"{args.examples} examples simulated from {args.checkpoint} x {args.chains} chains, "
          f"{args.steps} steps x {args.leapfrog} leapfrog; {load_avg()}", flush=True)
    claims = Claims()
    hmc = pyrolik.HMC(num_leapfrog=args.leapfrog)
    common = {"num_steps": args.steps, "num_chains": args.chains, "seed": 0, "progress": False}
    if "main" in parts:
        report("prior path, sigmoid", pyrolik.bdmc(model, data, kernel=hmc, schedule="sigmoid", **common),
               claims, 3.15, "PyTorch code 6.3, BlackJAX 0.72")
        report("prior path, linear", pyrolik.bdmc(model, data, kernel=hmc, schedule="linear", **common),
               claims, 9.8, "PyTorch code 19.6")
        report("encoder path, sigmoid",
               pyrolik.bdmc(model, data, kernel=hmc, init=model.guide, **common), claims, 1.0,
               "target < 0.4")
    if "variants" in parts:
        for name, kern in [("mass_matrix=True", pyrolik.HMC(num_leapfrog=args.leapfrog,
                                                            mass_matrix=True)),
                           ("target_accept=0.8", pyrolik.HMC(num_leapfrog=args.leapfrog,
                                                             target_accept=0.8))]:
            report(f"prior path, sigmoid, {name}", pyrolik.bdmc(model, data, kernel=kern, **common),
                   claims, None, "BlackJAX 0.72")
    if "convergence" in parts:
        convergence(model, data, args, hmc, claims)
    claims.finish()


def convergence(model, data, args, hmc, claims: Claims) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = args.conv_examples
    sub = (data.x[:n], {k: v[:n] for k, v in data.latents.items()})
    steps = [int(s) for s in args.conv_steps.split(",")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (name, init) in zip(axes, [("prior path", None), ("encoder path", model.guide)], strict=True):
        table = pyrolik.infer.bdmc_convergence(model, sub, num_steps=steps, num_chains=args.chains,
                                         kernel=hmc, init=init, progress=False)
        print(f"\n{name}, {n} simulated examples x {args.chains} chains (sigmoid schedule):")
        print(table.round(3).to_string(index=False))
        below = table[table.gap < 1.0]
        first = int(below.num_steps.iloc[0]) if len(below) else None
        print(f"{name}: fewest steps tried with a gap under 1 nat: {first}", flush=True)
        for _, row in table.iterrows():
            claims.check(f"{name}, {int(row.num_steps)} steps: gap {row.gap:.2f} >= -2 s.e.",
                         row.gap >= -2 * row.gap_se)
        pyrolik.diagnostics.plots.plot_bdmc_convergence(table, ax=ax, title=f"BDMC on simulated MNIST, {name}")
    fig.tight_layout()
    out = Path(args.plot)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    print(f"plot: {out}")
    t = steps[len(steps) // 2]
    t0 = time.perf_counter()
    pyrolik.bdmc(model, sub, num_steps=t, num_chains=args.chains, kernel=hmc, seed=1,
                 progress=False)
    t_bdmc = time.perf_counter() - t0
    t0 = time.perf_counter()
    for s in (1, 2):
        pyrolik.ais(model, sub[0], num_steps=t, num_chains=args.chains, kernel=hmc, seed=s,
                    progress=False)
    t_two = time.perf_counter() - t0
    print(f"cost at {t} steps, {n} x {args.chains}: bdmc {t_bdmc:.1f} s, two forward ais "
          f"{t_two:.1f} s, ratio {t_bdmc / t_two:.2f}")


if __name__ == "__main__":
    main()
