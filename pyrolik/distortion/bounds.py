r"""Sandwiching the one-run curve: forward and reverse AIS at chosen betas of the distortion path.

What reverse AIS needs. Reverse AIS from :math:`\beta_j` down to 0 is a stochastic *upper* bound on
:math:`\log Z_{\beta_j}(x)` only when it starts from exact draws of :math:`q_{\beta_j}(z \mid x)
\propto p(z) e^{-\beta_j d(x, f(z))}`. Two consequences:

* One reverse run gives an upper bound at its starting beta *only*. Its running weights at an
  intermediate :math:`\beta_i < \beta_j` estimate :math:`Z_{\beta_i}/Z_{\beta_j}` without bias, which
  bounds :math:`\log Z_{\beta_i}` from neither side, and its states there are not exact draws of
  :math:`q_{\beta_i}`. An upper bound at every grid beta needs exact draws at every grid beta.
* Exact draws of :math:`q_\beta` for *real* data are not available in general. For the squared error
  they are for *simulated* data: :math:`z \sim p(z)`, :math:`x = f(z) + \sigma\varepsilon`,
  :math:`\sigma = 1/\sqrt{2\beta}`, makes :math:`z` an exact draw of
  :math:`p(z \mid x) = q_\beta(z \mid x)` (the Gaussian mode of
  :func:`pyrolik.model.distortion.distortion_model` is that noise model). A user distortion is not
  a noise model (nothing to simulate from), so there the exact draws must be supplied (``data=``).

So :func:`distortion_bdmc` does what Huang et al. (2020, section 5) did: at each checked beta it
simulates data at that noise level and runs BDMC (:func:`pyrolik.bdmc`, forward and reverse AIS in one
batched pass) along the *same* betas the one-run curve visits up to there. The gap bounds the error
of the one-run estimate at that beta on data like the model's. On simulated data the distortion of
the exact draw, :math:`d(x, f(z))`, is an unbiased one-draw estimate of :math:`D_\beta(x)`, so the
rate is sandwiched at the exact distortion:

.. math:: \mathbb E[-\hat U - \beta d] \le R_\beta = -\beta D_\beta - \log Z_\beta
   \le \mathbb E[-\hat L - \beta d].
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd
import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count
from pyrolik.distortion.export import bdmc_fields, bdmc_to_datatree
from pyrolik.distortion.schedule import (
    grid_from_betas,
    grid_from_sigmas,
    log_normal_constant,
    merge_grid,
    sigma_of,
)
from pyrolik.execution.distributed import main_result
from pyrolik.infer.latents import expand_latents, latents_to_flat
from pyrolik.infer.sandwich import bdmc
from pyrolik.mcmc.hmc import HMC
from pyrolik.model.distortion import DistortionFn, distortion_model
from pyrolik.model.target import make_target
from pyrolik.results.table import Summary

__all__ = ["distortion_bdmc", "DistortionBDMC"]


@dataclass
class DistortionBDMC:
    r"""BDMC along the distortion path at a few betas: per beta its own (simulated) data.

    ``lower`` / ``upper`` are ``(c, N)`` stochastic bounds on :math:`\log Z_\beta(x)` for the data of
    each checked beta (row ``j`` belongs to ``x[j]``); ``distortion`` the exact draws' distortion.
    """

    mode: str
    betas: Tensor  # (c,)
    lower: Tensor  # (c, N) forward AIS, log Z_beta
    upper: Tensor  # (c, N) reverse AIS, log Z_beta
    distortion: Tensor  # (c, N) d(x, f(z)) at the exact draws
    num_values: int
    x: list[Tensor]
    results: list[Any] = field(default_factory=list)  # the BDMCResult of each beta
    seed: int | None = None
    wall_time: float = float("nan")

    exports_itself: ClassVar[bool] = True  # pyrolik.save / pyrolik.io.export.to_datatree call ours

    @property
    def sigmas(self) -> Tensor | None:
        return sigma_of(self.betas) if self.mode == "gaussian" else None

    @property
    def gap(self) -> Tensor:
        """``(c,)`` mean over examples of upper - lower (nats)."""
        return (self.upper - self.lower).mean(-1)

    @property
    def gap_stderr(self) -> Tensor:
        d = self.upper - self.lower
        return d.std(-1) / math.sqrt(d.shape[-1]) if d.shape[-1] > 1 else torch.full_like(
            self.gap, math.nan)

    @property
    def rate_lower(self) -> Tensor:
        r"""``(c, N)`` :math:`-\hat U - \beta d`: a stochastic lower bound on the rate at the exact
        distortion (unbiased for :math:`D_\beta` over the exact draws)."""
        return -self.upper - self.betas.unsqueeze(-1) * self.distortion

    @property
    def rate_upper(self) -> Tensor:
        r"""``(c, N)`` :math:`-\hat L - \beta d`: a stochastic upper bound on the rate."""
        return -self.lower - self.betas.unsqueeze(-1) * self.distortion

    def log_likelihood_bounds(self) -> tuple[Tensor, Tensor]:
        """``(lower, upper)`` on log p_sigma(x), each ``(c, N)`` (Gaussian mode)."""
        if self.mode != "gaussian":
            raise ValueError("log p_sigma needs the Gaussian mode (squared error)")
        c = log_normal_constant(self.betas, self.num_values).unsqueeze(-1)
        return self.lower + c, self.upper + c

    def summary(self) -> pd.DataFrame:
        """One row per checked beta: bounds on log Z (and log p_sigma), the gap, the rate sandwich."""
        cols: dict[str, Any] = {"beta": self.betas}
        if self.mode == "gaussian":
            lo, up = self.log_likelihood_bounds()
            cols.update({"sigma": self.sigmas, "log p_sigma lower": lo.mean(-1),
                         "log p_sigma upper": up.mean(-1)})
        cols.update({"log Z lower": self.lower.mean(-1), "log Z upper": self.upper.mean(-1),
                     "gap [nats]": self.gap, "gap stderr": self.gap_stderr,
                     "distortion (exact draws)": self.distortion.mean(-1),
                     "rate lower": self.rate_lower.mean(-1), "rate upper": self.rate_upper.mean(-1)})
        df = Summary({k: v.detach().cpu().double().numpy() for k, v in cols.items()})
        df.index.name = "checked beta"
        return df

    def warnings(self) -> list[str]:
        """Each checked point's BDMC warnings (a gap above 1 nat among them), in plain words."""
        names = (sigma_of(self.betas) if self.mode == "gaussian" else self.betas).tolist()
        what = "sigma" if self.mode == "gaussian" else "beta"
        return [f"at {what} {v:.4g}: {w}" for v, res in zip(names, self.results, strict=True)
                for w in res.warnings()]

    def to_datatree(self):
        """Export to an :class:`xarray.DataTree` (see :mod:`pyrolik.distortion.export`)."""
        return bdmc_to_datatree(self)

    @classmethod
    def from_datatree(cls, tree) -> DistortionBDMC:
        """Rebuild from :meth:`to_datatree`'s output (``pyrolik.load`` calls this)."""
        return cls(**bdmc_fields(tree))


