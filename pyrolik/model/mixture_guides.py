r"""M2-style guides: a guide that samples a discrete latent the model sums out is a mixture proposal (``docs/idioms.md``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pyro.poutine as poutine

__all__ = ["enumerated_in_guide", "mark_enumerated"]

ModelFn = Callable[..., Any]


def enumerated_in_guide(tr_g) -> tuple[str, ...]:
    """The discrete latent sites of a guide's trace marked ``infer={"enumerate": "parallel"}``."""
    return tuple(s["name"] for s in tr_g.nodes.values()
                 if s["type"] == "sample" and not s["is_observed"]
                 and s["infer"].get("enumerate") == "parallel"
                 and getattr(s["fn"], "support", None) is not None and s["fn"].support.is_discrete)


class mark_enumerated:  # noqa: N801 - used like a Pyro handler (lower case, as config_enumerate)
    """``fn`` with the sample sites ``names`` marked ``infer={"enumerate": "parallel"}``."""

    def __init__(self, fn: ModelFn, names: Iterable[str]):
        self.fn = fn
        self.names = frozenset(names)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__wrapped__ = fn

    def _config(self, msg: Any) -> Any:
        if msg["type"] == "sample" and msg["name"] in self.names and not msg["is_observed"]:
            return {"enumerate": "parallel"}
        return {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return poutine.infer_config(self.fn, config_fn=self._config)(*args, **kwargs)
