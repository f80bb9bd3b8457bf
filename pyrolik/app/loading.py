"""Load what the command line names: a model or guide, its weights, a data file (``docs/scale.md``)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["load_callable", "load_weights", "defines_load", "prepare_modules", "parameter_dtype",
           "load_data", "load_per_example", "DATA_SUFFIXES"]

DATA_SUFFIXES = (".npy", ".npz", ".pt", ".pth")


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} does not exist")
    name = f"pyrolik_user_{path.stem}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path.resolve()):
        return sys.modules[name]
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path.resolve())
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}: Python finds no loader for it; give a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise ImportError(f"importing {path} failed: {type(err).__name__}: {err}") from err
    return module


def load_callable(spec: str, what: str = "model") -> tuple[Any, ModuleType]:
    """``file.py:name`` or ``module:name`` -> (the callable, its module)."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"{what} must be given as path/to/file.py:name or package.module:name, "
                         f"got {spec!r}")
    where, name = spec.rsplit(":", 1)
    if not where or not name:
        raise ValueError(f"{what} must be given as path/to/file.py:name, got {spec!r}")
    if where.endswith(".py") or os.sep in where or "/" in where:
        module = _import_file(Path(where))
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as err:
            raise ImportError(f"cannot import module {where!r} for the {what} ({err}); give a file "
                              "path ending in .py or put the module on PYTHONPATH") from err
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                           and getattr(v, "__module__", None) == module.__name__)
            raise ValueError(f"{where} has no attribute {name!r} for the {what}; callables defined "
                             f"there: {found}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{spec} is a {type(obj).__name__}, not a callable Pyro {what}")
    return obj, module


def load_weights(model: Any, module: ModuleType, path: str | os.PathLike) -> None:
    """Load trained parameters following the convention of ``docs/scale.md``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {path} does not exist")
    hook = getattr(module, "load", None)
    if callable(hook):
        hook(str(path))
        return
    if isinstance(model, nn.Module):
        state = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
            state = state["state_dict"]  # a checkpoint that wraps the state dict
        model.load_state_dict(state)
        return
    raise ValueError(f"cannot load {path} into the model: define a function load(path) in "
                     f"{getattr(module, '__file__', module.__name__)} that loads the weights into "
                     "the model's modules (or make the model a torch.nn.Module)")


def defines_load(module: ModuleType) -> bool:
    """Whether the model's file defines its own ``load(path)`` weights hook."""
    hook = getattr(module, "load", None)
    return callable(hook) and getattr(hook, "__module__", None) == module.__name__


def _modules(model: Any, module: ModuleType) -> list[nn.Module]:
    found = [v for v in vars(module).values() if isinstance(v, nn.Module)]
    if isinstance(model, nn.Module):
        found.append(model)
    return found


def prepare_modules(model: Any, module: ModuleType, device: torch.device) -> None:
    """Put the model's modules in eval mode on ``device``."""
    for m in _modules(model, module):
        m.eval().to(device)


def parameter_dtype(model: Any, module: ModuleType) -> torch.dtype | None:
    """The one floating dtype of the model's modules' parameters (``None``: none, or several)."""
    dtypes = {p.dtype for m in _modules(model, module) for p in m.parameters()
              if p.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 else None


def _pick(arrays: dict[str, Any], key: str | None, path: Path) -> Any:
    if key is not None:
        if key not in arrays:
            raise ValueError(f"{path} has no array {key!r}; it holds {sorted(arrays)}")
        return arrays[key]
    if len(arrays) == 1:
        return next(iter(arrays.values()))
    if "x" in arrays:
        return arrays["x"]
    raise ValueError(f"{path} holds several arrays {sorted(arrays)}: choose one with --data-key")


def _read(path: Path, key: str | None) -> torch.Tensor:
    """The array of a .npy, .npz or .pt file (``key`` picks one of several), as a tensor."""
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        data: Any = np.load(path, allow_pickle=False)
    elif suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    elif suffix in (".pt", ".pth"):
        data = torch.load(path, map_location="cpu", weights_only=True)
    else:
        raise ValueError(f"unsupported data file {path}: use one of {', '.join(DATA_SUFFIXES)}")
    if isinstance(data, dict):
        data = _pick(data, key, path)
    elif key is not None:
        raise ValueError(f"{path} holds one unnamed array, so the key {key!r} names nothing in it: "
                         "give it without a key (--data without --data-key; --per-example "
                         "NAME=PATH.npy, a file of its own) or save named arrays in an .npz")
    if isinstance(data, np.ndarray):
        if data.dtype == object:
            raise ValueError(f"{path} holds an object array; save a numeric array")
        data = torch.from_numpy(np.ascontiguousarray(data))
    if not isinstance(data, torch.Tensor):
        raise ValueError(f"{path} holds a {type(data).__name__}, not an array of observations")
    return data


def load_data(path: str | os.PathLike, *, key: str | None = None, dtype: str = "auto",
              limit: int | None = None, device: torch.device | str = "cpu",
              integer_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Read observations ``(N, *event_shape)`` from .npy, .npz or .pt (tensor or dict)."""
    path = Path(path)
    data = _read(path, key)
    if dtype == "auto":
        target = data.dtype if data.is_floating_point() else integer_dtype
    elif dtype in ("float32", "float64"):
        target = getattr(torch, dtype)
    else:
        raise ValueError(f"dtype must be auto, float32 or float64, got {dtype!r}")
    if data.dim() < 1 or data.shape[0] < 1:
        raise ValueError(f"{path} holds no examples (shape {tuple(data.shape)})")
    if limit is not None:
        data = data[:limit]
    return data.to(device=device, dtype=target)


def load_per_example(specs: list[str] | None, data: str | os.PathLike | None, num_examples: int,
                     like: torch.Tensor | None, limit: int | None = None,
                     device: torch.device | str = "cpu") -> dict[str, Any]:
    """``--per-example NAME=KEY`` or ``NAME=PATH[:KEY]`` as keywords; floats in ``like``'s dtype."""
    from pyrolik.model.arguments import per_example

    out: dict[str, Any] = {}
    for spec in specs or []:
        name, sep, source = spec.partition("=")
        if not sep or not name.isidentifier() or not source:
            raise ValueError(f"--per-example {spec!r}: write NAME=KEY (an array of the --data file) "
                             "or NAME=PATH[:KEY]")
        path_part, _, key = source.partition(":") if source.lower().split(":")[0].endswith(
            DATA_SUFFIXES) else ("", "", source)
        path = Path(path_part) if path_part else (Path(data) if data is not None else None)
        if path is None:
            raise ValueError(f"--per-example {spec!r}: name a file, NAME=PATH[:KEY] (there is no "
                             "--data file here)")
        value = _read(path, key or None)
        if limit is not None and path_part == "":
            value = value[:limit]
        if value.dim() < 1 or value.shape[0] != num_examples:
            raise ValueError(f"--per-example {name}: {path} holds an array of shape "
                             f"{tuple(value.shape)}, not one row for each of the {num_examples} "
                             "examples")
        if value.is_floating_point() and like is not None:
            value = value.to(like.dtype)
        out[name] = per_example(value.to(device))
    return out
