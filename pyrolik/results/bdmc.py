r"""The result of BDMC: a forward (lower) and a reverse (upper) AIS run on simulated data, their gap,
and its converter to a DataTree; the record of a budget search by BDMC."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar, NamedTuple

import numpy as np
import pandas as pd
import torch
import xarray as xr
from torch import Tensor

from pyrolik.advice import BDMC_GAP_WARN, NEGATIVE_GAP_SE, inverted_gap_advice
from pyrolik.exceptions import prefixed, remark
from pyrolik.ops.stats import DEFAULT_BLOCKS
from pyrolik.results.convert import Converter, to_datatree
from pyrolik.results.estimates import AISResult, Exported, _mean, _stderr
from pyrolik.results.layout import (
    EX,
    NESTED,
    _dataset,
    _np,
    _one_draw,
    _tree,
    example_dim,
    pit,
    stored,
)
from pyrolik.results.table import Summary

__all__ = ["BDMCResult", "BDMCConverter", "DistortionBDMCConverter", "Budget", "Round", "Check",
           "CONFIDENCE_Z", "MAX_STEPS"]


class BDMCConverter(Converter):
    """A BDMC result: its two runs as subtrees, the sandwich, the simulated latents and their PIT."""

    def __init__(self, result: Any, num_blocks: int = DEFAULT_BLOCKS):
        self.result = result
        self.ex = example_dim(result)
        self.subtrees = {name: to_datatree(getattr(result, name), num_blocks=num_blocks)
                         for name in NESTED}

    def evidence_to_xarray(self) -> xr.Dataset:
        """Both bounds per example ``(bound, <plate>)``, the gap and its MCSE."""
        lo, up, ex = self.result.lower, self.result.upper, self.ex
        both = np.stack([_np(lo.log_likelihood), _np(up.log_likelihood)])
        ev: dict[str, Any] = {"log_marginal_likelihood": (("bound", ex), both),
                              "gap": ((ex,), _np(self.result.per_example_gap))}
        if lo.mcse is not None and up.mcse is not None:
            mcse = np.stack([_np(lo.mcse), _np(up.mcse)])
            ev["mcse"] = (("bound", ex), mcse)
            ev["gap_mcse"] = ((ex,), np.sqrt((mcse ** 2).sum(0)))
        return _one_draw(xr.Dataset(ev, coords={ex: np.arange(len(self.result.x)),
                                                "bound": ["lower", "upper"]}))

    def simulated_to_xarray(self) -> xr.Dataset | None:
        """The exact latents that generated ``x``, ``(<plate>, ...)`` or ``(sample, <plate>, ...)``."""
        lat, n = self.result.latents, len(self.result.x)
        if not lat:
            return None
        variables = {s: self.layout(s, _np(v), (EX,) if v.shape[0] == n else ("sample", EX))
                     for s, v in lat.items()}
        return _one_draw(_dataset(variables, {self.ex: np.arange(n)}, []))

    def calibration_to_xarray(self, simulated: xr.Dataset | None) -> xr.Dataset | None:
        """The PIT of each simulated latent among the forward run's resampled draws."""
        post = self.subtrees["lower"].children.get("posterior")
        if simulated is None or post is None or any(
                da.dims[2] != self.ex for da in simulated.data_vars.values()):
            return None
        truth = simulated.squeeze(("chain", "draw"), drop=True)
        return _one_draw(xr.Dataset({s: pit(post.dataset[s], truth[s]) for s in truth.data_vars
                                     if s in post.dataset}))

    def groups(self) -> dict[str, xr.Dataset | None]:
        simulated = self.simulated_to_xarray()
        lower = self.subtrees["lower"]
        return {"evidence": self.evidence_to_xarray(), "simulated": simulated,
                "calibration": self.calibration_to_xarray(simulated),
                **{g: lower[g].to_dataset() for g in ("posterior", "sample_stats")
                   if g in lower.children},
                **{f"{name}/{g}": node.to_dataset() for name, sub in self.subtrees.items()
                   for g, node in sub.children.items()}}

    def to_datatree(self) -> xr.DataTree:
        tree = _tree(self.groups(), {**self.attrs(), "method": "bdmc", "bound": "sandwich",
                                     "gap": float(self.result.gap),
                                     "gap_stderr": float(self.result.gap_stderr)})
        for name, sub in self.subtrees.items():
            tree[name].attrs = dict(sub.attrs)
        return tree


