"""Issue 2: the adapter's fused value-and-gradient against the same decoder written by hand.

50-200-200-784 ELU decoder, Bernoulli observations, batch 1000 (100 examples x 10 chains). Both sides
compute log p(z), log p(x|z) and their two gradients; timed in alternation in one run.

    python benchmarks/bench_adapter.py [--dtype float64] [--batch 1000]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks._common import decoder, hand_value_and_grad, interleaved, machine, pyro_model
from pyrolik.target import make_target


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--repeats", type=int, default=40)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    dec = decoder().to(dtype).to(args.device)
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(args.batch // 10, 784, generator=g) < 0.13).to(dtype).to(args.device)
    target = make_target(pyro_model(dec), x, num_chains=10)
    u = torch.randn(target.rows, 50, generator=g, dtype=dtype).to(args.device)
    hand = hand_value_and_grad(dec, target.x)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def run_hand():
        hand(u)
        sync()

    def run_adapter():
        target.value_and_grad(u)
        sync()

    t = interleaved({"hand": run_hand, "adapter": run_adapter}, repeats=args.repeats)
    print(f"machine: {machine()}")
    print(f"batch {target.rows}, {args.dtype}, device {args.device}")
    print(f"hand-written torch : {1e3 * t['hand']:.2f} ms per value-and-gradient")
    print(f"pyrolik adapter    : {1e3 * t['adapter']:.2f} ms per value-and-gradient")
    print(f"ratio adapter/hand : {t['adapter'] / t['hand']:.3f}  (target <= 1.05)")
    return t


if __name__ == "__main__":
    main()
