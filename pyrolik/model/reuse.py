r"""What pyrolik computes once and reuses: the targets built between the runs of one call (the
rounds of a budget search, a ``Tolerance``), and recorded evaluations, whose tensor operations are
replayed without re-running the Pyro program's Python (when it is used, when it stays eager and how
to switch it off: ``docs/scale.md``)."""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from collections import Counter
from collections.abc import Callable, Hashable
from contextvars import ContextVar, Token
from typing import Any

import torch
from torch import Tensor, fx
from torch.utils import _pytree as pytree

__all__ = ["MAX_RECORDINGS", "RECORD_AFTER", "Replayed", "TargetCache", "active_cache",
           "fold_constants", "replay_default", "reuse_buffers", "same_value"]

_ACTIVE: ContextVar[TargetCache | None] = ContextVar("pyrolik_target_cache", default=None)


def same_value(a: Any, b: Any) -> bool:
    """Whether two arguments are equal as a model reads them: tensors by shape, dtype, device and
    values; tuples, lists, dicts and dataclasses entry by entry; anything else by ``==``."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and a.device == b.device and bool(torch.equal(a, b)))
    if type(a) is not type(b):
        return False
    if a is b:
        return True
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_value(u, v) for u, v in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a):
        return all(same_value(getattr(a, f.name), getattr(b, f.name))
                   for f in dataclasses.fields(a))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an object that cannot say: not the same
        return False


class TargetCache:
    """The targets built while it is active (``with cache:``), found again by :meth:`find`."""

    def __init__(self) -> None:
        self._entries: list[tuple[tuple, Any]] = []
        self._tokens: list[Token] = []

    def __enter__(self) -> TargetCache:
        self._tokens.append(_ACTIVE.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.reset(self._tokens.pop())

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, key: tuple) -> Any:
        """The target stored under a key equal to ``key`` (:func:`same_value`), or ``None``."""
        return next((t for k, t in self._entries if same_value(k, key)), None)

    def add(self, key: tuple, target: Any) -> None:
        self._entries.append((key, target))


def active_cache() -> TargetCache | None:
    """The cache of the innermost ``with TargetCache():`` block, or ``None``."""
    return _ACTIVE.get()


RECORD_AFTER = 2  # eager evaluations of a key before it is recorded: one-off calls never pay for it
MAX_RECORDINGS = 3  # recordings of one key before giving up (its program keeps changing)

_log = logging.getLogger("pyrolik")


_SWITCH = {"1": True, "true": True, "yes": True, "on": True, "": True,
           "0": False, "false": False, "no": False, "off": False}


def replay_default() -> bool:
    """Whether targets replay recorded evaluations by default: yes, unless ``PYROLIK_REPLAY=0``."""
    value = os.environ.get("PYROLIK_REPLAY", "1")
    if value.strip().lower() not in _SWITCH:
        raise ValueError(f"PYROLIK_REPLAY={value!r} is neither on nor off: set it to 1 (replay, the "
                         "default) or 0 (run the Pyro program at every evaluation)")
    return _SWITCH[value.strip().lower()]


class Replayed:
    """The replay layer: a function of ``u`` replayed from a recording of its tensor operations, per
    layout of ``u`` (a key): eager for the first :data:`RECORD_AFTER` calls of a key, then recorded
    and replayed while ``state_fn(u)`` is unchanged (``statuses``: ``"replay"``, ``"eager"`` or why
    not, per key)."""

    def __init__(self, fn: Callable[[Tensor], object], enabled: bool = True,
                 state_fn: Callable[[Tensor], Hashable] | None = None):
        self.fn = fn
        self.state_fn = state_fn
        self.enabled = enabled
        self.calls: Counter = Counter()
        self.recordings: Counter = Counter()
        self.replays: dict[Hashable, tuple[Callable, Hashable]] = {}
        self.statuses: dict[Hashable, str] = {}

    @property
    def status(self) -> str | None:
        """``"replay"``, ``"eager"`` or why it stays eager, for the latest layout of ``u``; None
        before the first call."""
        return next(reversed(self.statuses.values()), None)

    @property
    def evaluation(self) -> str:
        """One line for a result's settings: ``"replay"``, ``"eager"`` or ``"eager (why)"``."""
        status = self.status or "eager"
        return status if status in ("replay", "eager") else f"eager ({status})"

    def __call__(self, u: Tensor):
        key = (tuple(u.shape), u.stride(), u.dtype, u.device)
        state = self.state_fn(u) if self.enabled and self.state_fn is not None else None
        fn, found = self.fn, self.replays.get(key)
        if found is not None:
            if found[1] == state:
                try:
                    with torch.no_grad():
                        return found[0](u)
                except Exception as err:  # noqa: BLE001 - whatever it was, the program decides
                    del self.replays[key]
                    self._refuse(key, f"the replay failed: {type(err).__name__}: {_first_line(err)}")
                    return fn(u)
            del self.replays[key]  # the program changed since the recording: record it again
            self.calls[key] = 0
            self.statuses[key] = "eager"
        out = fn(u)
        if self.statuses.setdefault(key, "eager") != "eager" or not self.enabled:  # refused, or off
            return out
        self.calls[key] += 1
        if self.calls[key] >= RECORD_AFTER:
            if self.recordings[key] >= MAX_RECORDINGS:
                self._refuse(key, f"its program changed after each of {MAX_RECORDINGS} recordings")
                return out
            self.recordings[key] += 1
            graph, why = record(fn, u, out)
            if graph is None:
                self._refuse(key, why)
            else:
                self.replays[key] = (graph, state)
                self.statuses[key] = "replay"
        return out

    def _refuse(self, key: Hashable, why: str) -> None:
        self.statuses[key] = why
        _log.info("pyrolik: evaluating %s eagerly: %s", key, why)