class DistortionBDMCConverter(Converter):
    """BDMC at points of the distortion path (``docs/export.md``): the bounds per point and example as
    one draw, and point ``j``'s BDMC export as the subtree ``beta_j``."""

    def __init__(self, result: Any, num_blocks: int = DEFAULT_BLOCKS):
        self.result = result
        self.ex = example_dim(result)
        self.subtrees = [to_datatree(res, num_blocks=num_blocks) for res in result.results]

    def bdmc_to_xarray(self) -> xr.Dataset:
        r = self.result
        variables = self.variables("bdmc")
        variables.update({name: (["beta", self.ex], _np(getattr(r, name)))
                          for name in ("rate_lower", "rate_upper")})
        derived = {"gap": r.gap, "gap_stderr": r.gap_stderr}
        if r.mode == "gaussian":
            derived["sigma"] = r.sigmas
        variables.update({name: (["beta"], _np(v)) for name, v in derived.items()})
        coords = {"beta": _np(r.betas), self.ex: np.arange(r.lower.shape[-1])}
        return _one_draw(_dataset(variables, coords, []))

    def to_datatree(self) -> xr.DataTree:
        tree = _tree({"bdmc": self.bdmc_to_xarray()}, {
            **self.attrs(), "method": "bdmc (distortion path)", "bound": "sandwich"})
        for j, sub in enumerate(self.subtrees):
            tree[f"beta_{j}"] = sub
        return tree


