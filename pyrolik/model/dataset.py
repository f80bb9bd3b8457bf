r"""A model with global latents as a model of whole data sets: the data set is one example (``docs/evidence.md``)."""

from __future__ import annotations

import math
from typing import Any

import pyro
import pyro.poutine as poutine
import torch
from torch import Tensor

from pyrolik._random import fork_rng_from
from pyrolik.model.arguments import ModelFn
from pyrolik.model.discovery import sample_sites
from pyrolik.model.modules import eval_mode

__all__ = ["PLATE", "WholeDataset"]

PLATE = "dataset"  # the outer plate: one row per copy of a whole data set (unless the model has one)


def _refuse_local_discrete(tr) -> None:
    """Refuse discrete latents inside plates: a row is a data set, its labels would sum jointly."""
    for s in sample_sites(tr):
        if s["is_observed"] or not s["fn"].support.is_discrete:
            continue
        plates = [f.name for f in s["cond_indep_stack"] if f.vectorized]
        if plates:
            raise ValueError(
                f"the discrete latent {s['name']!r} is inside the plate(s) {plates}: "
                "pyrolik.evidence sums discrete latents out only where they are global (outside "
                "every plate); marginalise a per-example label in the model by hand (e.g. "
                "dist.MixtureSameFamily over its classes), or estimate per-example log p(x_n) "
                "with pyrolik.ais if the model has no global latents")


class WholeDataset:
    """``model`` as a Pyro program whose examples are whole data sets (``docs/evidence.md``): a call
    on ``rows`` ``(R, *row_shape)`` runs ``model(x, *model_args, **model_kwargs)`` vectorised over
    the plate ``"dataset"``, its observed sites taking each row's values (``x``: data or a
    placeholder)."""

    def __init__(self, model: ModelFn, x: Tensor, model_args: tuple = (),
                 model_kwargs: dict | None = None):
        self.model = model
        self.x = x
        self.model_args = tuple(model_args)
        self.model_kwargs = dict(model_kwargs or {})
        with fork_rng_from(None), torch.no_grad(), eval_mode():
            tr = poutine.trace(model).get_trace(x, *self.model_args, **self.model_kwargs)
        # the number of batch dims the model's plates use (Pyro's max_plate_nesting)
        self.nesting = max((-f.dim for s in tr.nodes.values() if s["type"] == "sample"
                            for f in s["cond_indep_stack"] if f.dim is not None), default=0)
        names = {f.name for site in tr.nodes.values() for f in site.get("cond_indep_stack", ())}
        self.plate = next(p for p in (PLATE, f"{PLATE}_copies", "_pyrolik_dataset")
                          if p not in names)
        _refuse_local_discrete(tr)
        observed = [s for s in sample_sites(tr) if s["is_observed"]]
        if not observed:
            raise ValueError(
                "the model has no observed site: condition its observation-noise site on the data, "
                "e.g. pyro.sample('x', dist.Normal(loc, sigma).to_event(1), obs=x)")
        # per observed site: its value's shape and how many batch dims the outer plate pads
        self.observed = {s["name"]: (tuple(s["value"].shape),
                                     self.nesting - len(s["fn"].batch_shape)) for s in observed}
        self._values = {s["name"]: s["value"].detach() for s in observed}
        # each latent's shape in the model as written (the outer plate pads global ones with 1s)
        self.latent_shapes = {s["name"]: tuple(s["value"].shape) for s in sample_sites(tr)
                              if not s["is_observed"]}
        only = observed[0]["value"] if len(observed) == 1 else None
        self.is_whole_x = only is not None and only.shape == x.shape and bool(torch.equal(only, x))
        self.__wrapped__ = model  # what a checkpoint's fingerprint reads the model's state from
        self.__name__ = getattr(model, "__name__", type(model).__name__)
        self.__qualname__ = f"WholeDataset({getattr(model, '__qualname__', self.__name__)})"

    def trace_values(self) -> dict[str, Tensor]:
        """The observed sites' values when the model runs on ``x``."""
        return dict(self._values)

    @property
    def row_shape(self) -> tuple[int, ...]:
        """The shape of one row: the data set's, or the observed values' total size."""
        if self.is_whole_x:
            return tuple(self.x.shape)
        return (sum(math.prod(shape) for shape, _ in self.observed.values()),)

    def to_rows(self, values: dict[str, Tensor]) -> Tensor:
        """Observed values ``{site: (R, *site_value_shape)}`` -> rows ``(R, *row_shape)``."""
        if self.is_whole_x:
            (v,) = values.values()
            return v.reshape(v.shape[0], *self.x.shape)
        return torch.cat([values[name].reshape(values[name].shape[0], -1)
                          for name in self.observed], dim=-1)

    def observed_values(self, rows: Tensor) -> dict[str, Tensor]:
        """Rows ``(R, *row_shape)`` -> each observed site's values, shaped for the outer plate."""
        r = rows.shape[0]
        flat = rows.reshape(r, -1)
        out, offset = {}, 0
        for name, (shape, pad) in self.observed.items():
            size = math.prod(shape)
            out[name] = flat[:, offset : offset + size].reshape(r, *(1,) * pad, *shape)
            offset += size
        return out

    def __call__(self, rows: Tensor) -> Any:
        with pyro.plate(self.plate, rows.shape[0], dim=-1 - self.nesting), \
                poutine.condition(data=self.observed_values(rows)):
            return self.model(self.x, *self.model_args, **self.model_kwargs)

    def unpad(self, latents: dict[str, Tensor], lead: int) -> dict[str, Tensor]:
        """Latents ``{site: (*lead dims, ...)}`` in the wrapped layout -> the model's own shapes."""
        return {n: v.reshape(*v.shape[:lead], *self.latent_shapes[n]) for n, v in latents.items()}

    def simulate(self, num_datasets: int, seed: int) -> tuple[Tensor, dict[str, Tensor]]:
        """Rows ``(M, *row_shape)`` of ``num_datasets`` whole data sets drawn from the model's joint
        and their ``{site: (M, ...)}`` latents, in one run; the global RNG is left alone."""
        def joint() -> Any:
            with pyro.plate(self.plate, num_datasets, dim=-1 - self.nesting):
                return self.model(self.x, *self.model_args, **self.model_kwargs)

        generator = torch.Generator(device=self.x.device).manual_seed(seed)
        with fork_rng_from(generator, self.x.device), torch.no_grad(), eval_mode():
            tr = poutine.trace(poutine.uncondition(joint)).get_trace()
        values, latents = {}, {}
        for s in sample_sites(tr):
            name = s["name"]
            if name in self.observed:
                shape = self.observed[name][0]
                values[name] = s["value"].detach().reshape(num_datasets, *shape)
            else:
                latents[name] = s["value"].detach()
        return self.to_rows(values), latents
