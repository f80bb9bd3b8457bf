"""The one-command demo: evaluate small digits models with every estimator, and check AIS with BDMC.

    python -m pyrolik demo [--output DIR] [--quick]

It needs no download: scikit-learn ships the 1,797 8x8 digits and ``models/checkpoints`` ships a VAE,
a GAN and a GMMN trained on them (``models/train_digits.py`` reproduces them; ``docs/models.md``
says how). For each model it estimates log p(x) of held-out test digits with AIS (prior path; the
VAE also along its encoder path), IWAE (VAE), likelihood weighting and KDE (bandwidth chosen on
validation digits), and runs BDMC on data simulated from the model. It prints one table and writes
every result as netCDF plus a few PNG plots to the output folder.

Units: the digits are dequantized grey levels ``(k + u) / 17`` in [0, 1]^64; ``log p(x)`` is in nats
per image of that continuous data, ``bits/dim`` is ``-log p(x) / (64 ln 2)`` of it, and
``bits/dim (k)`` upper-bounds the NLL of the integer grey levels ``k`` in 0..16:
``-log P(k) <= -log p(x) + 64 log 17`` (dequantization, Theis et al. 2016).
"""

from __future__ import annotations

import argparse
import importlib
import math
import time
from pathlib import Path

import pandas as pd
import torch

import pyrolik

__all__ = ["run", "main"]

PIXELS = 64
LEVELS = 17  # digits grey levels 0..16


def _models():
    try:
        import pyrolik_models as models
    except ImportError:  # a source checkout run without installing
        import models
    return models


def _row(model: str, result, seconds: float, gap: float | None = None) -> dict:
    ll = result.mean
    return {
        "model": model,
        "estimator": result.method + ("+encoder" if getattr(result, "path", "") == "guide" else ""),
        "bound": result.bound or "none",
        "log p(x) [nats]": ll,
        "stderr": result.stderr,
        "MCSE": float(result.mcse.mean()) if result.mcse is not None else math.nan,
        "bits/dim": -ll / (PIXELS * math.log(2)),
        "bits/dim (k)": (-ll + PIXELS * math.log(LEVELS)) / (PIXELS * math.log(2)),
        "BDMC gap [nats]": math.nan if gap is None else gap,
        "seconds": seconds,
    }


