"""The work behind ``pyrolik evaluate``, ``pyrolik bdmc`` and ``pyrolik summary`` (see :mod:`pyrolik.app.cli`),
and the options the estimator commands share."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from pyrolik.annealing.kernel import HMC, SMC
from pyrolik.app import report
from pyrolik.app.loading import (
    check_data_dtype,
    defines_load,
    load_callable,
    load_data,
    load_per_example,
    load_weights,
    parameter_dtype,
    prepare_modules,
)
from pyrolik.exceptions import PyrolikWarning
from pyrolik.execution.checkpoint import remove_checkpoint
from pyrolik.execution.distributed import Shard, init_from_env, main_result, set_threads
from pyrolik.infer.tolerance import Tolerance
from pyrolik.io.export import load, save
from pyrolik.results import EstimateResult

__all__ = ["evaluate", "bdmc", "summary", "add_kernel_options", "add_data_options", "add_tolerance_options",
           "positive_float", "resolve_num_steps", "DEFAULT_STEPS"]


@contextlib.contextmanager
def _session(args) -> Iterator[tuple[Shard, torch.device]]:
    """The command's shard and device; its process group (under torchrun) destroyed at the end."""
    set_threads(args.threads)  # default: PYROLIK_NUM_THREADS, else 1 (benchmarks/RESULTS.md)
    if str(args.device).startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device} but no CUDA device is available; use --device cpu")
    shard, device = init_from_env(args.device, args.backend)
    try:
        yield shard, device
    finally:
        if shard.world_size > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def _barrier(shard: Shard) -> None:
    if shard.world_size > 1:
        torch.distributed.barrier()


def _load_model(args, device: torch.device, shard: Shard) -> tuple[Any, Any, dict]:
    model, module = load_callable(args.model, "model")
    if args.weights:
        load_weights(model, module, args.weights)
    elif defines_load(module) and shard.is_main:
        warnings.warn(f"{getattr(module, '__file__', None) or module.__name__} defines load(path) "
                      "but --weights was not given: the model runs with the parameters it has "
                      "after import (untrained ones, if load() is what fills them in); pass "
                      "--weights PATH to load the trained parameters", PyrolikWarning, stacklevel=2)
    prepare_modules(model, module, device)
    kwargs: Any = {}
    if args.model_kwargs:
        try:
            kwargs = json.loads(args.model_kwargs)
        except json.JSONDecodeError as err:
            raise ValueError(f"--model-kwargs is not valid JSON ({err.msg}): write it as "
                             "'{\"name\": value}'") from err
        if not isinstance(kwargs, dict):
            raise ValueError("--model-kwargs must be a JSON object such as '{\"sigma\": 0.05}'")
    return model, module, kwargs


def _read_data(args, model: Any, module: Any, device: torch.device) -> torch.Tensor:
    """``--data`` with integers in the model's dtype; under ``--dtype auto``, floating data of
    another dtype than the parameters refused."""
    model_dtype = parameter_dtype(model, module)
    x = load_data(args.data, key=args.data_key, dtype=args.dtype, limit=args.limit, device=device,
                  integer_dtype=model_dtype or torch.float32)
    if args.dtype == "auto":
        check_data_dtype(x, model_dtype, args.data)
    return x


def _guide(spec: str | None, device: torch.device):
    if spec is None:
        return None
    guide, module = load_callable(spec, "guide")
    prepare_modules(guide, module, device)
    return guide


def _outputs(path: str, names: list[str], overwrite: bool) -> dict[str, Path]:
    out = Path(path)
    suffix = out.suffix or ".nc"
    paths = ({names[0]: out} if len(names) == 1
             else {n: out.with_name(f"{out.stem}.{n}{suffix}") for n in names})
    for p in paths.values():
        if not p.parent.is_dir():
            raise ValueError(f"the folder of the output {p} does not exist; create it first")
        if p.exists() and not overwrite:
            raise ValueError(f"{p} exists: pass --overwrite to replace it, or choose another --output")
    return paths


def _kernel(args) -> SMC:
    move = HMC(num_leapfrog=args.num_leapfrog, step_size=args.step_size,
               target_accept=args.target_accept, adapt=None if args.adapt == "none" else args.adapt,
               mass_matrix=args.mass_matrix, step_jitter=args.step_jitter,
               momentum_persistence=args.momentum_persistence)
    return SMC(move, resample=args.resample, islands=args.islands)