def record(fn: Callable[[Tensor], object], u: Tensor, at_u: object) -> tuple[Callable | None, str]:
    """Record ``fn`` at ``u`` (``at_u = fn(u)``, computed eagerly); the replay, or None and why not."""
    from torch.fx.experimental.proxy_tensor import make_fx
    devices = [u.device] if u.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the eager calls have shown the program's own warnings
        try:
            graph = make_fx(fn)(u)
            fold_constants(graph)
            reuse_buffers(graph)
        except Exception as err:  # noqa: BLE001 - any failure to record means: stay eager
            return None, f"recording failed: {type(err).__name__}: {_first_line(err)}"
        replay = graph.forward
        v = 0.5 * u.roll(1, 0) + 0.25  # another input: the rows rotated by one, shrunk and shifted
        for point, want in ((u, at_u), (v, fn(v))):
            with torch.no_grad():
                got = replay(point)
            if not _agree(got, want):
                return None, ("the recorded operations disagree with the program (Python-side use "
                              "of tensor values, or randomness)")
    return replay, "replay"


def fold_constants(graph) -> int:
    """Compute once what the program recomputes identically at every call; in place."""
    aten = torch.ops.aten  # metadata_only: operators that read only the shape, dtype and device
    metadata_only = {aten.new_zeros.default, aten.new_ones.default, aten.new_full.default,
                     aten.zeros_like.default, aten.ones_like.default, aten.full_like.default}
    nodes = list(graph.graph.nodes)
    fresh: set = set()
    for node in nodes:
        if _is_pure(node) and (node.target is aten.lift_fresh_copy.default
                               or node.target in metadata_only
                               or all(a in fresh for a in node.all_input_nodes)):
            fresh.add(node)
    if not fresh or any(_mutates(n) and any(a in fresh for a in n.all_input_nodes) for n in nodes):
        return 0  # nothing to fold, or the program writes into what would be folded
    values: dict = {}

    def value(a):
        if a in values:
            return values[a]
        if a.op == "get_attr":
            return getattr(graph, a.target)
        like = a.meta.get("val")  # an argument of a metadata-only operator: a stand-in will do
        return torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device=like.device)

    try:
        with torch.no_grad():
            for node in nodes:
                if node in fresh:
                    args, kwargs = fx.node.map_arg((node.args, node.kwargs), value)
                    values[node] = node.target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - e.g. no metadata for a stand-in: leave the graph as it is
        return 0
    for i, node in enumerate(n for n in nodes if n in fresh and any(u not in fresh for u in n.users)):
        name = f"_folded_{i}"
        graph.register_buffer(name, values[node], persistent=False)
        with graph.graph.inserting_before(node):
            node.replace_all_uses_with(graph.graph.get_attr(name))
    removed = 0
    for node in reversed(nodes):
        if not node.users and (node in fresh or node.op == "get_attr" or _is_pure(node)):
            graph.graph.erase_node(node)
            removed += 1
    graph.graph.lint()
    graph.recompile()
    return removed


def _operator(node) -> torch._ops.OpOverload | None:
    """The ATen operator a node calls, or None (placeholders, attributes, Python functions)."""
    is_op = node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
    return node.target if is_op else None


def _mutates(node) -> bool:
    op = _operator(node)
    return op is not None and op._schema.is_mutable


def _is_pure(node) -> bool:
    """An operator call that mutates nothing and draws no random numbers (unused: safe to drop)."""
    op = _operator(node)
    return op is not None and not op._schema.is_mutable \
        and torch.Tag.nondeterministic_seeded not in op.tags


def _returns_new_tensor(node) -> bool:
    """Whether the operator's result owns its memory (``_unsafe_view`` shares it unannotated)."""
    return _is_pure(node) and node.target is not torch.ops.aten._unsafe_view.default \
        and all(r.alias_info is None for r in node.target._schema.returns)


def reuse_buffers(graph) -> int:
    """Write ``c = a op b`` as ``a.op_(b)`` where ``a`` is a fresh result used only there."""
    aten = torch.ops.aten
    variants = {aten.add.Tensor: aten.add_.Tensor, aten.sub.Tensor: aten.sub_.Tensor,
                aten.mul.Tensor: aten.mul_.Tensor, aten.div.Tensor: aten.div_.Tensor,
                aten.neg.default: aten.neg_.default}
    owned: set = set()  # nodes whose result is a buffer no other node sees
    done = 0
    for node in graph.graph.nodes:
        in_place = variants.get(node.target)
        a = node.args[0] if node.args else None
        if in_place is None or not isinstance(a, fx.Node) or len(a.users) != 1 \
                or not (a in owned or _returns_new_tensor(a)):
            continue
        ma, mc = a.meta.get("tensor_meta"), node.meta.get("tensor_meta")
        if ma is None or mc is None or ma.shape != mc.shape or ma.dtype != mc.dtype:
            continue
        node.target = in_place
        owned.add(node)
        done += 1
    if done:
        graph.graph.lint()
        graph.recompile()
    return done


def _agree(got: object, want: object) -> bool:
    a, spec_a = pytree.tree_flatten(got)
    b, spec_b = pytree.tree_flatten(want)
    if spec_a != spec_b:
        return False
    for x, y in zip(a, b, strict=True):
        if not isinstance(x, Tensor):
            if x != y:
                return False
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        rtol, atol = (1e-10, 1e-10) if x.dtype == torch.float64 else (1e-5, 1e-5)
        if not torch.allclose(x, y.detach(), rtol=rtol, atol=atol, equal_nan=True):
            return False
    return True


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else ""
