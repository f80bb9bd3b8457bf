"""Issue 10, item 1: Table 1 / figure 2(c) of Wu et al. (2017) at CPU scale, binarized MNIST.

The 50-200-200-784 Bernoulli VAE trained with the IWAE bound (k=5 here, 50 in the paper), evaluated on a
fixed subset of the 10,000 test images (the first ``--num-test``) by the IWAE bound (k = 1..5000), AIS
from the prior and AIS+encoder at several numbers of annealing steps. Claims checked (exit 1 if one
fails): AIS at its largest budget is not below the IWAE bound at k=5000 (paired, 2 s.e.), and
AIS+encoder at a tenth of AIS's largest number of steps comes within max(0.5 nat, 2 s.e.) of it.
Also the speed figures of issue 10: ms per annealing step of pyrolik.ais against the torch floor on
this trained decoder, the scaling with examples x chains, and the peak memory.

    PYTHONPATH=. python benchmarks/mnist_iwae.py /work/shared/data [--quick]
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
    mean_se,
    paired,
    peak_rss_mb,
)


def ints(s: str) -> list[int]:
    return [int(v) for v in s.split(",") if v]


def speed(model, x, chains: int, steps: int, leapfrog: int = 10) -> None:
    """ms per annealing step of pyrolik.ais (fixed step size) against L+1 fused passes."""
    from benchmarks.bench_ais import ais_per_step, floor_per_step

    dec = model.decoder
    x_all, x = x, x[:100]
    x_rep = x.repeat(chains, 1)
    ais_per_step(model, x, 3, chains, leapfrog)  # warm-up
    a = floor_per_step(dec, x_rep, leapfrog, "cpu")
    b = ais_per_step(model, x, steps, chains, leapfrog)
    a2 = floor_per_step(dec, x_rep, leapfrog, "cpu")
    floor = 0.5 * (a + a2)
    print(f"speed: {len(x)} examples x {chains} chains, L={leapfrog}: floor {1e3 * floor:.1f} ms/step "
          f"(L+1 fused passes), pyrolik.ais {1e3 * b:.1f} ms/step, ratio {b / floor:.2f}; "
          f"{1e3 * b / (len(x) * chains / 1000):.0f} ms per step per 1000 example x chain pairs")
    print("scaling: rows = examples x chains -> ms per step, us per row-step")
    for n in (25, 100, 400):  # 250, 1000, 4000 rows when x has 400 examples
        n = min(n, len(x_all))
        t = ais_per_step(model, x_all[:n], max(5, steps // 4), chains, leapfrog)
        print(f"  {n * chains:5d} rows: {1e3 * t:8.1f} ms/step, {1e6 * t / (n * chains):7.1f} us/row")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("data_dir", nargs="?", default=None)
    p.add_argument("--checkpoint", default=str(CHECKPOINTS / "iwae_mnist.pt"))
    p.add_argument("--train-args", default="--epochs 4 --batch-size 100 --particles 5 --threads 1",
                   help="models.training.train_mnist arguments used when the checkpoint is absent")
    p.add_argument("--num-test", type=int, default=100, help="first n test images")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--ais-steps", default="100,500")
    p.add_argument("--enc-steps", default="10,50")
    p.add_argument("--iwae-k", default="1,10,100,1000,5000")
    p.add_argument("--speed-steps", type=int, default=20, help="0 skips the speed figures")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1 is fastest on a loaded 2-core machine)")
    p.add_argument("--quick", action="store_true", help="tiny settings for the slow test")
    p.add_argument("--plot", default=str(FIGURES / "mnist_iwae_fig2c.png"))
    args = p.parse_args(argv)
    if args.quick:
        args.num_test, args.chains = 10, 2
        args.ais_steps, args.enc_steps, args.iwae_k = "20,100", "3,10", "1,10,100"
        args.speed_steps = 0
    data_dir = data_dir_or_exit(args.data_dir, "binarized_mnist.npz")
    torch.set_num_threads(args.threads)

    model = load_or_train("iwae", Path(args.checkpoint), data_dir, args.train_args.split())
    hist = model.meta.get("history", {})
    print(f"model: {args.checkpoint}; trained {hist.get('num_epochs', '?')} epochs, "
          f"{hist.get('num_steps', '?')} steps, {hist.get('seconds', float('nan')):.0f} s; "
          f"final train loss {hist.get('losses', [float('nan')])[-1]:.2f}, "
          f"valid loss {(hist.get('valid_losses') or [float('nan')])[-1]:.2f} (negative bound, nats)")
    from pyrolik.io.datasets import load_binarized_mnist

    x = load_binarized_mnist(data_dir, dtype=torch.float32).test[: args.num_test]
    print(f"evaluated on the first {len(x)} of the 10,000 binarized MNIST test images; {load_avg()}")
    claims = Claims()
    rows = []  # (estimator, budget, mean, se, seconds, per-example tensor)
    for k in ints(args.iwae_k):
        r = pyrolik.iwae(model, x, model.guide, num_samples=k, seed=0, progress=False,
                         chunk_size=min(k, 500))
        rows.append(("IWAE bound", k, *mean_se(r.log_likelihood), r.wall_time, r.log_likelihood))
    for name, steps, init in [("AIS", ints(args.ais_steps), None),
                              ("AIS+encoder", ints(args.enc_steps), model.guide)]:
        for t in steps:
            r = pyrolik.ais(model, x, num_steps=t, num_chains=args.chains, init=init, seed=0,
                            progress=False)
            rows.append((name, t, *mean_se(r.log_likelihood), r.wall_time, r.log_likelihood))
            acc = float(r.acceptance_rate.mean())
            print(f"  {name} {t} steps: acceptance {acc:.2f}", flush=True)
    print("\n| estimator | budget | mean log p(x) (nats) | s.e. over examples | seconds |")
    print("|---|---|---|---|---|")
    for name, b, m, se, s, _ in rows:
        unit = "samples" if name == "IWAE bound" else "steps"
        print(f"| {name} | {b} {unit} | {m:.2f} | {se:.2f} | {s:.1f} |")
    best_iwae = [r for r in rows if r[0] == "IWAE bound"][-1]
    ais_rows = [r for r in rows if r[0] == "AIS"]
    enc_rows = [r for r in rows if r[0] == "AIS+encoder"]
    best_ais = ais_rows[-1]
    d, se = paired(best_ais[5], best_iwae[5])
    print(f"\nAIS ({best_ais[1]} steps) - IWAE bound (k={best_iwae[1]}): {d:.2f} +- {se:.2f} nats "
          f"(paper, 10,000 test images: AIS 1000 dist -85.68 vs IWAE k=10,000 -86.90: +1.22)")
    claims.check(f"AIS at {best_ais[1]} steps is not below the IWAE bound at k={best_iwae[1]} "
                 f"(diff {d:.2f} +- {se:.2f})", d > -2 * se)
    tenth = [r for r in enc_rows if r[1] * 10 <= best_ais[1]]
    if tenth:
        enc = tenth[-1]
        d2, se2 = paired(enc[5], best_ais[5])
        print(f"AIS+encoder ({enc[1]} steps) - AIS ({best_ais[1]} steps): {d2:.2f} +- {se2:.2f} nats "
              f"(paper: -85.754 at 100 vs -85.679 at 1000: -0.08)")
        claims.check(f"AIS+encoder at {enc[1]} steps reaches AIS at {best_ais[1]} steps within "
                     f"max(0.5, 2 s.e.) (diff {d2:.2f} +- {se2:.2f})", d2 > -max(0.5, 2 * se2))
    print(f"peak RSS after the estimates: {peak_rss_mb():.0f} MiB")
    plot(rows, args.plot, len(x))
    if args.speed_steps:
        speed(model, load_binarized_mnist(data_dir, dtype=torch.float32).test[:400], 10,
              args.speed_steps)
    claims.finish()


def plot(rows, path: str, n: int) -> None:
    """Figure 2(c): estimate against wall time, per estimator."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name, color in (("IWAE bound", "tab:green"), ("AIS", "tab:blue"), ("AIS+encoder", "tab:red")):
        rr = [r for r in rows if r[0] == name]
        if not rr:
            continue
        s = [max(r[4], 1e-2) for r in rr]
        m = [r[2] for r in rr]
        ax.plot(s, m, "o-", color=color, label=name)
        for r, si, mi in zip(rr, s, m, strict=True):
            ax.annotate(str(r[1]), (si, mi), fontsize=7, xytext=(3, -9), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("wall time [s] (2 shared CPU cores)")
    ax.set_ylabel("mean log p(x) [nats]")
    ax.set_title(f"IWAE, binarized MNIST, {n} test images (fig. 2c); s.e. over "
                 f"examples {rows[-1][3]:.1f} (shared)", fontsize=8)
    ax.legend(frameon=False, fontsize=8)
    lo = min(r[2] for r in rows if r[1] >= 10 or r[0] != "IWAE bound")
    hi = max(r[2] for r in rows)
    ax.set_ylim(lo - 0.5, hi + 0.5)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
