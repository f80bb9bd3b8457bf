"""Cost of exporting, saving and loading an AIS result of MNIST evaluation size.

A synthetic AISResult with the shapes of a 1000-example binarized-MNIST evaluation (16 chains,
latent 50, 784 pixels, 100 recorded steps, 200-step schedule), timed side by side with annealing
steps of the real 50-200-200-784 decoder at the same batch (16k rows, 10 leapfrog steps). Prints
seconds, the file size, and export + save as a fraction of a 200-step run.

    PYTHONPATH=. python benchmarks/bench_export.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

import pyrolik
from benchmarks._common import decoder, pyro_model
from pyrolik.mcmc.step_sizes import StepSizes
from pyrolik.results import AISResult


def synthetic(n: int = 1000, k: int = 16, d: int = 50, pixels: int = 784, records: int = 100,
              steps: int = 200) -> AISResult:
    g = torch.Generator().manual_seed(0)
    lw = torch.randn(k, n, generator=g, dtype=torch.float64) - 90.0
    trace = {name: torch.rand(records, k, n, generator=g)
             for name in ("acceptance_rate", "step_size", "log_weight")}
    trace["diverging"] = torch.rand(records, k, n, generator=g) < 0.01
    trace["beta"] = torch.linspace(0, 1, records + 1)[1:].unsqueeze(1).expand(-1, k).contiguous()
    betas = torch.linspace(0, 1, steps + 1, dtype=torch.float64)
    z = torch.randn(k, n, d, generator=g)
    return AISResult(
        method="ais", log_likelihood=pyrolik.ops.stats.log_mean_exp(lw), bound="lower",
        log_weights=lw, ess=pyrolik.ops.stats.effective_sample_size(lw),
        mcse=pyrolik.ops.stats.mcse_log_mean_exp(lw), khat=torch.rand(n),
        x=(torch.rand(n, pixels, generator=g) < 0.5).float(), settings={"num_steps": steps},
        seed=0, wall_time=60.0, schedule=betas,
        step_sizes=StepSizes(betas[::5], torch.randn(len(betas[::5]), n, generator=g)),
        kernel=pyrolik.HMC(), final_state=z, latents={"z": z}, acceptance_rate=torch.rand(k, n),
        num_divergent=torch.zeros(k, n, dtype=torch.long), trace=trace,
        trace_steps=torch.arange(1, records + 1) * (steps // records),
    )


def timed(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(1)
    r = synthetic()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ais.nc"
        t_tree = timed(r.to_datatree)
        t_idata = timed(r.to_inference_data)
        t_save = timed(lambda: pyrolik.save(r, path))
        t_load = timed(lambda: pyrolik.load(path))
        size = path.stat().st_size / 2**20
    x = r.x.to(torch.float32)
    kernel = pyrolik.HMC(num_leapfrog=10, step_size=0.05, adapt=None)
    num_steps = 3
    t_ais = timed(lambda: pyrolik.ais(pyro_model(decoder()), x, num_steps=num_steps, num_chains=16,
                                      kernel=kernel, seed=0, progress=False), repeats=1)
    per_step = t_ais / num_steps
    print(f"AIS result: N=1000, K=16, d=50, 784 pixels, R=100 records; netCDF {size:.1f} MiB")
    print(f"to_datatree {t_tree:.3f} s | to_inference_data {t_idata:.3f} s | "
          f"save {t_save:.3f} s | load {t_load:.3f} s (median of 3)")
    print(f"one annealing step of the real decoder at 16k rows: {per_step:.2f} s; "
          f"to_datatree + save = {(t_tree + t_save) / per_step:.2f} steps = "
          f"{100 * (t_tree + t_save) / (200 * per_step):.3f}% of a 200-step run")


if __name__ == "__main__":
    main()
