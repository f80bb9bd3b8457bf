"""Benchmark: all (n, seed) probes of a loss-data curve trained as one batched model vs one by one.

Both runs use the same data order, initialisation, Adam settings and number of steps
(`pyrolik.curves.probes.train_probes` vs `tests/curves/reference.py`'s `train_probes_loop`); the script checks that they end at
the same parameters, then prints the wall-clock times and their ratio, measured side by side in
one run (interleaved, best of ``--repeats``).

    PYTHONPATH=. python benchmarks/bench_curves.py --dataset digits
    PYTHONPATH=. python benchmarks/bench_curves.py --dataset mnist --data-dir ../shared/data

``--dataset mnist`` uses the 10,000 MNIST test images (8,000 training pool, 2,000 validation),
from ``--data-dir`` or ``$PYROLIK_DATA``; it is skipped with a message when they are absent.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch

from pyrolik.curves import default_lr, default_sizes, train_valid_split
from pyrolik.curves.probes import (
    evaluate_probes,
    init_probes,
    make_probe_set,
    train_probes,
)
from pyrolik.io.datasets import find_data_dir, load_digits, load_mnist_test
from tests.curves.reference import train_probes_loop


def load(dataset: str, data_dir: str | None):
    if dataset == "digits":
        x, y = load_digits(dtype=torch.float32)
        return train_valid_split(x, y, valid_size=0.2, seed=0)
    found = find_data_dir(data_dir)
    if found is None:
        return None
    images, labels = load_mnist_test(found)
    x = torch.as_tensor(images, dtype=torch.float32) / 255.0
    y = torch.as_tensor(labels.astype(np.int64))
    return train_valid_split(x, y, valid_size=2000, seed=0)


def timed(train_fn, *args, sync, **kwargs):
    t0 = time.perf_counter()
    out = train_fn(*args, **kwargs)
    sync()
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=["digits", "mnist"], default="digits")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--probes", nargs="+", default=["linear", "mlp"])
    parser.add_argument("--num-sizes", type=int, default=10)
    parser.add_argument("--num-seeds", type=int, default=10)
    parser.add_argument("--num-steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    split = load(args.dataset, args.data_dir)
    if split is None:
        print("MNIST test set not found: pass --data-dir or set PYROLIK_DATA; skipped")
        return
    (x, y), (xv, yv) = split
    x, xv = x.reshape(len(x), -1), xv.reshape(len(xv), -1)
    mean, scale = x.mean(0), x.var(0).mean().sqrt()  # as loss_data_curve(standardize=True)
    dev = torch.device(args.device)
    x, xv = ((x - mean) / scale).to(dev), ((xv - mean) / scale).to(dev)
    y, yv = y.to(dev), yv.to(dev)
    sizes = torch.as_tensor(default_sizes(len(x), args.num_sizes))
    g = torch.Generator().manual_seed(0)
    probe_set = make_probe_set(len(x), sizes, args.num_seeds, g)
    num_probes = len(probe_set.sizes)
    print(f"{args.dataset}: pool {tuple(x.shape)}, validation {len(xv)}, sizes {sizes.tolist()}")
    print(f"{num_probes} probes = {len(sizes)} sizes x {args.num_seeds} seeds; "
          f"{args.num_steps} Adam steps, batch {args.batch_size}; float32; "
          f"torch {torch.__version__}, {args.threads} threads, {args.device}, "
          f"{platform.processor() or platform.machine()}, load average {os.getloadavg()[0]:.1f}")

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for probe in args.probes:
        init = init_probes(probe, probe_set.seeds, x.shape[1], 10, hidden=args.hidden,
                           generator=g, dtype=torch.float32)
        init = {k: v.to(dev) for k, v in init.items()}
        kw = dict(num_steps=args.num_steps, batch_size=args.batch_size,
                  lr=default_lr(probe, x.shape[1]), weight_decay=1e-3)
        best_b = best_l = float("inf")
        for _ in range(args.repeats):  # interleaved, so both see the same machine load
            tb, pb = timed(train_probes, x, y, probe_set, init, sync=sync, **kw)
            tl, pl = timed(train_probes_loop, x, y, probe_set, init, sync=sync, **kw)
            best_b, best_l = min(best_b, tb), min(best_l, tl)
        diff = max((pb[k] - pl[k]).abs().max().item() for k in pb)
        loss_b, _ = evaluate_probes(pb, xv, yv)
        loss_l, _ = evaluate_probes(pl, xv, yv)
        dloss = (loss_b - loss_l).abs().max().item()
        print(f"  {probe:6s} batched {best_b:7.2f} s | loop {best_l:7.2f} s | "
              f"loop / batched = {best_l / best_b:5.2f}x | max |param diff| {diff:.1e}, "
              f"max |val loss diff| {dloss:.1e} nats (float32)", flush=True)


if __name__ == "__main__":
    main()
