r"""The checks a program passes before it is evaluated: Pyro constructs, each evaluated as the
model's density or refused in words; modules in training mode, evaluations that are not
deterministic at a fixed latent, rows whose density reads other rows (``docs/idioms.md``)."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions.torch_distribution import MaskedDistribution
from pyro.distributions.util import scale_and_mask
from pyro.poutine.block_messenger import BlockMessenger
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample
from torch import Tensor, nn
from torch.distributions import Independent
from torch.nn.modules.module import register_module_forward_pre_hook

from pyrolik.exceptions import IdiomWarning
from pyrolik.model.arguments import ModelFn
from pyrolik.model.messenger import is_subsample, is_zero_density, plate_indices, sample_nodes

__all__ = ["Watch", "agree", "check_deterministic", "check_index_free", "check_masked_latents",
           "check_program", "check_rows_independent", "check_sites", "check_subsampling",
           "eval_mode", "subsampled_plates", "training_dependent"]

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
        IdiomWarning, stacklevel=4)


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


class _FixedIndices(Messenger):
    """Give every plate fixed indices (:func:`~pyrolik.model.messenger.plate_indices`)."""

    def __init__(self, shift: int = 0):
        super().__init__()
        self.shift = shift

    def _pyro_sample(self, msg: dict) -> None:
        if is_subsample(msg) and msg["value"] is None:
            msg["value"] = plate_indices(msg["fn"], self.shift)


class Watch:
    """What a traced run hid from its tracer: the sample sites stopped by ``poutine.block``."""

    def __init__(self) -> None:
        self.blocked: list[tuple[str, bool]] = []  # (site, observed)

    @contextlib.contextmanager
    def __call__(self, shift: int = 0) -> Iterator[Watch]:
        original = BlockMessenger._process_message
        blocked = self.blocked

        def process(messenger, msg):
            original(messenger, msg)
            if msg["stop"] and msg["type"] == "sample" and not site_is_subsample(msg):
                blocked.append((msg["name"], bool(msg["is_observed"])))

        with mock.patch.object(BlockMessenger, "_process_message", process), _FixedIndices(shift):
            yield self

    def refuse_blocked(self, what: str) -> None:
        """Raise if a sample site of the ``what`` ("model"/"guide") was hidden by ``poutine.block``."""
        if not self.blocked:
            return
        name, observed = self.blocked[0]
        effect = ("its density would be left out of log p(x)" if observed else
                  "it would draw a new value at every evaluation, which pyrolik cannot integrate out")
        raise ValueError(
            f"poutine.block hides the {'observed' if observed else 'latent'} sample site {name!r} "
            f"of the {what} from pyrolik: {effect}; remove the block around it (hiding params is "
            "fine: poutine.block(hide_types=['param']))")


def subsampled_plates(tr) -> dict[str, tuple[int, int]]:
    """``{plate: (size, subsample_size)}`` for the plates of a trace that draw a subsample (or, with
    more rows than ``size``, would: chains x examples beyond a data set's size)."""
    out = {}
    for name, site in tr.nodes.items():
        if site["type"] == "sample" and site_is_subsample(site):
            fn = site["fn"]
            if fn.subsample_size is not None and fn.subsample_size != fn.size:
                out[name] = (fn.size, fn.subsample_size)
    return out


def check_subsampling(tr, tr_2, rows: int, plate_name: str | None) -> None:
    """Refuse subsampling plates other than one over the examples whose subsample is the rows."""
    doubled = subsampled_plates(tr_2)
    for name, (size, sub) in subsampled_plates(tr).items():
        if plate_name is None:
            if size == rows and doubled.get(name, (None,))[0] == 2 * rows:
                raise ValueError(
                    f"pyro.plate({name!r}, ..., subsample_size={sub}) draws {sub} of the examples "
                    "at each call: pyrolik evaluates every example of x, so run the plate over all "
                    f"of them when evaluating (subsample_size=None; e.g. make it an argument of the "
                    "model and pass model_kwargs)")
        elif name != plate_name:
            raise ValueError(
                f"pyro.plate({name!r}, {size}, subsample_size={sub}) subsamples inside each "
                f"example: pyrolik needs every example's full density; set subsample_size=None "
                "when evaluating")


def check_index_free(fn: ModelFn, x: Tensor, args: tuple, kwargs: dict, tr, plate: str,
                     what: str, trace: Callable) -> None:
    """Refuse a ``what`` whose density reads the indices of the subsampling ``plate``."""
    values = {name: site["value"] for name, site in sample_nodes(tr) if not site["is_observed"]}
    other = trace(pyro.poutine.condition(fn, data=values), x, args, kwargs, shift=1)
    size, _ = subsampled_plates(tr)[plate]
    for name, site in sample_nodes(tr):
        again = other.nodes.get(name)
        if again is None or not _same_log_prob(site, again):
            raise ValueError(
                f"the {what} reads the subsample indices of pyro.plate({plate!r}, {size}, "
                f"subsample_size=...) (site {name!r} changes with them): they say which of the "
                f"{size} rows x holds, which pyrolik cannot know. Pass the rows' indices "
                f"explicitly: pyro.plate({plate!r}, {size}, subsample=idx) with idx a per-example "
                f"argument (a plate over x itself, pyro.plate({plate!r}, len(x)), would number the "
                "rows pyrolik runs, chains x examples, not the examples)")


def _same_log_prob(a: dict, b: dict) -> bool:
    with torch.no_grad():
        try:
            la = a["fn"].log_prob(a["value"])
            lb = b["fn"].log_prob(b["value"])
        except (ValueError, RuntimeError):
            return False
        return la.shape == lb.shape and torch.allclose(la, lb, equal_nan=True)


def check_sites(tr, what: str) -> None:
    """Refuse ``pyro.factor`` and point-mass latents; warn once when a scale is left out."""
    scaled = []
    for name, site in sample_nodes(tr):
        fn = site["fn"]
        if isinstance(fn, dist.Unit) and site["is_observed"]:
            raise ValueError(
                f"pyro.factor({name!r}, ...) adds an unnormalised term to the {what}'s log density: "
                "pyrolik cannot tell a normalised log-likelihood of x (log p(x) is then defined) from "
                "a penalty or a prior term (it is not). If it is the log-likelihood of x, write it "
                f"as an observed site, pyro.sample({name!r}, SomeDistribution(...), obs=x)")
        if not site["is_observed"] and _is_point_mass(fn):
            raise ValueError(
                f"latent site {name!r} of the {what} is a point mass ({type(fn).__name__}): it has "
                f"no density over its values; write it as pyro.deterministic({name!r}, value)")
        if what == "model":
            factor = _user_scale(site)
            if factor is not None:
                scaled.append((name, factor))
            if site["is_observed"]:
                _warn_outside_support(name, site)
    if scaled:  # named without the factor: on the stacked rows it is not the one at the user's x
        names = ", ".join(repr(n) for n, _ in scaled[:4])
        warnings.warn(
            f"pyrolik evaluates the model unscaled: site(s) {names} carry a scale from "
            "poutine.scale or another scale messenger (KL annealing, a 1/N normaliser of the ELBO); "
            "the estimate is log p(x) of the model without it (a scale of 0 used as a mask: use "
            "poutine.mask instead)", IdiomWarning, stacklevel=4)


def _warn_outside_support(name: str, site: dict) -> None:
    """Warn of an observed value outside its support that ``validate_args=False`` let through."""
    fn = site["fn"]
    if site["mask"] is not None or _value_mask(site) is not None:
        return
    try:
        with torch.no_grad():
            ok = bool(fn.support.check(site["value"]).all())
    except (RuntimeError, ValueError, NotImplementedError, TypeError):
        return
    if not ok:
        warnings.warn(
            f"observed site {name!r} has support {fn.support} and x holds values outside it "
            f"(its distribution was built with validate_args=False): pyrolik evaluates the model's "
            "log-density as written, which is not a normalised density of such x (for grey levels "
            "use dist.ContinuousBernoulli, or binarize x)", IdiomWarning, stacklevel=4)


def _is_point_mass(fn) -> bool:
    while isinstance(fn, (Independent, MaskedDistribution)):
        fn = fn.base_dist
    return isinstance(fn, dist.Delta)


def _user_scale(site: dict) -> str | None:
    """The site's scale beyond its subsampling plates' ``size / subsample_size``, shown; None if 1."""
    scale = site["scale"]
    for frame in site["cond_indep_stack"]:
        full = getattr(frame, "full_size", None)
        if full is not None and frame.size not in (None, -1) and full != frame.size:
            scale = scale / (full / frame.size)
    if isinstance(scale, Tensor):
        if scale.numel() and bool(((scale - 1).abs() <= 1e-9).all()):
            return None
        return f"{float(scale.reshape(-1)[0]):.4g}" + ("..." if scale.numel() > 1 else "")
    return None if abs(float(scale) - 1.0) <= 1e-9 else f"{float(scale):.4g}"


def check_masked_latents(model: ModelFn, x: Tensor, args: tuple, kwargs: dict, tr,
                         latent_names: list[str], trace: Callable) -> None:
    """Refuse a masked latent whose masked entries affect another site; otherwise its mask is lifted.

    Checked by autograd: the log density must have zero gradient at the masked entries.
    """
    masks = {}
    for name in latent_names:
        site = tr.nodes[name]
        m = _value_mask(site)
        if m is not None and not bool(m.all()):
            masks[name] = m
    if not masks:
        return
    values = {name: tr.nodes[name]["value"].detach().clone().requires_grad_(name in masks)
              for name in latent_names}
    with torch.enable_grad():
        tr_c = trace(pyro.poutine.condition(model, data=values), x, args, kwargs, no_grad=False)
        total = 0.0
        for _, site in sample_nodes(tr_c):
            if not is_zero_density(site["fn"]):
                total = total + scale_and_mask(site["fn"].log_prob(site["value"]), 1.0,
                                               site["mask"]).sum()
        if not isinstance(total, Tensor) or not total.requires_grad:
            return  # nothing depends on the masked latents at all
        grads = torch.autograd.grad(total, [values[n] for n in masks], allow_unused=True)
    for (name, m), g in zip(masks.items(), grads, strict=True):
        if g is not None and bool((g.abs() * ~m).sum() > 0):
            raise ValueError(
                f"a mask (poutine.mask or .mask()) hides part of the prior density of latent site "
                f"{name!r}, and its masked entries affect other sites: the model's density is "
                "improper there, so log p(x) is not defined. Mask observed sites only (a masked "
                "observation is one that is not observed); give the latent its full prior")


def _value_mask(site: dict) -> Tensor | None:
    """The site's masks (``poutine.mask`` and ``.mask()``) as a boolean over its value; None if none."""
    value, fn = site["value"], site["fn"]
    m = None

    def combine(mask, pad: int):
        nonlocal m
        if mask is None or mask is True:
            return
        t = torch.as_tensor(mask, device=value.device).bool()
        t = t.reshape(t.shape + (1,) * pad)
        m = t if m is None else m & t

    combine(site["mask"], len(fn.event_shape))
    while isinstance(fn, (Independent, MaskedDistribution)):
        if isinstance(fn, MaskedDistribution):
            combine(fn._mask, len(fn.event_shape))
        fn = fn.base_dist
    return None if m is None else m.expand(value.shape)
