r"""M2-style guides: a guide that samples a discrete latent the model sums out is a mixture proposal.

Kingma et al.'s M2 model (semi-supervised VAE) has a discrete label :math:`y` and a continuous
:math:`z`; its guide samples :math:`y \sim q(y \mid x)`, then :math:`z \sim q(z \mid x, y)`. pyrolik
sums :math:`y` out of the model exactly (``infer={"enumerate": "parallel"}``), so the proposal for
the remaining latent :math:`z` is the guide's marginal, the mixture

.. math:: q(z \mid x) = \sum_y q(y \mid x)\, q(z \mid x, y),

drawn by running the guide as written (ancestral sampling) and evaluated by running it with
:math:`y` enumerated in parallel and :math:`z` fixed (a log-sum-exp over :math:`y`). With it,
``iwae`` is the natural M2 bound :math:`\mathbb E \log \frac1K \sum_k p(x, z_k) / q(z_k \mid x)`
with :math:`p(x, z) = \sum_y p(x, y, z)`, and ``ais(init=guide)`` starts from and anneals away from
that mixture.

As in Pyro's SS-VAE example, enumeration may be marked in the guide only
(``config_enumerate(guide)``, for ``TraceEnum_ELBO``): a discrete site the guide marks
``infer={"enumerate": "parallel"}`` is summed out in the model too.
"""

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