def _batch_size(batch_size: int | None, n: int, shard: Shard) -> int | None:
    if batch_size is not None or shard.world_size == 1:
        return batch_size
    size = math.ceil(n / shard.world_size)
    if shard.is_main:
        warnings.warn(f"--batch-size not given: using {size} (examples / processes) so that every "
                      "process gets a batch; pass --batch-size to reproduce this run elsewhere",
                      PyrolikWarning, stacklevel=2)
    return size


def _ais_kwargs(args, shard: Shard, batch_size: int | None, kwargs: dict) -> dict[str, Any]:
    return dict(num_steps=resolve_num_steps(args), num_chains=args.num_chains,
                schedule=args.schedule, kernel=_kernel(args), model_kwargs=kwargs, seed=args.seed,
                batch_size=batch_size, progress=not args.quiet and shard.is_main)


def _execution(args, shard: Shard, checkpoint: bool = True) -> contextlib.ExitStack:
    """The run's :func:`pyrolik.checkpoint` and (under torchrun) :func:`pyrolik.distributed`."""
    import pyrolik

    stack = contextlib.ExitStack()
    if shard.world_size > 1:
        stack.enter_context(pyrolik.distributed())
    if checkpoint and args.checkpoint:
        stack.enter_context(pyrolik.checkpoint(args.checkpoint, every=args.checkpoint_every))
    return stack


def _finish_checkpoint(args, shard: Shard) -> None:
    """After rank 0 wrote the result, every process deletes its own checkpoint (unless kept)."""
    if not args.checkpoint or args.keep_checkpoint:
        return
    _barrier(shard)
    from pyrolik.execution.checkpoint import checkpoint_path

    remove_checkpoint(checkpoint_path(args.checkpoint, (shard.rank, shard.world_size)))


def _warn(messages: list[str], path: str | Path | None = None, show_all: bool = False) -> None:
    """A result's warnings on stderr, also under --quiet (:func:`report.stderr_lines`)."""
    where = f"pyrolik summary --all {path if path is not None else 'RESULT'}"
    sys.stdout.flush()
    for line in report.stderr_lines(messages, where=where, show_all=show_all):
        print(line, file=sys.stderr)
    sys.stderr.flush()


def _report(results: dict[str, Any], paths: dict[str, Path]) -> None:
    for name, result in results.items():
        print(result.summary())  # fixed width: the estimate is never elided
        _warn(result.warnings(), paths[name])
        print(f"wrote {paths[name]}\n")


def evaluate(args) -> int:
    """``pyrolik evaluate``: run the chosen estimators on a data file, write one result each."""
    import pyrolik

    with _session(args) as (shard, device):
        model, module, kwargs = _load_model(args, device, shard)
        guide = _guide(args.guide, device)
        if "iwae" in args.estimators and guide is None:
            raise ValueError("the iwae estimator needs a guide: pass --guide path/to/file.py:guide")
        if args.ais_init == "guide" and guide is None:
            raise ValueError("--ais-init guide needs --guide path/to/file.py:guide")
        if "kde" in args.estimators and not args.bandwidth:
            raise ValueError("kde needs --bandwidth H, or a grid H1,H2,... with --validation data")
        x = _read_data(args, model, module, device)
        kwargs = {**kwargs, **load_per_example(args.per_example, args.data, x.shape[0], x,
                                               args.limit, device)}
        if args.per_example and "kde" in args.estimators:
            raise ValueError("kde compares x with samples of the model's marginal, which has no "
                             "per-example arguments: drop kde or --per-example")
        validation = None
        if "kde" in args.estimators and args.validation:  # read before hours of other work
            validation = load_data(args.validation, key=args.data_key,
                                   dtype=str(x.dtype).split(".")[-1], device=device)
        paths = _outputs(args.output, args.estimators, args.overwrite)
        batch_size = _batch_size(args.batch_size, x.shape[0], shard)
        progress = not args.quiet and shard.is_main
        results: dict[str, Any] = {}
        for name in args.estimators:
            result: EstimateResult | None
            if name == "ais":
                with _execution(args, shard):
                    result = pyrolik.ais(model, x, init=guide if args.ais_init == "guide" else None,
                                         record=args.record_every,
                                         **_ais_kwargs(args, shard, batch_size, kwargs))
            elif name in ("iwae", "lw"):
                common = dict(num_samples=args.num_samples, chunk_size=args.chunk_size,
                              model_kwargs=kwargs, seed=args.seed, batch_size=batch_size,
                              progress=progress)
                with _execution(args, shard, checkpoint=False):
                    result = (pyrolik.iwae(model, x, guide, **common) if name == "iwae"
                              else pyrolik.likelihood_weighting(model, x, **common))
            else:  # kde: cheap next to the others, run by the first process only
                result = (_kde(args, model, kwargs, x, validation, device, progress)
                          if shard.is_main else None)
            if shard.is_main:
                result = main_result(result, name)
                save(result, paths[name])
                results[name] = result
            if name == "ais":
                _finish_checkpoint(args, shard)
        if shard.is_main:
            _report(results, paths)
        _barrier(shard)  # every process done before any tears its process group down
        return 0


