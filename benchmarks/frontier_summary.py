"""Means over seeds of ``benchmarks/frontier.py`` runs, from their printed output.

Each log is the output of one or more ``frontier.py`` commands; every command's line for a candidate
and budget counts as one seed (run each seed once per candidate and budget). For each candidate and
budget it prints the mean BDMC gap over seeds with the standard error of that mean (the per-seed standard errors
combined), and draws the means against the gradient evaluations per chain and against the wall seconds
of a run (two panels, log-log; a BlackJAX row's seconds exclude XLA's compilation, printed apart).

    python benchmarks/frontier_summary.py benchmarks/logs/frontier_momentum_vae_seeds0-4.log \
        --title "digits VAE" --out benchmarks/figures/frontier_momentum_vae.png
"""

from __future__ import annotations

import argparse
import math
import re
from collections import defaultdict

ROW = re.compile(r"\s*(\S+) G=\s*(\d+): T=\s*([\d.]+),\s+([\d.]+) evals/chain, gap\s+(-?[\d.]+) \+- "
                 r"([\d.]+), ([\d.]+) s \(([\d.]+) s CPU\)(?: \+ compile ([\d.]+) s)?")


def read(paths: list[str]) -> dict[tuple[str, int], dict[str, tuple]]:
    """``{(candidate, budget): {command: (gap, se, evals, cpu s, wall s, compile s)}}``."""
    rows: dict[tuple[str, int], dict[str, tuple]] = defaultdict(dict)
    for path in paths:
        block = 0
        for line in open(path):
            if line.startswith("machine:"):
                block += 1
            m = ROW.match(line)
            if m:
                name, budget, _, evals, gap, se, wall, cpu, comp = m.groups()
                rows[(name, int(budget))][f"{path}:{block}"] = (
                    float(gap), float(se), float(evals), float(cpu), float(wall), float(comp or 0))
    return rows


def against(paths: list[str], ref: str) -> None:
    """Each row's lower and upper bound minus the reference's midpoint, example by example, pooled
    over seeds (mean +- se over all examples): a bound's bias shows as a lower bound above the
    reference's upper bound (or an upper below its lower) on average."""
    import numpy as np

    data: dict[tuple, dict] = defaultdict(dict)
    for path in paths:
        with np.load(path) as f:
            data[(str(f["model"]), int(f["seed"]))].update({k: f[k] for k in f.files if "@" in k})
    diffs: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for seed, rows in sorted(data.items()):
        if f"{ref}:lower" not in rows:
            print(f"{seed}: no {ref} row, left out")
            continue
        lo, up = rows[f"{ref}:lower"], rows[f"{ref}:upper"]
        mid = 0.5 * (lo + up)
        for key in rows:
            name, which = key.rsplit(":", 1)
            diffs[name][f"{which} - ref midpoint"].append(rows[key] - mid)
            if which == "lower":
                diffs[name]["lower - ref upper"].append(rows[key] - up)
    print(f"bounds against {ref}'s midpoint (nats, mean +- se over examples, seeds pooled):")
    for name in sorted(diffs, key=lambda n: (int(n.rsplit("@", 1)[1]), n)):
        parts = []
        for what in ("lower - ref midpoint", "upper - ref midpoint", "lower - ref upper"):
            v = np.concatenate(diffs[name][what])
            parts.append(f"{what} {v.mean():+.3f} +- {v.std() / len(v) ** 0.5:.3f}")
        print(f"{name:>32} ({len(diffs[name]['lower - ref upper'])} seeds): " + ", ".join(parts))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logs", nargs="+")
    p.add_argument("--title", default="")
    p.add_argument("--out", default=None, help="figure path (none: no figure)")
    p.add_argument("--bounds", nargs="*", default=[], metavar="NPZ",
                   help="frontier.py --save-bounds files: each row's bounds against --ref's midpoint "
                        "on the same seed's examples")
    p.add_argument("--seconds", choices=["wall", "cpu"], default="wall",
                   help="the right panel's time: wall, or CPU seconds (steadier on a shared machine)")
    p.add_argument("--ref", default="default@2000", help="the reference row, candidate@budget")
    p.add_argument("--rename", nargs="*", default=[], metavar="OLD=NEW",
                   help="a candidate's name in the table and the legend, e.g. default=L10 for logs "
                        "written when the default was L = 10")
    args = p.parse_args(argv)
    names = dict(r.split("=", 1) for r in args.rename)
    rows = {(names.get(n, n), b): v for (n, b), v in read(args.logs).items()}
    summary = {}
    for (name, budget), seeds in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        gaps = [v[0] for v in seeds.values()]
        mean = sum(gaps) / len(gaps)
        se = math.sqrt(sum(v[1] ** 2 for v in seeds.values())) / len(gaps)
        evals = sum(v[2] for v in seeds.values()) / len(gaps)
        cpu = sum(v[3] for v in seeds.values()) / len(gaps)
        wall = sum(v[4] for v in seeds.values()) / len(gaps)
        comp = sum(v[5] for v in seeds.values()) / len(gaps)
        summary[(name, budget)] = (mean, se, evals, wall, cpu)
        print(f"G={budget:5d} {name:>8} {evals:7.1f} evals/chain, {len(gaps)} seeds: gap {mean:.3f} "
              f"+- {se:.3f} (" + " ".join(f"{g:.2f}" for g in gaps) + f"), {wall:.1f} s wall, "
              f"{cpu:.1f} s CPU per run" + (f" (+ compile {comp:.1f} s)" if comp else ""))
    if args.bounds:
        against(args.bounds, args.ref)
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, col, label in ((axes[0], 2, "gradient evaluations per chain (pilot included)"),
                               (axes[1], 3 if args.seconds == "wall" else 4,
                                f"{args.seconds} seconds per run, one thread (compilation excluded)")):
            for name in sorted({n for n, _ in summary}):
                # a mean gap at or below zero is drawn at its standard error, as a downward triangle
                pts = sorted((v[col], max(v[0], v[1], 1e-3), v[1], v[0] <= 0)
                             for (n, _), v in summary.items() if n == name)
                if len(pts) < 2:
                    continue
                xs, ys, es, neg = zip(*pts, strict=True)
                line = ax.errorbar(xs, ys, yerr=es, marker="o", capsize=2, label=name)
                for x, y, n in zip(xs, ys, neg, strict=True):
                    if n:
                        ax.plot([x], [y], marker="v", ms=11, color=line[0].get_color(),
                                markerfacecolor="white")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(label)
        axes[0].set_ylabel("BDMC gap [nats], mean over seeds")
        fig.suptitle(args.title)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False, fontsize=8)
        fig.tight_layout(rect=(0, 0.12, 1, 1))
        fig.savefig(args.out, dpi=120)
        print(f"figure: {args.out}")
    return summary




