r"""Turn a Pyro model (and optionally a guide) into batched log-density functions: the adapter's facade."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyro
import torch
from torch import Tensor

from pyrolik._validate import check_count, validate_data
from pyrolik.model.arguments import ModelFn, mark_arguments, slice_arguments
from pyrolik.model.autoguides import (
    FittedGaussian,
    enumerated_in_guide,
    fitted_gaussian,
    is_autoguide,
    mark_enumerated,
)
from pyrolik.model.discovery import check_guide_sites, discover, trace_guide
from pyrolik.model.evaluation import Draw, KeptGuide, Program, ValueAndGrad
from pyrolik.model.modules import check_program, check_rows_independent
from pyrolik.model.reuse import Replayed, active_cache, replay_default
from pyrolik.model.supports import Layout, SiteLayout, refuse_annealing

__all__ = ["AnnealingPath", "Draw", "Inputs", "SiteLayout", "Target", "ValueAndGrad", "make_target",
           "prepare_inputs"]

PATHS = ("prior", "guide")  # the initial distributions f_0 of an annealing path


class Target:
    """A model (and optional guide) as batched functions of a flat unconstrained latent ``u``,
    built by :func:`make_target`: row ``k * N + n`` is chain ``k`` of example ``n``."""

    def __init__(self, layout: Layout, program: Program, replay: bool = True):
        self.layout = layout
        self.program = program
        self.replay = replay  # replay recorded evaluations in value_and_grad (pyrolik.model.reuse)
        self.kept_guide = KeptGuide(program) if program.guide is not None else None
        self._evaluations: dict[str, Replayed] = {}
        self._first: dict[int, Target] = {}  # first_chains(k), kept with their recordings

    @property
    def dtype(self) -> torch.dtype:
        x = self.program.x
        return x.dtype if x.is_floating_point() else torch.get_default_dtype()

    def first_chains(self, k: int) -> Target:
        """The same target restricted to its first ``k`` chains (rows are chain-major)."""
        if k >= self.layout.num_chains:
            return self
        if k not in self._first:
            self._first[k] = Target(self.layout.first_chains(k), self.program.first_chains(k),
                                    self.replay)
        return self._first[k]

    # -- annealing paths ------------------------------------------------------------------------
    def path(self, name: str = "prior") -> AnnealingPath:
        r"""The annealing path from ``"prior"`` (:math:`f_0 = p(z)`) or ``"guide"`` (:math:`f_0 = q(z
        \mid x)`, AIS+encoder) to :math:`f_1 = p(x, z)`: what the annealing engine evaluates."""
        self._check_path(name)
        return AnnealingPath(self, name)

    def value_and_grad(self, u: Tensor, path: str = "prior") -> ValueAndGrad:
        r"""Both terms of :math:`\log f_\beta = \log f_0 + \beta (\log f_1 - \log f_0)` and their
        gradients; :math:`\log f_0` is :math:`\log p(u)` or :math:`\log q(u \mid x)` by ``path``."""
        return self._evaluation(path)(u)

    def _evaluation(self, path: str) -> Replayed:
        """The layered evaluation of one path, built at its first use."""
        if path not in self._evaluations:
            self._check_path(path)  # raises for the guide path of a program without a guide
            program, kept = self.program, self.kept_guide if path == "guide" else None

            def evaluate(u: Tensor) -> ValueAndGrad:  # one argument: what make_fx records
                return program.value_and_grad(u, kept)

            def state(u: Tensor) -> tuple:
                """What a recording depends on besides its tensors: guide epoch, param store ids."""
                epoch = kept.epoch if kept is not None and kept.current(u) is not None else 0
                return epoch, tuple(id(p) for _, p in pyro.get_param_store().named_parameters())

            self._evaluations[path] = Replayed(evaluate, self.replay, state)
        return self._evaluations[path]

    def _check_path(self, name: str) -> None:
        if name not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {name!r}")
        refuse_annealing(self.layout.circular)  # HMC would move a circular latent over many turns
        if name == "guide":
            self.program.guide_or_raise()

    def evaluation(self, path: str) -> str:
        """One line for a result's settings: ``"replay"``, ``"eager"`` or ``"eager (why)"``."""
        found = self._evaluations.get(path)
        return "eager" if found is None else found.evaluation


