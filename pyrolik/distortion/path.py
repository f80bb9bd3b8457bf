r"""The distortion path: a model whose observation term is :math:`-\beta_{\max}\, d(x, f(z))` (+ a constant).

The derivation (Huang et al. 2020; Wu et al. 2017, figure 2(a)) is in ``docs/sigma_and_rd.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import TorchDistribution, constraints
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample
from torch import Tensor
from torch.distributions import Independent, Normal

from pyrolik._random import fork_rng_from
from pyrolik._validate import check_model
from pyrolik.model.hints import Refusal
from pyrolik.model.messenger import is_subsample
from pyrolik.schedules import PILOT_NAMES, geometric, resolve

__all__ = ["DistortionModel", "distortion_model", "squared_error", "as_log_z", "grid_from_sigmas",
           "grid_from_betas", "merge_grid", "sigma_of", "log_normal_constant"]

DistortionFn = Callable[[Tensor, Tensor], Tensor]


def squared_error(x: Tensor, x_hat: Tensor) -> Tensor:
    r"""Elementwise :math:`(x - \hat x)^2` (the site sums it over its event dims).

    Parameters
    ----------
    x : torch.Tensor
        Observed values.
    x_hat : torch.Tensor
        The observed site's mean, broadcastable to ``x``.
    """
    return (x - x_hat) ** 2


class _NegativeDistortion(TorchDistribution):
    r"""An unnormalised observation term :math:`\log f(x) = -B\, d(x, \hat x)` (never sampled)."""

    arg_constraints: dict = {}
    support = constraints.real

    def __init__(self, x_hat: Tensor, fn: DistortionFn, beta_max: float, batch_shape, event_shape,
                 site: str):
        self.x_hat, self.fn, self.beta_max, self.site = x_hat, fn, beta_max, site
        super().__init__(batch_shape, event_shape, validate_args=False)

    def log_prob(self, value: Tensor) -> Tensor:
        d = self.fn(value, self.x_hat)
        if not isinstance(d, Tensor):
            raise TypeError(f"the distortion function returned {type(d).__name__} at site "
                            f"{self.site!r}; it must return a tensor")
        full = self.batch_shape + self.event_shape
        if d.shape == full and len(self.event_shape):
            d = d.sum(tuple(range(-len(self.event_shape), 0)))
        if d.shape != self.batch_shape:
            raise ValueError(
                f"the distortion function returned shape {tuple(d.shape)} at site {self.site!r}; "
                f"return one value per element {tuple(full)} or per example {tuple(self.batch_shape)}")
        return -self.beta_max * d

    def sample(self, sample_shape=torch.Size()):  # noqa: B008 (torch's own default)
        raise NotImplementedError(
            f"site {self.site!r} carries a user distortion, which is not a distribution over x: "
            "data cannot be simulated from it (simulate from the model itself, or use sigma= with "
            "a Gaussian observation site)")


class _SwapObservation(Messenger):
    """Replace every observed site's distribution (see :func:`distortion_model`)."""

    def __init__(self, owner: DistortionModel):
        super().__init__()
        self.owner = owner

    def _pyro_sample(self, msg: dict) -> None:
        if not msg["is_observed"] or is_subsample(msg) or msg["infer"].get("_deterministic"):
            return
        msg["fn"] = self.owner._replace(msg["name"], msg["fn"], msg["scale"], msg["mask"])


