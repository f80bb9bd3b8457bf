"""Checkpoint and resume for long runs, written atomically and checked on load."""

from __future__ import annotations

import hashlib
import io
import os
import uuid
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyro
import torch
from torch import nn

from pyrolik._random import fork_rng_from
from pyrolik._validate import check_count
from pyrolik.exceptions import PyrolikWarning
from pyrolik.model.arguments import mark_arguments, slice_arguments, unwrap

__all__ = ["Checkpoint", "fingerprint", "hash_tensors", "qualified_name", "remove_checkpoint",
           "atomic_write_bytes", "checkpoint_path"]

MAGIC = b"PYROLIK-CHECKPOINT 1\n"


# -- hashing -------------------------------------------------------------------------------------
def _update(h, t: torch.Tensor) -> None:
    t = t.detach()
    h.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def hash_tensors(items: Iterable[tuple[Any, Any]], h: Any = None) -> str:
    """SHA-256 of named tensors and plain values (order as given; lists, tuples and dicts of them
    entry by entry)."""
    h = hashlib.sha256() if h is None else h
    for name, value in items:
        h.update(f"<{name}>".encode())
        if isinstance(value, torch.Tensor):
            _update(h, value)
        elif isinstance(value, nn.Module):
            hash_tensors(value.state_dict().items(), h)
        elif isinstance(value, (list, tuple, dict)):
            hash_tensors(value.items() if isinstance(value, dict) else enumerate(value), h)
        else:
            h.update(repr(value).encode())
    return h.hexdigest()


def qualified_name(fn: Any) -> str | None:
    """``module.qualname`` of a function, or of the class of a callable object."""
    if fn is None:
        return None
    obj = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(obj, '__module__', '?')}.{obj.__qualname__}"


def _held_state(fn: Any) -> list[tuple[str, Any]]:
    """Tensors, modules and plain settings a model holds: attributes, closure, referenced globals."""
    out: list[tuple[str, Any]] = []
    if fn is None:
        return out
    if isinstance(fn, nn.Module):
        return [("module", fn)]
    inner = getattr(fn, "__wrapped__", None)  # a wrapper (functools.wraps, pyrolik's model wrappers)
    if inner is not None and inner is not fn:
        out += [(f"wrapped.{k}", v) for k, v in _held_state(inner)]
    if hasattr(fn, "__self__") and hasattr(fn, "__func__"):  # a bound method: its object, too
        return (out + [(f"self.{k}", v) for k, v in _held_state(fn.__self__)]
                + _held_state(fn.__func__))
    if hasattr(fn, "__code__"):  # a function
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
            try:
                out.append((f"closure.{name}", cell.cell_contents))
            except ValueError:  # an empty cell
                continue
        out += [(f"global.{name}", value) for name in fn.__code__.co_names
                if isinstance(value := fn.__globals__.get(name), (torch.Tensor, nn.Module))]
        out += [(f"default.{i}", value) for i, value in enumerate(fn.__defaults__ or ())]
        return [(k, v) for k, v in out if isinstance(v, (torch.Tensor, nn.Module, int, float, str,
                                                         bool, type(None)))]
    return out + [(f"attr.{name}", value)
                  for name, value in (sorted(vars(fn).items()) if hasattr(fn, "__dict__") else [])
                  if isinstance(value, (torch.Tensor, nn.Module, int, float, str, bool, tuple))]


def _probe(fn: Any, x: torch.Tensor, args: tuple, kwargs: dict
           ) -> tuple[list[tuple[str, Any]], list[float]]:
    """A seeded trace of ``fn`` on ``x``: its ``param`` sites, and each sample site's log-density
    (what the model computes, through whatever functions and globals it reads)."""
    if fn is None:
        return [], []
    with fork_rng_from(torch.Generator().manual_seed(0), x.device), torch.no_grad(), \
            pyro.validation_enabled(False):
        tr = pyro.poutine.trace(fn).get_trace(x, *args, **kwargs)
        try:
            tr.compute_log_prob()
        except Exception:  # noqa: BLE001 - a site without a density: the hashes stand alone
            pass
    nodes = tr.nodes.values()
    return (sorted((n["name"], n["value"]) for n in nodes if n["type"] == "param"),
            [float(n["log_prob_sum"]) for n in nodes if "log_prob_sum" in n])


