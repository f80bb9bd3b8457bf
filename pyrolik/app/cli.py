"""The ``pyrolik`` command line: every subcommand's options, errors in one line (``docs/scale.md``)."""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from typing import Any

from pyrolik.annealing.kernel import SMC
from pyrolik.app.report import SHOWN

__all__ = ["main", "build_parser"]

ESTIMATORS = ("ais", "iwae", "lw", "kde")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit status 2
        self.exit(2, f"pyrolik: error: {message} (see {self.prog} --help)\n")


def _positive(text: str, number: type = int) -> Any:
    """A positive integer, or with ``number=float`` a finite positive number."""
    what = "integer" if number is int else "number"
    try:
        value = number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive {what}, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive {what}, got {value}")
    return value


def _floats(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(v) for v in text.replace("x", ",").split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a shape such as 784 or 1,28,28, got {text!r}"
                                         ) from None
    if not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected positive dimensions, got {text!r}")
    return shape


def _estimators(text: str) -> list[str]:
    names = [v.strip().lower() for v in text.split(",") if v.strip()]
    names = ["lw" if v in ("likelihood_weighting", "likelihood-weighting") else v for v in names]
    bad = [v for v in names if v not in ESTIMATORS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown estimator(s) {bad}; choose from {', '.join(ESTIMATORS)}")
    return list(dict.fromkeys(names))


def _threshold(text: str) -> float | None:
    """``--resample``'s value: a fraction, or ``none`` (plain AIS)."""
    if text.lower() in ("none", "off"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1] or 'none', got {text!r}"
                                         ) from None


def _common(p: argparse.ArgumentParser, output_help: str) -> None:
    g = p.add_argument_group("model and run")
    g.add_argument("model", help="the Pyro model: path/to/file.py:function or package.module:function")
    g.add_argument("--weights", metavar="PATH",
                   help="trained parameters (a model checkpoint): the model file's load(path) hook "
                        "is called with it; a torch.nn.Module model gets load_state_dict instead")
    g.add_argument("--model-kwargs", metavar="JSON", default=None,
                   help='keyword arguments passed to the model after x, as JSON: \'{"sigma": 0.05}\'')
    g.add_argument("--seed", type=int, default=0, help="random seed, recorded in the result "
                   "(default 0; the same seed gives the same numbers)")
    g.add_argument("--batch-size", type=_positive, default=None, metavar="N",
                   help="examples per pass (default: all at once; lower it if memory runs out)")
    g.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1 ... "
                   "(default cpu; under torchrun, cuda means one GPU per process: LOCAL_RANK)")
    g.add_argument("--threads", type=_positive, default=None, metavar="N",
                   help="CPU threads per process (torch.set_num_threads; default: "
                        "PYROLIK_NUM_THREADS if set, else 1, the fastest on a shared or busy "
                        "machine, see pyrolik.execution.set_threads)")
    g.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="torch.distributed backend under torchrun (default auto: NCCL on CUDA, "
                        "else gloo)")
    o = p.add_argument_group("output")
    o.add_argument("-o", "--output", required=True, metavar="PATH", help=output_help)
    o.add_argument("--overwrite", action="store_true",
                   help="replace existing result files (default: refuse)")
    o.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bars (the summary still goes to stdout, warnings to stderr)")
    o.add_argument("--debug", action="store_true", help="show the full traceback on errors")


def _annealing_options(g: argparse._ArgumentGroup, steps: str, schedules: tuple[str, ...],
                       schedule: str) -> None:
    """The run's steps, chains and schedule (default: ``schedules[0]``), then the kernel's."""
    g.add_argument("--num-steps", type=_positive, default=None, metavar="N",
                   help=f"{steps} (default 3000)")
    g.add_argument("--num-chains", type=_positive, default=16, metavar="K",
                   help="chains per example (default 16)")
    g.add_argument("--schedule", choices=schedules, default=schedules[0], help=schedule)
    g.add_argument("--num-leapfrog", type=_positive, default=3, metavar="L",
                   help="leapfrog steps per HMC move (default 3)")
    g.add_argument("--momentum-persistence", type=float, default=0.5, metavar="ALPHA",
                   help="part of the momentum kept between annealing steps, in [0, 1) (default "
                        "0.5; 0: a fresh momentum at every step)")
    g.add_argument("--step-size", type=float, default=0.1, metavar="EPS",
                   help="HMC step size: the adaptation's start, or the fixed size with --adapt "
                        "none (default 0.1)")
    g.add_argument("--adapt", choices=("pilot", "online", "none"), default="pilot",
                   help="step-size adaptation: a frozen pilot table (default, exact), online "
                        "(slightly biased) or none")
    g.add_argument("--target-accept", type=float, default=None, metavar="A",
                   help="acceptance rate the step-size adaptation aims for (default 0.9 with the "
                        "pilot, 0.65 online)")
    g.add_argument("--step-jitter", type=float, default=0.5, metavar="J",
                   help="each transition's step size is drawn from eps * U(1-J, 1+J) (default 0.5)")
    g.add_argument("--mass-matrix", action="store_true",
                   help="diagonal mass matrix per example and temperature from the pilot "
                        "(default: identity)")
    g.add_argument("--resample", type=_threshold, default=SMC.resample, metavar="T",
                   help="resample an island of an example's chains when its ESS falls below T "
                        f"times its chains, in (0, 1], or 'none' for plain AIS (default "
                        f"{SMC.resample}: at every step; pyrolik.SMC)")
    g.add_argument("--islands", type=int, default=None, metavar="B",
                   help="islands per example, a divisor of --num-chains (default: 2 to 4 islands "
                        "of at least 4 chains; plain AIS where there is no such split, as below 8 "
                        "chains)")