class DistortionModel:
    r"""A Pyro model with its observation sites swapped for the distortion path (``docs/sigma_and_rd.md``).

    Called like the wrapped model; an example's observation term is
    :math:`-\beta_{\max} d + D\cdot\mathrm{offset}`, :math:`D` its observed values.
    """

    def __init__(self, model: Callable[..., Any], *, sigma: float | None = None,
                 distortion: DistortionFn | None = None, beta_max: float | None = None):
        check_model(model)
        if (sigma is None) == (distortion is None):
            raise ValueError("pass exactly one of sigma= (Gaussian observation sites, squared "
                             "error) or distortion= (a callable d(x, x_hat)) with beta_max=")
        if sigma is not None:
            sigma = _positive("sigma", sigma)
            if beta_max is not None:
                raise ValueError("beta_max is 1 / (2 sigma^2) with sigma=; pass one of them")
            beta_max = 1.0 / (2.0 * sigma**2)
        else:
            if not callable(distortion):
                raise TypeError(f"distortion must be a callable d(x, x_hat), got "
                                f"{type(distortion).__name__}")
            if beta_max is None:
                raise ValueError("a user distortion needs beta_max= (the largest inverse "
                                 "temperature of the path)")
            beta_max = _positive("beta_max", beta_max)
        self.model, self.sigma, self.distortion = model, sigma, distortion
        self.beta_max: float = beta_max
        #: the constant per observed value in the observation term: -log(2 pi sigma^2) / 2 or 0
        self.offset: float = -0.5 * math.log(2 * math.pi * sigma**2) if sigma is not None else 0.0
        self.__name__ = f"distortion_model({getattr(model, '__name__', type(model).__name__)})"

    def __eq__(self, other: object) -> bool:
        """The same wrapper: the same model and distortion, equal sigma and beta_max."""
        return (isinstance(other, DistortionModel) and other.model is self.model
                and other.distortion is self.distortion and other.sigma == self.sigma
                and other.beta_max == self.beta_max)

    def __hash__(self) -> int:
        return hash((id(self.model), id(self.distortion), self.sigma, self.beta_max))

    def __call__(self, x: Tensor, *args: Any, **kwargs: Any) -> Any:
        with _SwapObservation(self):
            return self.model(x, *args, **kwargs)

    def _replace(self, name: str, fn, scale, mask):
        if mask is not None or not (isinstance(scale, (int, float)) and scale == 1.0):
            raise Refusal(
                f"observed site {name!r} is masked or scaled (poutine.mask / poutine.scale / "
                ".mask()): the distortion path needs every observed value counted once; remove the "
                "mask or scale from the observation site")
        base, ndims = fn, 0  # through plain Independent wrappers
        while isinstance(base, Independent):
            base, ndims = base.base_dist, ndims + base.reinterpreted_batch_ndims
        if type(base).__name__ == "MaskedDistribution":
            raise Refusal(f"observed site {name!r} is masked (.mask()); the distortion path "
                          "needs every observed value counted once: remove the mask")
        shape = fn.batch_shape + fn.event_shape
        if self.sigma is not None:
            if not isinstance(base, Normal):
                raise Refusal(
                    f"observed site {name!r} is {type(base).__name__}, not Normal: the sigma curve "
                    "needs a Gaussian observation site N(x; f(z), sigma^2). For another observation "
                    "model, pyrolik.rate_distortion(model, x, betas, distortion=d, ...) with d(x, "
                    "x_hat) a callable of the site's mean gives a rate-distortion curve instead "
                    "(distortion_model(model, distortion=d, beta_max=...) is its path)")
            new = dist.Normal(base.loc.expand(base.batch_shape),
                              torch.as_tensor(self.sigma, dtype=base.loc.dtype,
                                              device=base.loc.device))
            return new.to_event(ndims) if ndims else new
        try:
            x_hat = base.mean
        except NotImplementedError as err:
            raise Refusal(f"observed site {name!r} ({type(base).__name__}) has no mean to compare "
                          "x with; write the decoder output into a site that has one") from err
        assert self.distortion is not None  # no sigma: __init__ required a distortion
        return _NegativeDistortion(x_hat.expand(shape), self.distortion, self.beta_max,
                                   fn.batch_shape, fn.event_shape, name)

    def num_values(self, x: Tensor, *args: Any, **kwargs: Any) -> int:
        """Observed values per example (D): counted from one trace of the model on ``x`` (the
        whole batch, so that per-example model arguments fit), divided by the number of examples."""
        with pyro.poutine.block(), torch.no_grad(), pyro.validation_enabled(False), \
                fork_rng_from(None, x.device):
            tr = pyro.poutine.trace(self.model).get_trace(x, *args, **kwargs)
        return sum(int(s["value"].numel()) for s in tr.nodes.values()
                   if s["type"] == "sample" and s["is_observed"] and not site_is_subsample(s)
                   and s["value"] is not None) // x.shape[0]


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def distortion_model(model: Callable[..., Any], *, sigma: float | None = None,
                     distortion: DistortionFn | None = None, beta_max: float | None = None
                     ) -> DistortionModel:
    r"""Wrap ``model`` so that its prior path at :math:`b \in [0, 1]` is the distortion path at :math:`\beta = b\,\beta_{\max}`.

    Parameters
    ----------
    model : callable
        Pyro model (``docs/models.md``) to wrap.
    sigma : float, optional
        Gaussian mode: every observed site must be ``Normal``; its scale becomes ``sigma``,
        :math:`\beta_{\max} = 1/(2\sigma^2)`, the distortion is the squared error, and the path
        gives :math:`\log p_{\sigma'}(x)` for :math:`\sigma' \ge \sigma`.
    distortion : callable, optional
        User mode: ``distortion(x, x_hat)``, ``x_hat`` the observed site's mean; with ``beta_max``.
    beta_max : float, optional
        The largest inverse temperature (user mode only).

    Returns
    -------
    DistortionModel
        Callable like ``model``; observation term :math:`-\beta_{\max} d + D \cdot \mathrm{offset}`.

    References
    ----------
    .. [1] S. Huang, A. Makhzani, Y. Cao, R. Grosse. Evaluating lossy compression rates of deep
       generative models. ICML, 2020.
    """
    return DistortionModel(model, sigma=sigma, distortion=distortion, beta_max=beta_max)


