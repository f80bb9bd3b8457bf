r"""Train one of the paper's models on MNIST read from ``--data-dir`` or ``$PYROLIK_DATA``.

    PYTHONPATH=. python -m models.training.train_mnist gan-10 --epochs 5 --out /tmp/gan10.pt
    PYTHONPATH=. python -m models.training.train_mnist iwae --epochs 3280 --batch-size 20 --particles 50

Data: ``iwae`` trains on the fixed binarized MNIST (50k train, 10k valid). The other six models train
on continuous MNIST, dequantized as :math:`(k + u)/256`. Only the 10,000 MNIST *test* images are
available here, so they are split 8000 / 1000 / 1000 with seed 0
(``pyrolik.io.datasets.split_mnist_test``), and every figure must say so. Wu et al. (2017) used
50k/10k of the MNIST training set instead. Defaults are reduced-scale settings that run in minutes
on a CPU; pass the paper's epochs for full scale (VAE/GAN: Adam with the learning rate picked from
1e-3, 1e-4, 1e-5; GMMN: SGD with momentum 0.9 and learning rate from 0.1, 0.5, 1, 2; IWAE: Burda et
al.'s 3280 epochs with k = 50).
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path
from typing import Any

import pyro
import torch

from ..zoo.presets import PRESETS, build
from ..zoo.serialization import save
from .train_gan import train_gan
from .train_gmmn import train_gmmn
from .train_vae import train_vae

__all__ = ["DEFAULTS", "mnist_data", "main"]

#: Reduced-scale defaults per kind: (epochs, batch size, learning rate).
DEFAULTS: dict[str, tuple[int, int, float]] = {
    "vae": (20, 100, 1e-3), "gan": (20, 100, 2e-4), "gmmn": (20, 1000, 1e-3),
    "iwae": (5, 20, 1e-3),
}


def mnist_data(kind: str, data_dir: str | None = None, dtype: torch.dtype = torch.float32):
    """``(train, valid)`` tensors for ``kind``: binarized MNIST for ``iwae``, else continuous."""
    from pyrolik.io.datasets import load_binarized_mnist, split_mnist_test

    if kind == "iwae":
        split = load_binarized_mnist(data_dir, dtype=dtype)
        return split.train, split.valid, "binarized MNIST (Larochelle & Murray), 50k train"
    images, _ = split_mnist_test(data_dir, dtype=dtype)
    return (images.train, images.valid,
            "continuous MNIST test set split 8000/1000/1000 (seed 0), dequantized (k+u)/256")


def main(argv: list[str] | None = None) -> Path:
    """Command line entry point."""
    paper = [n for n in PRESETS if not n.startswith("digits")]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=paper)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--sigma", type=float, default=None,
                        help="VAE: the observation noise used in training (default 0.05)")
    parser.add_argument("--particles", type=int, default=50, help="IWAE: k of the bound")
    parser.add_argument("--max-train", type=int, default=None, help="use the first n examples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    kind = PRESETS[args.name][0]
    epochs, batch_size, lr = DEFAULTS[kind]
    epochs = args.epochs if args.epochs is not None else epochs
    batch_size = args.batch_size or batch_size
    lr = args.lr or lr
    train, valid, described = mnist_data(kind, args.data_dir)
    if args.max_train:
        train = train[: args.max_train]
    pyro.set_rng_seed(args.seed)
    model = build(args.name).float()
    common: dict[str, Any] = {"num_epochs": epochs, "batch_size": batch_size, "lr": lr,
                              "seed": args.seed, "progress": args.progress}
    if kind == "vae":
        history = train_vae(model, train, valid=valid[:1000], sigma=args.sigma, **common)
    elif kind == "iwae":
        history = train_vae(model, train, valid=valid[:1000], objective="iwae",
                            num_particles=args.particles, adam_eps=1e-4, **common)
    elif kind == "gan":
        history = train_gan(model, train, **common)
    else:
        history = train_gmmn(model, train, **common)
    out = args.out or Path(f"{args.name}.pt")
    meta = {"data": described, "num_train": int(train.shape[0]), "preset": args.name,
            "history": history.to_meta(), "args": vars(args) | {"out": str(out)},
            "versions": {"torch": str(torch.__version__), "pyro": pyro.__version__,
                         "python": platform.python_version()}}
    save(model, out, meta=meta)
    last = f"{history.losses[-1]:.3f}" if history.losses else "n/a"
    print(f"{args.name}: {len(history.losses)} epochs, {history.num_steps} steps, "  # noqa: T201
          f"{history.seconds:.1f} s, final loss {last} -> {out}")
    return out


if __name__ == "__main__":
    main()
