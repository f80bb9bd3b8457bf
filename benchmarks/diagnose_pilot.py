r"""Issue 17: why the pilot of before (target acceptance 0.65, no jitter) made the BDMC gap worse.

On examples simulated from the reference model, BDMC runs with three kernels at the same budget,
recording per annealing step (``_ais_lab.py``, the same HMC transition as pyrolik's):

- ``pilot065``: the pilot table of ``HMC(target_accept=0.65, pilot_chains=None, step_jitter=0)``;
- ``fixed``: step size 0.1 throughout, no jitter;
- ``pilot90+jitter``: the pilot table of ``HMC()`` (acceptance 0.9 under jitter 0.5), with jitter.

All three on the sigmoid schedule, so that only the transitions differ. Printed per temperature:
the median step size, the acceptance, the expected squared jump in z, ``ESJD(r)``: the expected
squared jump of :math:`r = \log p(x \mid z)` over :math:`2\,\mathrm{Var}[r]` (1: a fresh draw, as
far as the AIS weights can tell), and the leapfrog rotation :math:`L\theta(\epsilon)` of a unit-scale
prior coordinate (:math:`\cos\theta = 1 - \epsilon^2/2`; :math:`L\theta \approx 2\pi` returns it to
its start). Then the BDMC gap split by ranges of :math:`\beta`: the forward chains' mean
:math:`r` lags behind the reverse chains' at the same :math:`\beta` (hysteresis), and
:math:`\sum_t \Delta\beta_t (\bar r^{rev}_t - \bar r^{fwd}_{t-1})` is the gap of the mean log-weights.

    PYTHONPATH=. python benchmarks/diagnose_pilot.py --examples 20
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import _ais_lab as lab  # noqa: E402
import torch  # noqa: E402

import pyrolik  # noqa: E402
from benchmarks._mnist import load_avg  # noqa: E402
from pyrolik.annealing.driver import run_pilot  # noqa: E402
from pyrolik.model.target import make_target  # noqa: E402


def table_plan(table, n, jitter):
    return lab.Plan(lab.table_eps_fn(table.betas, table.log_step_size, n), eps_jitter=jitter)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default=str(HERE / "checkpoints" / "reference_iwae.pt"))
    p.add_argument("--examples", type=int, default=20)
    p.add_argument("--chains", type=int, default=10)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    from pyrolik_models import load

    model = load("iwae", args.checkpoint, dtype=torch.float32)
    n, k, T = args.examples, args.chains, args.steps
    data = pyrolik.simulate(model, n, data_shape=(784,), seed=0)
    x, zp = data.x, data.latents["z"]
    betas = pyrolik.schedules.sigmoid(T)
    path = make_target(model, x, k).path("prior")
    g = torch.Generator().manual_seed(args.seed + 1000)
    old = pyrolik.HMC(target_accept=0.65, pilot_chains=None, step_jitter=0.0)
    new = pyrolik.HMC()
    plans = {
        "pilot065": table_plan(run_pilot(old.adaptation, path, old.transition, betas, g), n, 0.0),
        "fixed": lab.fixed(0.1),
        "pilot90+jitter": table_plan(run_pilot(new.adaptation, path, new.transition, betas, g), n, 0.5),
    }
    print(f"{args.checkpoint}: {n} simulated examples x {k} chains, {T} sigmoid steps x 10 "
          f"leapfrog, seed {args.seed}; {load_avg()}")
    edges = [0, 0.001, 0.01, 0.03, 0.1, 0.3, 0.6, 0.9, 1.0]
    for name, plan in plans.items():
        r = lab.bdmc(model, x, zp, k, betas.float(), plan, seed=args.seed)
        run, kn = r["run"], r["kn"]
        print(f"\n== {name}: BDMC gap {r['gap']:.3f} +- {r['gap_se']:.3f} nats "
              f"(lower {float(r['lower'].mean()):.2f}, upper {float(r['upper'].mean()):.2f})")
        print("   t    beta    eps  L*theta   acc  ESJD(z)  ESJD(r)  mean r fwd / rev")
        mr = run.mean_r.double()
        rf = mr[:, :kn].reshape(T + 1, k, n)
        rr = mr[:, kn:].reshape(T + 1, k, n).flip(0)  # index t: the reverse chains at betas[t]
        var = 0.5 * (rf.var(1) + rr.var(1)).mean(1)  # Var[r] at betas[t], both directions
        for t in (1, 5, 10, 20, 30, 40, 60, 80, 100, 130, 160, 200):
            if t > T:
                continue
            eps = float(run.eps[t - 1, :kn].median())
            theta = math.acos(max(-1.0, 1 - eps * eps / 2))
            esjd_r = float(run.jump_r[t - 1, :kn].mean()) / (2 * float(var[t]))
            print(f"{t:4d} {float(betas[t]):7.4f} {eps:6.3f} {10 * theta / (2 * math.pi):5.2f}x2pi "
                  f"{float(run.acc[t - 1, :kn].mean()):5.2f} {float(run.jump_z[t - 1, :kn].mean()):8.2f}"
                  f" {esjd_r:8.2f}  {float(rf[t].mean()):8.2f} / {float(rr[t].mean()):8.2f}")
        db = (betas[1:] - betas[:-1]).double()
        contrib = db * (rr[1:].mean((1, 2)) - rf[:-1].mean((1, 2)))
        parts = []
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            sel = (betas[1:] > a) & (betas[1:] <= b)
            parts.append(f"({a}, {b}]: {float(contrib[sel].sum()):.2f}")
        print(f"   gap of the mean log-weights {float(contrib.sum()):.2f} nats, by beta: "
              + ", ".join(parts))


if __name__ == "__main__":
    main()