def fingerprint(method: str, *, model: Any, x: torch.Tensor, seed: int, settings: dict,
                guide: Any = None, model_args: tuple = (), model_kwargs: dict | None = None,
                extra: dict[str, Any] | None = None, shard: tuple[int, int] = (0, 1)
                ) -> dict[str, Any]:
    """What identifies a run: a resumed run must match every entry (see the module docstring)."""
    # per-example arguments (pyrolik.model.arguments) follow the one-example probe, and are hashed
    # as tensors, not through the repr of their wrappers
    marked = mark_arguments(tuple(model_args), dict(model_kwargs or {}), x.shape[0])
    probe_args, probe_kwargs = unwrap(*slice_arguments(*marked, 0, 1))
    model_args, kwargs = unwrap(*marked)
    probe = x[:1]
    params, density = _probe(model, probe, probe_args, probe_kwargs)
    guide_params, guide_density = _probe(guide, probe, probe_args, probe_kwargs)
    params += [(f"guide.{k}", v) for k, v in guide_params]
    return {"method": method, "data": hash_tensors([("x", x), ("device", x.device.type)]),
            "schedule/latents": hash_tensors(sorted((extra or {}).items())),
            "model": qualified_name(model),
            "model parameters": hash_tensors(params + _held_state(model)),
            "model density": density + guide_density,
            "model_args/model_kwargs": hash_tensors([("args", a) for a in model_args]
                                                    + sorted(kwargs.items())),
            "guide": qualified_name(guide), "guide parameters": hash_tensors(_held_state(guide)),
            "settings": {k: repr(v) for k, v in settings.items()}, "seed": seed,
            "processes": f"rank {shard[0]} of {shard[1]}",
            "versions": {"torch": str(torch.__version__), "pyro": str(pyro.__version__)}}


# -- files ---------------------------------------------------------------------------------------
def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, then rename it."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _dump(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    payload = buf.getvalue()
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def _read(path: Path, device: torch.device, expected_sha: str | None = None) -> Any:
    fix = (f"delete {path} (and {_batch_dir(path)}) or pass another checkpoint path to start over")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read checkpoint file {path} ({err}); {fix}") from err
    head = len(MAGIC) + 65
    if not raw.startswith(MAGIC) or len(raw) < head:
        raise ValueError(f"{path} is not a pyrolik checkpoint (or is truncated); {fix}")
    sha, payload = raw[len(MAGIC):head - 1].decode(errors="replace"), raw[head:]
    if hashlib.sha256(payload).hexdigest() != sha or (expected_sha and sha != expected_sha):
        raise ValueError(f"checkpoint file {path} is corrupt (its checksum does not match); {fix}")
    try:
        return torch.load(io.BytesIO(payload), map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means a bad file
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"checkpoint file {path} cannot be read ({first}); {fix}") from err


def _batch_dir(path: Path) -> Path:
    return path.with_name(path.name + ".batches")


def remove_checkpoint(path: str | os.PathLike) -> None:
    """Delete a checkpoint file and its folder of completed batches (nothing if absent)."""
    path = Path(path)
    folder = _batch_dir(path)
    if folder.is_dir():
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    path.unlink(missing_ok=True)


def _describe(saved: dict, current: dict) -> list[str]:
    diffs = []
    for key, value in current.items():
        if key == "versions":
            continue
        old = saved.get(key)
        if key == "settings" and isinstance(old, dict):
            diffs += [f"setting {k!r} ({old.get(k)} then, {v} now)"
                      for k, v in value.items() if old.get(k) != v]
        elif key == "model density" and old is not None and len(old) == len(value):
            if not torch.allclose(torch.tensor(old), torch.tensor(value), rtol=1e-6, atol=1e-9,
                                  equal_nan=True):  # what a trace computes, to its last bits
                diffs.append("the model's log-density at a seeded draw")
        elif old != value:
            detail = f" ({old} then, {value} now)" if key in ("method", "seed", "model", "guide",
                                                               "processes") else ""
            diffs.append(f"{key}{detail}")
    return diffs