@dataclass(frozen=True)
class BDMCResult(Exported):
    """Bidirectional Monte Carlo on simulated data: a sandwich ``lower <= log p(x) <= upper``."""

    converter: ClassVar[type] = BDMCConverter
    bound: ClassVar[str] = "sandwich"
    method: ClassVar[str] = "bdmc"

    lower: AISResult = stored("lower", codec="result")
    upper: AISResult = stored("upper", codec="result")
    x: Tensor = stored("lower/observed_data", "x", [EX])
    # the exact latents that generated x: each (N, *site), or (K, N, *site)
    latents: dict[str, Tensor] = stored("simulated", None, ["sample", EX], default_factory=dict)
    wall_time: float = stored("attrs", "wall_time", default=float("nan"))

    @property
    def failed(self) -> Tensor:
        """``(N,)`` bool: examples where either bound failed (NaN or inf); left out of the means."""
        return self.lower.failed | self.upper.failed

    @property
    def per_example_gap(self) -> Tensor:
        """``upper - lower`` per example (nats); bounds the error of either estimate on average."""
        return self.upper.log_likelihood - self.lower.log_likelihood

    @property
    def gap(self) -> float:
        """The BDMC gap: mean over the examples that did not fail of upper minus lower (nats)."""
        return _mean(self.per_example_gap, self.failed)

    @property
    def gap_stderr(self) -> float:
        return _stderr(self.per_example_gap, self.failed)

    @property
    def per_example_gap_mcse(self) -> Tensor:
        r"""Monte Carlo standard error of each example's gap, :math:`\sqrt{\mathrm{mcse}_L^2 +
        \mathrm{mcse}_U^2}` (the two runs are independent), nats."""
        if self.lower.mcse is None or self.upper.mcse is None:
            return torch.full_like(self.per_example_gap, float("nan"), dtype=torch.float64)
        return (self.lower.mcse.double() ** 2 + self.upper.mcse.double() ** 2).sqrt()

    @property
    def gap_mcse(self) -> float:
        r"""MCSE of :attr:`gap`, :math:`\sqrt{\sum_n \mathrm{mcse}_n^2} / N` over the examples that
        did not fail (nats; :attr:`gap_stderr` is the spread over examples instead)."""
        ok = ~self.failed
        if not ok.any():
            return float("nan")
        return float(self.per_example_gap_mcse[ok].pow(2).sum().sqrt() / int(ok.sum()))

    def inverted_gap(self) -> dict[str, Any] | None:
        """``{"gap", "mcse", "num_mcse", "within_noise"}``: how far below zero the mean gap is in
        MCSEs (noise within :data:`~pyrolik.advice.NEGATIVE_GAP_SE`, else the reverse chains did not
        start at exact posterior draws); None when the gap is not inverted."""
        gap, mcse = self.gap, self.gap_mcse
        if not gap < 0:
            return None
        num = -gap / mcse if mcse > 0 else math.inf
        return {"gap": gap, "mcse": mcse, "num_mcse": num, "within_noise": num <= NEGATIVE_GAP_SE}

    @property
    def midpoint(self) -> Tensor:
        """``(lower + upper) / 2`` per example (nats): the centre of the sandwich, **not an
        estimate** of log p(x) (neither bound's; use ``lower.log_likelihood`` for forward AIS). Its
        distance to either bound is half the per-example gap."""
        return 0.5 * (self.upper.log_likelihood + self.lower.log_likelihood)

    @property
    def mean(self) -> float:
        """Mean of :attr:`midpoint` over the examples that did not fail (nats)."""
        return _mean(self.midpoint, self.failed)

    @property
    def stderr(self) -> float:
        return _stderr(self.midpoint, self.failed)

    def summary(self) -> Summary:
        """Lower and upper rows, and the gap with its standard error and MCSE (an inverted gap says
        whether it is within noise), as a :class:`~pyrolik.results.table.Summary`."""
        df = pd.concat([self.lower.summary(), self.upper.summary()])
        df.index = ["forward AIS (lower)", "reverse AIS (upper)"]
        df.index.name = "estimate"
        gap = {f"{self.lower.quantity} [nats]": self.gap, "stderr": self.gap_stderr,
               "examples": len(self.x), "bound": "gap", "gap MCSE": self.gap_mcse}
        inverted = self.inverted_gap()
        if inverted is not None:
            gap["inverted gap"] = (f"{inverted['num_mcse']:.1f} MCSE: "
                                   + ("noise" if inverted["within_noise"] else "NOT noise"))
        df.loc["BDMC gap (upper - lower)", list(gap)] = list(gap.values())
        return Summary(df)

    def warnings(self) -> list[str]:
        out: list[str] = [prefixed("forward: ", w) for w in self._leg_warnings(self.lower)]
        out += [prefixed("reverse: ", w) for w in self._leg_warnings(self.upper)]
        if self.gap > BDMC_GAP_WARN:
            out.append(f"the BDMC gap is {self.gap:.2f} nats: AIS has not converged on this model; "
                       "increase num_steps until the gap is small")
        ok = ~self.failed  # inverted gaps, of the mean and per example, in units of their MCSE
        return out + inverted_gap_advice(self.inverted_gap(), self.per_example_gap.double()[ok],
                                         self.per_example_gap_mcse[ok], self.num_examples)

    def _leg_warnings(self, leg: AISResult) -> list[str]:
        """A leg's warnings; one-chain dominance is a remark when the gap is small, not inverted."""
        out = leg.warnings()
        inverted = self.inverted_gap()
        if not (self.gap <= BDMC_GAP_WARN and (inverted is None or inverted["within_noise"])):
            return out
        settled = set(leg._dominated_warnings(leg.num_weights or 0))
        return [remark(f"{w} (the BDMC gap, {self.gap:.2f} nats, bounds what it costs on average)")
                if w in settled else w for w in out]

    @property
    def num_examples(self) -> int:
        return int(self.x.shape[0])

    def __repr__(self) -> str:
        return (f"BDMCResult(N={len(self.x)}, lower={self.lower.mean:.4f}, "
                f"upper={self.upper.mean:.4f}, gap={self.gap:.4f} +- {self.gap_stderr:.4f})")


CONFIDENCE_Z = 2.0  # a budget search's gap bound: mean + 2 standard errors (one-sided 97.7%)
MAX_STEPS = 6400  # a budget search's default cap (25 * 2**8)


class Round(NamedTuple):
    """One BDMC run of the search, on the simulated data."""

    num_steps: int
    gap: float  # mean over simulated examples of upper - lower (nats)
    gap_se: float  # its standard error over the examples
    lower: float  # mean forward estimate on the simulated data (nats)
    gradient_evals: float  # model gradient evaluations of the whole run, pilot included
    seconds: float
    point: str | None = None  # a curve's grid point whose gap decided the round ("sigma 0.05")

    @property
    def gap_upper(self) -> float:
        """The gap's upper confidence bound, ``gap + CONFIDENCE_Z * gap_se``."""
        return self.gap + CONFIDENCE_Z * self.gap_se


