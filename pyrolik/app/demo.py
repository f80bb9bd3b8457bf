"""The one-command demo: evaluate small digits models with every estimator, and check AIS with BDMC.

    python -m pyrolik demo [--output DIR] [--quick | --full]

It needs no download: scikit-learn ships the 8x8 digits and ``models/checkpoints`` a VAE, a GAN and a
GMMN trained on them (``docs/models.md``). For each model it estimates log p(x) of held-out test
digits with AIS (the VAE also from its encoder), IWAE (VAE), likelihood weighting and KDE, and runs
BDMC on data simulated from the model. It prints one table with the warnings to act on under it
(the remarks counted in one line; ``--all`` prints each) and writes netCDF results and PNG plots.

Time: about 2 minutes on a busy 2-core laptop (``--threads``); ``--quick`` is a 20 s smoke test,
``--full`` about 20-30 minutes (``benchmarks/RESULTS.md``). Units: nats per image of dequantized
grey levels ``(k + u) / 17``; ``bits/dim (k)`` upper-bounds the NLL of the integer levels
(``docs/units.md``).
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch

import pyrolik
from pyrolik.app import report
from pyrolik.app.cli import _positive
from pyrolik.app.report import StageProgress
from pyrolik.execution.distributed import main_result, set_threads

__all__ = ["run", "main", "SETTINGS", "GAP_WARN"]

PIXELS = 64
LEVELS = 17  # digits grey levels 0..16
KINDS = ("vae", "gan", "gmmn")
#: A BDMC gap above this many nats means AIS has not converged at the demo's settings.
GAP_WARN = 1.0
#: The demo's sizes: default (about 2 minutes on a busy 2-core machine), quick and full.
SETTINGS = {
    "default": dict(num_examples=100, num_steps=600, num_chains=8, num_simulated=20,
                    iwae_samples=1000, lw_samples=5000, kde_samples=5000),
    "quick": dict(num_examples=10, num_steps=100, num_chains=4, num_simulated=5,
                  iwae_samples=100, lw_samples=500, kde_samples=1000),
    "full": dict(num_examples=250, num_steps=3000, num_chains=16, num_simulated=50,
                 iwae_samples=5000, lw_samples=20000, kde_samples=10000),
}
NUM_LEAPFROG = 3  # the default kernel's (pyrolik.HMC())


def _decode_z(model: Any) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    """``latents -> model.decode(latents["z"])``: a decoder model's mean image at its latents."""
    return lambda latents: model.decode(latents["z"])