def _ais_options(p: argparse.ArgumentParser) -> None:
    schedules = ("auto", "adaptive", "adaptive_per_example", "sigmoid", "linear", "geometric")
    _annealing_options(p.add_argument_group("annealed importance sampling"), "annealing steps",
                       schedules, "annealing schedule (default auto: adaptive, built from the "
                       "pilot's variances, when the step sizes come from a pilot; else sigmoid)")
    c = p.add_argument_group("checkpoint and resume (AIS and BDMC)")
    c.add_argument("--checkpoint", metavar="PATH", default=None,
                   help="save the run's state here every --checkpoint-every steps; if PATH exists, "
                        "resume from it (same model, data, settings and seed required; "
                        "default: no checkpoint)")
    c.add_argument("--checkpoint-every", type=_positive, default=100, metavar="STEPS",
                   help="annealing steps between checkpoints (default 100)")
    c.add_argument("--keep-checkpoint", action="store_true",
                   help="keep the checkpoint after the result is written (default: delete it)")


def _curve_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("annealed importance sampling (one run along the distortion path)")
    _annealing_options(g, "steps of the base schedule; the grid points are merged in",
                       ("geometric", "sigmoid", "linear"), "base schedule in beta / beta_max "
                       "(default geometric: equal steps in log sigma; not auto/adaptive, which "
                       "would move the grid points per batch)")


