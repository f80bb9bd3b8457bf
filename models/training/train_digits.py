r"""Reproduce the small pretrained checkpoints on scikit-learn's 8x8 digits (no download needed).

    PYTHONPATH=. python -m models.training.train_digits                 # all four, into models/checkpoints/
    PYTHONPATH=. python -m models.training.train_digits --only vae,gan --out /tmp/ckpt --epochs-scale 0.1

Data (:func:`digits_split`): the 1,797 digits of ``pyrolik.io.datasets.load_digits``, shuffled with
seed 0 and split 1297 / 250 / 250 into train / valid / test. The Gaussian models see the dequantized
grey levels :math:`(k + u) / 17 \in [0, 1]^{64}` (dequantization seed 0), the Bernoulli model
a fixed binarization :math:`x \sim \mathrm{Bernoulli}(k / 16)` drawn once with seed 0.

Models (:data:`models.zoo.presets.PRESETS`): one small decoder 8-64-128-64 shared by the VAE (tanh),
the GAN (tanh) and the GMMN (ReLU), each with a sigmoid output and a Gaussian observation site; a
Bernoulli VAE 8-100-100-64 trained with the IWAE bound. After training, each Gaussian model's sigma
is chosen on the validation split (:func:`models.training.sigma.choose_sigma`) with the best estimator
pyrolik has (the one-run sigma curve ``pyrolik.sigma_curve`` when it exists, else AIS per sigma,
otherwise the IWAE bound for the VAE and likelihood weighting for the GAN and GMMN); the curve and
the estimator are stored in the checkpoint's ``meta``. This script imports pyrolik (data,
estimators); the model definitions do not.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any

import pyro
import torch

from ..zoo.base import DecoderModel
from ..zoo.presets import build
from ..zoo.serialization import CHECKPOINT_DIR, load, save
from .sigma import choose_sigma
from .train_gan import train_gan
from .train_gmmn import train_gmmn
from .train_vae import train_vae

__all__ = ["SPLIT_SIZES", "SETTINGS", "SIGMA_GRID", "digits_split", "train_digits_model",
           "choose_digits_sigma", "main"]

SEED = 0
#: train / valid / test sizes of the 1,797 digits.
SPLIT_SIZES = (1297, 250, 250)
#: Trainer settings per kind (epochs at ``--epochs-scale 1``).
SETTINGS: dict[str, dict[str, Any]] = {
    "vae": {"num_epochs": 300, "batch_size": 64, "lr": 1e-3},
    "gan": {"num_epochs": 500, "batch_size": 32, "lr": 5e-4},
    "gmmn": {"num_epochs": 300, "batch_size": 256, "lr": 1e-3},
    "iwae": {"num_epochs": 300, "batch_size": 64, "lr": 1e-3, "objective": "iwae",
             "num_particles": 10},
}
#: Candidate observation-noise standard deviations for the Gaussian models.
SIGMA_GRID = (0.05, 0.07, 0.1, 0.14, 0.2, 0.28)
NUM_SIGMA_EXAMPLES = 100  # validation examples used to choose sigma
AIS_STEPS, AIS_CHAINS = 200, 4  # within ~1 nat of 500 steps x 8 chains on these models
# one run for the grid: agrees with 1000-step per-sigma AIS (benchmarks/sigma_curve_onerun.py) and
# costs less than the six 200-step per-sigma runs it replaces
ONE_RUN_STEPS = 1000


def digits_split(*, binarize: bool = False, seed: int = SEED, dtype: torch.dtype | None = None):
    """The train / valid / test split of the digits used by the shipped checkpoints.

    Returns a ``pyrolik.io.datasets.Split`` of tensors ``(n, 64)``: dequantized grey levels in
    [0, 1], or with ``binarize=True`` a fixed Bernoulli(k / 16) binarization in {0, 1}.
    """
    from pyrolik.io.datasets import Split, load_digits

    dtype = dtype or torch.get_default_dtype()
    if binarize:
        probs, _ = load_digits(scale=True, dtype=dtype)
        x = torch.bernoulli(probs, generator=torch.Generator().manual_seed(seed))
    else:
        x, _ = load_digits(dequantize_seed=seed, dtype=dtype)
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))
    n_train, n_valid, _ = SPLIT_SIZES
    return Split(x[order[:n_train]], x[order[n_train:n_train + n_valid]],
                 x[order[n_train + n_valid:]])


def _log_likelihood_fn(kind: str):
    """``(model, x, sigma) -> (N,)`` estimates of log p(x) from pyrolik, and its description."""
    import pyrolik

    if hasattr(pyrolik, "sigma_curve"):  # the whole grid from one annealing run
        def curve(model, x, sigmas):
            return pyrolik.sigma_curve(model, x, sigmas, num_steps=ONE_RUN_STEPS,
                                       num_chains=AIS_CHAINS, seed=SEED, progress=False)
        curve.one_run = True  # type: ignore[attr-defined]
        return curve, (f"pyrolik.sigma_curve(num_steps={ONE_RUN_STEPS}, num_chains={AIS_CHAINS}) "
                       "(one run for the whole grid)")
    if hasattr(pyrolik, "ais"):
        def fn(model, x, sigma):
            return pyrolik.ais(model, x, num_steps=AIS_STEPS, num_chains=AIS_CHAINS,
                               model_kwargs={"sigma": sigma}, seed=SEED,
                               progress=False).log_likelihood
        return fn, f"pyrolik.ais(num_steps={AIS_STEPS}, num_chains={AIS_CHAINS})"
    if kind == "vae":
        def fn(model, x, sigma):
            return pyrolik.iwae(model, x, model.guide, num_samples=2000,
                                model_kwargs={"sigma": sigma}, seed=SEED,
                                progress=False).log_likelihood
        return fn, "pyrolik.iwae(num_samples=2000) (lower bound; AIS not yet available)"

    def fn(model, x, sigma):
        return pyrolik.likelihood_weighting(model, x, num_samples=20000,
                                            model_kwargs={"sigma": sigma}, seed=SEED,
                                            progress=False).log_likelihood
    return fn, ("pyrolik.likelihood_weighting(num_samples=20000) (lower bound, biased towards "
                "large sigma; AIS not yet available)")


def train_digits_model(kind: str, *, epochs_scale: float = 1.0, choose: bool = True,
                       seed: int = SEED) -> tuple[DecoderModel, dict[str, Any]]:
    """Train the digits model ``kind`` as shipped; return it and the notes for its checkpoint."""
    settings = dict(SETTINGS[kind])
    settings["num_epochs"] = max(1, round(settings["num_epochs"] * epochs_scale))
    data = digits_split(binarize=kind == "iwae", dtype=torch.float32)
    pyro.set_rng_seed(seed)  # the initial weights
    model = build(f"digits-{kind}").float()
    if kind in ("vae", "iwae"):
        history = train_vae(model, data.train, valid=data.valid, seed=seed, **settings)
    elif kind == "gan":
        history = train_gan(model, data.train, seed=seed, **settings)
    else:
        history = train_gmmn(model, data.train, seed=seed, **settings)
    meta: dict[str, Any] = {
        "data": (f"scikit-learn digits, split {SPLIT_SIZES} (train/valid/test) with seed {seed}; "
                 + ("binarized as Bernoulli(k/16), seed 0" if kind == "iwae"
                    else "dequantized (k+u)/17, seed 0")),
        "preset": f"digits-{kind}", "settings": settings, "seed": seed,
        "history": history.to_meta(),
        "versions": {"torch": str(torch.__version__), "pyro": pyro.__version__,
                     "python": platform.python_version()},
        "threads": torch.get_num_threads(),
        "script": "PYTHONPATH=. python -m models.training.train_digits",
    }
    if choose and kind != "iwae":
        meta["sigma_choice"] = choose_digits_sigma(model, data.valid)
    return model, meta


def choose_digits_sigma(model: DecoderModel, valid: torch.Tensor) -> dict[str, Any]:
    """Set ``model.sigma`` to the best of :data:`SIGMA_GRID` on validation data; returns notes."""
    fn, how = _log_likelihood_fn(model.kind)
    start = time.perf_counter()
    x_valid = valid[:NUM_SIGMA_EXAMPLES].double()
    dtype = model.param_dtype
    if getattr(fn, "one_run", False):
        choice = choose_sigma(model.double(), x_valid, SIGMA_GRID, curve_fn=fn)
    else:
        choice = choose_sigma(model.double(), x_valid, SIGMA_GRID, fn)
    model.to(dtype)
    model.sigma = choice.sigma
    return {
        "estimator": how, "num_valid_examples": x_valid.shape[0],
        "sigmas": choice.sigmas.tolist(),
        "mean_log_likelihood": choice.mean_log_likelihood.tolist(),
        "stderr": choice.stderr.tolist(), "chosen": choice.sigma,
        "seconds": time.perf_counter() - start,
    }


def _describe(kind: str, meta: dict[str, Any]) -> str:
    h = meta["history"]
    text = (f"{kind:5s} {h['num_epochs']:4d} epochs {h['seconds']:6.1f} s  final loss "
            f"{h['losses'][-1]:.3f}")
    if h["valid_losses"]:
        text += f"  valid {h['valid_losses'][-1]:.3f}"
    if "sigma_choice" in meta:
        s = meta["sigma_choice"]
        text += f"  sigma {s['chosen']} ({s['seconds']:.0f} s)"
    return text


def main(argv: list[str] | None = None) -> dict[str, Path]:
    """Command line entry point: train, choose sigma, save ``digits_<kind>.pt``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=CHECKPOINT_DIR)
    parser.add_argument("--only", default="vae,gan,gmmn,iwae")
    parser.add_argument("--epochs-scale", type=float, default=1.0)
    parser.add_argument("--no-sigma", action="store_true", help="keep the preset sigma")
    parser.add_argument("--resigma", action="store_true",
                        help="only choose sigma again for the checkpoints already in --out")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1 is fastest for these small networks)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    paths = {}
    for kind in args.only.split(","):
        if kind not in SETTINGS:
            parser.error(f"unknown kind {kind!r}; choose from {sorted(SETTINGS)}")
        if args.resigma:
            if kind == "iwae":
                continue
            model = load(kind, args.out / f"digits_{kind}.pt", dtype=torch.float32)
            meta = dict(model.meta)
            meta["sigma_choice"] = choose_digits_sigma(model, digits_split().valid)
        else:
            model, meta = train_digits_model(kind, epochs_scale=args.epochs_scale,
                                             choose=not args.no_sigma)
        paths[kind] = save(model, args.out / f"digits_{kind}.pt", meta=meta)
        print(_describe(kind, meta), "->", paths[kind])  # noqa: T201 (a script's report)
    return paths


if __name__ == "__main__":
    main()