TOTAL_ROW = re.compile(r"\s*(\S+) K=\s*(\d+) B=\s*(\d+): T=\s*([\d.]+),\s+([\d.]+) evals/chain,"
                       r"\s+([\d.]+) evals/example, gap\s+(-?[\d.]+) \+- ([\d.]+), ([\d.]+) s "
                       r"\(([\d.]+) s CPU\)")


def read_totals(logs: list[str], bounds: list[str]) -> dict[tuple[str, int, int], dict]:
    """``{(candidate, chains, total): {"gap": per-example gaps of all seeds, "evals": mean
    gradients per example, "cpu": mean CPU s per run, "seeds": n}}`` from ``frontier.py --totals``
    logs and their ``--save-bounds`` files (the gaps from the bounds, seeds pooled)."""
    import numpy as np

    cells: dict[tuple[str, int, int], dict] = defaultdict(lambda: defaultdict(list))
    for path in logs:
        for line in open(path):
            m = TOTAL_ROW.match(line)
            if m:
                name, k, b = m.group(1), int(m.group(2)), int(m.group(3))
                cells[(name, k, b)]["evals"].append(float(m.group(6)))
                cells[(name, k, b)]["cpu"].append(float(m.group(10)))
                cells[(name, k, b)]["logged"].append((float(m.group(7)), float(m.group(8))))
    for path in bounds:
        with np.load(path) as f:
            for key in f.files:
                m = re.fullmatch(r"(.+)@(\d+)K(\d+):lower", key)
                if m:
                    cell = cells[(m.group(1), int(m.group(3)), int(m.group(2)))]
                    cell["gap"].append(f[key.replace(":lower", ":upper")] - f[key])
    out = {}
    for key, c in cells.items():
        cost = {"evals": float(np.mean(c["evals"])) if c["evals"] else float(key[2]),
                "cpu": float(np.mean(c["cpu"])) if c["cpu"] else float("nan")}
        if c["gap"] and len(c["gap"]) >= len(c["logged"]):
            gap = np.concatenate(c["gap"])
            out[key] = {"gap": gap, "mean": float(gap.mean()),
                        "se": float(gap.std() / len(gap) ** 0.5), "seeds": len(c["gap"]), **cost}
        elif c["logged"]:  # a run cut short wrote no bounds: its printed gaps, equal-size seeds
            means, ses = np.array(c["logged"]).T
            out[key] = {"gap": None, "mean": float(means.mean()),
                        "se": float((ses ** 2).sum() ** 0.5 / len(ses)), "seeds": len(ses), **cost}
    return out


