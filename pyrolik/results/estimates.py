"""Result objects returned by every estimator: per-example estimates, weights and diagnostics."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd
import torch
from torch import Tensor

from pyrolik.advice import (
    ACCEPTANCE_COLLAPSE,
    BEST_SPLIT_CHAINS,
    DIVERGENT_REMARK,
    KHAT_WARN,
    MIN_WEIGHTS,
    WASTED_SPLIT,
    acceptance_fix,
)
from pyrolik.exceptions import Message, remark
from pyrolik.execution.batches import failed_message
from pyrolik.ops.stats import khat_threshold, lognormal_bias
from pyrolik.results.convert import AISConverter, EstimateConverter, to_datatree, to_inference_data
from pyrolik.results.layout import BLOCK, EX, stored
from pyrolik.results.table import Summary

__all__ = ["Exported", "EstimateResult", "AISResult", "KHAT_WARN", "MIN_WEIGHTS_FOR_MCSE", "bits_per_dim"]

# fewer weights per example than this: k-hat cannot check their tail, so the MCSE is a rough guide
MIN_WEIGHTS_FOR_MCSE = MIN_WEIGHTS  # thresholds: pyrolik.advice


def _mean(values: Tensor, failed: Tensor) -> float:
    ok = values[~failed]
    return float(ok.mean()) if len(ok) else float("nan")


def _stderr(values: Tensor, failed: Tensor) -> float:
    ok = values[~failed]
    return float(ok.std(unbiased=True) / math.sqrt(len(ok))) if len(ok) > 1 else float("nan")


def bits_per_dim(log_likelihood: Tensor | float, num_dims: float | Tensor) -> Tensor | float:
    r"""Negative log-likelihood in bits per dimension: :math:`-\log p(x) / (D \ln 2)`.

    Parameters
    ----------
    log_likelihood : float or torch.Tensor
        :math:`\log p(x)` in nats, per example.
    num_dims : int or torch.Tensor
        :math:`D`, or the entries each example observes.

    Returns
    -------
    float or torch.Tensor
    """
    return -log_likelihood / (num_dims * math.log(2.0))


class Exported:
    """Every result: its export methods (:mod:`pyrolik.results.convert`) and its class found again
    by name when a file is read."""

    @staticmethod
    def class_named(name: str) -> Any:
        """The result class called ``name`` among the subclasses of :class:`Exported`, or ``None``."""
        found = [Exported]
        while found:
            cls = found.pop()
            if cls.__name__ == name:
                return cls
            found.extend(cls.__subclasses__())
        return None

    def to_datatree(self, *, num_blocks: int = 4):
        """Export to an :class:`xarray.DataTree` (see :mod:`pyrolik.results.convert`)."""
        return to_datatree(self, num_blocks=num_blocks)

    def to_inference_data(self, *, num_blocks: int = 4):
        """Export to an :class:`arviz.InferenceData` (see :mod:`pyrolik.results.convert`)."""
        return to_inference_data(self, num_blocks=num_blocks)


@dataclass(frozen=True)
class EstimateResult(Exported):
    """Per-example estimates of log p(x) in nats; fields declare their export (``stored``)."""

    converter: ClassVar[type] = EstimateConverter

    method: str = stored("attrs", "method")
    log_likelihood: Tensor = stored("evidence", "log_marginal_likelihood", [EX])  # (N,)
    bound: str | None = stored("attrs", "bound", codec="none")
    # (K, N), importance log-weights where kept
    log_weights: Tensor | None = stored("particles", "log_weight", [BLOCK, EX], default=None)
    ess: Tensor | None = stored("evidence", "ess", [EX], default=None)  # (N,)
    mcse: Tensor | None = stored("evidence", "mcse", [EX], default=None)  # (N,)
    khat: Tensor | None = stored("evidence", "pareto_k", [EX], default=None)  # (N,)
    x: Tensor | None = stored("observed_data", "x", [EX], default=None)  # (N, ...): the data
    settings: dict[str, Any] = stored("attrs", "settings", codec="json", default_factory=dict)
    seed: int | None = stored("attrs", "seed", codec="seed", default=None)
    wall_time: float = stored("attrs", "wall_time", default=float("nan"))
    example_dim: str = "example"  # the model's plate over the examples: the export's example dim
    # (N,) entries each example observes, masks included (bits/dim's D); None: every entry of x
    num_observed: Tensor | None = stored("observed_data", "num_observed", [EX], default=None)
    # IWAE / likelihood weighting: the raw draws behind log_weights, each (K, N, *site), when kept
    samples: dict[str, Tensor] | None = stored("particles", None, [BLOCK, EX], default=None)
    # IWAE / likelihood weighting: draws resampled by weight per block of samples (C, D, N, ...):
    # "draw_index" (the sample each copies), "draw_log_weight", and the sites by name
    draws: dict[str, Tensor] | None = stored("sample_stats", codec="draws", default=None)
    # what log_likelihood estimates: log p(x), or on a user distortion's path log Z (no bits/dim)
    quantity: str = stored("attrs", "quantity", default="log p(x)")

    @property
    def num_examples(self) -> int:
        return self.log_likelihood.shape[0]

    @property
    def failed(self) -> Tensor:
        """``(N,)`` bool: examples whose estimate is not finite (left out of :attr:`mean`)."""
        return ~torch.isfinite(self.log_likelihood)

    @property
    def mean(self) -> float:
        """Average estimate over the examples that did not fail (nats)."""
        return _mean(self.log_likelihood, self.failed)

    @property
    def stderr(self) -> float:
        """Standard error of :attr:`mean` over examples (data variability), nats."""
        return _stderr(self.log_likelihood, self.failed)

    @property
    def observed_dims(self) -> Tensor | None:
        """``(N,)``: the entries each example's estimate is a density of (the model's observed
        sites, masks included; with no model, every entry of ``x``), the :math:`D_n` of bits/dim."""
        if self.num_observed is not None:
            return self.num_observed
        if self.x is None:
            return None
        return torch.full((self.num_examples,), float(self.x[0].numel()), dtype=torch.float64)

    @property
    def num_dims(self) -> int | None:
        """The entries observed per example when every example observes as many (else None: see
        :attr:`observed_dims`)."""
        dims = self.observed_dims
        if dims is None or not len(dims) or not bool((dims == dims[0]).all()):
            return None
        return int(dims[0])

    @property
    def bits_per_dim(self) -> float:
        r"""NLL in bits per observed entry of the examples that did not fail, :math:`-\sum_n \log
        p(x_n) / (\ln 2 \sum_n D_n)` (:attr:`observed_dims`); NaN when the count is unknown or 0."""
        dims, ok = self.observed_dims, ~self.failed
        total = float("nan") if dims is None else float(dims[ok.to(dims.device)].sum())
        if not total > 0:
            return float("nan")
        return float(bits_per_dim(self.log_likelihood[ok].double().sum(), total))

    @property
    def num_weights(self) -> int | None:
        """Weights per example behind ``log_likelihood`` and ``mcse`` (chains or samples)."""
        if self.log_weights is not None:
            return int(self.log_weights.shape[0])
        count = self.settings.get("num_chains", self.settings.get("num_samples"))
        return int(count) if isinstance(count, int | float) else None

    _weight_unit: ClassVar[str] = "samples"

    @property
    def mcse_unreliable(self) -> Tensor | None:
        """``(N,)`` bool: examples whose MCSE cannot be trusted (fewer than 25 weights, or k-hat
        above :func:`~pyrolik.ops.stats.khat_threshold`)."""
        if self.mcse is None:
            return None
        k = self.num_weights
        if k is None or k < MIN_WEIGHTS_FOR_MCSE or self.khat is None:
            return torch.ones_like(self.mcse, dtype=torch.bool)
        return self.khat > khat_threshold(k)

    def warnings(self) -> list[str]:
        """Plain-words warnings about this estimate (empty when nothing looks wrong)."""
        out = [failed_message(self.failed)] if self.failed.any() else []
        blind = 0 if self.num_observed is None else int((self.num_observed == 0).sum())
        if blind:
            out.append(f"{blind} of {self.num_examples} examples observe nothing (every entry "
                       "masked): their log p(x) is exactly 0 and counts in the mean; drop them from x")
        if self.khat is not None:
            bad = int((self.khat > KHAT_WARN).sum())
            if bad:
                out.append(
                    f"{bad} of {self.num_examples} examples have Pareto k-hat > {KHAT_WARN}: their "
                    "importance weights are dominated by a few draws and the estimate is unreliable "
                    "(use more chains/samples, more annealing steps, or a better proposal)")
        out += self._mcse_warnings()
        scores = self.settings.get("validation_log_likelihood") if self.method == "kde" else None
        if scores and len(scores) > 1:  # KDE: is the chosen bandwidth at an end of the grid?
            best = max(range(len(scores)), key=scores.__getitem__)
            if best in (0, len(scores) - 1):
                side = "smallest" if best == 0 else "largest"
                out.append(f"the KDE bandwidth chosen on the validation data is the {side} of the "
                           f"grid ({self.settings['bandwidth']:.4g}): the best one may lie outside "
                           "it; widen the grid (bandwidth=, --bandwidth on the command line)")
        return out

    def _mcse_warnings(self) -> list[str]:
        k, unit = self.num_weights, self._weight_unit
        if self.mcse is None or k is None:
            return []
        if k < MIN_WEIGHTS_FOR_MCSE:
            # a standing caveat of the settings: a remark; one weight holding the mass is acted on
            return [remark(
                f"the MCSE comes from {k} {unit} per example: it matches the spread of repeated "
                f"runs on average (jackknife), but {k} weights cannot show whether rare draws "
                f"dominate (Pareto k-hat needs {MIN_WEIGHTS_FOR_MCSE} or more), so read it as a "
                f"rough guide, not an error bar; use {MIN_WEIGHTS_FOR_MCSE}+ {unit} for an MCSE "
                "you can check"), *self._dominated_warnings(k)]
        threshold = khat_threshold(k)
        if self.khat is None or threshold >= KHAT_WARN:
            return []
        bad = int(((self.khat > threshold) & (self.khat <= KHAT_WARN) & ~self.failed).sum())
        if not bad:
            return []
        text = (f"{bad} of {self.num_examples} examples have Pareto k-hat between {threshold:.2f} "
                f"and {KHAT_WARN}: with {k} {unit} their estimate and MCSE converge too slowly to "
                f"be trusted (the threshold rises with the number of {unit}: Vehtari et al. 2024); "
                f"use more {unit}")
        # beside examples above 0.7, whose message already asks for more of them: a remark
        return [remark(text) if bool((self.khat > KHAT_WARN).any()) else text]

    def _dominated_warnings(self, k: int) -> list[str]:
        """Below 25 weights: examples whose MCSE exceeds sqrt(1 - 1/K) (one draw holds the mass)."""
        if self.mcse is None or k < 2:
            return []
        limit = math.sqrt(1.0 - 1.0 / k)
        heavy = int(((self.mcse > limit) & ~self.failed).sum())
        if not heavy:
            return []
        unit = self._weight_unit
        more = f"more annealing steps or {unit}" if unit == "chains" else f"more {unit}"
        return [f"for {heavy} of {self.num_examples} examples the weights are dominated by one of "
                f"the {k} {unit} (MCSE > sqrt(1 - 1/K) = {limit:.2f} nats): the estimate rests on "
                f"one draw; use {more}"]

    def per_example(self) -> pd.DataFrame:
        """One row per example: estimate, MCSE, ESS and k-hat."""
        cols = {"log_likelihood": self.log_likelihood}
        cols.update({n: getattr(self, n) for n in ("mcse", "ess", "khat") if getattr(self, n) is not None})
        if self.num_observed is not None and self.num_dims is None:  # they differ: show them
            cols["observed_dims"] = self.num_observed
        df = pd.DataFrame({k: v.detach().cpu().double().numpy() for k, v in cols.items()})
        df.index.name = "example"
        return df

    def _summary_row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"method": self.method, "bound": self.bound or "none",
                               "examples": self.num_examples, f"{self.quantity} [nats]": self.mean,
                               "stderr": self.stderr}
        if self.failed.any():
            row["failed"] = int(self.failed.sum())
        if self.observed_dims is not None and self.quantity == "log p(x)":
            row["NLL [bits/dim]"] = self.bits_per_dim
        if self.mcse is not None:
            k = self.num_weights
            label = ("mean MCSE" if k is None or k >= MIN_WEIGHTS_FOR_MCSE else
                     f"mean MCSE (K={k} {self._weight_unit}: rough below {MIN_WEIGHTS_FOR_MCSE})")
            row[label] = float(self.mcse[~self.failed].mean())
        if self.ess is not None:
            ok = ~self.failed
            row["min ESS"] = float(self.ess[ok].min()) if ok.any() else float("nan")
        if self.khat is not None and torch.isfinite(self.khat).any():
            row["max k-hat"] = float(self.khat[torch.isfinite(self.khat)].max())
        row["wall time [s]"] = self.wall_time
        return row

    def summary(self) -> Summary:
        """A one-row table a person can read: the mean estimate, its errors and diagnostics."""
        return Summary(pd.DataFrame([self._summary_row()]).set_index("method"))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(method={self.method!r}, bound={self.bound!r}, "
                f"N={self.num_examples}, mean={self.mean:.4f}, stderr={self.stderr:.4f})")


@dataclass(frozen=True, repr=False)
class AISResult(EstimateResult):
    """A forward or reverse AIS run: ``log_likelihood`` is ``logmeanexp(log_weights)``, or its
    negative for reverse AIS (whose weights estimate 1/p(x))."""

    converter: ClassVar[type] = AISConverter

    samples: dict[str, Tensor] | None = None  # AIS keeps its final states in latents
    draws: dict[str, Tensor] | None = None  # and resamples them when exported
    direction: str = stored("attrs", "direction", default="forward")
    path: str = stored("attrs", "path", default="prior")
    # (num_steps + 1,) betas in the order they were visited ((num_steps + 1, N) per batch)
    schedule: Tensor | None = stored("constant_data", "schedule", ["step", EX], default=None)
    # annealing.step_sizes.StepSizes: the frozen pilot table (adapt="pilot")
    step_sizes: Any = stored("constant_data", ("pilot_beta", "log_step_size", "inv_mass",
                                               "log_ratio_var"), ["pilot_step", EX, "latent_dim"],
                             codec="step_sizes", default=None)
    kernel: Any = stored("attrs", "kernel", codec="kernel", default=None)  # the HMC kernel used
    final_state: Tensor | None = stored("unconstrained_particles", "u", [BLOCK, EX, "latent_dim"],
                                        default=None)  # (K, N, d) unconstrained latents at the end
    # constrained final states, each (K, N, *site)
    latents: dict[str, Tensor] | None = stored("particles", None, [BLOCK, EX], default=None)
    acceptance_rate: Tensor | None = stored("particles", "mean_acceptance_rate", [BLOCK, EX],
                                            default=None)  # (K, N) mean over the run
    # (K, N) count of non-finite proposals
    num_divergent: Tensor | None = stored("particles", "num_divergent", [BLOCK, EX], default=None)
    # recorded diagnostics, each (R, K, N, ...), see ``ais``: in annealing ("z" in trajectory)
    trace: dict[str, Tensor] | None = stored("annealing", None, ["step", BLOCK, EX], codec="trace",
                                             default=None)
    # (R,) the annealing step index of each record
    trace_steps: Tensor | None = stored("annealing", "step", ["step"], codec="coord", default=None)
    # results.bdmc.Budget: how a Tolerance chose num_steps (None without it)
    budget: Any = stored("attrs", "budget", codec="budget", default=None)
    # (K, N) the chain each chain descends from, when the chains were resampled (pyrolik.SMC)
    ancestor: Tensor | None = stored("particles", "ancestor", [BLOCK, EX], default=None)
    # (N,) the steps at which each example's chains were resampled (mean over its islands)
    num_resampled: Tensor | None = stored("evidence", "num_resampled", [EX], default=None)

    _weight_unit: ClassVar[str] = "chains"

    def _summary_row(self) -> dict[str, Any]:
        row = super()._summary_row()
        if self.path == "guide":
            row["method"] = f"{self.method}+encoder"
        if self.acceptance_rate is not None:
            row["acceptance"] = float(self.acceptance_rate[:, ~self.failed].mean())
        if self.num_divergent is not None:
            row["divergences"] = int(self.num_divergent[:, ~self.failed].sum())
        if self.num_resampled is not None:
            row["resamplings"] = float(self.num_resampled.double().mean())
        if self.budget is not None:
            row.update(self.budget.summary_fields())
        return row

    def warnings(self) -> list[str]:
        out = super().warnings()
        if self.acceptance_rate is not None:
            low = int(((self.acceptance_rate.mean(0) < ACCEPTANCE_COLLAPSE) & ~self.failed).sum())
            if low:
                out.append(
                    f"HMC acceptance collapsed (< {ACCEPTANCE_COLLAPSE}) for {low} of "
                    f"{self.num_examples} examples: the chains barely moved, so the estimate is far "
                    "from converged; " + acceptance_fix(self.kernel))
        num_div = 0 if self.num_divergent is None else int(self.num_divergent[:, ~self.failed].sum())
        if num_div:
            out.append(self._divergent_warning(num_div))
        out += self._resampling_warnings() + self._split_warnings()
        if self.budget is not None:
            out += list(self.budget.notes)
        return out

    def _split_warnings(self) -> list[str]:
        """Whether fewer chains with more steps each would have spent the gradients better."""
        k, steps, best = self.num_weights, self.settings.get("num_steps"), BEST_SPLIT_CHAINS
        if self.log_weights is None or k is None or k <= best or not isinstance(steps, int):
            return []
        if self.ancestor is not None:  # resampled: the chains' weights are not independent
            return [] if k < 4 * best else [remark(
                f"whether {k} chains of {steps} steps spend the gradients well was not checked: "
                "the check reads independent chains' weights, and these were resampled; on the "
                f"measured frontier {best} to {2 * best} chains with more steps each did best "
                "(benchmarks/RESULTS.md)")]
        lw = self.log_weights[:, ~self.failed].double()
        lw = lw[:, torch.isfinite(lw).all(0)]
        if lw.shape[1] == 0:
            return []
        v = float(lw.var(0).mean())
        ratio = lognormal_bias(k, v) / max(lognormal_bias(best, v * best / k), 1e-12)
        if ratio <= WASTED_SPLIT:
            return []
        longer = steps * k // best
        return [Message(
            f"{k} chains of {steps} steps waste this budget: their log-weights vary by {v:.2f} "
            f"nats^2 per example, too much for more chains to average out; {best} chains of "
            f"{longer} steps (the same gradient evaluations) would leave about {ratio:.1f} times "
            f"less bias (a log-normal model of the weights, which predicts the measured frontier: "
            f"benchmarks/RESULTS.md); pass num_chains={best}, num_steps={longer}")]

    def _resampling_warnings(self) -> list[str]:
        """What resampling (SMC) did to the chains and what it means for the diagnostics."""
        if self.num_resampled is None:
            return []
        times = float(self.num_resampled.double().mean())
        out: list[str] = []
        islands = self.settings.get("islands")
        single = 0 if self.mcse is None else int((self.mcse.isnan() & ~self.failed).sum())
        if single:
            out.append(Message(
                f"the MCSE of {single} of {self.num_examples} examples cannot be estimated from "
                "this run: all their chains descend from one starting chain (one island, resampled "
                f"{times:.0f} times per example); run them in independent islands (pyrolik.SMC() "
                "splits 8 or more chains into 2 to 4 islands), or repeat the run with other seeds "
                "and take the spread"))
        resampled = int((self.num_resampled > 0).sum())
        if resampled:
            how = (f"within {islands} independent islands per example: the MCSE is the spread of "
                   f"the islands' estimates, right on average over examples but from {islands} "
                   "values each, so one example's can be several times too small (for per-example "
                   "error bars use more islands, pyrolik.SMC(islands=), or repeat with other "
                   "seeds); each exported block of chains holds whole islands"
                   if isinstance(islands, int) and islands > 1 else
                   "in one island: chains that share an ancestor are not independent, so ArviZ's "
                   "diagnostics across the exported blocks of chains overstate their independence")
            out.append(remark(
                f"the chains of {resampled} of {self.num_examples} examples were resampled (SMC, "
                f"{times:.1f} times per example on average) {how}; ESS and k-hat are those of the "
                "chains' starting ancestors (Chan & Lai 2013)"))
        return out

    def _divergent_warning(self, num_div: int) -> str:
        """Divergent proposals: a remark under ``DIVERGENT_REMARK`` of the transitions."""
        text = f"{num_div} HMC proposals were non-finite (divergent) and rejected"
        steps = (len(self.schedule) - 1 if self.schedule is not None
                 else self.settings.get("num_steps"))
        if self.num_divergent is None or not isinstance(steps, int | float) or steps < 1:
            return text
        transitions = int(self.num_divergent[:, ~self.failed].numel() * steps)
        if transitions and num_div < DIVERGENT_REMARK * transitions:
            return remark(f"{text} ({num_div} of {transitions} transitions: each stays where it "
                          "was, so AIS stays valid and only that step is lost)")
        return Message(f"{text} ({num_div} of {transitions or '?'} transitions: frequent enough to "
                       "slow the chains; lower the step size or raise target_accept)")