def distortion_bdmc(
    model: Callable[..., Any],
    num_examples: int | None = None,
    *,
    sigmas: Sequence[float] | Tensor | None = None,
    betas: Sequence[float] | Tensor | None = None,
    distortion: DistortionFn | None = None,
    check: Sequence[float] | None = None,
    data: dict[float, tuple[Tensor, Any]] | None = None,
    data_shape: tuple[int, ...] | None = None,
    num_steps: int | None,
    num_chains: int,
    schedule: str | Tensor = "geometric",
    kernel: HMC | None = None,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    progress: bool = True,
    step_sizes: dict[float, Any] | None = None,
) -> DistortionBDMC:
    r"""BDMC at chosen points of the one-run curve, along the betas that curve visits.

    The grid (``sigmas``, or ``betas`` with an optional ``distortion``) and ``num_steps`` /
    ``schedule`` are those of the :func:`pyrolik.sigma_curve` / :func:`pyrolik.rate_distortion`
    call to check: the path is built the same way. At each grid point in ``check`` (default all),
    ``num_examples`` examples are simulated with noise :math:`\sigma = 1/\sqrt{2\beta}` (squared
    error only) or taken from ``data[point] = (x, latents)`` (exact draws of :math:`q_\beta(z \mid x)`),
    and forward and reverse AIS run from 0 to that beta. See the module docstring for why one
    reverse run cannot bound every beta. ``step_sizes``, keyed like ``data``: a pilot table for a
    point's examples (``results[j].lower.step_sizes`` of an earlier call on the same data) instead
    of a new pilot there (:func:`pyrolik.bdmc`'s ``step_sizes``).

    Returns
    -------
    DistortionBDMC
        ``lower``/``upper`` (c, N) on log Z_beta, ``gap`` (c,), ``rate_lower``/``rate_upper``,
        ``log_likelihood_bounds()`` (Gaussian mode), ``summary()``.
    """
    start = time.perf_counter()
    check_count("num_chains", num_chains)
    seed = resolve_seed(seed)
    if (sigmas is None) == (betas is None):
        raise ValueError("pass the grid as exactly one of sigmas= or betas=")
    if sigmas is not None:
        if distortion is not None:
            raise ValueError("sigmas= means the squared error; pass betas= with a distortion")
        grid, _ = grid_from_sigmas(sigmas)
    else:
        assert betas is not None  # exactly one of the two, checked above
        grid = grid_from_betas(betas)
    mode = "gaussian" if distortion is None else "user"
    beta_max = float(grid[-1])
    if mode == "gaussian":
        grid[-1] = distortion_model(model, sigma=(0.5 / beta_max) ** 0.5).beta_max
        beta_max = float(grid[-1])
    grid_b = grid / beta_max
    grid_b[-1] = 1.0
    path, steps = merge_grid(grid_b, schedule, num_steps)
    key = sigma_of(grid) if (mode == "gaussian" and sigmas is not None) else grid
    chosen = list(range(len(grid))) if check is None else [_find(key, c, "check") for c in check]
    given = {} if data is None else {_find(key, k, "data"): v for k, v in data.items()}
    tables = {} if step_sizes is None else {_find(key, k, "step_sizes"): v
                                            for k, v in step_sizes.items()}
    if mode == "user" and len(given) < len(chosen):
        raise ValueError("a user distortion is not a noise model, so there is nothing to simulate "
                         "exact draws of q_beta from: pass data={beta: (x, latents)} with exact "
                         "draws for every checked beta")
    if not given.keys() >= set(chosen) and (num_examples is None or data_shape is None):
        raise ValueError("pass num_examples= and data_shape= to simulate data, or data= with "
                         "(x, latents) for every checked point")
    kwargs = dict(model_kwargs or {})
    lower, upper, dist, xs, results = [], [], [], [], []
    for j in chosen:
        beta = float(grid[j])
        dm = (distortion_model(model, sigma=(0.5 / beta) ** 0.5) if mode == "gaussian"
              else distortion_model(model, distortion=distortion, beta_max=beta))
        sub = path[: int(steps[j]) + 1] / path[steps[j]]
        sub[-1] = 1.0
        res = main_result(bdmc(
            dm, num_examples, data_shape=data_shape, num_steps=None, num_chains=num_chains,
            schedule=sub, kernel=kernel, data=given.get(j), model_args=model_args,
            model_kwargs=kwargs, seed=seed, batch_size=batch_size, progress=progress,
            step_sizes=tables.get(j)), "bdmc")
        x = res.x
        num_values = dm.num_values(x, *model_args, **kwargs)
        constant = num_values * dm.offset
        target = make_target(dm, x, 1, model_args=model_args, model_kwargs=kwargs)
        exact = latents_to_flat(target, expand_latents(target, res.latents, x.shape[0]))
        with torch.no_grad():
            ratio = target.log_obs(exact).double()
        lower.append(res.lower.log_likelihood.double() - constant)
        upper.append(res.upper.log_likelihood.double() - constant)
        dist.append((constant - ratio) / dm.beta_max)
        xs.append(x)
        results.append(res)
    sizes = {len(t) for t in lower}
    if len(sizes) > 1:
        raise ValueError(f"data= must give the same number of examples at every point, got {sizes}")
    return DistortionBDMC(mode, grid[chosen].to(torch.float64), torch.stack(lower),
                          torch.stack(upper), torch.stack(dist), num_values, xs, results, seed,
                          time.perf_counter() - start)


def _find(grid: Tensor, value: float, what: str) -> int:
    close = torch.isclose(grid, torch.tensor(float(value), dtype=torch.float64), rtol=1e-9)
    if not close.any():
        raise ValueError(f"{what}: {value} is not a point of the grid "
                         f"{[round(float(g), 6) for g in grid]}")
    return int(close.nonzero()[0])