class Checkpoint:
    """The checkpoint of one run: completed batches on disk, and the batch in progress; opening one of
    another run raises ``ValueError`` naming what differs."""

    def __init__(self, path: str | os.PathLike, every: int, fingerprint: dict[str, Any],
                 device: torch.device | str = "cpu"):
        self.path, self.fingerprint, self.device = Path(path), fingerprint, torch.device(device)
        self.every = check_count("checkpoint_every", every)
        self.done: dict[str, str] = {}  # str(first example) -> sha256 of the batch file
        self.partial: dict[str, Any] | None = None
        if not self.path.parent.is_dir():
            raise ValueError(f"the folder of checkpoint {self.path} does not exist; create it first")
        # temporary files of a run killed while writing (one run per checkpoint path)
        folder = _batch_dir(self.path)
        stale = list(self.path.parent.glob(f".{self.path.name}.*.tmp"))
        for f in stale + (list(folder.glob(".*.tmp")) if folder.is_dir() else []):
            f.unlink(missing_ok=True)
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        state = _read(self.path, self.device)
        if not isinstance(state, dict) or "fingerprint" not in state:
            raise ValueError(f"{self.path} is not a pyrolik checkpoint; delete it or pass another path")
        diffs = _describe(state["fingerprint"], self.fingerprint)
        if diffs:
            raise ValueError(f"checkpoint {self.path} was written by a different run (what "
                             f"differs: {'; '.join(diffs)}): resume with the same model, "
                             "parameters, data, settings and seed, or delete the checkpoint (or "
                             "pass another path) to start over")
        if state["fingerprint"].get("versions") != self.fingerprint["versions"]:
            warnings.warn(f"checkpoint {self.path} was written with {state['fingerprint']['versions']}"
                          f", this run uses {self.fingerprint['versions']}: the resumed result is "
                          "valid but may not be bit-identical to an uninterrupted run",
                          PyrolikWarning, stacklevel=4)
        self.done, self.partial = dict(state["done"]), state["partial"]

    def _write(self) -> None:
        atomic_write_bytes(self.path, _dump({"fingerprint": self.fingerprint, "done": self.done,
                                             "partial": self.partial}))

    def completed(self, start: int) -> Any | None:
        """The stored output of the batch starting at ``start``, or ``None`` if not completed."""
        sha = self.done.get(str(start))
        return None if sha is None else _read(_batch_dir(self.path) / f"{start}.pt", self.device,
                                               expected_sha=sha)

    def resume_state(self, start: int) -> Any | None:
        """The saved state of the batch starting at ``start`` if it was in progress."""
        partial = self.partial
        return partial["state"] if partial is not None and partial["start"] == start else None

    def save_progress(self, start: int, state: Any) -> None:
        """Record the state of the batch in progress (atomically replaces the checkpoint file)."""
        self.partial = {"start": start, "state": state}
        self._write()

    def complete(self, start: int, payload: Any) -> None:
        """Store a finished batch: its own file first, then the checkpoint file that lists it."""
        folder = _batch_dir(self.path)
        folder.mkdir(exist_ok=True)
        data = _dump(payload)
        atomic_write_bytes(folder / f"{start}.pt", data)
        self.done[str(start)] = data[len(MAGIC):len(MAGIC) + 64].decode()
        self.partial = None
        self._write()


def checkpoint_path(path: str | os.PathLike, shard: tuple[int, int] = (0, 1)) -> Path:
    """Each process's own checkpoint, ``ckpt.rank1-of-4.pt`` for ``shard = (rank, world_size)``."""
    path, (rank, world_size) = Path(path), shard
    return path if world_size == 1 else path.with_name(
        f"{path.stem}.rank{rank}-of-{world_size}{path.suffix}")