def _encoder_steps(num_steps: int) -> int:
    return max(3, num_steps // 30)


def _row(model: str, result, seconds: float, gap: float | None = None) -> dict:
    ll = result.mean
    return {"model": model,
            "estimator": result.method + ("+encoder" if getattr(result, "path", "") == "guide" else ""),
            "bound": result.bound or "none", "log p(x) [nats]": ll, "stderr": result.stderr,
            "MCSE": float(result.mcse.mean()) if result.mcse is not None else math.nan,
            "bits/dim": -ll / (PIXELS * math.log(2)),
            "bits/dim (k)": (-ll + PIXELS * math.log(LEVELS)) / (PIXELS * math.log(2)),
            "BDMC gap [nats]": math.nan if gap is None else gap, "seconds": seconds}


def _plan(s: dict) -> list[tuple[str, str, str, float]]:
    """``(kind, stage, label, weight)`` per stage; weights: rows x gradients, fit to run times."""
    grad = NUM_LEAPFROG + 1
    chain_steps = s["num_chains"] * s["num_steps"] * grad
    enc_steps = _encoder_steps(s["num_steps"])
    enc = s["num_examples"] * s["num_chains"] * (enc_steps + max(20, enc_steps // 5)) * grad
    stages = [("bdmc", f"BDMC on {s['num_simulated']} simulated digits",
               3.5 * s["num_simulated"] * chain_steps),
              ("ais", "AIS from the prior", 1.2 * s["num_examples"] * chain_steps),
              ("ais+encoder", "AIS from the encoder", 1.5 * enc),  # the VAE's only
              ("iwae", "IWAE", 0.7 * s["num_examples"] * s["iwae_samples"]),  # the VAE's only
              ("lw", "likelihood weighting", s["num_examples"] * s["lw_samples"]),
              ("kde", "KDE", 10 * s["kde_samples"])]
    plan = [(kind, stage, f"{kind.upper()}: {label}", w) for kind in KINDS
            for stage, label, w in stages if kind == "vae" or stage not in ("ais+encoder", "iwae")]
    fixed = 0.02 * sum(w for *_, w in plan) / len(plan)  # tracing, recording, bookkeeping
    return [(k, st, label, w + fixed) for k, st, label, w in plan]


def run(output: str | Path = "pyrolik-demo-output", *, num_examples: int | None = None,
        num_steps: int | None = None, num_chains: int | None = None,
        num_simulated: int | None = None, seed: int = 0, quick: bool = False, full: bool = False,
        progress: bool = True) -> pd.DataFrame:
    """Run the demo; return the table (also written to ``output/summary.csv``).

    The table's ``attrs`` hold ``"warnings"`` (a list of ``(label, message)``: every estimator's
    ``warnings()``, BDMC's among them, which flags a gap above 1 nat; each message keeps its
    severity, :func:`pyrolik.exceptions.severity`) and ``"settings"``. ``progress`` shows one
    progress display on stderr for the whole run.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if quick and full:
        raise ValueError("choose --quick or --full, not both")
    s = dict(SETTINGS["quick" if quick else "full" if full else "default"])
    given = dict(num_examples=num_examples, num_steps=num_steps, num_chains=num_chains,
                 num_simulated=num_simulated)
    s.update({key: value for key, value in given.items() if value is not None})
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import pyrolik_models as models
    except ImportError:  # a source checkout run without installing
        import models  # type: ignore[no-redef]
    train_digits = importlib.import_module(models.__name__ + ".train_digits")
    split = train_digits.digits_split(dtype=torch.float32)  # the split the checkpoints used
    x, valid = split.test[:s["num_examples"]], split.valid[:200]
    s["num_examples"] = x.shape[0]  # what runs: the test split has 250
    hmc = pyrolik.HMC()
    assert hmc.num_leapfrog == NUM_LEAPFROG
    common: dict[str, Any] = dict(seed=seed, progress=False)
    annealing = dict(num_chains=s["num_chains"], kernel=hmc, **common)
    rows, figs, notes = [], {}, []
    plan = _plan(s)
    bar = StageProgress([(label, w) for *_, label, w in plan], enabled=progress,
                        name="pyrolik demo")
    loaded: dict[str, Any] = {}
    sandwich: pyrolik.results.BDMCResult | None = None
    ais: pyrolik.results.AISResult | None = None
    result: pyrolik.results.EstimateResult
    try:
        for kind, stage, _label, _w in plan:
            name = kind.upper()
            if kind not in loaded:
                loaded[kind] = models.load(kind, dtype=torch.float32)
            model = loaded[kind]
            with bar.stage():
                t0 = time.perf_counter()
                if stage == "bdmc":
                    sandwich = main_result(pyrolik.bdmc(
                        model, s["num_simulated"], data_shape=(PIXELS,), num_steps=s["num_steps"],
                        **annealing), "bdmc")
                    pyrolik.save(sandwich, out / f"{kind}_bdmc.nc")
                    notes += [(f"{name} BDMC", w) for w in sandwich.warnings()]
                    continue
                if stage == "ais":
                    result = ais = main_result(pyrolik.ais(
                        model, x, num_steps=s["num_steps"], **annealing), "ais")
                elif stage == "ais+encoder":
                    result = main_result(pyrolik.ais(
                        model, x, num_steps=_encoder_steps(s["num_steps"]), init=model.guide,
                        **annealing), "ais")
                elif stage == "iwae":
                    result = main_result(pyrolik.iwae(
                        model, x, model.guide, num_samples=s["iwae_samples"], **common), "iwae")
                elif stage == "lw":
                    result = main_result(pyrolik.likelihood_weighting(
                        model, x, num_samples=s["lw_samples"], **common), "likelihood_weighting")
                else:
                    samples = model.sample(s["kde_samples"], torch.Generator().manual_seed(seed))
                    grid = torch.logspace(math.log10(0.02), math.log10(0.5), 12).tolist()
                    result = pyrolik.kde(samples, x, bandwidth=grid, validation=valid,
                                         progress=False)
                seconds = time.perf_counter() - t0
            gap = None
            if stage == "ais":
                assert sandwich is not None  # each kind's BDMC stage runs before its AIS
                gap = sandwich.gap
            row = _row(name, result, seconds, gap)
            rows.append(row)
            suffix = result.method + ("_encoder" if stage == "ais+encoder" else "")
            pyrolik.save(result, out / f"{kind}_{suffix}.nc")
            label = f"{name} {_SHORT.get(row['estimator'], row['estimator'])}"
            notes += [(label, w) for w in result.warnings()]
            if stage == "ais" and kind == "vae":
                assert sandwich is not None and ais is not None
                figs["bdmc_vae.png"] = pyrolik.diagnostics.plots.plot_bdmc(sandwich).figure
                figs["diagnostics_vae_ais.png"] = pyrolik.diagnostics.plots.plot_diagnostics(ais)
            if stage == "ais" and kind == "gan":
                assert ais is not None
                figs["posterior_gan.png"] = pyrolik.diagnostics.plots.plot_posterior_decodings(
                    ais, _decode_z(model),
                    examples=range(min(4, s["num_examples"])), num_samples=8, image_shape=(8, 8))
    finally:
        bar.close()
    table = pd.DataFrame(rows)
    table.to_csv(out / "summary.csv", index=False)
    figs["estimates.png"] = _plot_estimates(table, plt)
    for fname, fig in figs.items():
        fig.savefig(out / fname, dpi=110, bbox_inches="tight")
        plt.close(fig)
    table.attrs["warnings"] = notes
    table.attrs["settings"] = s
    return table


def _plot_estimates(table: pd.DataFrame, plt):
    """Each model's estimates side by side, with 2-SE bars: KDE's place among them is the lesson."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    estimators = list(dict.fromkeys(table["estimator"]))
    models = list(dict.fromkeys(table["model"]))
    width = 0.8 / len(estimators)
    for i, est in enumerate(estimators):
        sub = table[table["estimator"] == est]
        pos = [models.index(m) + (i - len(estimators) / 2) * width for m in sub["model"]]
        ax.bar(pos, sub["log p(x) [nats]"], width, yerr=2 * sub["stderr"], label=est, align="edge")
    ax.set_xticks(range(len(models)), models)
    ax.set_ylabel("mean log p(x) [nats / image]")
    ax.set_title("held-out digits: AIS vs IWAE vs likelihood weighting vs KDE")
    ax.axhline(0, color="k", lw=0.5)
    ax.legend(frameon=False, fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


_SHORT = {"likelihood_weighting": "lw"}
_COLUMNS = [("model", "model", "{}"), ("estimator", "estimator", "{}"), ("bound", "bound", "{}"),
            ("log p(x)", "log p(x) [nats]", "{:.2f}"), ("stderr", "stderr", "{:.2f}"),
            ("MCSE", "MCSE", "{:.2f}"), ("bits/dim (k)", "bits/dim (k)", "{:.3f}"),
            ("BDMC gap", "BDMC gap [nats]", "{:.2f}"), ("time", "seconds", "{:.0f} s")]


#: Where the demo's folded remarks can be read in full (its output folder fills in ``{output}``).
WHERE = "pyrolik summary --all {output}/*.nc"


def format_table(table: pd.DataFrame, width: int = 80, *,
                 where: str = WHERE.format(output="pyrolik-demo-output"),
                 show_all: bool = False) -> str:
    """The demo's table in at most ``width`` columns, its warnings under it (``warning_lines``)."""

    def cell(value: Any, key: str, fmt: str) -> str:
        if isinstance(value, float) and math.isnan(value):
            return "-"
        return fmt.format(_SHORT.get(value, value) if key == "estimator" else value)

    cells = [[cell(row[key], key, fmt) for _, key, fmt in _COLUMNS] for _, row in table.iterrows()]
    heads = [h for h, _, _ in _COLUMNS]
    widths = [max([len(h)] + [len(c[j]) for c in cells]) for j, h in enumerate(heads)]
    left = {0, 1, 2}
    sep = "  " if sum(widths) + 2 * (len(widths) - 1) <= width else " "

    def fmt_line(parts):
        return sep.join(p.ljust(w) if j in left else p.rjust(w)
                        for j, (p, w) in enumerate(zip(parts, widths, strict=True))).rstrip()

    lines = [fmt_line(heads)] + [fmt_line(c) for c in cells]
    notes = report.warning_lines(table.attrs.get("warnings", []), width, where=where,
                                 show_all=show_all)
    return "\n".join(lines + ([""] + notes if notes else []))


def _footer(table: pd.DataFrame, s: dict, output: Path, seconds: float, width: int = 80) -> str:
    gaps = table["BDMC gap [nats]"].dropna()
    enc = _encoder_steps(s["num_steps"])
    text = [f"Settings: {s['num_examples']} test digits; AIS {s['num_steps']} steps x "
            f"{s['num_chains']} chains ({enc} steps from the encoder); IWAE {s['iwae_samples']} "
            f"samples, lw {s['lw_samples']}, KDE {s['kde_samples']}; BDMC on {s['num_simulated']} "
            "simulated digits.",
            "log p(x): nats per 8x8 digit in [0,1]; bits/dim (k): a bound on the NLL of the integer "
            "grey levels. AIS, IWAE, lw (likelihood weighting): stochastic lower bounds; KDE: no bound."]
    if len(gaps) and float(gaps.max()) <= GAP_WARN:
        text.append(f"On data simulated from each model the BDMC gap (at most "
                    f"{float(gaps.max()):.2f} nats) bounds the error of AIS at these settings.")
    elif len(gaps):
        big = ", ".join(f"{m} {g:.1f}" for m, g in zip(table.loc[gaps.index, "model"], gaps,
                                                        strict=True) if g > GAP_WARN)
        text.append(f"The BDMC gaps are large ({big} nats): AIS has not converged at "
                    f"{s['num_steps']} steps, and those rows are loose lower bounds, not "
                    "estimates within the gap; see the warnings, and run --full or more --steps.")
    text += _encoder_note(table, s["num_steps"], enc)
    text.append(f"Results (netCDF) and plots in {output.resolve()} ({seconds:.0f} s).")
    return "\n".join(textwrap.fill(t, width) for t in text)


def _encoder_note(table: pd.DataFrame, num_steps: int, enc: int) -> list[str]:
    """For a model with an encoder: AIS from it against AIS from the prior, and where to start."""
    out = []
    for model in table["model"].unique():
        rows = table[table["model"] == model].set_index("estimator")["log p(x) [nats]"]
        if "ais+encoder" in rows and "ais" in rows:
            diff = rows["ais+encoder"] - rows["ais"]
            fewer = f", {num_steps / enc:.0f} times fewer," if num_steps >= 2 * enc else ""
            out.append(f"The {model} has an encoder: AIS from it (init=model.guide) with {enc} "
                       f"steps{fewer} gave a lower bound {abs(diff):.2f} "
                       f"nats {'above' if diff >= 0 else 'below'} AIS from the prior with "
                       f"{num_steps}; for a VAE, start from the encoder "
                       "(pyrolik.ais(model, x, init=model.guide, ...); docs/kernel.md).")
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of the demo (``python -m pyrolik demo``)."""
    p = argparse.ArgumentParser(prog="pyrolik demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    d = SETTINGS["default"]
    p.add_argument("--output", default="pyrolik-demo-output",
                   help="folder for netCDF files and plots (default pyrolik-demo-output)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny settings: a smoke test of about 20 s")
    size.add_argument("--full", action="store_true",
                      help="longer settings (250 digits, 3000 steps x 16 chains, 50 simulated): "
                           "about 20-30 minutes on a busy 2-core machine")
    p.add_argument("--examples", type=_positive, default=None,
                   help=f"held-out test digits to evaluate (default {d['num_examples']}; at "
                        "most 250, the test split)")
    p.add_argument("--steps", type=_positive, default=None,
                   help=f"annealing steps of AIS and BDMC (default {d['num_steps']})")
    p.add_argument("--chains", type=_positive, default=None,
                   help=f"AIS chains per example (default {d['num_chains']})")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: PYROLIK_NUM_THREADS, else 1, the fastest "
                        "for these small networks)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--all", action="store_true", dest="show_all",
                   help="print every warning, the remarks at the level of Monte Carlo noise "
                        "too (default: those to act on, and the remarks counted in one line)")
    args = p.parse_args(argv)
    set_threads(args.threads)
    start = time.perf_counter()
    if not args.quiet:
        expected = "20 s" if args.quick else "20-30 minutes" if args.full else "2 minutes"
        print(f"pyrolik demo: VAE, GAN and GMMN on held-out digits; about {expected} on a busy "
              f"2-core machine (threads: {torch.get_num_threads()})", file=sys.stderr)
    table = run(args.output, num_examples=args.examples, num_steps=args.steps,
                num_chains=args.chains, seed=args.seed, quick=args.quick, full=args.full,
                progress=not args.quiet)
    print(format_table(table, where=WHERE.format(output=args.output), show_all=args.show_all))
    print()
    print(_footer(table, table.attrs["settings"], Path(args.output), time.perf_counter() - start))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
