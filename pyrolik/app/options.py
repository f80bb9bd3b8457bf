"""Command-line options that several ``pyrolik`` subcommands share, defined once."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from pyrolik.annealing.kernel import SMC
from pyrolik.infer.tolerance import Tolerance

__all__ = ["add_kernel_options", "add_data_options", "add_tolerance_options", "positive_float",
           "resolve_num_steps", "DEFAULT_STEPS"]

DEFAULT_STEPS = 3000  # --num-steps when neither it nor --tolerance is given (3 leapfrog each)


def _threshold(text: str) -> float | None:
    """``--resample``'s value: a fraction, or ``none`` (plain AIS)."""
    if text.lower() in ("none", "off"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1] or 'none', got {text!r}"
                                         ) from None


def add_kernel_options(g: argparse._ArgumentGroup, positive: Callable[[str], int]) -> None:
    """``--num-leapfrog``, ``--momentum-persistence``, ``--step-size``, ``--adapt``,
    ``--target-accept``, ``--step-jitter``, ``--mass-matrix``, ``--resample`` and ``--islands``:
    the kernel of every annealing subcommand."""
    g.add_argument("--num-leapfrog", type=positive, default=3, metavar="L",
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
                        "of at least 4 chains; plain AIS below 8 chains)")


def add_data_options(p: argparse.ArgumentParser,
                     positive: Callable[[str], int]) -> argparse._ArgumentGroup:
    """``--data``, ``--data-key``, ``--limit`` and ``--dtype`` in a group "data" (returned, for
    subcommands that add more)."""
    d = p.add_argument_group("data")
    d.add_argument("--data", required=True, metavar="PATH",
                   help="observations (N, *event_shape): .npy, .npz or .pt")
    d.add_argument("--data-key", default=None, metavar="KEY",
                   help="array to use in an .npz or a dict .pt (default: the only one, or 'x')")
    d.add_argument("--limit", type=positive, default=None, metavar="N",
                   help="evaluate the first N examples only (default: all)")
    d.add_argument("--dtype", choices=("auto", "float32", "float64"), default="auto",
                   help="convert the data to this dtype (default auto: keep floating data, make "
                        "integers/booleans float32; auto refuses floating data whose dtype "
                        "differs from the model's parameters and names the --dtype to pass)")
    return d


def positive_float(text: str) -> float:
    """An argparse type: a finite positive number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def add_tolerance_options(p: argparse.ArgumentParser, positive: Callable[[str], int],
                          final: str) -> None:
    """``--tolerance NATS`` and ``--max-steps N``: the estimator's ``num_steps=Tolerance(NATS, N)``
    (``final``: what runs once the steps are chosen)."""
    t = p.add_argument_group("a budget chosen for a tolerance")
    t.add_argument("--tolerance", type=positive_float, default=None, metavar="NATS",
                   help="choose --num-steps by BDMC on data simulated from the model, doubling "
                        f"the steps until the gap's upper confidence bound is within NATS; then "
                        f"{final} with them (one process; default: --num-steps)")
    t.add_argument("--max-steps", type=positive, default=None, metavar="N",
                   help="with --tolerance: the search's cap (default: the estimator's)")


def resolve_num_steps(args: argparse.Namespace) -> int | Tolerance:
    """The estimator's ``num_steps`` from ``--num-steps`` or the tolerance options (a
    :class:`~pyrolik.Tolerance`; ``DEFAULT_STEPS`` when neither is given)."""
    tolerance = getattr(args, "tolerance", None)
    if tolerance is None:
        if getattr(args, "max_steps", None) is not None:
            raise ValueError("--max-steps caps the search of --tolerance: pass --tolerance NATS too, "
                             "or drop --max-steps")
        return DEFAULT_STEPS if args.num_steps is None else args.num_steps
    if args.num_steps is not None:
        raise ValueError(f"pass either --num-steps (a budget you choose) or --tolerance (a budget "
                         f"chosen by BDMC on simulated data), not both: got --num-steps "
                         f"{args.num_steps} and --tolerance {tolerance}; to bound the search use "
                         "--max-steps")
    return Tolerance(tolerance, *(() if args.max_steps is None else (args.max_steps,)))
