"""The work behind the ``pyrolik`` subcommands but ``demo`` (their options: ``cli.py``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import pyrolik
from pyrolik.annealing.kernel import HMC, SMC
from pyrolik.app import report
from pyrolik.app.loading import (
    defines_load,
    load_callable,
    load_data,
    load_per_example,
    load_weights,
    parameter_dtype,
    prepare_modules,
)
from pyrolik.diagnostics.checks import bdmc_gap
from pyrolik.distortion.curve import DistortionCurve
from pyrolik.exceptions import PyrolikWarning
from pyrolik.execution.checkpoint import checkpoint_path, remove_checkpoint
from pyrolik.execution.distributed import Shard, init_from_env, main_result, set_threads
from pyrolik.infer.tolerance import Tolerance
from pyrolik.io.export import load, save
from pyrolik.results import BDMCResult, EstimateResult

__all__ = ["evaluate", "bdmc", "summary", "curve", "resolve_num_steps", "DEFAULT_STEPS"]


@contextlib.contextmanager
def _session(args) -> Iterator[tuple[Shard, torch.device]]:
    """The command's shard and device; its process group (under torchrun) destroyed at the end."""
    set_threads(args.threads)  # default: PYROLIK_NUM_THREADS, else 1 (benchmarks/RESULTS.md)
    if str(args.device).startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device} but no CUDA device is available; use --device cpu")
    shard, device = init_from_env(args.device, args.backend)
    try:
        yield shard, device
        _barrier(shard)  # every process done before any tears its process group down
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
    """``--data``, integers in the model's dtype; ``--dtype auto`` refuses another float dtype."""
    model_dtype = parameter_dtype(model, module)
    x = load_data(args.data, key=args.data_key, dtype=args.dtype, limit=args.limit, device=device,
                  integer_dtype=model_dtype or torch.float32)
    if args.dtype == "auto" and model_dtype not in (None, x.dtype) and x.is_floating_point():
        have, want = str(x.dtype).split(".")[-1], str(model_dtype).split(".")[-1]
        raise ValueError(f"{args.data} holds {have} data but the model's parameters are {want}: "
                         f"pass --dtype {want} to convert the data (or --dtype {have} to keep them, "
                         "if the model converts its inputs itself)")
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
    num_steps = resolve_num_steps(args)  # its errors before the kernel's
    move = HMC(num_leapfrog=args.num_leapfrog, step_size=args.step_size,
               target_accept=args.target_accept, adapt=None if args.adapt == "none" else args.adapt,
               mass_matrix=args.mass_matrix, step_jitter=args.step_jitter,
               momentum_persistence=args.momentum_persistence)
    return dict(num_steps=num_steps, num_chains=args.num_chains, schedule=args.schedule,
                kernel=SMC(move, resample=args.resample, islands=args.islands), model_kwargs=kwargs,
                seed=args.seed, batch_size=batch_size, progress=not args.quiet and shard.is_main)


def _execution(args, shard: Shard, checkpoint: bool = True) -> contextlib.ExitStack:
    """The run's :func:`pyrolik.checkpoint` and (under torchrun) :func:`pyrolik.distributed`."""
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
    remove_checkpoint(checkpoint_path(args.checkpoint, (shard.rank, shard.world_size)))


