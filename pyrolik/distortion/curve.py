"""A whole curve per example from one run along the distortion path."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, NamedTuple

import pandas as pd
import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count, validate_data
from pyrolik.annealing.driver import run
from pyrolik.annealing.kernel import Kernel
from pyrolik.annealing.run import Recording
from pyrolik.distortion.path import (
    DistortionModel,
    as_log_z,
    distortion_model,
    grid_from_betas,
    grid_from_sigmas,
    log_normal_constant,
    merge_grid,
    sigma_of,
)
from pyrolik.ops.stats import (
    chain_statistics,
    effective_sample_size,
    log_mean_exp,
    mcse_log_mean_exp,
)
from pyrolik.results.convert import CurveConverter
from pyrolik.results.estimates import Exported
from pyrolik.results.layout import BLOCK, EX, stored
from pyrolik.results.table import Summary

__all__ = ["DistortionCurve", "SigmaChoice", "OptimalSigma", "OPTIMAL_SIGMA_WARNING", "run_curve",
           "gaussian_curve"]

OPTIMAL_SIGMA_WARNING = (
    "sigma tuned for each example is not a generative model: the per-example optimum is an upper "
    "bound on what a better radially symmetric (heavy-tailed, Gaussian scale mixture) noise model "
    "could reach, not a log-likelihood of this model (Wu et al. 2017, appendix B); report it beside "
    "the fixed-sigma log-likelihood, never instead of it")
MIN_ESS = 2.0  # fewer effective chains than this: the estimate at that beta rests on one chain


def se_over_examples(t: Tensor) -> Tensor:
    """Standard error of the mean over the last dim (examples); NaN with fewer than two."""
    n = t.shape[-1]
    return t.std(-1) / math.sqrt(n) if n > 1 else torch.full_like(t.sum(-1), math.nan)


class SigmaChoice(NamedTuple):
    """The best fixed sigma over the examples and the whole curve (nats)."""

    sigma: float
    index: int  # type: ignore[assignment]  # the grid index; shadows tuple.index on purpose
    sigmas: Tensor  # (m,)
    mean_log_likelihood: Tensor  # (m,)
    stderr: Tensor  # (m,) over examples
    log_likelihood: Tensor  # (m, N)


class OptimalSigma(NamedTuple):
    """Table 3 of Wu et al.: sigma tuned per example against one fixed sigma (see the warning)."""

    sigma: Tensor  # (N,) the per-example best grid sigma
    log_likelihood: Tensor  # (N,) log p at that sigma: NOT a log-likelihood of a model
    fixed_sigma: float
    fixed_log_likelihood: Tensor  # (N,)
    improvement: Tensor  # (N,) optimal - fixed, >= 0
    warning: str

    @property
    def mean_improvement(self) -> float:
        return float(self.improvement.mean())

    def summary(self) -> pd.DataFrame:
        """Table 3's row: optimal, fixed and improvement (means over the examples, nats)."""
        values = (self.log_likelihood, self.fixed_log_likelihood, self.improvement)
        return Summary({
            "mean": [float(self.log_likelihood.mean()), float(self.fixed_log_likelihood.mean()),
                     self.mean_improvement],
            "stderr": [float(se_over_examples(t)) for t in values],
        }, index=["optimal sigma per example (upper bound, not a model)",
                  f"fixed sigma = {self.fixed_sigma:g}", "improvement"])


