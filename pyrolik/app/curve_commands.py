"""``pyrolik sigma-curve``, ``pyrolik rate-distortion`` and ``pyrolik distortion-bdmc``: one run, the whole curve."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from pyrolik.app import commands as cmd
from pyrolik.app.loading import load_callable

__all__ = ["add_parsers", "COMMANDS"]


def _curve_options(p: argparse.ArgumentParser, positive: Callable[[str], int]) -> None:
    g = p.add_argument_group("annealed importance sampling (one run along the distortion path)")
    g.add_argument("--num-steps", type=positive, default=None, metavar="N",
                   help="steps of the base schedule; the grid points are merged in (default 3000; "
                        "with --tolerance, chosen by its search)")
    g.add_argument("--num-chains", type=positive, default=16, metavar="K",
                   help="chains per example (default 16)")
    g.add_argument("--schedule", choices=("geometric", "sigmoid", "linear"), default="geometric",
                   help="base schedule in beta / beta_max (default geometric: equal steps in log "
                        "sigma; not auto/adaptive, which would move the grid points per batch)")
    cmd.add_kernel_options(g, positive)


def add_parsers(sub: Any, common: Callable, positive: Callable, floats: Callable,
                shape: Callable) -> None:
    """Add the three subcommands to the ``pyrolik`` parser's subparsers ``sub``."""
    sc = sub.add_parser(
        "sigma-curve", help="log p_sigma(x) for a grid of sigmas from one AIS run (fig. 2a, Table 3)",
        description="Anneal p(z) exp(-||x - f(z)||^2 / (2 sigma^2)) from sigma = infinity down to "
        "the smallest grid sigma and read log p_sigma(x) of every example at every grid sigma "
        "(stochastic lower bounds): the sigma curve, the best fixed sigma and sigma per example. "
        "The model's observation sites must be Gaussian.")
    common(sc, "result file (.nc): the curve at every grid sigma and its AIS run (read back by "
               "pyrolik summary and pyrolik.load)")
    cmd.add_data_options(sc, positive)
    sc.add_argument("--sigmas", type=floats, required=True, metavar="S1,S2,...",
                    help="the grid of observation standard deviations")
    sc.add_argument("--fixed-sigma", type=float, default=None, metavar="S",
                    help="the fixed sigma Table 3 compares with, e.g. chosen on validation data "
                         "(default: the best on these data)")
    _curve_options(sc, positive)
    cmd.add_tolerance_options(sc, positive, "the curve on the data")

    rd = sub.add_parser(
        "rate-distortion", help="the rate-distortion curve of a decoder model from one AIS run",
        description="Huang et al. (2020): anneal p(z) exp(-beta d(x, f(z))) up to the largest beta "
        "and report, at each grid beta, distortion D and rate R = -beta D - log Z in nats (a point "
        "on or above the model's rate-distortion curve in expectation).")
    common(rd, "result file (.nc): the curve at every grid beta and its AIS run (read back by "
               "pyrolik summary and pyrolik.load)")
    cmd.add_data_options(rd, positive)
    rd.add_argument("--betas", type=floats, required=True, metavar="B1,B2,...",
                    help="inverse temperatures (the largest ends the run)")
    rd.add_argument("--distortion", metavar="SPEC", default=None,
                    help="a distortion d(x, x_hat) as path/to/file.py:function, x_hat the observed "
                         "site's mean (default: squared error through the Gaussian site)")
    _curve_options(rd, positive)
    cmd.add_tolerance_options(rd, positive, "the curve on the data")

    db = sub.add_parser(
        "distortion-bdmc", help="BDMC at points of a sigma curve, on data simulated at that sigma",
        description="At each checked sigma, simulate data with that observation noise and sandwich "
        "log p_sigma(x) between forward and reverse AIS along the betas the one-run curve visits "
        "(same --sigmas, --num-steps and --schedule as the sigma-curve run to check).")
    common(db, "result file (.nc): both bounds at every checked sigma and the simulated data "
               "(read back by pyrolik summary and pyrolik.load)")
    db.add_argument("--sigmas", type=floats, required=True, metavar="S1,S2,...",
                    help="the grid of the sigma-curve run to check")
    db.add_argument("--check", type=floats, default=None, metavar="S1,...",
                    help="the grid sigmas to check (default: all)")
    db.add_argument("--num-examples", type=positive, required=True, metavar="N",
                    help="examples to simulate at each checked sigma")
    db.add_argument("--data-shape", type=shape, required=True, metavar="SHAPE",
                    help="event shape of one example, e.g. 64 or 1,8,8")
    _curve_options(db, positive)


def _run(args, work: Callable[[Any, dict, Callable[[], Any]], Any], report: Callable[[Any], None]) -> int:
    with cmd._session(args) as (shard, device):
        if shard.world_size > 1:
            raise ValueError(f"pyrolik {args.command} runs in one process; start it without "
                             "torchrun")
        model, module, kwargs = cmd._load_model(args, device, shard)
        paths = cmd._outputs(args.output, ["curve"], args.overwrite)
        common = cmd._ais_kwargs(args, shard, args.batch_size, kwargs)
        result = work(model, common, lambda: cmd._read_data(args, model, module, device))
        from pyrolik.io.export import save

        save(result, paths["curve"])
        # as the other commands: fixed-width tables (results_format), --quiet silences progress
        # only, warnings go to stderr
        report(result)
        cmd._warn(getattr(result, "warnings", lambda: [])(), paths["curve"])
        print(f"wrote {paths['curve']}")
        return 0


def sigma_curve(args) -> int:
    """``pyrolik sigma-curve``."""
    import pyrolik

    def work(model, common, read_x):
        return pyrolik.sigma_curve(model, read_x(), args.sigmas, **common)

    def report(curve):
        print(curve.summary())
        best = curve.best_sigma()
        print(f"best fixed sigma on these data: {best.sigma:g} (choose it on validation data)")
        table = curve.optimal_sigma(args.fixed_sigma)
        print(table.summary())
        print(f"note: {table.warning}")

    return _run(args, work, report)


def rate_distortion(args) -> int:
    """``pyrolik rate-distortion``."""
    import pyrolik

    def work(model, common, read_x):
        x = read_x()
        distortion = None if args.distortion is None else load_callable(args.distortion,
                                                                        "distortion")[0]
        return pyrolik.rate_distortion(model, x, args.betas, distortion=distortion, **common)

    return _run(args, work, lambda curve: print(curve.summary()))


def distortion_bdmc(args) -> int:
    """``pyrolik distortion-bdmc``."""
    import pyrolik

    def work(model, common, read_x):
        return pyrolik.distortion_bdmc(model, args.num_examples, sigmas=args.sigmas,
                                       check=args.check, data_shape=args.data_shape, **common)

    return _run(args, work, lambda res: print(res.summary()))


COMMANDS: dict[str, Callable[[Any], int]] = {"sigma-curve": sigma_curve,
                                             "rate-distortion": rate_distortion,
                                             "distortion-bdmc": distortion_bdmc}
