"""Does the reported MCSE match the spread of log p(x) estimates over repeated runs, with few chains?

    PYTHONPATH=. python benchmarks/mcse_few_chains.py [--reps 300]

Each of N data points is evaluated ``reps`` times in one call (the data repeated ``reps`` times:
every copy is an independent run with its own chains), so for every point the observed standard
deviation of ``log_likelihood`` over the runs is the true sampling spread, and the reported
per-example ``mcse`` of those same runs is what a user would have seen. Printed per model,
estimator and number of chains/samples K: the ratio observed spread / RMS(reported MCSE) over the
N points (median [min, max]; 1 is right, above 1 understated), for the jackknife MCSE that results
report and for the delta method sqrt(1/ESS - 1/K) it replaced (from the same runs' log-weights),
and how often |estimate - mean estimate| <= 2 MCSE.

Models with a known answer: the linear-Gaussian model (exact marginal) and a 1-D Beta-latent model
(quadrature), AIS with 20 and 100 steps and likelihood weighting.
"""

from __future__ import annotations

import argparse
import time

import torch

import pyrolik
from benchmarks._common import machine
from models.oracles.linear_gaussian import LinearGaussian
from models.oracles.quadrature import BetaLatent
from pyrolik.ops.stats import mcse_log_mean_exp


def spread(result, reps: int, n: int) -> dict[str, torch.Tensor]:
    """Observed spread over runs, and the RMS of each MCSE, per data point."""
    est = result.log_likelihood.reshape(reps, n)
    observed = est.std(0)
    delta = mcse_log_mean_exp(result.log_weights, method="delta").reshape(reps, n)
    jack = result.mcse.reshape(reps, n)
    out = {}
    for name, m in (("jackknife", jack), ("delta", delta)):
        out[name] = observed / m.pow(2).mean(0).sqrt()
        out[name + " cover"] = ((est - est.mean(0)).abs() <= 2 * m).double().mean(0)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=300)
    p.add_argument("--points", type=int, default=20)
    p.add_argument("--chains", default="4,8,16,32,64")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    n, reps = args.points, args.reps
    lg = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0, dtype=torch.float64)
    beta = BetaLatent.random(data_dim=5, s=0.3, seed=0)
    data = {"linear-Gaussian": (lg, lg.sample(n, torch.Generator().manual_seed(1))),
            "Beta latent": (beta, beta.sample(n, torch.Generator().manual_seed(1))[0])}
    print(f"{machine()}; {n} points x {reps} runs each")
    print("ratio = observed spread / RMS(reported MCSE): 1 is right, > 1 understated\n")
    start = time.perf_counter()
    for model_name, (model, x) in data.items():
        xr = x.repeat(reps, 1)
        for how in ("AIS 20 steps", "AIS 100 steps", "likelihood weighting"):
            for k in (int(v) for v in args.chains.split(",")):
                if how.startswith("AIS"):
                    steps = int(how.split()[1])
                    r = pyrolik.ais(model, xr, num_steps=steps, num_chains=k, seed=0,
                                    kernel=pyrolik.HMC(num_leapfrog=5), progress=False)
                else:
                    r = pyrolik.likelihood_weighting(model, xr, num_samples=k, seed=0,
                                                     keep_weights=True, progress=False)
                s = spread(r, reps, n)
                line = f"{model_name:16s} {how:21s} K={k:3d}"
                for name in ("jackknife", "delta"):
                    q, c = s[name], s[name + " cover"]
                    line += (f" | {name}: {q.median():5.2f} [{q.min():5.2f}, {q.max():6.2f}]"
                             f" within 2 MCSE {c.median():.2f}")
                print(line, flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