@dataclass(frozen=True)
class DistortionCurve(Exported):
    r"""Per-example curves from one run along the distortion path; fields declare their export.

    ``log_weights`` and ``distortions`` are ``(m, K, N)`` (betas x chains x examples); ``mode``:
    ``"gaussian"`` or ``"user"`` (rate-distortion only).
    """

    converter: ClassVar[type] = CurveConverter
    optimal_sigma_warning: ClassVar[str] = OPTIMAL_SIGMA_WARNING

    mode: str = stored("attrs", "mode")
    betas: Tensor = stored("particles", "beta", ["beta"], codec="coord")  # (m,) float64, increasing
    log_weights: Tensor = stored("particles", "log_weight", ["beta", BLOCK, EX])  # (m, K, N) float64
    distortions: Tensor = stored("particles", "distortion", ["beta", BLOCK, EX])  # (m, K, N) float64
    num_values: int = stored("attrs", "num_values")  # D, observed values per example
    x: Tensor = stored("observed_data", "x", [EX])
    # (T + 1,) in the path parameter b = beta / beta_max
    schedule: Tensor = stored("constant_data", "schedule", ["step"])
    record_steps: Tensor = stored("constant_data", "record_step", ["beta"])  # (m,) into schedule
    beta_max: float = stored("attrs", "beta_max")
    ais: Any = stored("ais", codec="result", default=None)  # the run's AISResult
    seed: int | None = stored("attrs", "seed", codec="seed", default=None)
    settings: dict[str, Any] = stored("attrs", "settings", codec="json", default_factory=dict)
    wall_time: float = stored("attrs", "wall_time", default=float("nan"))
    budget: Any = stored("attrs", "budget", codec="budget", default=None)  # how Tolerance chose

    def __post_init__(self) -> None:
        if self.mode == "user":  # its run's estimate is log Z at beta_max of exp(-beta d)
            object.__setattr__(self, "ais", as_log_z(self.ais))

    # -- per example ----------------------------------------------------------------------------
    @property
    def num_examples(self) -> int:
        return self.log_weights.shape[-1]

    @property
    def num_chains(self) -> int:
        return self.log_weights.shape[1]

    @property
    def sigmas(self) -> Tensor | None:
        """``(m,)`` :math:`1/\\sqrt{2\\beta}` in Gaussian mode (decreasing), else None."""
        return sigma_of(self.betas) if self.mode == "gaussian" else None

    @cached_property
    def log_z(self) -> Tensor:
        r"""``(m, N)`` :math:`\log \hat Z_\beta(x)`, stochastic lower bounds."""
        return log_mean_exp(self.log_weights, dim=1)

    @cached_property
    def mcse(self) -> Tensor:
        """``(m, N)`` Monte Carlo standard error of :attr:`log_z` (and log p_sigma), as
        :func:`pyrolik.ais` reports it: over the islands, or the chains' starting ancestors, of a
        resampled run (:func:`~pyrolik.ops.stats.chain_statistics`)."""
        return self._chain_statistics[1]

    @cached_property
    def ess(self) -> Tensor:
        """``(m, N)`` effective number of chains at each beta (of their starting ancestors when the
        run resampled)."""
        return self._chain_statistics[0]

    @cached_property
    def _lineage(self) -> tuple[Tensor | None, int | None]:
        """``(ancestors (m, K, N), islands)`` at the grid points of a resampled run, else ``(None,
        None)``: the run's recorded starting ancestor of every chain."""
        trace = (self.ais.trace if self.ais is not None else None) or {}
        if "ancestor" not in trace:
            return None, None
        return trace["ancestor"].to(self.log_weights.device), self.ais.settings.get("islands")

    @cached_property
    def _chain_statistics(self) -> tuple[Tensor, Tensor]:
        ancestors, islands = self._lineage
        if ancestors is None:  # independent chains
            return (effective_sample_size(self.log_weights, dim=1),
                    mcse_log_mean_exp(self.log_weights, dim=1))
        m, k, n = self.log_weights.shape
        ess, mcse, _ = chain_statistics(self.log_weights.movedim(0, 1).reshape(k, m * n),
                                        ancestors.movedim(0, 1).reshape(k, m * n), islands)
        return ess.reshape(m, n), mcse.reshape(m, n)

    @cached_property
    def _self_normalised(self) -> Tensor:
        return torch.softmax(self.log_weights, dim=1)

    @cached_property
    def distortion(self) -> Tensor:
        r"""``(m, N)`` :math:`\hat D_\beta`, the self-normalised weighted mean distortion."""
        return (self._self_normalised * self.distortions).sum(1)

    @cached_property
    def distortion_mcse(self) -> Tensor:
        r"""``(m, N)`` delta-method standard error of :attr:`distortion`:
        :math:`\sqrt{\sum_g (\sum_{k \in g} \bar w_k (d_k - \hat D))^2}` over independent groups
        :math:`g`: the chains, or the starting ancestors of a resampled run, or its :math:`G` islands
        (times :math:`G / (G - 1)` under the root, the jackknife's factor for few groups)."""
        resid = self.distortions - self.distortion.unsqueeze(1)
        ancestors, islands = self._lineage
        if ancestors is None:
            return torch.sqrt((self._self_normalised**2 * resid**2).sum(1))
        k, g = self.num_chains, islands or 1
        group = (ancestors if g < 2
                 else (torch.arange(k, device=ancestors.device) // (k // g)).view(1, k, 1)
                 .expand_as(ancestors))
        terms = torch.zeros_like(resid).scatter_add_(1, group, self._self_normalised * resid)
        return torch.sqrt((terms**2).sum(1) * (g / (g - 1) if g > 1 else 1.0))

    @cached_property
    def rate(self) -> Tensor:
        r"""``(m, N)`` :math:`\hat R_\beta = -\beta \hat D_\beta - \log \hat Z_\beta` in nats; with
        :attr:`distortion` a point on or above the rate-distortion curve in expectation."""
        return -self.betas.unsqueeze(-1) * self.distortion - self.log_z

    @cached_property
    def log_likelihood(self) -> Tensor | None:
        r"""``(m, N)`` :math:`\log \hat p_\sigma(x)` at each grid sigma (Gaussian mode), lower bounds."""
        if self.mode != "gaussian":
            return None
        return self.log_z + log_normal_constant(self.betas, self.num_values).unsqueeze(-1)

    # -- over examples ----------------------------------------------------------------------------
    @property
    def failed(self) -> Tensor:
        """``(N,)`` bool: examples whose estimate is not finite at some beta (the model's density
        was not); they are left out of every mean over the examples."""
        return ~torch.isfinite(self.log_z).all(0)

    @property
    def mean_log_likelihood(self) -> Tensor:
        """``(m,)`` mean over the examples of :attr:`log_likelihood`."""
        return self._gaussian_only("mean_log_likelihood").mean(-1)

    @property
    def stderr(self) -> Tensor:
        """``(m,)`` standard error over the examples of :attr:`mean_log_likelihood`."""
        return se_over_examples(self._gaussian_only("stderr"))

    def _gaussian(self, what: str) -> tuple[Tensor, Tensor]:
        """``(sigmas, log_likelihood)`` of every example; only the Gaussian mode defines them."""
        if self.log_likelihood is None or self.sigmas is None:
            raise ValueError(f"{what} needs the Gaussian mode (sigma curve): this curve was run "
                             "with a user distortion, which defines rate and distortion only")
        return self.sigmas, self.log_likelihood

    def _gaussian_only(self, what: str) -> Tensor:
        """:attr:`log_likelihood` of the examples that did not fail."""
        return self._gaussian(what)[1][:, ~self.failed]

    def best_sigma(self) -> SigmaChoice:
        """The grid sigma with the best mean log-likelihood over these examples.

        Choose it on *validation* examples (Wu et al. 2017, section 5.3.2).
        """
        sigmas = self._gaussian("best_sigma")[0]
        ll = self._gaussian_only("best_sigma")
        mean = ll.mean(-1)
        i = int(torch.argmax(mean))
        return SigmaChoice(float(sigmas[i]), i, sigmas, mean, self.stderr, ll)

    def optimal_sigma(self, fixed_sigma: float | None = None) -> OptimalSigma:
        """Sigma tuned independently for each example (Table 3 of Wu et al. 2017).

        .. warning:: Not a generative model (:data:`OPTIMAL_SIGMA_WARNING`); the maximum of
           lower bounds may exceed the true maximum by about the MCSE.

        ``fixed_sigma``: the comparison (default: the best fixed sigma on these examples).
        """
        sigmas, ll = self._gaussian("optimal_sigma")  # every example; a failed one gets NaN rows
        best = torch.argmax(torch.nan_to_num(ll, nan=-math.inf), dim=0)
        if fixed_sigma is None:
            j = self.best_sigma().index
        else:
            close = torch.isclose(sigmas, torch.tensor(float(fixed_sigma), dtype=torch.float64))
            if not close.any():
                raise ValueError(f"fixed_sigma={fixed_sigma} is not on the grid "
                                 f"{[round(float(s), 6) for s in sigmas]}")
            j = int(close.nonzero()[0])
        opt = ll.gather(0, best.unsqueeze(0)).squeeze(0)
        return OptimalSigma(sigmas[best], opt, float(sigmas[j]), ll[j], opt - ll[j],
                            OPTIMAL_SIGMA_WARNING)

    # -- tables -----------------------------------------------------------------------------------
    def summary(self) -> pd.DataFrame:
        """One row per recorded beta: means over examples of log Z (and log p_sigma), standard errors,
        MCSE, ESS, distortion, rate, and with ``num_steps=Tolerance(...)`` the budget."""
        ok = ~self.failed
        cols: dict[str, Any] = {"beta": self.betas}
        if self.mode == "gaussian":
            sigmas, ll = self._gaussian("summary")
            cols["sigma"] = sigmas
            cols["log p_sigma(x) [nats]"] = ll[:, ok].mean(-1)
            cols["stderr"] = se_over_examples(ll[:, ok])
        cols["log Z_beta"] = self.log_z[:, ok].mean(-1)
        cols["mean MCSE"] = self.mcse[:, ok].mean(-1)
        cols["min ESS"] = self.ess[:, ok].min(-1).values if ok.any() else self.betas * math.nan
        cols["distortion"] = self.distortion[:, ok].mean(-1)
        cols["rate [nats]"] = self.rate[:, ok].mean(-1)
        df = Summary({k: v.detach().cpu().double().numpy() for k, v in cols.items()})
        df.index.name = "grid point"
        if self.budget is not None:  # one budget for the whole curve: the same on every row
            for name, value in self.budget.summary_fields().items():
                df[name] = [value] * len(df)
        return df

    def warnings(self) -> list[str]:
        """Plain-words warnings (empty when nothing looks wrong)."""
        out = []
        num_failed = int(self.failed.sum())
        if num_failed:
            out.append(f"{num_failed} of {self.num_examples} examples failed (a NaN or inf estimate "
                       "at some beta: the model's density was not finite); they are left out of "
                       "the means (see curve.failed)")
        floor = min(MIN_ESS, self.num_chains / 2)  # with 2 chains, below 1 cannot happen
        low = (self.ess < floor) & ~self.failed
        if low.any():
            where = [round(float(b), 4) for b in self.betas[low.any(-1)]]
            out.append(f"at beta {where} some examples have fewer than {floor:g} effective chains: "
                       "one chain dominates the weights, so log Z, distortion and rate there are "
                       "unreliable (more annealing steps or chains)")
        if self.ais is not None:
            out.extend(self.ais.warnings())
        if self.budget is not None:
            out.extend(self.budget.notes)
        return out

    # -- export (to_datatree, to_inference_data: pyrolik.results.convert.CurveConverter) ---------
    def to_dataset(self):
        """The per-beta, per-example curves as one :class:`xarray.Dataset` (``beta`` coordinate,
        ``sigma (beta)`` beside them in Gaussian mode): the export's ``curve`` group."""
        ds = self.to_datatree()["curve"].to_dataset().squeeze(("chain", "draw"), drop=True)
        # sigma a coordinate along beta here (.swap_dims(beta="sigma").sel(sigma=...)); a variable
        # in the export, where ArviZ's to_dataframe() joins the groups' columns
        return ds.set_coords("sigma") if "sigma" in ds else ds


def run_curve(dm: DistortionModel, x: Tensor, betas: Tensor, mode: str, *, num_steps: int | None,
              num_chains: int, schedule: str | Tensor, kernel: Kernel | None, model_args: tuple,
              model_kwargs: dict | None, seed: int | None, batch_size: int | None,
              progress: bool) -> DistortionCurve:
    """Anneal ``dm`` along ``schedule`` merged with ``betas / dm.beta_max``; read the grid."""
    start = time.perf_counter()
    x = validate_data(x)
    check_count("num_chains", num_chains)
    seed = resolve_seed(seed)
    grid_b = betas / dm.beta_max
    grid_b[-1] = 1.0
    path, steps = merge_grid(grid_b, schedule, num_steps)
    model_kwargs = dict(model_kwargs or {})
    num_values = dm.num_values(x, *model_args, **model_kwargs)
    # the driver behind pyrolik.ais, recording the log-weights and log f1 - log f0 at the grid
    recording = Recording(steps=tuple(int(t) for t in steps), log_ratio=True)
    _, results = run("sigma_curve", dm, x, directions=("forward",), num_steps=None,
                     num_chains=num_chains, schedule=path, kernel=kernel, model_args=model_args,
                     model_kwargs=model_kwargs, seed=seed, batch_size=batch_size,
                     progress=progress, recording=recording, desc="AIS (distortion path)",
                     scoped=False)
    assert results is not None  # one process
    result = results[0]
    assert result.trace is not None and result.trace_steps is not None
    assert torch.equal(result.trace_steps, steps.cpu())
    b = path[steps].unsqueeze(-1).unsqueeze(-1)
    constant = num_values * dm.offset  # the wrapped observation term is -beta_max d + constant
    log_w = result.trace["log_weight"].double() - b * constant  # (m, K, N)
    distortions = (constant - result.trace["log_ratio"].double()) / dm.beta_max
    settings = {"num_steps": len(path) - 1, "num_chains": num_chains,
                "schedule": schedule if isinstance(schedule, str) else "custom",
                "base_num_steps": num_steps, "mode": mode, "beta_max": dm.beta_max,
                "sigma_min": dm.sigma, "distortion": getattr(dm.distortion, "__name__", None)
                if dm.distortion is not None else "squared error",
                "kernel": repr(result.kernel), "batch_size": batch_size,
                "evaluation": result.settings.get("evaluation")}
    return DistortionCurve(mode=mode, betas=betas.to(torch.float64), log_weights=log_w,
                           distortions=distortions, num_values=num_values, x=x, schedule=path,
                           record_steps=steps, beta_max=dm.beta_max, ais=result, seed=seed,
                           settings=settings, wall_time=time.perf_counter() - start)


def gaussian_curve(model: Callable[..., Any], x: Tensor, *, sigmas: Sequence[float] | Tensor | None
                   = None, betas: Sequence[float] | Tensor | None = None, **run: Any
                   ) -> DistortionCurve:
    """The curve of ``model``'s Gaussian observation sites at a grid of ``sigmas`` or ``betas``
    (exactly one): :func:`run_curve` with the wrapper of the grid's end; ``run``: its keywords."""
    if sigmas is not None:
        grid, sigma_min = grid_from_sigmas(sigmas)
        return run_curve(distortion_model(model, sigma=sigma_min), x, grid, "gaussian", **run)
    grid = grid_from_betas(betas)  # type: ignore[arg-type]
    return run_curve(distortion_model(model, sigma=(0.5 / float(grid[-1])) ** 0.5), x, grid,
                     "gaussian", **run)