@dataclass(frozen=True)
class AnnealingPath:
    r"""One annealing path of a :class:`Target`, :math:`\log f_\beta = (1-\beta)\log f_0 + \beta
    \log f_1`: :math:`f_1 = p(x, z)`, :math:`f_0 = p(z)` (``"prior"``) or :math:`q(z \mid x)`."""

    target: Target
    name: str

    def value_and_grad(self, u: Tensor) -> ValueAndGrad:
        return self.target.value_and_grad(u, self.name)

    def sample_initial(self, generator: torch.Generator | None) -> Tensor:
        """Exact draws of :math:`f_0`, flat unconstrained ``(rows, d)``."""
        program = self.target.program
        return (program.sample_guide(generator) if self.name == "guide"
                else program.sample_prior(generator)).u

    def first_chains(self, k: int) -> AnnealingPath:
        """The same path on the target's first ``k`` chains."""
        return AnnealingPath(self.target.first_chains(k), self.name)

    @property
    def evaluation(self) -> str:
        """How the model was evaluated: ``"replay"``, ``"eager"`` or ``"eager (why)"``."""
        return self.target.evaluation(self.name)


def make_target(model: ModelFn, x: Tensor, num_chains: int = 1, *, model_args: tuple = (),
                model_kwargs: dict | None = None, guide: ModelFn | FittedGaussian | None = None,
                replay: bool | None = None) -> Target:
    """Trace ``model`` on ``x`` once and return its :class:`Target` for ``num_chains`` copies
    (``ValueError``/``TypeError`` for a model that cannot be annealed); ``replay``: replay recorded
    evaluations (:mod:`pyrolik.model.reuse`), by default unless ``PYROLIK_REPLAY=0``."""
    x = validate_data(x)
    check_count("num_chains", num_chains)
    if replay is not None and not isinstance(replay, bool):
        raise TypeError(f"replay must be True, False or None (the environment's PYROLIK_REPLAY), "
                        f"got {replay!r}")
    replay = replay_default() if replay is None else replay
    cache = active_cache() if guide is None else None  # pyrolik.model.reuse: a search's rounds
    key = (model, x, num_chains, tuple(model_args), dict(model_kwargs or {}), replay)
    if cache is not None and (found := cache.find(key)) is not None:
        return found
    marked = mark_arguments(tuple(model_args), dict(model_kwargs or {}), x.shape[0])
    x_rep = x.repeat((num_chains,) + (1,) * (x.dim() - 1)) if num_chains > 1 else x
    if callable(guide) and not is_autoguide(guide) and not isinstance(guide, FittedGaussian):
        # config_enumerate(guide), as Pyro's SS-VAE writes it: the site is summed out in both
        guide_enumerated = enumerated_in_guide(trace_guide(guide, x_rep, num_chains, *marked))
        if guide_enumerated:
            model = mark_enumerated(model, guide_enumerated)
    layout, flipped = discover(model, x_rep, num_chains, *marked)
    flipped_guide: list = []
    guide_enum_dims: int | None = None
    if is_autoguide(guide):
        guide = fitted_gaussian(guide, layout, x.shape[0], x)
    if isinstance(guide, FittedGaussian):
        if guide.num_examples != x.shape[0] or guide.loc.shape[1] != layout.latent_dim:
            raise ValueError(f"the guide ({guide.source}) holds proposals for {guide.num_examples} "
                             f"examples of {guide.loc.shape[1]} latent values, x has {x.shape[0]} "
                             f"examples of {layout.latent_dim}")
    elif guide is not None:
        flipped_guide, guide_enum_dims = check_guide_sites(guide, x_rep, num_chains, *marked,
                                                           layout)
        if guide_enum_dims is not None:  # an M2-style guide: its summed sites are enumerated too
            guide = mark_enumerated(guide, layout.enumerated)
    program = Program(layout, model, x_rep, *marked, guide,
                      eval_modules=bool(flipped or flipped_guide), guide_enum_dims=guide_enum_dims)
    u, density = check_program(program, flipped, flipped_guide)
    check_rows_independent(program, u, density)
    target = Target(layout, program, replay)
    if cache is not None:
        cache.add(key, target)
    return target


@dataclass(frozen=True)
class Inputs:
    """What an estimator passes to :func:`make_target` for each batch of examples."""

    model_args: tuple
    model_kwargs: dict
    guide: Any = None

    def batch(self, start: int, stop: int) -> Inputs:
        args, kwargs = slice_arguments(self.model_args, self.model_kwargs, start, stop)
        guide = self.guide  # a FittedGaussian is sliced too
        return Inputs(args, kwargs,
                      guide.examples(start, stop) if isinstance(guide, FittedGaussian) else guide)


def prepare_inputs(model: ModelFn, x: Tensor, model_args: tuple = (),
                   model_kwargs: dict | None = None, guide: Any = None) -> Inputs:
    """Mark the per-example arguments against all of ``x`` and make an AutoGuide's per-example
    Gaussians, once, before an estimator splits ``x`` into batches (:meth:`Inputs.batch`)."""
    args, kwargs = mark_arguments(tuple(model_args), dict(model_kwargs or {}), x.shape[0])
    if is_autoguide(guide):
        layout, _ = discover(model, x, 1, args, kwargs)
        guide = fitted_gaussian(guide, layout, x.shape[0], x)
    return Inputs(args, kwargs, guide)