class Check(NamedTuple):
    """The check on the real data: the estimate at ``num_steps`` against one at half the steps."""

    num_examples: int  # the subset of x it ran on
    num_steps: int  # the half budget it compared with
    change: float  # mean over the subset of estimate(T) - estimate(T / 2), nats
    change_se: float
    simulated_change: float | None  # the same change of the lower bound on the simulated data
    gradient_evals: float
    seconds: float
    point: str | None = None  # a curve's grid point with the largest change ("sigma 0.05")


@dataclass(frozen=True)
class Budget:
    """How a tolerance chose ``num_steps`` (``rounds`` on simulated data, the real-data ``check``)
    and what it cost in gradient evaluations and seconds (the final run's: :meth:`with_final`)."""

    tolerance: float | None  # None: a gradient budget was split
    num_steps: int
    converged: bool
    num_simulated: int
    rounds: list[Round]
    final_gradient_evals: float | None = None
    final_seconds: float | None = None
    check: Check | None = None
    max_steps: int = MAX_STEPS
    confidence_z: float = CONFIDENCE_Z
    notes: list[str] = field(default_factory=list)  # the warnings it gave, in plain words
    seed: int | None = None  # the search's seed: the same seed makes the same budget
    num_chains: int | None = None  # the chains the steps are for (the split's, or the caller's)
    gradients: float | None = None  # a budget in gradient evaluations per example, split (no search)

    def with_final(self, gradient_evals: float, seconds: float) -> Budget:
        """The budget with the final run's cost."""
        return replace(self, final_gradient_evals=float(gradient_evals),
                       final_seconds=float(seconds))

    @property
    def search_gradient_evals(self) -> float:
        return float(sum(r.gradient_evals for r in self.rounds))

    @property
    def search_seconds(self) -> float:
        return float(sum(r.seconds for r in self.rounds))

    @property
    def gap(self) -> float:
        """The BDMC gap (simulated data) at the chosen ``num_steps`` (NaN: no search ran)."""
        return self.rounds[-1].gap if self.rounds else math.nan

    @property
    def cost_ratio(self) -> float:
        """(search + check + final run) / final run, in gradient evaluations (NaN before the run)."""
        return self._ratio(self.search_gradient_evals, "gradient_evals", self.final_gradient_evals)

    @property
    def time_ratio(self) -> float:
        """(search + check + final run) / final run, in seconds (NaN before the run)."""
        return self._ratio(self.search_seconds, "seconds", self.final_seconds)

    def _ratio(self, search: float, cost: str, final: float | None) -> float:
        extra = search + (getattr(self.check, cost) if self.check else 0.0)
        return math.nan if final is None else (extra + final) / final

    def summary_fields(self) -> dict[str, Any]:
        """What a result's ``summary()`` shows of the budget."""
        if not self.rounds:  # a gradient budget, split without a search
            return {"gradients per example": self.gradients, "chains chosen": self.num_chains,
                    "steps chosen": self.num_steps}
        last = self.rounds[-1]
        where = "" if last.point is None else f" at {last.point}"
        return {"tolerance [nats]": self.tolerance, "steps chosen": self.num_steps if self.converged
                else f"{self.num_steps} (cap; not within tolerance)",
                "BDMC gap (simulated)": f"{self.gap:.3f} +- {last.gap_se:.3f}{where}",
                "search + final / final": self.cost_ratio}

    def table(self):
        """One row per round: steps, gap, its standard error and upper bound, cost (a DataFrame)."""
        rows = [{**r._asdict(), "gap_upper": r.gap_upper} for r in self.rounds]
        return pd.DataFrame(rows, columns=[*Round._fields, "gap_upper"]).set_index("num_steps")

    def to_dict(self) -> dict[str, Any]:
        """Plain values (what the export stores as JSON), derived costs included."""
        out = asdict(self)
        out["rounds"] = [r._asdict() for r in self.rounds]
        out["check"] = None if self.check is None else self.check._asdict()
        out.update(search_gradient_evals=self.search_gradient_evals,
                   search_seconds=self.search_seconds, cost_ratio=self.cost_ratio)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Budget:
        """The inverse of :meth:`to_dict` (derived costs are recomputed)."""
        keep = {k: v for k, v in d.items()
                if k not in ("search_gradient_evals", "search_seconds", "cost_ratio")}
        keep["rounds"] = [Round(**r) for r in d["rounds"]]
        keep["check"] = None if d.get("check") is None else Check(**d["check"])
        return cls(**keep)