def run(
    output: str | Path = "pyrolik-demo-output",
    *,
    num_examples: int = 100,
    num_steps: int = 300,
    num_chains: int = 8,
    num_simulated: int = 20,
    seed: int = 0,
    quick: bool = False,
    progress: bool = True,
    log=print,
) -> pd.DataFrame:
    """Run the demo; return the table (also written to ``output/summary.csv``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if quick:
        num_examples, num_steps, num_chains, num_simulated = 10, 30, 4, 5
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    models = _models()
    train_digits = importlib.import_module(models.__name__ + ".train_digits")
    split = train_digits.digits_split(dtype=torch.float32)  # the split the checkpoints used
    x, valid = split.test[:num_examples], split.valid[:200]
    hmc = pyrolik.HMC(num_leapfrog=10)
    common = dict(seed=seed, progress=progress)
    rows, figs = [], {}
    for kind in ("vae", "gan", "gmmn"):
        model = models.load(kind, dtype=torch.float32)
        name = kind.upper()
        log(f"[{name}] sigma = {model.sigma:g} (chosen on validation digits); "
            f"{num_examples} test digits, {num_chains} chains, {num_steps} annealing steps")
        t0 = time.perf_counter()
        sandwich = pyrolik.bdmc(model, num_simulated, data_shape=(PIXELS,), num_steps=num_steps,
                                num_chains=num_chains, kernel=hmc, **common)
        pyrolik.save(sandwich, out / f"{kind}_bdmc.nc")
        log(f"[{name}] BDMC on {num_simulated} simulated digits: gap {sandwich.gap:.3f} "
            f"+- {sandwich.gap_stderr:.3f} nats ({time.perf_counter() - t0:.1f} s)")
        results = []
        t0 = time.perf_counter()
        ais = pyrolik.ais(model, x, num_steps=num_steps, num_chains=num_chains, kernel=hmc,
                          **common)
        results.append((ais, time.perf_counter() - t0, sandwich.gap))
        if kind == "vae":
            t0 = time.perf_counter()
            enc = pyrolik.ais(model, x, num_steps=max(3, num_steps // 10), num_chains=num_chains,
                              kernel=hmc, init=model.guide, **common)
            results.append((enc, time.perf_counter() - t0, None))
            t0 = time.perf_counter()
            iw = pyrolik.iwae(model, model.guide, x, num_samples=100 if quick else 1000, **common)
            results.append((iw, time.perf_counter() - t0, None))
        t0 = time.perf_counter()
        lw = pyrolik.likelihood_weighting(model, x, num_samples=500 if quick else 5000, **common)
        results.append((lw, time.perf_counter() - t0, None))
        t0 = time.perf_counter()
        samples = model.sample(1000 if quick else 5000, torch.Generator().manual_seed(seed))
        grid = torch.logspace(math.log10(0.02), math.log10(0.5), 12).tolist()
        kde = pyrolik.kde(samples, x, bandwidth=grid, validation=valid, progress=progress)
        results.append((kde, time.perf_counter() - t0, None))
        for result, seconds, gap in results:
            suffix = result.method + ("_encoder" if getattr(result, "path", "") == "guide" else "")
            pyrolik.save(result, out / f"{kind}_{suffix}.nc")
            rows.append(_row(name, result, seconds, gap))
            for w in result.warnings():
                log(f"[{name}] {result.method}: {w}")
        if kind == "vae":
            figs["bdmc_vae.png"] = pyrolik.diagnostics.plots.plot_bdmc(sandwich).figure
            figs["diagnostics_vae_ais.png"] = pyrolik.diagnostics.plots.plot_diagnostics(ais)
        if kind == "gan":
            figs["posterior_gan.png"] = pyrolik.plot_posterior_decodings(
                ais, lambda lat, m=model: m.decode(lat["z"]), examples=range(min(4, num_examples)),
                num_samples=8, image_shape=(8, 8))
    table = pd.DataFrame(rows)
    table.to_csv(out / "summary.csv", index=False)
    figs["estimates.png"] = _plot_estimates(table, plt)
    for fname, fig in figs.items():
        fig.savefig(out / fname, dpi=110, bbox_inches="tight")
        plt.close(fig)
    return table


def _plot_estimates(table: pd.DataFrame, plt):
    """Each model's estimates side by side, with 2-SE bars: KDE's place among them is the lesson."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    estimators = list(dict.fromkeys(table["estimator"]))
    width = 0.8 / len(estimators)
    for i, est in enumerate(estimators):
        sub = table[table["estimator"] == est]
        pos = [list(dict.fromkeys(table["model"])).index(m) + (i - len(estimators) / 2) * width
               for m in sub["model"]]
        ax.bar(pos, sub["log p(x) [nats]"], width, yerr=2 * sub["stderr"], label=est, align="edge")
    models = list(dict.fromkeys(table["model"]))
    ax.set_xticks(range(len(models)), models)
    ax.set_ylabel("mean log p(x) [nats / image]")
    ax.set_title("held-out digits: AIS vs IWAE vs likelihood weighting vs KDE")
    ax.axhline(0, color="k", lw=0.5)
    ax.legend(frameon=False, fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of the demo (``python -m pyrolik demo``)."""
    p = argparse.ArgumentParser(prog="pyrolik demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default="pyrolik-demo-output", help="folder for netCDF files and plots")
    p.add_argument("--examples", type=int, default=100, help="held-out test digits to evaluate")
    p.add_argument("--steps", type=int, default=300, help="annealing steps of AIS and BDMC")
    p.add_argument("--chains", type=int, default=8, help="AIS chains per example")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny settings (a smoke test, ~20 s)")
    p.add_argument("--quiet", action="store_true", help="no progress bars or stage messages")
    args = p.parse_args(argv)
    start = time.perf_counter()
    table = run(args.output, num_examples=args.examples, num_steps=args.steps,
                num_chains=args.chains, seed=args.seed, quick=args.quick,
                progress=not args.quiet, log=(lambda *a: None) if args.quiet else print)
    with pd.option_context("display.width", 160, "display.max_columns", 20,
                           "display.float_format", "{:.3f}".format):
        print(table.to_string(index=False))
    print(f"\nlog p(x): nats per 8x8 digit (dequantized to [0,1]); bits/dim (k): bound on the NLL of "
          f"the integer grey levels. Forward AIS is a stochastic lower bound whose error on data "
          f"like the model's is bounded by the BDMC gap; KDE is no bound at all.\n"
          f"Results (netCDF) and plots in {Path(args.output).resolve()} "
          f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
