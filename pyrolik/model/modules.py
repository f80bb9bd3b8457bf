r"""Modules in training mode, and evaluations that are not deterministic at a fixed latent (``docs/idioms.md``)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.module import register_module_forward_pre_hook

from pyrolik.exceptions import IdiomWarning

__all__ = ["agree", "eval_mode", "check_deterministic", "check_program", "training_dependent"]

_KNOWN = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm, nn.RReLU,
          nn.modules.instancenorm._InstanceNorm)


@contextlib.contextmanager
def eval_mode(flipped: list[nn.Module] | None = None) -> Iterator[list[nn.Module]]:
    """Run every module called inside in eval mode; restore the flags on exit."""
    switched: list[nn.Module] = []

    def hook(module: nn.Module, args) -> None:
        if module.training:
            module.training = False
            switched.append(module)

    handle = register_module_forward_pre_hook(hook)
    try:
        yield switched
    finally:
        handle.remove()
        for m in switched:
            m.training = True
        if flipped is not None:
            flipped.extend(m for m in switched if all(m is not f for f in flipped))


@contextlib.contextmanager
def training_mode(modules: list[nn.Module]) -> Iterator[None]:
    """Run ``modules`` in training mode with their buffers (batch-norm statistics) restored after."""
    saved = [{k: b.clone() for k, b in m.named_buffers(recurse=False)} for m in modules]
    try:
        yield
    finally:
        with torch.no_grad():
            for m, buffers in zip(modules, saved, strict=True):
                for k, b in buffers.items():
                    getattr(m, k).copy_(b)


def training_dependent(flipped: list[nn.Module], evaluate: Callable[[bool], Tensor],
                       what: str) -> None:
    """Warn if running the ``flipped`` modules (found in training mode) in training mode changes the
    ``what``'s density; ``evaluate(train)`` gives the density at a fixed latent, in either mode."""
    if not flipped:
        return
    known = sorted({type(m).__name__ for m in flipped if _depends_on_mode(m)})
    if not known:
        custom = [m for m in flipped if not isinstance(m, _KNOWN)]
        if not custom:
            return
        # a module of another kind may read self.training: compare the two modes (state restored)
        with torch.random.fork_rng(), training_mode(flipped):
            train = evaluate(True)
        if agree(train, evaluate(False)):
            return
        known = sorted({type(m).__name__ for m in custom})[:6]
    warnings.warn(
        f"the {what} calls modules in training mode ({', '.join(known)}): their output is random "
        "or depends on the batch, so pyrolik evaluates them in eval mode, as .eval() would (your "
        "modules keep their flags); call .eval() on them to silence this warning",
        IdiomWarning, stacklevel=4,
    )


def check_deterministic(evaluate: Callable[[], Tensor], what: str) -> Tensor:
    """Refuse a ``what`` whose density at a fixed latent differs between two evaluations; return the
    first."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        first = evaluate()
        torch.manual_seed(1)
        second = evaluate()
    if not agree(first, second):
        gap = float((first - second).abs().nan_to_num(0.0).max())
        raise ValueError(
            f"the {what}'s log density at a fixed latent changed from one evaluation to the next "
            f"(by up to {gap:.3g} nats): something in it draws random numbers outside pyro.sample "
            "(torch.randn, a random layer, .sample() on a distribution). pyrolik needs the density "
            "to be a function of (x, z): make those draws pyro.sample sites, or remove them"
        )
    return first


def check_program(program: Any, flipped_model: list[nn.Module], flipped_guide: list[nn.Module]
                  ) -> tuple[Tensor, Tensor]:
    """Run the checks above on a :class:`~pyrolik.model.evaluation.Program` at one prior draw ``u``;
    return ``u`` and the model's ``(log p(u), log p(x | u))`` there, ``(2, rows)``."""
    with torch.no_grad():
        u = program.sample_prior(None).u

        def model_density(train: bool = False) -> Tensor:
            p = replace(program, eval_modules=False) if train else program
            return torch.stack(p.log_prior_and_obs(u))

        training_dependent(flipped_model, model_density, "model")
        density = check_deterministic(model_density, "model")
        if program.guide is None or not callable(program.guide):
            return u, density

        def guide_density(train: bool = False) -> Tensor:
            p = replace(program, eval_modules=False) if train else program
            return p.log_guide(u)

        training_dependent(flipped_guide, guide_density, "guide")
        check_deterministic(guide_density, "guide")
    return u, density


def _depends_on_mode(module: nn.Module) -> bool:
    """A module of a kind whose output depends on its training flag (dropout with p > 0, ...)."""
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return module.p > 0
    if isinstance(module, nn.modules.instancenorm._InstanceNorm):
        return module.track_running_stats
    return isinstance(module, _KNOWN)


def agree(a: Tensor, b: Tensor) -> bool:
    """Equal up to rounding: 1e-9 (float64) or 1e-4 (other dtypes), relative and absolute."""
    tol = 1e-9 if a.dtype == torch.float64 else 1e-4
    return bool(torch.allclose(a, b, rtol=tol, atol=tol, equal_nan=True))