# -- the path's grids of sigmas (or betas) -------------------------------------------------------

def _as_grid(values: Sequence[float] | Tensor, name: str) -> Tensor:
    t = torch.as_tensor(values, dtype=torch.float64)
    if t.ndim > 1:
        raise ValueError(f"{name} must be a 1-D list of numbers, got shape {tuple(t.shape)}")
    t = t.reshape(-1)
    if t.numel() == 0 or not torch.isfinite(t).all() or (t <= 0).any():
        raise ValueError(f"{name} must be a non-empty list of positive finite numbers, got "
                         f"{values!r}")
    if len(torch.unique(t)) != len(t):
        raise ValueError(f"{name} must not repeat a value, got {t.tolist()}")
    return t


def grid_from_sigmas(sigmas: Sequence[float] | Tensor) -> tuple[Tensor, float]:
    r"""``(betas, sigma_min)``: :math:`\beta_j = 1/(2\sigma_j^2)`, increasing (sigmas decreasing);
    ``sigmas`` positive, distinct, any order."""
    s = torch.sort(_as_grid(sigmas, "sigmas"), descending=True).values
    return 0.5 / s**2, float(s[-1])


def grid_from_betas(betas: Sequence[float] | Tensor) -> Tensor:
    """The betas (positive, distinct, any order), sorted increasing."""
    return torch.sort(_as_grid(betas, "betas")).values


def merge_grid(grid_b: Tensor, schedule: str | Tensor, num_steps: int | None
               ) -> tuple[Tensor, Tensor]:
    """``(schedule, steps)``: the base schedule in :math:`b` from 0 to 1 with every grid point
    merged in, ``schedule[steps] == grid_b`` (``grid_b`` increasing in :math:`(0, 1]`, ending at 1;
    ``num_steps``: the base schedule's, ``None`` with a tensor)."""
    if isinstance(schedule, str) and schedule in PILOT_NAMES:
        raise ValueError(
            f"schedule={schedule!r} is not available on the distortion path: a schedule built from "
            "the pilot run differs from batch to batch, and the curve needs its grid betas at the "
            "same steps of one schedule; use 'geometric' (the default here: equal steps in log "
            "sigma), 'sigmoid', 'linear' or a tensor of betas from 0 to 1")
    if schedule == "geometric":
        if num_steps is None:
            raise ValueError("num_steps is required with a named schedule")
        base = geometric(num_steps, beta_min=min(1e-4, float(grid_b[0]) / 100))
    else:
        base = resolve(schedule, num_steps)
    if float(grid_b[-1]) != 1.0 or float(grid_b[0]) <= 0:
        raise ValueError("grid points must lie in (0, 1] with the last at exactly 1")
    merged = torch.unique(torch.cat([base, grid_b.to(torch.float64)]))  # sorted
    # betas that differ only by rounding would make a zero-length step: drop the base's copy
    keep = torch.ones_like(merged, dtype=torch.bool)
    for b in grid_b.tolist():
        keep &= ~(((merged - b).abs() <= 1e-12 * max(b, 1e-300)) & (merged != b))
    merged = merged[keep]
    steps = torch.searchsorted(merged, grid_b.to(torch.float64))
    assert torch.equal(merged[steps], grid_b.to(torch.float64))
    return merged, steps


def as_log_z(result: Any) -> Any:
    """A run along a user distortion's path as what it estimates: log Z, not log p(x) (its bound
    stays, on log Z; a file saved before ``quantity`` existed reads back the same way)."""
    return (dataclasses.replace(result, quantity="log Z at its beta (not log p(x))")
            if getattr(result, "quantity", None) == "log p(x)" else result)


def sigma_of(beta: Tensor) -> Tensor:
    r""":math:`\sigma = 1/\sqrt{2\beta}` of positive inverse temperatures."""
    s = torch.sqrt(0.5 / beta)
    # the sigma as typed (0.062, not 0.06199999999999999) where it gives exactly this beta
    typed = torch.tensor([float(f"{v:.15g}") for v in s.reshape(-1).tolist()],
                         dtype=s.dtype, device=s.device).reshape(s.shape)
    return torch.where(0.5 / typed**2 == beta, typed, s)


def log_normal_constant(beta: Tensor, num_values: int) -> Tensor:
    r""":math:`-\tfrac D2 \log(2\pi\sigma^2) = \tfrac D2 \log(\beta/\pi)`: ``log p_sigma = log Z_beta + this``
    (``num_values``: D, observed values per example)."""
    return 0.5 * num_values * torch.log(beta / math.pi)
