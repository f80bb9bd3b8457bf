"""Issue 18, Wu et al. (2017) figure 3: log-likelihood of train and test digits over the training of a VAE.

A digits VAE (the shipped architecture, 8-64-128-64 decoder) is trained with Pyro SVI (ELBO, Adam) on a
small training set, long enough to overfit; a :class:`pyrolik.training.TrainingMonitor` evaluates AIS+encoder
and the IWAE bound on fixed train and test subsets every ``--every`` epochs. Printed: the curves, the
train-test gap over the epochs, and the monitor's cost (seconds per evaluation against seconds per
epoch, and the overhead per epoch at this ``--every``), plus what one evaluation costs next to an epoch
over the full 1297-digit training split.

Claims (exit 1 if one fails): the AIS train-test gap at the end is more than 3 standard errors above
zero and above the gap at the first evaluation after ``--warmup`` epochs (the gap opens up); the test
curve flattens over the second half of training (it gains less than a third of what the train curve
gains).

    PYTHONPATH=. python benchmarks/training_curve.py                 # about 5 minutes on 2 cores
    PYTHONPATH=. python benchmarks/training_curve.py --quick
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pyro
import torch
from pyro.infer import SVI, Trace_ELBO

import pyrolik
from benchmarks._mnist import FIGURES, Claims, load_avg


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--train-size", type=int, default=200, help="training digits (small: overfits)")
    p.add_argument("--epochs", type=int, default=800)
    p.add_argument("--every", type=int, default=25, help="evaluate every k epochs")
    p.add_argument("--warmup", type=int, default=100, help="epochs before the gap is compared")
    p.add_argument("--subset", type=int, default=40, help="train and test digits evaluated")
    p.add_argument("--steps", type=int, default=20, help="AIS+encoder steps")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--samples", type=int, default=100, help="IWAE samples")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=None)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.train_size, args.epochs, args.every, args.warmup, args.subset = 60, 40, 10, 10, 8
        args.steps, args.samples = 5, 10
    torch.set_num_threads(1)
    from pyrolik_models import build
    from pyrolik_models.training.train_digits import digits_split

    claims = Claims()
    split = digits_split(dtype=torch.float32)
    x_train = split.train[: args.train_size]
    pyro.set_rng_seed(args.seed)
    vae = build("digits-vae")
    monitor = pyrolik.training.TrainingMonitor(vae, x_train[: args.subset], split.test[: args.subset],
                                      guide=vae.guide, every=args.every, methods=("ais", "iwae"),
                                      num_steps=args.steps, num_chains=args.chains,
                                      num_samples=args.samples, seed=args.seed)
    print(f"digits VAE {vae.sizes}, sigma {vae.sigma}; {len(x_train)} training digits, {args.epochs} "
          f"epochs (batch 50, Adam {args.lr}); monitor every {args.every} epochs: AIS+encoder "
          f"{args.steps} steps x {args.chains} chains, IWAE {args.samples} samples, on "
          f"{args.subset} train + {args.subset} test digits; {load_avg()}", flush=True)
    print("epoch   ELBO/ex   AIS train  AIS test   gap     IWAE train IWAE test")
    with pyro.get_param_store().scope():
        svi = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": args.lr}), Trace_ELBO())
        vae.train()
        for epoch in range(args.epochs + 1):
            loss = 0.0
            if epoch:  # epoch 0 is the untrained model
                loss = sum(svi.step(b) for b in x_train[torch.randperm(len(x_train))].split(50))
            row = monitor(epoch, force=epoch == args.epochs, elbo=-loss / len(x_train))
            if row:
                print(f"{epoch:5d} {-loss / len(x_train):9.2f} {row['ais/train']:10.2f} "
                      f"{row['ais/test']:9.2f} {row['ais/train'] - row['ais/test']:7.2f} "
                      f"{row['iwae/train']:10.2f} {row['iwae/test']:9.2f}", flush=True)
    vae.eval()
    ds = monitor.to_dataset()
    cost = monitor.cost
    # a cheaper kernel: a fixed step size (no pilot run), on the trained model, same subsets
    cheap = pyrolik.training.TrainingMonitor(vae, x_train[: args.subset], split.test[: args.subset],
                                    guide=vae.guide, methods=("ais", "iwae"), num_steps=args.steps,
                                    num_chains=args.chains, num_samples=args.samples,
                                    kernel=pyrolik.HMC(adapt=None, step_size=0.05), seed=args.seed)
    timing = {}
    for name, m in (("default HMC() (pilot)", monitor), ("HMC(adapt=None, step_size=0.05)", cheap)):
        start = time.perf_counter()
        row = m.evaluate(args.epochs + 1)
        timing[name] = time.perf_counter() - start
        print(f"one evaluation of the trained model with {name}: {timing[name]:.2f} s; AIS test "
              f"{row['ais/test']:.2f}, train {row['ais/train']:.2f}")
    # the cost of one evaluation next to an epoch over the full training split (after the above:
    # this epoch changes the model)
    with pyro.get_param_store().scope():
        svi = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": args.lr}), Trace_ELBO())
        vae.train()
        start = time.perf_counter()
        for b in split.train[torch.randperm(len(split.train))].split(50):
            svi.step(b)
        full_epoch = time.perf_counter() - start
    vae.eval()
    print(f"\ncost: {monitor.describe_cost()}; next to an epoch over the full {len(split.train)}-digit "
          f"split ({full_epoch:.2f} s) one evaluation is {cost['eval_seconds'] / full_epoch:.2f} "
          f"epochs; {load_avg()}")
    gap = (ds["ais_mean"].sel(subset="train") - ds["ais_mean"].sel(subset="test")).values
    se = ((ds["ais_stderr"].sel(subset="train") ** 2 + ds["ais_stderr"].sel(subset="test") ** 2)
          ** 0.5).values
    epochs = ds["epoch"].values
    first = int((epochs >= args.warmup).nonzero()[0][0])
    claims.check(f"the AIS train-test gap opens up: {gap[first]:.1f} nats at epoch {epochs[first]} "
                 f"-> {gap[-1]:.1f} +- {se[-1]:.1f} at epoch {epochs[-1]}",
                 gap[-1] > 3 * se[-1] and gap[-1] > gap[first])
    test = ds["ais_mean"].sel(subset="test").values
    train = ds["ais_mean"].sel(subset="train").values
    half = int((epochs >= epochs[-1] / 2).nonzero()[0][0])
    d_test, d_train = test[-1] - test[half], train[-1] - train[half]
    claims.check(f"over the second half of training the test curve flattens while the train curve "
                 f"rises: test {d_test:+.1f}, train {d_train:+.1f} nats (test peak {test.max():.1f} "
                 f"at epoch {epochs[test.argmax()]})", d_test < d_train / 3)
    path = Path(args.plot or FIGURES / "training_curve_digits_vae.png")
    import matplotlib

    matplotlib.use("Agg")
    from pyrolik.training.monitor import plot_monitor

    ax = plot_monitor(ds, start_epoch=args.every)
    ax.set_title(f"digits VAE on {len(x_train)} digits: train vs test (fig. 3 of Wu et al.)",
                 fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    ax.figure.savefig(path, dpi=90)
    print(f"plot: {path}")
    claims.finish()


if __name__ == "__main__":
    main()
