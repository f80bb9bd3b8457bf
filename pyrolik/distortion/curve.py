r"""The result of one annealing run along the distortion path: a whole curve per example.

At each recorded inverse temperature :math:`\beta_j` the run holds, per chain :math:`k` and example
:math:`n`, the AIS log-weight :math:`\log w_{jkn}` (an unbiased estimate of :math:`Z_{\beta_j}(x_n)`
in :math:`w`) and the distortion :math:`d_{jkn} = d(x_n, f(z_{jkn}))` of the chain's state. From them:

.. math::
    \log \hat Z_\beta = \log \tfrac1K \textstyle\sum_k w_k, \qquad
    \hat D_\beta = \textstyle\sum_k \bar w_k d_k, \qquad
    \hat R_\beta = -\beta \hat D_\beta - \log \hat Z_\beta,

with :math:`\bar w_k` the self-normalised weights (Huang et al. 2020, section 4), and for the squared
error :math:`\log \hat p_\sigma(x) = \log \hat Z_\beta - \tfrac D2 \log(2\pi\sigma^2)` at
:math:`\sigma = 1/\sqrt{2\beta}`.

Which way the errors go. :math:`\log \hat Z_\beta` and :math:`\log \hat p_\sigma` are stochastic
lower bounds (Jensen), at every recorded beta. The point :math:`(\hat D_\beta, \hat R_\beta)` lies on
or above the model's rate-distortion curve in expectation: let :math:`\tilde q` be the law of a
chain's state drawn with probability :math:`\bar w_k`; then :math:`\mathbb E[\hat D] = \mathbb
E_{\tilde q}[d]` and, by the extended-space argument of AIS,
:math:`\mathrm{KL}(\tilde q \,\|\, q_\beta) \le \log Z_\beta - \mathbb E \log \hat Z_\beta`, so

.. math::
    \mathrm{KL}(\tilde q \,\|\, p) = \mathrm{KL}(\tilde q \,\|\, q_\beta) - \beta\,\mathbb E_{\tilde q}[d]
    - \log Z_\beta \le \mathbb E[\hat R_\beta]:

the rate of an achievable code at distortion :math:`\mathbb E \hat D` is at most
:math:`\mathbb E \hat R`. Averages over examples keep this (a per-example allocation of distortion is
feasible for the average constraint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, NamedTuple

import pandas as pd
import torch
from torch import Tensor

from pyrolik.distortion.export import curve_fields, curve_to_datatree
from pyrolik.distortion.schedule import log_normal_constant, sigma_of
from pyrolik.ops.stats import effective_sample_size, log_mean_exp, mcse_log_mean_exp
from pyrolik.results.table import Summary

__all__ = ["DistortionCurve", "SigmaChoice", "OptimalSigma", "OPTIMAL_SIGMA_WARNING"]

OPTIMAL_SIGMA_WARNING = (
    "sigma tuned for each example is not a generative model: the per-example optimum is an upper "
    "bound on what a better radially symmetric (heavy-tailed, Gaussian scale mixture) noise model "
    "could reach, not a log-likelihood of this model (Wu et al. 2017, appendix B); report it beside "
    "the fixed-sigma log-likelihood, never instead of it")
MIN_ESS = 2.0  # fewer effective chains than this: the estimate at that beta rests on one chain


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
        n = len(self.improvement)

        def se(t: Tensor) -> float:
            return float(t.std() / math.sqrt(n)) if n > 1 else math.nan

        return Summary({
            "mean": [float(self.log_likelihood.mean()), float(self.fixed_log_likelihood.mean()),
                     self.mean_improvement],
            "stderr": [se(self.log_likelihood), se(self.fixed_log_likelihood),
                       se(self.improvement)],
        }, index=["optimal sigma per example (upper bound, not a model)",
                  f"fixed sigma = {self.fixed_sigma:g}", "improvement"])


def _se(t: Tensor) -> Tensor:
    """Standard error over the last dim (examples); NaN with fewer than two."""
    n = t.shape[-1]
    return t.std(-1) / math.sqrt(n) if n > 1 else torch.full_like(t.sum(-1), math.nan)


@dataclass(frozen=True)
class DistortionCurve:
    """Per-example curves from one run along the distortion path (see the module docstring).

    ``log_weights`` and ``distortions`` are ``(m, K, N)``: recorded betas x chains x examples;
    ``log_weights`` are already shifted to estimate :math:`\\log Z_\\beta` (the wrapped model's
    constant removed). ``mode`` is ``"gaussian"`` (squared error; sigmas and log p_sigma defined)
    or ``"user"`` (a user distortion; rate-distortion only).
    """

    mode: str
    betas: Tensor  # (m,) float64, increasing
    log_weights: Tensor  # (m, K, N) float64
    distortions: Tensor  # (m, K, N) float64
    num_values: int  # D, observed values per example
    x: Tensor
    schedule: Tensor  # (T + 1,) in the path parameter b = beta / beta_max
    record_steps: Tensor  # (m,) indices into schedule
    beta_max: float
    ais: Any = None  # the AISResult of the run (acceptance, step sizes, final states)
    seed: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    wall_time: float = float("nan")
    budget: Any = None  # infer.budget.Budget: how tolerance= chose num_steps (None without it)

    exports_itself: ClassVar[bool] = True  # pyrolik.save / pyrolik.io.export.to_datatree call ours
    optimal_sigma_warning: ClassVar[str] = OPTIMAL_SIGMA_WARNING

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
        """``(m, N)`` delta-method Monte Carlo standard error of :attr:`log_z` (and log p_sigma)."""
        return mcse_log_mean_exp(self.log_weights, dim=1)

    @cached_property
    def ess(self) -> Tensor:
        """``(m, N)`` effective number of chains at each beta."""
        return effective_sample_size(self.log_weights, dim=1)

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
        :math:`\sqrt{\sum_k \bar w_k^2 (d_k - \hat D)^2}`."""
        resid = self.distortions - self.distortion.unsqueeze(1)
        return torch.sqrt((self._self_normalised**2 * resid**2).sum(1))

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
        return _se(self._gaussian_only("stderr"))

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

        Choose it on *validation* examples and evaluate on others: chosen on the evaluated data it
        inflates the score (Wu et al. 2017, section 5.3.2).
        """
        sigmas = self._gaussian("best_sigma")[0]
        ll = self._gaussian_only("best_sigma")
        mean = ll.mean(-1)
        i = int(torch.argmax(mean))
        return SigmaChoice(float(sigmas[i]), i, sigmas, mean, self.stderr, ll)

    def optimal_sigma(self, fixed_sigma: float | None = None) -> OptimalSigma:
        """Sigma tuned independently for each example (Table 3 of Wu et al. 2017).

        .. warning:: This is not a generative model: see :data:`OPTIMAL_SIGMA_WARNING`. The maximum
           over the grid of per-sigma lower bounds may exceed the true maximum by about the MCSE.

        ``fixed_sigma``: the comparison (a grid sigma, e.g. chosen on validation data with
        :meth:`best_sigma`); default: the best fixed sigma on these examples.
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
        """One row per recorded beta: means over the examples of log Z (and log p_sigma), their
        standard errors, the mean MCSE and ESS, distortion and rate; with ``tolerance=``, the
        budget's tolerance, chosen steps, deciding BDMC gap and cost (the same on every row)."""
        ok = ~self.failed
        cols: dict[str, Any] = {"beta": self.betas}
        if self.mode == "gaussian":
            sigmas, ll = self._gaussian("summary")
            cols["sigma"] = sigmas
            cols["log p_sigma(x) [nats]"] = ll[:, ok].mean(-1)
            cols["stderr"] = _se(ll[:, ok])
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

    # -- export -----------------------------------------------------------------------------------
    def to_datatree(self):
        """Export to an :class:`xarray.DataTree` (see :mod:`pyrolik.distortion.export`)."""
        return curve_to_datatree(self)

    @classmethod
    def from_datatree(cls, tree) -> DistortionCurve:
        """Rebuild a curve from :meth:`to_datatree`'s output (``pyrolik.load`` calls this)."""
        return cls(**curve_fields(tree))

    def to_dataset(self):
        """The per-beta, per-example curves as one :class:`xarray.Dataset` (``beta`` coordinate,
        ``sigma`` beside it in Gaussian mode)."""
        return self.to_datatree()["curve"].to_dataset()

    def to_inference_data(self):
        """Export to an :class:`arviz.InferenceData` (the groups of :meth:`to_datatree`)."""
        import arviz as az

        tree = self.to_datatree()
        return az.InferenceData(attrs=dict(tree.attrs), **{
            name: node.to_dataset() for name, node in tree.children.items() if name != "ais"})
