"""Issue 10 item 3: Table 2 / section 5.3.2 of Wu et al. (2017) at CPU scale, continuous MNIST.

Data: the 10,000 MNIST *test* images (the training images are not available here), dequantized
(k+u)/256 and split 8000 train / 1000 valid / 1000 test with seed 0 (``split_mnist_test``); the paper
used 50k/10k of the MNIST training set. VAE-10, GAN-10, GMMN-10 trained briefly by
``models.training.train_mnist`` (defaults: 20 epochs). Per model: sigma chosen by AIS on validation images
over a grid; AIS on the first ``--examples`` test and train images (one call, same settings), KDE
with 10,000 samples and bandwidth chosen on 100 validation images, IWAE bound (VAE only).
Run one model per process (``--models``) to use several cores; ``--report`` merges the JSON results
and checks the claims (exit 1 if one fails): AIS is above KDE for every model on test, and KDE
compresses (smaller spread) or misorders the models relative to AIS.

    PYTHONPATH=. python benchmarks/mnist_continuous.py /work/shared/data --models gan-10
    PYTHONPATH=. python benchmarks/mnist_continuous.py /work/shared/data --report
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import pyrolik
from benchmarks._mnist import (
    CHECKPOINTS,
    Claims,
    data_dir_or_exit,
    load_avg,
    load_or_train,
    mean_se,
)
from benchmarks.sigma_curve import sigma_curve

PAPER = {"vae-10": (705.4, 791.0, 408.7, 486.5), "gan-10": (328.8, 346.6, 259.7, None),
         "gmmn-10": (346.7, 358.9, 262.7, None)}  # AIS test, AIS train, KDE test, IWAE test


def evaluate(name: str, data_dir: Path, args) -> dict:
    from pyrolik.io.datasets import split_mnist_test

    split = split_mnist_test(data_dir, dtype=torch.float32)[0]
    model = load_or_train(name, Path(args.checkpoint_dir) / f"{name}_mnist.pt", data_dir,
                          args.train_args.split())
    hist = model.meta.get("history", {})
    n = args.examples
    sigmas = [float(s) for s in args.sigmas.split(",")]
    print(f"{name}: trained {hist.get('num_epochs')} epochs ({hist.get('seconds', 0):.0f} s); "
          f"choosing sigma on {args.sigma_examples} validation images; {load_avg()}", flush=True)
    curve = sigma_curve(model, split.valid[: args.sigma_examples], sigmas,
                        num_steps=args.sigma_steps, num_chains=1, kde_samples=1000)
    sigma = sigmas[max(range(len(sigmas)), key=lambda i: curve["ais"][i])]
    kw = {"sigma": sigma}
    x = torch.cat([split.test[:n], split.train[:n]])
    r = pyrolik.ais(model, x, num_steps=args.steps, num_chains=args.chains, model_kwargs=kw,
                    seed=0, progress=False)
    out = {"model": name, "sigma": sigma, "sigma_curve": curve, "examples": n,
           "steps": args.steps, "chains": args.chains, "ais_seconds": r.wall_time,
           "train_epochs": hist.get("num_epochs"), "acceptance": float(r.acceptance_rate.mean())}
    out["ais_test"], out["ais_test_se"] = mean_se(r.log_likelihood[:n])
    out["ais_train"], out["ais_train_se"] = mean_se(r.log_likelihood[n:])
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        centres = model.sample(args.kde_samples, g)
    grid = [0.03, 0.05, 0.07, 0.1, 0.14, 0.2, 0.28]
    k = pyrolik.kde(centres, x, bandwidth=grid, validation=split.valid[:100], progress=False)
    out["kde_bandwidth"] = k.settings["bandwidth"]
    out["kde_test"], out["kde_test_se"] = mean_se(k.log_likelihood[:n])
    out["kde_train"], out["kde_train_se"] = mean_se(k.log_likelihood[n:])
    if hasattr(model, "guide"):
        w = pyrolik.iwae(model, x[:n], model.guide, num_samples=args.iwae_k, model_kwargs=kw,
                         seed=0, progress=False, chunk_size=100)
        out["iwae_test"], out["iwae_test_se"] = mean_se(w.log_likelihood)
    print(json.dumps({k: v for k, v in out.items() if k != "sigma_curve"}, indent=1), flush=True)
    return out


def report(results: list[dict]) -> None:
    claims = Claims()
    print("\n| model | sigma | AIS test | AIS train | train-test | KDE test (h) | KDE train | IWAE test |"
          " paper AIS test / train / KDE / IWAE |")
    print("|---|---|---|---|---|---|---|---|---|")
    for o in results:
        p = PAPER[o["model"]]
        iw = f"{o['iwae_test']:.1f} ± {o['iwae_test_se']:.1f}" if "iwae_test" in o else "/"
        print(f"| {o['model']} | {o['sigma']} | {o['ais_test']:.1f} ± {o['ais_test_se']:.1f} | "
              f"{o['ais_train']:.1f} ± {o['ais_train_se']:.1f} | "
              f"{o['ais_train'] - o['ais_test']:.1f} | {o['kde_test']:.1f} ± {o['kde_test_se']:.1f} "
              f"({o['kde_bandwidth']:.2f}) | {o['kde_train']:.1f} | {iw} | "
              f"{p[0]} / {p[1]} / {p[2]} / {p[3] or '/'} |")
    for o in results:
        claims.check(f"{o['model']}: AIS test ({o['ais_test']:.1f}) above KDE test "
                     f"({o['kde_test']:.1f})", o["ais_test"] > o["kde_test"])
    if len(results) > 1:
        ais = [o["ais_test"] for o in results]
        kde = [o["kde_test"] for o in results]
        order_ais = sorted(range(len(ais)), key=ais.__getitem__)
        order_kde = sorted(range(len(kde)), key=kde.__getitem__)
        spread_ais, spread_kde = max(ais) - min(ais), max(kde) - min(kde)
        print(f"spread across models: AIS {spread_ais:.1f} nats, KDE {spread_kde:.1f} nats; order "
              f"(low to high) AIS {[results[i]['model'] for i in order_ais]}, "
              f"KDE {[results[i]['model'] for i in order_kde]}")
        claims.check("KDE compresses or misorders the differences between models that AIS shows",
                     spread_kde < spread_ais or order_ais != order_kde)
    claims.finish()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("data_dir", nargs="?", default=None)
    p.add_argument("--models", default="vae-10,gan-10,gmmn-10")
    p.add_argument("--examples", type=int, default=10, help="first n test and first n train images")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--chains", type=int, default=1)
    p.add_argument("--sigmas", default="0.03,0.05,0.08,0.12")
    p.add_argument("--sigma-examples", type=int, default=6)
    p.add_argument("--sigma-steps", type=int, default=30)
    p.add_argument("--kde-samples", type=int, default=10000)
    p.add_argument("--iwae-k", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--checkpoint-dir", default=str(CHECKPOINTS))
    p.add_argument("--train-args", default="--threads 1",
                   help="models.training.train_mnist arguments used when a checkpoint is absent")
    p.add_argument("--out-dir", default=str(Path(__file__).parent / "logs"))
    p.add_argument("--report", action="store_true", help="merge the saved per-model results")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.examples, args.steps, args.sigmas, args.sigma_examples = 3, 20, "0.05,0.1", 2
        args.sigma_steps, args.kde_samples, args.iwae_k = 10, 500, 20
    data_dir = data_dir_or_exit(args.data_dir, "mnist_test.npz")
    torch.set_num_threads(args.threads)
    out_dir = Path(args.out_dir)
    names = args.models.split(",")
    if not args.report:
        for name in names:
            res = evaluate(name, data_dir, args)
            (out_dir / f"continuous_{name}.json").write_text(json.dumps(res, indent=1))
        if len(names) == 1:
            return
    report([json.loads((out_dir / f"continuous_{n}.json").read_text()) for n in names
            if (out_dir / f"continuous_{n}.json").is_file()])


if __name__ == "__main__":
    main()
