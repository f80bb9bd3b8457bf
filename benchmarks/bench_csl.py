"""CSL on RBMs small enough to evaluate exactly: Table 2 and Figure 1 of Bengio, Yao & Cho (2014).

Part 1 (Table 2): an RBM with 5 hidden units trained by PCD on binarized MNIST; CSL of the test set
from 1k ... 30k latent samples taken every 100th block-Gibbs step, against the exact test
log-likelihood (enumeration of the 2^5 hidden states) and against CSL from i.i.d. exact draws of
P(h) (the same estimator without the chain's autocorrelation).

Part 2 (Figure 1): RBMs with 1 ... 15 hidden units; exact log-likelihood, unbiased CSL and biased
CSL (10 chains per test example started at the example, 1 or 30 steps): does biased CSL rank the
models like the exact log-likelihood?

    PYTHONPATH=. python benchmarks/bench_csl.py --data-dir ../shared/data   # or $PYROLIK_DATA
    PYTHONPATH=. python benchmarks/bench_csl.py --digits                    # no MNIST: 8x8 digits

Not run by pytest. Prints the tables recorded in benchmarks/RESULTS.md and writes a figure.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from models.oracles.rbm import RBM
from pyrolik import compare, csl
from pyrolik.infer import biased_csl, sample_chain
from pyrolik.io.datasets import find_data_dir, load_binarized_mnist, load_digits


def load(args) -> tuple[torch.Tensor, torch.Tensor, str]:
    if not args.digits:
        found = find_data_dir(args.data_dir, "binarized_mnist.npz")
        if found is not None:
            split = load_binarized_mnist(found)
            return split.train, split.test, "binarized MNIST (Larochelle & Murray), 50k / 10k"
        print("binarized_mnist.npz not found: falling back to the 8x8 digits")
    x, _ = load_digits()
    x = (x > 0.5).to(torch.get_default_dtype())
    return x[:1500], x[1500:], "sklearn digits thresholded at 0.5, 1500 / 297"


def fit(train, h, args) -> RBM:
    return RBM.fit(train, num_hidden=h, k=1, persistent=True, epochs=args.epochs, lr=args.lr,
                   batch_size=100, seed=args.seed)


def table2(train, test, args) -> list[str]:
    t0 = time.perf_counter()
    rbm = fit(train, 5, args)
    t_fit = time.perf_counter() - t0
    exact = rbm.log_prob(test)
    counts = [1000, 2000, 5000, 10000, 20000, 30000]
    num_chains = 100
    per_chain = max(counts) // num_chains
    g = torch.Generator().manual_seed(args.seed)
    x0 = train[torch.randint(len(train), (num_chains,), generator=g)]
    t0 = time.perf_counter()
    h = sample_chain(rbm, x0, num_samples=per_chain, thin=100, burn_in=1000, seed=args.seed)
    t_chain = time.perf_counter() - t0
    # interleave chains so that the first k samples are k / 100 steps of every chain
    h = h.reshape(-1, rbm.num_hidden)
    iid = rbm.sample_hidden_exact(max(counts), generator=g)
    lines = [
        f"RBM {rbm.num_visible}-5, PCD-1, {args.epochs} epochs, lr {args.lr}: fit {t_fit:.1f} s; "
        f"{num_chains} Gibbs chains, burn-in 1000, every 100th state: {t_chain:.1f} s",
        "",
        "| # samples | CSL, Gibbs chain (nats) | CSL, i.i.d. P(h) (nats) | CSL time (s) |",
        "|---|---|---|---|",
    ]
    for k in counts:
        t0 = time.perf_counter()
        r_chain = csl(rbm, test, h[:k], chunk_size=1000, khat=False)
        dt = time.perf_counter() - t0
        r_iid = csl(rbm, test, iid[:k], chunk_size=1000, khat=False)
        lines.append(f"| {k // 1000}k | {r_chain.mean:.2f} +- {r_chain.stderr:.2f} | "
                     f"{r_iid.mean:.2f} +- {r_iid.stderr:.2f} | {dt:.2f} |")
    lines.append(f"| exact | {exact.mean():.2f} +- {exact.std() / math.sqrt(len(exact)):.2f} | | |")
    c = compare({"csl_30k": csl(rbm, test, h, khat=False), "exact": exact})
    row = c.pairs.iloc[0]
    lines += ["", f"paired, 30k chain samples vs exact: {row['mean_diff']:.3f} +- {row['se']:.3f} "
              f"nats (t-test p = {row['t_pvalue']:.2g})"]
    return lines


def figure1(train, test, args) -> tuple[list[str], dict]:
    sizes = [1, 2, 3, 4, 5, 6, 8, 10, 12, 15]
    sub = test[: args.biased_examples]
    keys = ("exact", "csl", "khat", "iid", "b1", "b30", "fit_s", "csl_s", "b1_s", "b30_s")
    out: dict = {k: [] for k in keys}
    for hsz in sizes:
        t0 = time.perf_counter()
        rbm = fit(train, hsz, args)
        out["fit_s"].append(time.perf_counter() - t0)
        out["exact"].append(float(rbm.log_prob(sub).mean()))
        g = torch.Generator().manual_seed(args.seed)
        x0 = train[torch.randint(len(train), (100,), generator=g)]
        h = sample_chain(rbm, x0, num_samples=100, thin=100, burn_in=1000, seed=args.seed,
                         flatten=True)
        t0 = time.perf_counter()
        res = csl(rbm, sub, h, khat=False)
        out["csl_s"].append(time.perf_counter() - t0)
        out["csl"].append(res.mean)
        # the same number of i.i.d. draws from the exact P(h): no chain, same estimator
        iid = csl(rbm, sub, rbm.sample_hidden_exact(h.shape[0], generator=g))
        out["iid"].append(iid.mean)
        out["khat"].append(float((iid.khat > 0.7).double().mean()))
        t0 = time.perf_counter()
        out["b1"].append(biased_csl(rbm, sub, rbm, num_chains=10, num_steps=1, seed=args.seed).mean)
        out["b1_s"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        out["b30"].append(
            biased_csl(rbm, sub, rbm, num_chains=10, num_steps=30, seed=args.seed).mean
        )
        out["b30_s"].append(time.perf_counter() - t0)
    lines = [
        f"{len(sub)} test examples; CSL: 10k samples (100 chains x 100, every 100th step); "
        "biased CSL: 10 chains per example started at it",
        "",
        "| hidden | exact | CSL 10k, Gibbs | CSL 10k, i.i.d. P(h) | k-hat > 0.7 (i.i.d.) "
        "| biased CSL 1 step | biased CSL 30 steps | fit (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, hsz in enumerate(sizes):
        lines.append(f"| {hsz} | {out['exact'][i]:.2f} | {out['csl'][i]:.2f} | {out['iid'][i]:.2f} "
                     f"| {out['khat'][i]:.0%} | {out['b1'][i]:.2f} | {out['b30'][i]:.2f} "
                     f"| {out['fit_s'][i]:.1f} |")
    exact = np.array(out["exact"])
    lines.append("")
    for key, label in (("csl", "CSL 10k"), ("b1", "biased CSL 1 step"),
                       ("b30", "biased CSL 30 steps")):
        est = np.array(out[key])
        rho = stats.spearmanr(exact, est).statistic
        same = list(np.argsort(exact)) == list(np.argsort(est))
        lines.append(f"- {label}: Spearman rho vs exact {rho:.3f}; identical order: {same}; "
                     f"mean (estimate - exact) {np.mean(est - exact):+.2f} nats; "
                     f"time per model {np.mean(out[key + '_s']):.2f} s")
    for key, label in (("b1", "biased CSL 1 step"), ("b30", "biased CSL 30 steps")):
        est = np.array(out[key])
        swaps = [
            f"{sizes[i]} vs {sizes[j]} (exact {exact[i] - exact[j]:+.2f}, "
            f"{label} {est[i] - est[j]:+.2f})"
            for i in range(len(sizes)) for j in range(i + 1, len(sizes))
            if (exact[i] - exact[j]) * (est[i] - est[j]) < 0
        ]
        lines.append(f"- pairs {label} orders unlike the exact log-likelihood: "
                     f"{'; '.join(swaps) or 'none'}")
    out["sizes"] = sizes
    return lines, out


def plot(out, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label, style in (("exact", "exact", "k-o"), ("csl", "CSL, 10k samples", "b:s"),
                              ("b1", "biased CSL, 1 step x 10 chains", "r-^"),
                              ("b30", "biased CSL, 30 steps x 10 chains", "c-v")):
        ax.plot(out["sizes"], out[key], style, label=label, ms=4)
    ax.set_xlabel("hidden units")
    ax.set_ylabel("mean test log-likelihood (nats)")
    ax.set_title("RBMs: exact vs CSL (cf. Bengio et al. 2014, Fig. 1)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--digits", action="store_true", help="use the 8x8 digits instead of MNIST")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--biased-examples", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1, help="torch threads (small matrices)")
    p.add_argument("--figure", default="benchmarks/out/csl_rbm.png")
    args = p.parse_args()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(args.threads)
    train, test, desc = load(args)
    print(f"data: {desc}; torch {torch.__version__}, {args.threads} thread(s), float64\n")
    print("## Table 2\n")
    print("\n".join(table2(train, test, args)))
    print("\n## Figure 1\n")
    lines, out = figure1(train, test, args)
    print("\n".join(lines))
    plot(out, Path(args.figure))
    Path(args.figure).with_suffix(".json").write_text(json.dumps(out, indent=1))
    print(f"\nfigure: {args.figure} (numbers: {Path(args.figure).with_suffix('.json')})")


if __name__ == "__main__":
    main()