def totals_main(argv=None):
    """``frontier_summary.py --totals``: the gap against the total gradients per example with the
    number of chains free, each candidate's best split per budget marked; one table and a figure."""
    p = argparse.ArgumentParser(description=totals_main.__doc__)
    p.add_argument("--totals", action="store_true")
    p.add_argument("--logs", nargs="+", required=True)
    p.add_argument("--bounds", nargs="+", required=True)
    p.add_argument("--title", default="")
    p.add_argument("--out", default=None)
    p.add_argument("--rename", nargs="*", default=[], metavar="OLD=NEW")
    p.add_argument("--drop", nargs="*", default=[], help="candidates in the table, not the figure")
    p.add_argument("--strict", action="store_true",
                   help="a split (candidate, K) with a negative mean gap at any budget is biased at "
                        "every budget (its bias is hidden where the gap is large): left out throughout")
    p.add_argument("--same", nargs="*", default=[], metavar="NAME@K=OTHER",
                   help="NAME's rows at K chains are OTHER's (the default at 4 chains is plain AIS, "
                        "bit for bit: default@4=ais)")
    args = p.parse_args(argv)
    names = dict(r.split("=", 1) for r in args.rename)
    cells = read_totals(args.logs, args.bounds)
    for same in args.same:
        (name, k), other = same.split("=")[0].split("@"), same.split("=")[1]
        cells.update({(name, int(k), b): v for (c, kk, b), v in list(cells.items())
                      if c == other and kk == int(k)})
    cands = sorted({c for c, _, _ in cells})
    budgets = sorted({b for _, _, b in cells})
    chains = sorted({k for _, k, _ in cells})
    best: dict[tuple[str, int], tuple[int, dict]] = {}
    for c in cands:
        print(f"{names.get(c, c)}: BDMC gap, mean over examples of all seeds +- se (seeds), "
              "CPU s per run; * the best split, ! a negative mean gap (its lower bound above the upper "
              "on average: biased, not a candidate)")
        for b in budgets:
            row = {k: cells[(c, k, b)] for k in chains if (c, k, b) in cells}
            valid = [k for k, v in row.items() if v["mean"] >= 0 and not (
                args.strict and any(cells[(c, k, bb)]["mean"] < 0 for bb in budgets
                                    if (c, k, bb) in cells))]
            if not valid:
                continue
            k_best = min(valid, key=lambda k: row[k]["mean"])  # biased splits (gap < 0) excluded
            best[(c, b)] = (k_best, row[k_best])
            print(f"  B={b:>6}: " + "  ".join(
                f"K={k}{'*' if k == k_best else ('!' if k not in valid else ' ')} {v['mean']:6.3f} +- {v['se']:.3f} "
                f"({v['seeds']}, {v['cpu']:.0f} s)" for k, v in row.items()))
    shown = [c for c in cands if c not in args.drop]
    print("\n| total gradients | " + " | ".join(names.get(c, c) for c in shown) + " |")
    print("| --- |" + " --- |" * len(shown))
    for b in budgets:
        print(f"| {b:,} | " + " | ".join(
            f"{best[(c, b)][1]['mean']:.3f} +- {best[(c, b)][1]['se']:.3f} "
            f"(K={best[(c, b)][0]}, {best[(c, b)][1]['cpu']:.0f} s)" if (c, b) in best else "-"
            for c in shown) + " |")
    if args.out:
        import matplotlib
        import matplotlib.ticker

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True, layout="constrained")
        for i, c in enumerate(c for c in cands if c not in args.drop):
            color = f"C{i}"
            for ax, key in ((axes[0], "evals"), (axes[1], "cpu")):
                for k in chains:  # every split, faint
                    pts = [(cells[(c, k, b)][key], cells[(c, k, b)]["mean"])
                           for b in budgets if (c, k, b) in cells]
                    if pts:
                        ax.plot(*zip(*pts, strict=True), color=color, alpha=0.15, lw=0.8)
                pts = [(v[key], v["mean"], v["se"], k) for b in budgets
                       for (k, v) in [best.get((c, b), (None, None))] if k is not None]
                xs, ys, es, ks = zip(*pts, strict=True)
                ax.errorbar(xs, ys, yerr=es, color=color, marker="o", capsize=2,
                            label=names.get(c, c) if key == "evals" else None)
                if key == "evals":
                    for x, y, k in zip(xs, ys, ks, strict=True):
                        ax.annotate(f"{k}", (x, y), textcoords="offset points", xytext=(4, 4),
                                    fontsize=7, color=color)
        for ax, label in ((axes[0], "gradient evaluations per example and leg (pilot included)"),
                          (axes[1], "CPU seconds per run (one thread)")):
            ax.set_xscale("log")
            ax.set_yscale("symlog", linthresh=0.1, linscale=1.0)
            ax.axhline(0, color="k", lw=0.5)
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_xlabel(label)
        axes[0].set_ylabel("BDMC gap [nats]")
        axes[0].legend(frameon=False, fontsize=8)
        fig.suptitle(f"{args.title}\neach split faint; the best valid split per budget marked with "
                     "its chains")
        fig.savefig(args.out, dpi=120)
        print(f"figure: {args.out}")
    return cells, best


if __name__ == "__main__":
    import sys

    totals_main() if "--totals" in sys.argv else main()
