"""Command-line options that several ``pyrolik`` subcommands share, defined once.

The kernel options map one to one onto :class:`pyrolik.HMC` (see ``commands._kernel``), and the data
options onto :func:`pyrolik.app.loading.load_data`; each help text gives the default.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["add_kernel_options", "add_data_options"]


def add_kernel_options(g: argparse._ArgumentGroup, positive: Callable[[str], int]) -> None:
    """``--num-leapfrog``, ``--step-size``, ``--adapt``, ``--target-accept``, ``--step-jitter`` and
    ``--mass-matrix``: the HMC kernel of every annealing subcommand."""
    g.add_argument("--num-leapfrog", type=positive, default=10, metavar="L",
                   help="leapfrog steps per HMC move (default 10)")
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
