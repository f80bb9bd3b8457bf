"""Non-finite proposals of the default kernel on a stiff linear-Gaussian target (posterior sd 0.1).

``LinearGaussian.random(5, 2, s=0.3)``: posterior sd 0.10-0.17. For each seed, 20 simulated
examples x 8 chains x 200 steps of ``pyrolik.ais`` with ``HMC()``; prints the divergent (rejected,
non-finite or exploding) proposals per run and the mean error against the exact log p(x) with its
standard error. Run it on two checkouts to compare kernels.

    PYTHONPATH=. python benchmarks/stiff_pilot.py --seeds 6
"""

from __future__ import annotations

import argparse

import torch

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=6)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    lg = LinearGaussian.random(5, 2, s=0.3, seed=0, dtype=torch.float64)
    rows = []
    for seed in range(args.seeds):
        sim = pyrolik.simulate(lg, 20, data_shape=(5,), seed=seed, dtype=torch.float64)
        r = pyrolik.ais(lg, sim.x, num_steps=200, num_chains=8, seed=seed, progress=False)
        err = float((r.log_likelihood - lg.exact_log_marginal(sim.x)).mean())
        se = float(r.mcse.pow(2).sum().sqrt() / 20)
        rows.append((int(r.num_divergent.sum()), err, se))
        print(f"seed {seed}: {rows[-1][0]} divergent proposals of 32000, error {err:+.3f} +- {se:.3f}")
    n = len(rows)
    print(f"mean: {sum(r[0] for r in rows) / n:.1f} divergent per run, error "
          f"{sum(r[1] for r in rows) / n:+.3f}")


if __name__ == "__main__":
    main()