def _kde(args, model, kwargs, x, validation, device, progress):
    import pyrolik

    samples = pyrolik.simulate(model, args.kde_samples, data_shape=tuple(x.shape[1:]),
                               model_kwargs=kwargs, seed=args.seed, dtype=x.dtype, device=device).x
    return pyrolik.kde(samples, x, bandwidth=args.bandwidth, validation=validation,
                       progress=progress)


def bdmc(args) -> int:
    """``pyrolik bdmc``: simulate from the model, then sandwich log p(x) with forward/reverse AIS."""
    import pyrolik

    with _session(args) as (shard, device):
        model, module, kwargs = _load_model(args, device, shard)
        guide = _guide(args.guide, device)
        paths = _outputs(args.output, ["bdmc"], args.overwrite)
        batch_size = _batch_size(args.batch_size, args.num_examples, shard)
        dtype = (parameter_dtype(model, module) or torch.float32 if args.dtype == "auto"
                 else getattr(torch, args.dtype))
        kwargs = {**kwargs, **load_per_example(args.per_example, None, args.num_examples, None,
                                               device=device)}
        sim = pyrolik.simulate(model, args.num_examples, data_shape=args.data_shape,
                               model_kwargs=kwargs, seed=args.seed, dtype=dtype, device=device)
        with _execution(args, shard):
            result = pyrolik.bdmc(model, sim, init=guide,
                                  **_ais_kwargs(args, shard, batch_size, kwargs))
        if shard.is_main:
            save(main_result(result, "bdmc"), paths["bdmc"])
        _finish_checkpoint(args, shard)
        if shard.is_main:
            _report({"bdmc": result}, paths)
        _barrier(shard)  # every process done before any tears its process group down
        return 0


def summary(args) -> int:
    """``pyrolik summary``: print the summary and warnings of result files (netCDF/zarr only:
    :func:`pyrolik.io.export.load` refuses any other file, and nothing is unpickled)."""
    results = [(path, load(path)) for path in args.results]  # refuse before printing anything
    for i, (path, result) in enumerate(results):
        if i:
            print()
        print(f"{path}:")
        print(result.summary())  # fixed width: the estimate is never elided
        _warn(result.warnings(), path, show_all=args.show_all)
        if args.per_example:
            print(_per_example(result).to_string())
    return 0


def _per_example(result) -> Any:
    if hasattr(result, "per_example"):
        return result.per_example()
    import pandas as pd

    df = pd.DataFrame({"lower": result.lower.log_likelihood.double().cpu().numpy(),
                       "upper": result.upper.log_likelihood.double().cpu().numpy(),
                       "gap": result.per_example_gap.double().cpu().numpy()})
    df.index.name = "example"
    return df


# -- the options the estimator commands share ---------------------------------------------------
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
    """The options of the kernel of every annealing subcommand (``--num-leapfrog``, ...)."""
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


def add_data_options(p: argparse.ArgumentParser, positive: Callable[[str], int]
                     ) -> argparse._ArgumentGroup:
    """``--data``, ``--data-key``, ``--limit`` and ``--dtype`` in a group "data" (returned)."""
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
    """``--tolerance NATS`` and ``--max-steps N`` (``final``: what runs with the chosen steps)."""
    t = p.add_argument_group("a budget chosen for a tolerance")
    t.add_argument("--tolerance", type=positive_float, default=None, metavar="NATS",
                   help="choose --num-steps by BDMC on data simulated from the model, doubling "
                        f"the steps until the gap's upper confidence bound is within NATS; then "
                        f"{final} with them (one process; default: --num-steps)")
    t.add_argument("--max-steps", type=positive, default=None, metavar="N",
                   help="with --tolerance: the search's cap (default: the estimator's)")


def resolve_num_steps(args: argparse.Namespace) -> int | Tolerance:
    """``num_steps``: ``--num-steps``, a :class:`~pyrolik.Tolerance`, or ``DEFAULT_STEPS``."""
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