def _warn(messages: list[str], path: str | Path, show_all: bool = False) -> None:
    """A result's warnings on stderr, also under --quiet (:func:`report.stderr_lines`)."""
    where = f"pyrolik summary --all {path}"
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
            one_array = str(args.validation).lower().endswith(".npy")  # --data-key names nothing
            validation = load_data(args.validation, key=None if one_array else args.data_key,
                                   dtype=str(x.dtype).split(".")[-1], device=device)
        paths = _outputs(args.output, args.estimators, args.overwrite)
        batch_size = _batch_size(args.batch_size, x.shape[0], shard)
        progress = not args.quiet and shard.is_main
        results: dict[str, Any] = {}
        for name in args.estimators:
            result: EstimateResult | None = None
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
            elif shard.is_main:  # kde: cheap next to the others, run by the first process only
                samples = pyrolik.simulate(model, args.kde_samples, data_shape=tuple(x.shape[1:]),
                                           model_kwargs=kwargs, seed=args.seed, dtype=x.dtype,
                                           device=device).x
                result = pyrolik.kde(samples, x, bandwidth=args.bandwidth, validation=validation,
                                     progress=progress)
            if shard.is_main:
                result = main_result(result, name)
                save(result, paths[name])
                results[name] = result
            if name == "ais":
                _finish_checkpoint(args, shard)
        if shard.is_main:
            _report(results, paths)
        return 0


def bdmc(args) -> int:
    """``pyrolik bdmc``: simulate from the model, then sandwich log p(x) with forward/reverse AIS."""
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
        return 0


def summary(args) -> int:
    """``pyrolik summary``: result files' summaries and warnings (netCDF/zarr, never unpickled)."""
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
    """One row per example (per grid point and example for a curve or its BDMC)."""
    import pandas as pd

    if isinstance(result, EstimateResult):
        return result.per_example()
    if isinstance(result, BDMCResult):  # lower, upper, gap and each bound's statistics
        return bdmc_gap(result)
    if isinstance(result, DistortionCurve):  # log p_sigma(x) in the Gaussian mode
        ll = result.log_likelihood
        columns = {"log_z" if ll is None else "log_likelihood": result.log_z if ll is None else ll,
                   "distortion": result.distortion, "rate": result.rate}
    else:  # a DistortionBDMC
        columns = {"lower": result.lower, "upper": result.upper, "distortion": result.distortion}
    key, points = ("beta", result.betas) if result.sigmas is None else ("sigma", result.sigmas)
    n = next(iter(columns.values())).shape[-1]
    index = pd.MultiIndex.from_product([points.tolist(), range(n)], names=[key, "example"])
    return pd.DataFrame({k: v.double().cpu().reshape(-1).numpy() for k, v in columns.items()},
                        index=index)


DEFAULT_STEPS = 3000  # --num-steps when neither it nor --tolerance is given (3 leapfrog each)


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


def curve(args) -> int:
    """``pyrolik sigma-curve``, ``rate-distortion`` and ``distortion-bdmc``: one run, the curve."""
    with _session(args) as (shard, device):
        if shard.world_size > 1:
            raise ValueError(f"pyrolik {args.command} runs in one process; start it without "
                             "torchrun")
        model, module, kwargs = _load_model(args, device, shard)
        paths = _outputs(args.output, ["curve"], args.overwrite)
        common = _ais_kwargs(args, shard, args.batch_size, kwargs)
        result: Any
        if args.command == "sigma-curve":
            x = _read_data(args, model, module, device)
            result = pyrolik.sigma_curve(model, x, args.sigmas, **common)
        elif args.command == "rate-distortion":
            x = _read_data(args, model, module, device)
            distortion = (None if args.distortion is None
                          else load_callable(args.distortion, "distortion")[0])
            result = pyrolik.rate_distortion(model, x, args.betas, distortion=distortion, **common)
        else:
            result = pyrolik.distortion_bdmc(model, args.num_examples, sigmas=args.sigmas,
                                             check=args.check, data_shape=args.data_shape, **common)
        save(result, paths["curve"])
        print(result.summary())  # fixed-width tables; --quiet silences progress only
        if args.command == "sigma-curve":
            best = result.best_sigma()
            print(f"best fixed sigma on these data: {best.sigma:g} (choose it on validation data)")
            table = result.optimal_sigma(args.fixed_sigma)
            print(table.summary())
            print(f"note: {table.warning}")
        _warn(result.warnings(), paths["curve"])
        print(f"wrote {paths['curve']}")
        return 0
