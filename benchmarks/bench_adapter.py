"""Issue 2: the adapter's fused value-and-gradient against the same decoder written by hand.

50-200-200-784 ELU decoder, Bernoulli observations, batch 1000 (100 examples x 10 chains). All sides
compute log p(z), log p(x|z) and their two gradients; timed in alternation in one run. The adapter is
timed as it runs by default (replaying its recorded evaluation, ``pyrolik/model/reuse.py``) and running the
Pyro program at every call (``replay=False``, ``PYROLIK_REPLAY=0``).

    python benchmarks/bench_adapter.py [--dtype float64] [--batch 1000] [--also 4000]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks._common import decoder, hand_value_and_grad, interleaved, machine, pyro_model
from pyrolik.model.target import make_target


def compare(batch: int, dtype, device: str, repeats: int) -> dict[str, float]:
    """Median seconds per value-and-gradient of the hand-written potential and of the adapter."""
    dec = decoder().to(dtype).to(device)
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(batch // 10, 784, generator=g) < 0.13).to(dtype).to(device)
    target = make_target(pyro_model(dec), x, num_chains=10, replay=True)
    eager = make_target(pyro_model(dec), x, num_chains=10, replay=False)
    u = torch.randn(target.layout.rows, 50, generator=g, dtype=dtype).to(device)
    hand = hand_value_and_grad(dec, target.program.x)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def run_hand():
        hand(u)
        sync()

    def run_adapter():
        target.value_and_grad(u)
        sync()

    def run_eager():
        eager.value_and_grad(u)
        sync()

    out = interleaved({"hand": run_hand, "adapter": run_adapter, "eager": run_eager}, repeats=repeats)
    if target.evaluation("prior") != "replay":
        raise RuntimeError(f"the adapter did not replay: {target.evaluation('prior')}")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=1000, help="the batch of the target (issue 2)")
    p.add_argument("--also", default="4000",
                   help="further batch sizes, comma-separated ('' for none): the adapter's extra "
                        "cost is constant per call, so its share falls with the batch")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--repeats", type=int, default=40)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    print(f"machine: {machine()}")
    out = {}
    for batch in [args.batch] + [int(b) for b in args.also.split(",") if b]:
        t = compare(batch, dtype, args.device, args.repeats)
        out[batch] = t
        print(f"batch {batch}, {args.dtype}, device {args.device}")
        print(f"hand-written torch : {1e3 * t['hand']:.2f} ms per value-and-gradient")
        print(f"pyrolik adapter    : {1e3 * t['adapter']:.2f} ms per value-and-gradient "
              f"({1e3 * (t['adapter'] - t['hand']):+.2f} ms; replaying its recording, the default)")
        print(f"  program each call: {1e3 * t['eager']:.2f} ms ({1e3 * (t['eager'] - t['hand']):+.2f} ms; "
              "replay=False)")
        print(f"ratio adapter/hand : {t['adapter'] / t['hand']:.3f}  (target <= 1.05); "
              f"program each call / hand: {t['eager'] / t['hand']:.3f}")
    return out[args.batch]


if __name__ == "__main__":
    main()
