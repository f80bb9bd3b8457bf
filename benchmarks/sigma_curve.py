"""Issue 10 item 4, figure 2(a) of Wu et al. (2017): log-likelihood against the observation sigma.

AIS (a stochastic lower bound that tightens with steps) and KDE with bandwidth sigma on the decoder's
mean images (the paper's KDE: the same Gaussian observation model, estimated from prior samples),
on a stated number of validation images of continuous MNIST (the 10,000 MNIST test images split
8000/1000/1000 with seed 0, ``pyrolik.io.datasets.split_mnist_test``). Claim (exit 1 if it fails): KDE's
best sigma is at least AIS's best sigma (KDE is biased toward large sigma), and KDE is far below AIS
at the smallest sigma.

    PYTHONPATH=. python benchmarks/sigma_curve.py /work/shared/data --model gan-10
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import pyrolik
from benchmarks._mnist import (
    CHECKPOINTS,
    FIGURES,
    Claims,
    data_dir_or_exit,
    load_avg,
    load_or_train,
)
from pyrolik.infer.parzen import kde_log_density


def sigma_curve(model, x, sigmas, *, num_steps: int, num_chains: int, kde_samples: int,
                seed: int = 0) -> dict[str, list[float]]:
    """AIS and KDE mean log p(x) (and standard errors over examples) at each sigma."""
    out: dict[str, list[float]] = {"sigma": list(sigmas), "ais": [], "ais_se": [], "kde": [],
                                   "kde_se": []}
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        centres = model.sample(kde_samples, g)
    kde = kde_log_density(centres, x, torch.tensor(sigmas, dtype=x.dtype))  # (S, N)
    n = len(x)
    for i, s in enumerate(sigmas):
        r = pyrolik.ais(model, x, num_steps=num_steps, num_chains=num_chains, seed=seed,
                        model_kwargs={"sigma": float(s)}, progress=False)
        out["ais"].append(r.mean)
        out["ais_se"].append(float(r.log_likelihood.std() / n ** 0.5))
        out["kde"].append(float(kde[i].mean()))
        out["kde_se"].append(float(kde[i].std() / n ** 0.5))
        print(f"  sigma {s:.3f}: AIS {out['ais'][-1]:9.1f} +- {out['ais_se'][-1]:.1f}, "
              f"KDE {out['kde'][-1]:9.1f} +- {out['kde_se'][-1]:.1f}", flush=True)
    return out


def plot_curve(curve, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for key, color in (("ais", "tab:blue"), ("kde", "tab:orange")):
        ax.errorbar(curve["sigma"], curve[key], yerr=[2 * v for v in curve[f"{key}_se"]], fmt="o-",
                    color=color, label=key.upper(), capsize=2)
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=300)  # the curves span 1e4 nats below their peak
    ax.set_xticks(curve["sigma"], [f"{s:g}" for s in curve["sigma"]])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
    ax.set_xlabel("observation sigma")
    ax.set_ylabel("mean log p(x) [nats]")
    ax.set_title(title, fontsize=9)
    ax.legend(frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("data_dir", nargs="?", default=None)
    p.add_argument("--model", default="gan-10", choices=["vae-10", "gan-10", "gmmn-10"])
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--sigmas", default="0.02,0.03,0.05,0.08,0.12,0.2")
    p.add_argument("--examples", type=int, default=10, help="first n validation images")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--chains", type=int, default=1)
    p.add_argument("--kde-samples", type=int, default=10000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--train-args", default="--threads 1",
                   help="models.training.train_mnist arguments used when the checkpoint is absent")
    p.add_argument("--plot", default=None)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.sigmas, args.examples, args.steps, args.kde_samples = "0.03,0.1,0.3", 4, 20, 1000
    data_dir = data_dir_or_exit(args.data_dir, "mnist_test.npz")
    claims = Claims()
    torch.set_num_threads(args.threads)
    ckpt = Path(args.checkpoint or CHECKPOINTS / f"{args.model}_mnist.pt")
    model = load_or_train(args.model, ckpt, data_dir, args.train_args.split())
    from pyrolik.io.datasets import split_mnist_test

    x = split_mnist_test(data_dir, dtype=torch.float32)[0].valid[: args.examples]
    sigmas = [float(s) for s in args.sigmas.split(",")]
    print(f"{args.model} ({ckpt}); {len(x)} validation images of the 8000/1000/1000 split of the "
          f"MNIST test set; AIS {args.steps} steps x {args.chains} chains; KDE {args.kde_samples} "
          f"samples; {load_avg()}", flush=True)
    curve = sigma_curve(model, x, sigmas, num_steps=args.steps, num_chains=args.chains,
                        kde_samples=args.kde_samples)
    best_ais = sigmas[max(range(len(sigmas)), key=lambda i: curve["ais"][i])]
    best_kde = sigmas[max(range(len(sigmas)), key=lambda i: curve["kde"][i])]
    print(f"best sigma: AIS {best_ais}, KDE {best_kde} (paper, GAN-50: KDE prefers a larger sigma)")
    claims.check(f"KDE's best sigma ({best_kde}) >= AIS's best sigma ({best_ais})",
                 best_kde >= best_ais)
    claims.check(f"KDE below AIS at the smallest sigma ({curve['kde'][0]:.0f} < {curve['ais'][0]:.0f})",
                 curve["kde"][0] < curve["ais"][0])
    plot_curve(curve, Path(args.plot or FIGURES / f"sigma_curve_{args.model}.png"),
               f"{args.model}, {len(x)} validation images (fig. 2a)")
    claims.finish()


if __name__ == "__main__":
    main()