def _data_options(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """``--data``, ``--data-key``, ``--limit`` and ``--dtype`` in a group "data" (returned)."""
    d = p.add_argument_group("data")
    d.add_argument("--data", required=True, metavar="PATH",
                   help="observations (N, *event_shape): .npy, .npz or .pt")
    d.add_argument("--data-key", default=None, metavar="KEY",
                   help="array to use in an .npz or a dict .pt (default: the only one, or 'x')")
    d.add_argument("--limit", type=_positive, default=None, metavar="N",
                   help="evaluate the first N examples only (default: all)")
    d.add_argument("--dtype", choices=("auto", "float32", "float64"), default="auto",
                   help="convert the data to this dtype (default auto: keep floating data, make "
                        "integers/booleans the dtype of the model's parameters, float32 if it has "
                        "none; auto refuses floating data whose dtype "
                        "differs from the model's parameters and names the --dtype to pass)")
    return d


def _tolerance_options(p: argparse.ArgumentParser, final: str) -> None:
    """``--tolerance NATS`` and ``--max-steps N`` (``final``: what runs with the chosen steps)."""
    t = p.add_argument_group("a budget chosen for a tolerance")
    t.add_argument("--tolerance", type=lambda text: _positive(text, float), metavar="NATS",
                   help="choose --num-steps by BDMC on data simulated from the model, doubling "
                        f"the steps until the gap's upper confidence bound is within NATS; then "
                        f"{final} with them (one process; default: --num-steps)")
    t.add_argument("--max-steps", type=_positive, default=None, metavar="N",
                   help="with --tolerance: the search's cap (default: the estimator's)")
    steps = next(a for a in p._actions if a.dest == "num_steps")
    steps.help = f"{str(steps.help)[:-1]}; with --tolerance, chosen by its search)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``pyrolik`` command."""
    from pyrolik import __version__

    parser = _Parser(prog="pyrolik", description="Estimate log p(x) of held-out data under "
                     "decoder-based Pyro models, with honest bounds (AIS, BDMC, IWAE, ...).",
                     epilog="Multi-process: torchrun --nproc-per-node P -m pyrolik evaluate ...")
    parser.add_argument("--version", action="version", version=f"pyrolik {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    ev = sub.add_parser("evaluate", help="estimate log p(x) of a data file under a model",
                        description="Estimate log p(x) of every example of a data file. Writes one "
                        "result file per estimator; prints a summary.")
    _common(ev, "result file (.nc); with several estimators, PATH.<name>.nc for each "
                "(run.nc -> run.ais.nc, run.iwae.nc, ...)")
    d = _data_options(ev)
    d.add_argument("--per-example", action="append", default=None, metavar="NAME=KEY",
                   help="a per-example model argument (labels, a mask, covariates): the array KEY "
                        "of the --data file (or NAME=PATH[:KEY]), passed as the model keyword NAME "
                        "with its rows following the examples; repeatable (default: none)")
    e = ev.add_argument_group("estimators")
    e.add_argument("-e", "--estimators", type=_estimators, default=["ais"], metavar="LIST",
                   help="comma-separated: ais (lower bound), iwae (needs --guide), lw (likelihood "
                        "weighting), kde (Parzen, biased) (default: ais)")
    e.add_argument("--guide", metavar="SPEC", default=None,
                   help="a Pyro guide q(z|x): path/to/file.py:guide (for iwae and --ais-init "
                        "guide; default: none)")
    e.add_argument("--ais-init", choices=("prior", "guide"), default="prior",
                   help="AIS path: from the prior (default) or from the guide (AIS+encoder)")
    e.add_argument("--num-samples", type=_positive, default=1000, metavar="K",
                   help="samples per example for iwae and lw (default 1000)")
    e.add_argument("--chunk-size", type=_positive, default=None, metavar="K",
                   help="samples per example per model pass for iwae and lw (default: about "
                        "16384 (sample, example) rows per pass)")
    e.add_argument("--bandwidth", type=_floats, default=None, metavar="H[,H...]",
                   help="kde bandwidth, or a grid chosen on --validation data (required by kde)")
    e.add_argument("--validation", metavar="PATH", default=None,
                   help="held-out data for choosing the kde bandwidth (never the evaluated data; "
                        "required with a bandwidth grid)")
    e.add_argument("--kde-samples", type=_positive, default=10_000, metavar="S",
                   help="model samples for kde (default 10000)")
    _ais_options(ev)
    ev.add_argument("--record-every", type=_positive, default=None, metavar="STEPS",
                    help="ais: stride of the recorded diagnostics (default: about 100 records)")
    _tolerance_options(ev, "AIS on the data")

    bd = sub.add_parser("bdmc", help="sandwich log p(x) on data simulated from the model",
                        description="Bidirectional Monte Carlo: simulate data from the model, then "
                        "forward AIS (lower bound) and reverse AIS (upper bound); the gap bounds "
                        "the error of AIS with these settings.")
    _common(bd, "result file (.nc) holding the simulated data and both runs: forward AIS "
                "(lower bound) and reverse AIS (upper bound)")
    s = bd.add_argument_group("simulation")
    s.add_argument("--num-examples", type=_positive, required=True, metavar="N",
                   help="examples to simulate (required)")
    s.add_argument("--data-shape", type=_shape, required=True, metavar="SHAPE",
                   help="event shape of one example, e.g. 784 or 1,28,28 (required)")
    s.add_argument("--dtype", choices=("auto", "float32", "float64"), default="auto",
                   help="dtype of the simulated data (default auto: the dtype of the model's "
                        "parameters, float32 if it has none)")
    s.add_argument("--per-example", action="append", default=None, metavar="NAME=PATH[:KEY]",
                   help="a per-example model argument with one row per simulated example, passed as "
                        "the model keyword NAME; repeatable (default: none)")
    s.add_argument("--guide", metavar="SPEC", default=None,
                   help="run both directions on the encoder path from this guide (default: the "
                        "prior path)")
    _ais_options(bd)

    sm = sub.add_parser("summary", help="print the summary of result files",
                        description="Print a readable summary (and warnings) of result files.")
    sm.add_argument("results", nargs="+", metavar="RESULT", help="result files written by pyrolik")
    sm.add_argument("--per-example", action="store_true",
                    help="also print one row per example (default: the summary only)")
    sm.add_argument("--all", action="store_true", dest="show_all",
                    help="print every warning, each remark at the level of Monte Carlo noise too "
                         "(default: the warnings to act on, and the remarks counted in one line)")
    sm.add_argument("-q", "--quiet", action="store_true", help="ignored: no progress bars")
    sm.add_argument("--debug", action="store_true", help="show the full traceback on errors")

    sc = sub.add_parser(
        "sigma-curve", help="log p_sigma(x) for a grid of sigmas from one AIS run (fig. 2a, Table 3)",
        description="Anneal p(z) exp(-||x - f(z)||^2 / (2 sigma^2)) from sigma = infinity down to "
        "the smallest grid sigma and read log p_sigma(x) of every example at every grid sigma "
        "(stochastic lower bounds): the sigma curve, the best fixed sigma and sigma per example. "
        "The model's observation sites must be Gaussian.")
    _common(sc, "result file (.nc): the curve at every grid sigma and its AIS run (read back by "
                "pyrolik summary and pyrolik.load)")
    _data_options(sc)
    sc.add_argument("--sigmas", type=_floats, required=True, metavar="S1,S2,...",
                    help="the grid of observation standard deviations")
    sc.add_argument("--fixed-sigma", type=float, default=None, metavar="S",
                    help="the fixed sigma Table 3 compares with, e.g. chosen on validation data "
                         "(default: the best on these data)")
    _curve_options(sc)
    _tolerance_options(sc, "the curve on the data")

    rd = sub.add_parser(
        "rate-distortion", help="the rate-distortion curve of a decoder model from one AIS run",
        description="Huang et al. (2020): anneal p(z) exp(-beta d(x, f(z))) up to the largest beta "
        "and report, at each grid beta, distortion D and rate R = -beta D - log Z in nats (a point "
        "on or above the model's rate-distortion curve in expectation).")
    _common(rd, "result file (.nc): the curve at every grid beta and its AIS run (read back by "
                "pyrolik summary and pyrolik.load)")
    _data_options(rd)
    rd.add_argument("--betas", type=_floats, required=True, metavar="B1,B2,...",
                    help="inverse temperatures (the largest ends the run)")
    rd.add_argument("--distortion", metavar="SPEC", default=None,
                    help="a distortion d(x, x_hat) as path/to/file.py:function, x_hat the observed "
                         "site's mean (default: squared error through the Gaussian site)")
    _curve_options(rd)
    _tolerance_options(rd, "the curve on the data")

    db = sub.add_parser(
        "distortion-bdmc", help="BDMC at points of a sigma curve, on data simulated at that sigma",
        description="At each checked sigma, simulate data with that observation noise and sandwich "
        "log p_sigma(x) between forward and reverse AIS along the betas the one-run curve visits "
        "(same --sigmas, --num-steps and --schedule as the sigma-curve run to check).")
    _common(db, "result file (.nc): both bounds at every checked sigma and the simulated data "
                "(read back by pyrolik summary and pyrolik.load)")
    db.add_argument("--sigmas", type=_floats, required=True, metavar="S1,S2,...",
                    help="the grid of the sigma-curve run to check")
    db.add_argument("--check", type=_floats, default=None, metavar="S1,...",
                    help="the grid sigmas to check (default: all)")
    db.add_argument("--num-examples", type=_positive, required=True, metavar="N",
                    help="examples to simulate at each checked sigma")
    db.add_argument("--data-shape", type=_shape, required=True, metavar="SHAPE",
                    help="event shape of one example, e.g. 64 or 1,8,8")
    _curve_options(db)

    dm = sub.add_parser("demo", help="run the demonstration (pyrolik demo --help for its options)",
                        add_help=False)
    dm.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the demo")
    return parser


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    known = (ValueError, TypeError, FileNotFoundError, ImportError, MemoryError, OSError)
    return text if isinstance(err, known) else f"{type(err).__name__}: {text}"


def _show_warning(message, category, filename, lineno, file=None, line=None):
    SHOWN.add(" ".join(str(message).split()))
    print(f"pyrolik: warning: {' '.join(str(message).split())}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pyrolik`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv[:1] == ["demo"]:
        return _demo(argv[1:])
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    debug = getattr(args, "debug", False)
    SHOWN.clear()
    try:
        with warnings.catch_warnings():
            # the command line's own policy: our warnings once each, in one line; no library noise
            warnings.simplefilter("default")
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", category=FutureWarning)
            if not debug:
                warnings.showwarning = _show_warning
            from pyrolik.app import commands

            run = {"evaluate": commands.evaluate, "bdmc": commands.bdmc, "summary": commands.summary}
            return run.get(args.command, commands.curve)(args)  # else one of the curves
    except KeyboardInterrupt:
        _end_progress_line()
        print("pyrolik: interrupted" + (" (rerun the same command to resume from the checkpoint)"
                                        if getattr(args, "checkpoint", None) else ""),
              file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the command line reports every error in one line
        _end_progress_line()
        if debug:
            raise
        print(f"pyrolik: error: {_one_line(err)}", file=sys.stderr)
        return 1


def _end_progress_line() -> None:
    """Close the progress bars an error or Ctrl-C left open: the message starts a line of its own."""
    from tqdm import tqdm

    bars = list(getattr(tqdm, "_instances", ()))
    for bar in bars:
        bar.close()
    if bars and not sys.stderr.isatty():
        sys.stderr.write("\n")


def _demo(argv: list[str]) -> int:
    demo = importlib.import_module("pyrolik.app.demo")  # at use: its imports are the heaviest
    try:
        status = demo.main(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except Exception as err:  # noqa: BLE001 - one line (the demo has no --debug)
        print(f"pyrolik: error: {_one_line(err)}", file=sys.stderr)
        return 1
    return int(status or 0)
