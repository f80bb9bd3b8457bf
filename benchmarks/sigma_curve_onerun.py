"""Issue 18: the sigma curve from one AIS run against one AIS run per sigma, on the digits GAN and VAE.

Per sigma, ``pyrolik.ais(model, x, model_kwargs={"sigma": s})`` (what ``benchmarks/sigma_curve.py``
does for figure 2(a)); once, ``pyrolik.sigma_curve(model, x, sigmas)``, which anneals down to the
smallest sigma and reads every grid sigma on the way. Same examples (validation digits), chains and
base steps. Printed per sigma: both means over the examples, their paired difference with its
standard error over the examples (which holds both runs' Monte Carlo noise), and the one run's mean
MCSE; then the cost of both (wall and CPU seconds: CPU time is less sensitive to other processes on
a shared machine). With ``--bdmc``, BDMC at two grid sigmas along the one-run's betas.

Claims (exit 1 if one fails): at every sigma the two agree within 3 standard errors of the paired
difference; the one run costs less than half of the per-sigma runs (CPU time).

    PYTHONPATH=. python benchmarks/sigma_curve_onerun.py                   # GAN and VAE, 1000 steps
    PYTHONPATH=. python benchmarks/sigma_curve_onerun.py --quick
"""

from __future__ import annotations

import argparse
import math
import time

import torch

import pyrolik
from benchmarks._mnist import Claims, load_avg


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def compare(model, x, sigmas, *, steps: int, onerun_steps: int, chains: int, seed: int = 0):
    """Per-sigma AIS and the one-run curve; returns rows per sigma and the costs."""
    def per_sigma():
        return {s: pyrolik.ais(model, x, num_steps=steps, num_chains=chains, seed=seed,
                               model_kwargs={"sigma": s}, progress=False).log_likelihood.double()
                for s in sigmas}

    per, wall_p, cpu_p = _timed(per_sigma)
    curve, wall_o, cpu_o = _timed(lambda: pyrolik.sigma_curve(
        model, x, sigmas, num_steps=onerun_steps, num_chains=chains, seed=seed + 1,
        progress=False))
    n = x.shape[0]
    rows = []
    for j, s in enumerate(curve.sigmas.tolist()):
        s_key = min(sigmas, key=lambda v, s=s: abs(v - s))
        d = curve.log_likelihood[j] - per[s_key]
        rows.append({"sigma": s, "one_run": float(curve.log_likelihood[j].mean()),
                     "per_sigma": float(per[s_key].mean()), "diff": float(d.mean()),
                     "se": float(d.std() / math.sqrt(n)), "mcse": float(curve.mcse[j].mean())})
    cost = {"wall_per_sigma": wall_p, "wall_one_run": wall_o, "cpu_per_sigma": cpu_p,
            "cpu_one_run": cpu_o, "steps_per_sigma": steps * len(sigmas),
            "steps_one_run": len(curve.schedule) - 1}
    return rows, cost, curve


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="gan,vae")
    p.add_argument("--sigmas", default="0.05,0.07,0.1,0.14,0.2,0.28",
                   help="the digits models' sigma grid (models/train_digits.py SIGMA_GRID)")
    p.add_argument("--examples", type=int, default=20, help="first n validation digits")
    p.add_argument("--steps", type=int, default=1000, help="AIS steps of each per-sigma run")
    p.add_argument("--onerun-steps", type=int, default=1000, help="base steps of the one run")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--bdmc", action="store_true", help="also BDMC at the smallest and middle sigma")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.examples, args.steps, args.onerun_steps, args.chains = 4, 30, 30, 2
    torch.set_num_threads(args.threads)
    import pyrolik_models
    from pyrolik_models.training.train_digits import digits_split

    claims = Claims()
    x = digits_split(dtype=torch.float32).valid[: args.examples]
    sigmas = [float(s) for s in args.sigmas.split(",")]
    print(f"{len(x)} validation digits; sigmas {sigmas}; per-sigma AIS {args.steps} steps, one run "
          f"{args.onerun_steps} base steps (+ grid points), {args.chains} chains; {load_avg()}",
          flush=True)
    for kind in args.models.split(","):
        model = pyrolik_models.load(kind)
        rows, cost, curve = compare(model, x, sigmas, steps=args.steps,
                                    onerun_steps=args.onerun_steps, chains=args.chains)
        print(f"\n{kind}: sigma   one run  per-sigma    diff +- se   (one-run MCSE)")
        for r in rows:
            print(f"  {r['sigma']:6.3f} {r['one_run']:9.2f} {r['per_sigma']:9.2f} "
                  f"{r['diff']:8.3f} +- {r['se']:.3f}   ({r['mcse']:.3f})")
        ratio_cpu = cost["cpu_one_run"] / cost["cpu_per_sigma"]
        ratio_wall = cost["wall_one_run"] / cost["wall_per_sigma"]
        print(f"  cost: per-sigma {cost['steps_per_sigma']} steps, {cost['wall_per_sigma']:.1f} s "
              f"wall, {cost['cpu_per_sigma']:.1f} s CPU; one run {cost['steps_one_run']} steps, "
              f"{cost['wall_one_run']:.1f} s wall, {cost['cpu_one_run']:.1f} s CPU; ratio "
              f"{ratio_cpu:.3f} (CPU), {ratio_wall:.3f} (wall); {load_avg()}", flush=True)
        best = curve.best_sigma()
        opt = curve.optimal_sigma()
        print(f"  best fixed sigma on these examples {best.sigma:g}; sigma per example gains "
              f"{opt.mean_improvement:.1f} nats on average (an upper bound, not a model)")
        worst = max(abs(r["diff"]) / max(r["se"], 1e-12) for r in rows)
        claims.check(f"{kind}: one run agrees with per-sigma runs at every sigma within 3 se "
                     f"(worst {worst:.2f} se)", worst <= 3.0)
        claims.check(f"{kind}: one run costs less than half (CPU ratio {ratio_cpu:.3f})",
                     ratio_cpu < 0.5)
        if args.bdmc:
            check = [sigmas[len(sigmas) // 2], min(sigmas)]
            res = pyrolik.distortion_bdmc(model, len(x), sigmas=sigmas, check=check,
                                          data_shape=(x.shape[1],), num_steps=args.onerun_steps,
                                          num_chains=args.chains, seed=0, progress=False)
            for s, g, se in zip(res.sigmas.tolist(), res.gap.tolist(), res.gap_stderr.tolist(),
                                strict=True):
                print(f"  BDMC on {len(x)} examples simulated at sigma {s:g} along the one-run's "
                      f"betas: gap {g:.3f} +- {se:.3f} nats")
    claims.finish()


if __name__ == "__main__":
    main()
