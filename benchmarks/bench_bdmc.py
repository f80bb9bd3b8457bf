r"""Issue 17: BDMC gap and wall time at equal budgets on the hard reference model, every cost counted.

The reference model is the binarized-MNIST 50-200-200-784 ELU IWAE of ``train_reference.py``. On
``--examples`` examples simulated from it (``pyrolik.simulate``, seed 0) each configuration runs
BDMC with ``--chains`` chains, ``--steps`` annealing steps of ``--leapfrog`` leapfrog steps, float32,
``--threads`` torch threads. Configurations run ``--repeats`` times each, in alternating order
(fair under shared load), with seeds 1, 2, ...; the gap is averaged over all runs (its standard error
over examples x runs), the wall time is the median.

Costs are counted per example: gradient evaluations of the estimating chains (2 x chains x steps x L
for BDMC) *plus the pilot's* (its transitions x its chains x L), and wall time, pilot included.
``ratio`` is the median wall time over that of the fixed-step-size run, ``floor`` the time per annealing
step over that of L + 1 fused forward+backward decoder passes at the run's batch (hand-written
torch). BlackJAX (``pip install .[bench]``; skipped when absent) runs tempered SMC with resampling off
on the same examples and decoder weights, its log-weights kept per chain (``_blackjax_peer.py``);
its wall time excludes compilation (printed apart).

    PYTHONPATH=. python benchmarks/bench_bdmc.py --configs default,fixed,blackjax

Configurations (``--configs``, comma-separated): ``default`` (``HMC()`` and the default schedule),
``fixed`` (``HMC(adapt=None, step_size=0.1, step_jitter=0)``, sigmoid: the fixed-step-size run the
time ratio refers to), ``fixed-jitter``, ``pilot065`` (the default before issue 17: pilot on all
chains aiming at acceptance 0.65, no jitter, sigmoid), ``pilot90-sigmoid``, ``pilot90-adaptive``,
``default-encoder`` / ``pilot065-encoder`` / ``fixed-encoder`` (the same with ``init=model.guide``),
and ``blackjax``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import _blackjax_peer as peer  # noqa: E402

if "--threads" in sys.argv:
    peer.configure_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
else:
    peer.configure_threads(1)

import torch  # noqa: E402

import pyrolik  # noqa: E402
from benchmarks._common import hand_value_and_grad, interleaved, machine  # noqa: E402
from benchmarks._mnist import load_avg  # noqa: E402

# name -> (kernel for L leapfrog steps, schedule); "default" is whatever HMC() and the estimators'
# default schedule are
LIBRARY = {
    "default": (lambda L: pyrolik.HMC(num_leapfrog=L), None),
    "fixed": (lambda L: pyrolik.HMC(num_leapfrog=L, adapt=None, step_size=0.1, step_jitter=0.0),
              "sigmoid"),
    "fixed-jitter": (lambda L: pyrolik.HMC(num_leapfrog=L, adapt=None, step_size=0.1), "sigmoid"),
    # the default before issue 17: pilot on all chains, target acceptance 0.65, no jitter, sigmoid
    "pilot065": (lambda L: pyrolik.HMC(num_leapfrog=L, target_accept=0.65, pilot_chains=None,
                                       step_jitter=0.0), "sigmoid"),
    "pilot90-sigmoid": (lambda L: pyrolik.HMC(num_leapfrog=L), "sigmoid"),
    "pilot90-adaptive": (lambda L: pyrolik.HMC(num_leapfrog=L), "adaptive"),
}
# the same on the encoder path (AIS+encoder: f0 = the IWAE's guide q(z | x))
ENCODER = {"default-encoder": "default", "pilot065-encoder": "pilot065", "fixed-encoder": "fixed"}

def run_library(name, model, data, args, seed):
    encoder = name in ENCODER
    make, schedule = LIBRARY[ENCODER.get(name, name)]
    extra = {} if schedule is None else {"schedule": schedule}
    if encoder:
        extra["init"] = model.guide
    t0 = time.perf_counter()
    r = pyrolik.bdmc(model, data, num_steps=args.steps, num_chains=args.chains,
                     kernel=make(args.leapfrog), seed=seed, progress=False, **extra)
    wall = time.perf_counter() - t0
    settings = r.lower.settings  # each leg records its own chains' cost; the pilot runs once
    pilot = settings["pilot_gradient_evals_per_example"]
    run = 2 * settings["gradient_evals_per_example"]
    return {"lower": r.lower.log_likelihood, "upper": r.upper.log_likelihood, "wall": wall,
            "grads": run + pilot, "pilot_grads": pilot, "schedule": settings["schedule"],
            "acc": float(r.lower.acceptance_rate.mean())}


def run_blackjax(name, model, data, args, seed):
    t0 = time.perf_counter()
    out = peer.bdmc(model.decoder, data.x.numpy(), data.latents["z"].numpy(),
                    num_chains=args.chains, betas=pyrolik.schedules.sigmoid(args.steps).numpy(),
                    step_size=0.1, num_leapfrog=args.leapfrog, seed=seed)
    return {"lower": torch.as_tensor(out["lower"]), "upper": torch.as_tensor(out["upper"]),
            "wall": out["run_s"], "compile": out["compile_s"], "total": time.perf_counter() - t0,
            "grads": 2 * args.chains * out["grads_per_chain"], "pilot_grads": 0, "acc": float("nan")}


def floor_per_step(model, data, args) -> float:
    """Seconds of L + 1 fused forward+backward decoder passes at the BDMC batch (2 x chains x n)."""
    x = data.x.repeat(2 * args.chains, 1)
    fn = hand_value_and_grad(model.decoder, x)
    z = torch.randn(x.shape[0], model.latent_dim)

    def step():
        for _ in range(args.leapfrog + 1):
            fn(z)

    return interleaved({"floor": step}, repeats=5, warmup=1)["floor"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default=str(HERE / "checkpoints" / "reference_iwae.pt"))
    p.add_argument("--examples", type=int, default=100)
    p.add_argument("--chains", type=int, default=10)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--leapfrog", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--configs", default="default,fixed,blackjax")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from pyrolik_models import load

    model = load("iwae", args.checkpoint, dtype=torch.float32)
    meta = getattr(model, "meta", {})
    data = pyrolik.simulate(model, args.examples, data_shape=(784,), seed=0)
    names = [c for c in args.configs.split(",") if c]
    if "blackjax" in names and peer.available() is None:
        print("SKIP blackjax: jax/blackjax not importable (pip install .[bench])")
        names.remove("blackjax")
    print(f"model {args.checkpoint} (epochs {meta.get('epochs')}, "
          f"{ {k: v for k, v in meta.items() if k.startswith('test_')} }); "
          f"{args.examples} simulated examples x {args.chains} chains, {args.steps} sigmoid steps "
          f"x {args.leapfrog} leapfrog, float32; {machine()}; {peer.available() or 'no jax'}",
          flush=True)
    print(f"load before: {load_avg()}", flush=True)
    runners = {**{k: run_library for k in [*LIBRARY, *ENCODER]}, "blackjax": run_blackjax}
    results: dict[str, list[dict]] = {n: [] for n in names}
    order = list(names)
    for rep in range(args.repeats):
        for name in order:
            out = runners[name](name, model, data, args, seed=rep + 1)
            results[name].append(out)
            gap = float((out["upper"] - out["lower"]).mean())
            print(f"  run {rep + 1} {name}: gap {gap:.3f}, {out['wall']:.1f} s", flush=True)
        order.reverse()
    floor = floor_per_step(model, data, args)
    print(f"load after: {load_avg()}")
    ref = statistics.median(r["wall"] for r in results["fixed"]) if "fixed" in results else None
    print(f"\nfloor: {args.leapfrog + 1} fused decoder passes at batch "
          f"{2 * args.chains * args.examples}: {floor * 1e3:.1f} ms per annealing step")
    head = (f"{'config':24s} {'lower':>8s} {'upper':>8s} {'gap':>6s} {'+-se':>5s} {'acc':>5s} "
            f"{'grads/ex':>9s} {'pilot':>6s} {'wall s':>7s} {'ratio':>6s} {'floor':>6s}")
    print(head)
    for name, runs in results.items():
        lower = torch.stack([r["lower"] for r in runs]).double()
        upper = torch.stack([r["upper"] for r in runs]).double()
        gaps = (upper - lower).mean(0)  # per example, averaged over runs
        se = float(gaps.std() / math.sqrt(gaps.numel()))
        wall = statistics.median(r["wall"] for r in runs)
        ratio = f"{wall / ref:.2f}" if ref else "-"
        per_step = wall / args.steps / floor
        print(f"{name:24s} {float(lower.mean()):8.2f} {float(upper.mean()):8.2f} "
              f"{float(gaps.mean()):6.3f} {se:5.3f} {statistics.mean(r['acc'] for r in runs):5.2f} "
              f"{runs[0]['grads']:9d} {runs[0]['pilot_grads']:6d} {wall:7.1f} {ratio:>6s} "
              f"{per_step:6.2f}")
        if name == "blackjax":
            print(f"{'':24s} (compile {statistics.median(r['compile'] for r in runs):.1f} s "
                  "not counted; its transitions cost L + 1 gradients)")
    print(f"\ncommand: python benchmarks/bench_bdmc.py {' '.join(argv or sys.argv[1:])}")
    print(f"threads: torch {torch.get_num_threads()}, XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}")


if __name__ == "__main__":
    main()
