r"""The result of BDMC: a forward (lower) and a reverse (upper) AIS run on simulated data, their gap,
and its converter to a DataTree."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch
import xarray as xr
from torch import Tensor

from pyrolik.advice import (
    BDMC_GAP_WARN,
    NEGATIVE_GAP_SE,
    inverted_gap_advice,
)
from pyrolik.exceptions import prefixed, remark
from pyrolik.ops.stats import DEFAULT_BLOCKS
from pyrolik.results.convert import Converter, _created_at, _versions, to_datatree
from pyrolik.results.estimates import AISResult, Exported, _mean, _stderr
from pyrolik.results.layout import (
    EX,
    LAYOUT,
    NESTED,
    _dataset,
    _laid_out,
    _np,
    _one_draw,
    _tree,
    example_dim,
    pit,
    stored,
)
from pyrolik.results.table import Summary

__all__ = ["BDMCResult", "BDMCConverter", "DistortionBDMCConverter"]


class BDMCConverter:
    """A BDMC result: its two runs as subtrees, the sandwich, the simulated latents and their PIT."""

    def __init__(self, result: Any, num_blocks: int = DEFAULT_BLOCKS):
        self.result = result
        self.ex = example_dim(result)
        self.subtrees = {name: to_datatree(getattr(result, name), num_blocks=num_blocks)
                         for name in NESTED}

    def evidence_to_xarray(self) -> xr.Dataset:
        """Both bounds per example ``(bound, <plate>)``, the gap and its MCSE."""
        lo, up, ex = self.result.lower, self.result.upper, self.ex
        ev: dict[str, Any] = {
            "log_marginal_likelihood": (("bound", ex), np.stack([_np(lo.log_likelihood),
                                                                 _np(up.log_likelihood)])),
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
        variables = {s: _laid_out(s, _np(v), (EX,) if v.shape[0] == n else ("sample", EX), self.ex)
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
        r = self.result
        tree = _tree(self.groups(), {
            **_versions(), "pyrolik_result": type(r).__name__, "method": "bdmc",
            "bound": "sandwich", "gap": float(r.gap), "gap_stderr": float(r.gap_stderr),
            "wall_time": float(r.wall_time), "created_at": _created_at(), "layout": LAYOUT})
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

    lower: AISResult = stored("lower", codec="result")
    upper: AISResult = stored("upper", codec="result")
    x: Tensor = stored("lower/observed_data", "x", [EX])
    # the exact latents that generated x: each (N, *site), or (K, N, *site)
    latents: dict[str, Tensor] = stored("simulated", None, ["sample", EX], default_factory=dict)
    wall_time: float = stored("attrs", "wall_time", default=float("nan"))

    @property
    def bound(self) -> str:
        return "sandwich"

    @property
    def method(self) -> str:
        return "bdmc"

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
        r"""Monte Carlo standard error of :attr:`gap`: :math:`\sqrt{\sum_n \mathrm{mcse}_n^2} / N`
        over the examples that did not fail (nats). :attr:`gap_stderr` is the spread over examples
        instead (data variability, which includes this noise)."""
        ok = ~self.failed
        if not ok.any():
            return float("nan")
        return float(self.per_example_gap_mcse[ok].pow(2).sum().sqrt() / int(ok.sum()))

    def inverted_gap(self) -> dict[str, Any] | None:
        """How far below zero the mean gap is in units of its MCSE, or None when it is not inverted.

        Upper minus lower has a non-negative expectation, so a negative mean gap is Monte Carlo
        noise when it is within :data:`~pyrolik.advice.NEGATIVE_GAP_SE` MCSEs of zero (small gaps
        at a small budget: a few chains), and a sign that the reverse chains did not start at
        exact posterior draws of ``x`` beyond that. Returns ``{"gap", "mcse", "num_mcse",
        "within_noise"}``.
        """
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
        """Lower and upper rows, plus the gap with its standard error over examples and its Monte
        Carlo standard error; an inverted gap (upper < lower) says whether it is within noise (a
        :class:`pandas.DataFrame` that prints as a fixed-width table, see
        :mod:`pyrolik.results.table`)."""
        df = pd.concat([self.lower.summary(), self.upper.summary()])
        df.index = ["forward AIS (lower)", "reverse AIS (upper)"]
        df.index.name = "estimate"
        gap = {"log p(x) [nats]": self.gap, "stderr": self.gap_stderr,
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
        out += self._inverted_warnings()
        return out

    def _leg_warnings(self, leg: AISResult) -> list[str]:
        """A leg's warnings; with a small gap that is not inverted beyond noise, an example's
        weights dominated by one chain is a remark: the sandwich bounds what it costs."""
        out = leg.warnings()
        inverted = self.inverted_gap()
        if not (self.gap <= BDMC_GAP_WARN and (inverted is None or inverted["within_noise"])):
            return out
        settled = set(leg._dominated_warnings(leg.num_weights or 0))
        return [remark(f"{w} (the BDMC gap, {self.gap:.2f} nats, bounds what it costs on average)")
                if w in settled else w for w in out]

    def _inverted_warnings(self) -> list[str]:
        """Inverted gaps, of the mean and per example, in units of their MCSE."""
        ok = ~self.failed
        return inverted_gap_advice(self.inverted_gap(), self.per_example_gap.double()[ok],
                                   self.per_example_gap_mcse[ok], self.num_examples)

    @property
    def num_examples(self) -> int:
        return int(self.x.shape[0])

    def __repr__(self) -> str:
        return (f"BDMCResult(N={len(self.x)}, lower={self.lower.mean:.4f}, "
                f"upper={self.upper.mean:.4f}, gap={self.gap:.4f} +- {self.gap_stderr:.4f})")
