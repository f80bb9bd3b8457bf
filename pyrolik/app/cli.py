"""The ``pyrolik`` command line: ``evaluate``, ``bdmc``, ``summary`` and ``demo`` (``docs/scale.md``)."""

from __future__ import annotations

import argparse
import sys
import warnings

from pyrolik.app.commands import add_data_options, add_kernel_options, add_tolerance_options

__all__ = ["main", "build_parser"]

ESTIMATORS = ("ais", "iwae", "lw", "kde")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit status 2
        self.exit(2, f"pyrolik: error: {message} (see {self.prog} --help)\n")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
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


def _ais_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("annealed importance sampling")
    g.add_argument("--num-steps", type=_positive, default=None, metavar="N",
                   help="annealing steps (default 3000; with --tolerance, chosen by its search)")
    g.add_argument("--num-chains", type=_positive, default=16, metavar="K", help="chains per example (default 16)")
    g.add_argument("--schedule", choices=("auto", "adaptive", "adaptive_per_example", "sigmoid",
                                          "linear", "geometric"),
                   default="auto", help="annealing schedule (default auto: adaptive, built from the "
                   "pilot's variances, when the step sizes come from a pilot; else sigmoid)")
    add_kernel_options(g, _positive)
    c = p.add_argument_group("checkpoint and resume (AIS and BDMC)")
    c.add_argument("--checkpoint", metavar="PATH", default=None,
                   help="save the run's state here every --checkpoint-every steps; if PATH exists, "
                        "resume from it (same model, data, settings and seed required; "
                        "default: no checkpoint)")
    c.add_argument("--checkpoint-every", type=_positive, default=100, metavar="STEPS",
                   help="annealing steps between checkpoints (default 100)")
    c.add_argument("--keep-checkpoint", action="store_true",
                   help="keep the checkpoint after the result is written (default: delete it)")


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
    d = add_data_options(ev, _positive)
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
                   help="samples per example per model pass for iwae and lw (default: all "
                        "--num-samples at once)")
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
    add_tolerance_options(ev, _positive, "AIS on the data")

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
                    help="print every warning, each remark at the level of Monte Carlo noise "
                         "too (default: the warnings to act on, and the remarks counted in one "
                         "line)")
    sm.add_argument("--debug", action="store_true", help="show the full traceback on errors")

    from pyrolik.app import curve_commands  # sigma-curve, rate-distortion, distortion-bdmc

    curve_commands.add_parsers(sub, _common, _positive, _floats, _shape)

    dm = sub.add_parser("demo", help="run the demonstration (pyrolik demo --help for its options)",
                        add_help=False)
    dm.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the demo")
    return parser


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    known = (ValueError, TypeError, FileNotFoundError, ImportError, MemoryError, OSError)
    return text if isinstance(err, known) else f"{type(err).__name__}: {text}"


def _show_warning(message, category, filename, lineno, file=None, line=None):
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
    try:
        with warnings.catch_warnings():
            # the command line's own policy: our warnings once each, in one line; no library noise
            warnings.simplefilter("default")
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", category=FutureWarning)
            if not debug:
                warnings.showwarning = _show_warning
            from pyrolik.app import commands as _commands
            from pyrolik.app import curve_commands as _curves

            return {"evaluate": _commands.evaluate, "bdmc": _commands.bdmc,
                    "summary": _commands.summary, **_curves.COMMANDS}[args.command](args)
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
    import importlib

    try:
        demo = importlib.import_module("pyrolik.app.demo")
    except ModuleNotFoundError as err:
        if err.name != "pyrolik.app.demo":
            raise
        print("pyrolik: error: the demo is not available in this version of pyrolik "
              "(pyrolik.app.demo is missing)", file=sys.stderr)
        return 1
    try:
        status = demo.main(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except Exception as err:  # noqa: BLE001 - one line unless --debug
        if "--debug" in argv:
            raise
        print(f"pyrolik: error: {_one_line(err)}", file=sys.stderr)
        return 1
    return int(status or 0)
