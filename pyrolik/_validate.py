"""The public boundary's arguments: their checks (one wording each) and their shared documentation."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

__all__ = ["validate_data", "check_count", "check_optional_count", "check_model",
           "PARAMETERS", "shared_params"]


def validate_data(x: Any, name: str = "x") -> Tensor:
    """Check the observations (or other rows, called ``name``) at the public boundary; return them
    unchanged."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (N, *event_shape), got "
                        f"{type(x).__name__}; convert with torch.as_tensor({name}, "
                        "dtype=torch.float32)")
    if x.dim() < 1 or x.shape[0] < 1:
        raise ValueError(f"{name} must have at least one example along dim 0, got shape "
                         f"{tuple(x.shape)}")
    if x.is_floating_point() and not torch.isfinite(x).all():
        bad = (~torch.isfinite(x)).reshape(x.shape[0], -1).any(-1).nonzero().flatten().tolist()
        raise ValueError(f"{name} contains NaN or inf in examples {bad[:10]}"
                         f"{'...' if len(bad) > 10 else ''}; remove or impute them before "
                         "estimating log-likelihoods")
    return x


def check_count(name: str, value: Any) -> int:
    """Raise unless ``value`` is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_model(model: Any) -> Any:
    """Raise unless ``model`` is callable (a Pyro model)."""
    if not callable(model):
        raise TypeError(f"model must be a callable Pyro model, got {type(model).__name__}")
    return model


def check_optional_count(name: str, value: Any) -> int | None:
    """Raise unless ``value`` is ``None`` or a positive integer."""
    return None if value is None else check_count(name, value)


# The estimators' shared parameters, documented once; :func:`shared_params` adds them to a docstring.
PARAMETERS: dict[str, str] = {
    "model": """model : callable
    Pyro model ``model(x, *model_args, **model_kwargs)`` with a plate over dim 0 of ``x`` and an
    observed site (``docs/models.md``).""",
    "x": """x : torch.Tensor, shape ``(N, *event_shape)``
    Observations; the model's data plate runs over dim 0.""",
    "num_examples": """num_examples : int or (x, latents)
    Examples to simulate from the model (with ``data_shape``), or data simulated from it and
    their latents (exact posterior draws), e.g. the output of :func:`pyrolik.simulate`.""",
    "data_shape": """data_shape : tuple of int
    The shape of one simulated example, ``x.shape[1:]``.""",
    "num_steps": """num_steps : int
    Annealing steps T (transitions); ``None`` when ``schedule`` is a tensor.""",
    "num_chains": """num_chains : int
    Independent AIS chains per example (K).""",
    "schedule": """schedule : {"auto", "adaptive", "adaptive_per_example", "sigmoid", "linear", "geometric"} or torch.Tensor
    Betas from exactly 0 to exactly 1 (:mod:`pyrolik.schedules`). ``"auto"``: adaptive
    when the kernel runs a pilot, else sigmoid. ``"adaptive"`` spaces the betas at constant
    thermodynamic speed from the pilot's variance of :math:`\\log p(x \\mid z)`, pooled over the
    batch (``"adaptive_per_example"``: one schedule per example); both need ``adapt="pilot"`` with
    at least 2 pilot chains. ``settings["schedule"]`` records which, ``schedule`` the betas.""",
    "kernel": """kernel : pyrolik.SMC or pyrolik.HMC, optional
    How the chains anneal: :class:`~pyrolik.SMC` (default ``SMC()``: resampling within islands of
    the chains, moved by ``HMC()``: 3 leapfrog steps, half the momentum kept, step sizes from a
    pilot run frozen per temperature; ``docs/kernel.md``); an ``HMC`` alone runs in ``SMC(HMC)``;
    ``SMC(resample=None)`` is plain AIS.""",
    "init": """init : callable, optional
    A Pyro guide :math:`q(z \\mid x)`: anneal from it instead of the prior (AIS+encoder).""",
    "model_args": """model_args : tuple
    Further positional arguments of the model (tensors with N rows are per example).""",
    "model_kwargs": """model_kwargs : dict, optional
    Keyword arguments of the model (tensors with N rows are per example).""",
    "seed": """seed : int, optional
    Makes the run reproducible (recorded in the result).""",
    "batch_size": """batch_size : int, optional
    Examples per pass; results depend on it only through Monte Carlo noise.""",
    "record": """record : int or pyrolik.annealing.Recording, optional
    What the run records besides its final state: the stride of the recorded diagnostics (default
    about 100 records), or a :class:`~pyrolik.annealing.Recording` (states too).""",
    "progress": """progress : bool
    Show a progress bar.""",
    "num_samples": """num_samples : int
    Draws per example (K).""",
    "chunk_size": """chunk_size : int, optional
    Draws per example per model pass (default: about 16k rows per pass); memory does not grow with
    ``num_samples``.""",
    "keep_weights": """keep_weights : bool, optional
    Keep all ``(num_samples, N)`` log-weights (default: when they are at most 1e7 numbers).""",
    "keep_samples": """keep_samples : bool, optional
    Keep every draw, ``samples`` by site ``(num_samples, N, *site)`` (default: when the weights are
    kept and the draws are at most 1e7 numbers). The result keeps ``draws`` either way: a bounded
    number per example resampled by weight as they stream by (:mod:`pyrolik.ops.resampling`).""",
    "dtype": """dtype : torch.dtype, optional
    Of the simulated data (default: torch's default dtype).""",
    "device": """device : torch.device or str, optional
    Of the simulated data.""",
}

_F = TypeVar("_F", bound=Callable[..., Any])


def _section(lines: list[str], i: int) -> bool:
    return i + 1 < len(lines) and bool(lines[i]) and set(lines[i + 1]) == {"-"}


def shared_params(fn: _F) -> _F:
    """Complete ``fn``'s numpydoc ``Parameters`` with :data:`PARAMETERS`, in signature order.

    An entry written in the docstring (``name : type`` or ``a, b``) wins over the shared one.
    """
    lines = inspect.cleandoc(fn.__doc__ or "").splitlines()
    heads = [i for i in range(len(lines)) if _section(lines, i)]
    start = next((i for i in heads if lines[i] == "Parameters"), None)
    if start is None:
        start = heads[0] if heads else len(lines) + 1
        lines[start - 1:start - 1] = ["", "Parameters", "----------"] if not heads else []
        lines[start:start] = ["Parameters", "----------", ""] if heads else []
        heads = [i for i in range(len(lines)) if _section(lines, i)]
    end = next((i for i in heads if i > start), len(lines))
    entries: list[list[str]] = []
    for line in lines[start + 2:end]:
        if line and not line[0].isspace():
            entries.append([line])
        elif entries and line:
            entries[-1].append(line)
    local = {name.strip(): entry for entry in entries
             for name in entry[0].split(" : ")[0].split(",")}
    body: list[str] = []
    done: set[int] = set()
    for name in inspect.signature(fn).parameters:
        entry = local.get(name)
        if entry is not None and id(entry) not in done:
            done.add(id(entry))
            body += entry
        elif entry is None and name in PARAMETERS:
            body += PARAMETERS[name].splitlines()
    body += [line for entry in entries if id(entry) not in done for line in entry]
    lines[start + 2:end] = body + ([""] if end < len(lines) else [])
    fn.__doc__ = "\n".join(lines) + "\n"
    return fn
