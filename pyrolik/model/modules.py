r"""The checks a program passes before it is evaluated: modules in training mode, evaluations that
are not deterministic at a fixed latent, rows whose density reads other rows (``docs/idioms.md``)."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.module import register_module_forward_pre_hook

from pyrolik.exceptions import IdiomWarning

__all__ = ["agree", "eval_mode", "check_deterministic", "check_program", "check_rows_independent",
           "training_dependent"]

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
    """Refuse a ``what`` whose density at a fixed latent differs between two runs; the first's."""
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
            "to be a function of (x, z): make those draws pyro.sample sites, or remove them")
    return first


def check_program(program: Any, flipped_model: list[nn.Module], flipped_guide: list[nn.Module]
                  ) -> tuple[Tensor, Tensor]:
    """Run the checks above on a :class:`~pyrolik.model.evaluation.Program` at one prior draw ``u``;
    return ``u`` and the model's ``(log p(u), log p(x | u))`` there, ``(2, rows)``."""
    with torch.no_grad():
        u = program.sample_prior(None).u

        def density(train: bool = False, guide: bool = False) -> Tensor:
            p = replace(program, eval_modules=False) if train else program
            return p.log_guide(u) if guide else torch.stack(p.log_prior_and_obs(u))

        training_dependent(flipped_model, density, "model")
        model_density = check_deterministic(density, "model")
        if callable(program.guide):  # a FittedGaussian (an AutoGuide) is no program
            guide_density = functools.partial(density, guide=True)
            training_dependent(flipped_guide, guide_density, "guide")
            check_deterministic(guide_density, "guide")
    return u, model_density


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


def check_rows_independent(program: Any, u: Tensor, full: Tensor) -> None:
    """Refuse a model whose per-row density depends on the other rows of its batch (``full``: its
    ``(log p(u), log p(x | u))`` at ``u`` in the full batch, ``(2, rows)``)."""
    rows, layout = program.rows, program.layout
    if layout.num_examples > 1:  # other examples of the batch: the last two rows, reversed
        index = torch.arange(rows - 1, rows - 1 - min(rows - 1, 2), -1, device=u.device)
        probe, probe_u, probed = program.on_rows(index), u[index], len(index)
    else:  # every row is a copy of one example: run it before a row of other data
        index = torch.full((2,), rows - 1, dtype=torch.long, device=u.device)
        x = program.x[index]
        x = torch.stack([x[0], x[1].reshape(-1).roll(1).reshape(x.shape[1:])])
        probe, probe_u, probed = program.on_rows(index, x), u[index], 1
        probe_u = torch.stack([probe_u[0], 0.5 * probe_u[1] + 0.25])
    try:
        with torch.no_grad(), torch.random.fork_rng():
            alone = torch.stack(probe.log_prior_and_obs(probe_u))[:, :probed]
    except Exception as err:  # noqa: BLE001 - a model that needs its batch as it is
        if probed == 1:
            return  # it fails on made-up data: nothing learnt about the user's rows
        raise ValueError(
            f"the model fails when run on {probed} rows of its batch ({type(err).__name__}: "
            f"{str(err).strip()[:200]}): pyrolik runs the examples in batches of any size "
            "(num_chains x batch_size rows, the last batch smaller), so the model must run on any "
            "number of rows") from err
    want = full[:, index[:probed]]
    if _close(alone, want):
        return
    gap = (alone - want).abs().nan_to_num(0.0)
    term, j = divmod(int(gap.reshape(-1).argmax()), probed)
    chain, example = divmod(int(index[j]), layout.num_examples)
    what = "log p(z)" if term == 0 else f"log p(x | z) (observed sites {list(layout.observed)})"
    raise ValueError(
        f"the model's density of one example depends on the other rows of its batch: {what} of "
        f"example {example} (chain {chain}) is {float(want[term, j]):.6g} in the batch of {rows} "
        f"rows and {float(alone[term, j]):.6g} in a batch of 2 rows at the same latents. Something "
        "in the model reads across the plate over the examples: a batch statistic (x.mean(0), "
        "z - z.mean(0), F.batch_norm(training=True), a softmax over dim 0), the rows' positions "
        "(torch.arange(len(x)), noise drawn after torch.manual_seed), or one row's latent in "
        "another row's density. pyrolik folds chains and batches into the plate, so each "
        "example's density must depend on its own row only: compute such statistics once, outside "
        "the model, and pass them as a shared argument (pyrolik.model.shared(t))")


def _close(a: Tensor, b: Tensor) -> bool:
    """Equal up to float32 rounding (another batch shape may reorder a matrix product's sums)."""
    tol = 1e-5 if torch.finfo(a.dtype).bits >= 32 else 1e-2
    return bool(torch.allclose(a, b, rtol=tol, atol=tol, equal_nan=True))
