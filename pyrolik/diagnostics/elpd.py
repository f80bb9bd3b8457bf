r"""The ``evidence`` group as ArviZ's ``ELPDData``, so that ``az.plot_khat`` draws its Pareto k-hat.

Not a leave-one-out estimate: its printed form says so, and ``az.compare`` should not be given it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import xarray as xr
from arviz import ELPDData  # ArviZ 0.x; the 1.x equivalent is arviz_stats' (not wrapped here)

__all__ = ["to_elpd", "EvidenceData"]


def _evidence(data: Any, bound: str) -> xr.Dataset:
    """The per-example ``evidence`` dataset of a result, DataTree or InferenceData."""
    if hasattr(data, "to_datatree") and not isinstance(data, xr.DataTree):
        data = data.to_datatree()  # a result, or an InferenceData
    if not isinstance(data, xr.DataTree):
        raise TypeError(f"to_elpd takes a pyrolik result, DataTree or InferenceData, got "
                        f"{type(data).__name__}")
    for path in (f"{bound}/evidence", f"{bound}_evidence", "evidence"):
        try:
            ds = data[path].to_dataset()
        except KeyError:
            continue
        if "pareto_k" in ds:  # one draw of the estimator: per example
            return ds.squeeze([d for d in ("chain", "draw") if d in ds.dims], drop=True)
    raise ValueError("no evidence group with pareto_k: export a result that kept its weights "
                     "(AIS, IWAE or likelihood weighting) with pyrolik >= this layout, e.g. "
                     "pyrolik.load(path).to_inference_data()")


class EvidenceData(ELPDData):
    """``ELPDData`` of per-example log evidence (not leave-one-out); prints as such."""

    @property
    def _constructor(self):
        return EvidenceData

    def __str__(self) -> str:
        k = np.asarray(self["pareto_k"])
        bad, missing = int(np.sum(k > self["good_k"])), int(np.sum(np.isnan(k)))
        text = (f"Computed from {self['n_samples']} weights per example for "
                f"{self['n_data_points']} examples (log evidence, not leave-one-out)\n"
                f"sum of log p(x_i): {self['elpd_evidence']:.2f} (se {self['se']:.2f})\n"
                f"Pareto k-hat above good_k = {self['good_k']:.2f}: {bad} of {k.size}")
        if missing:
            text += f"; not computable for {missing} (NaN: fewer than 25 weights or a flat tail)"
        return text

    __repr__ = __str__


def to_elpd(data: Any, *, bound: str = "lower") -> Any:
    """An ``arviz.ELPDData`` of the export's per-example evidence, for ``az.plot_khat``.

    Parameters
    ----------
    data : result, xarray.DataTree or arviz.InferenceData
        An export with an ``evidence`` group, or a BDMC export (its ``bound`` run).
    bound : {"lower", "upper"}
        Which run of a BDMC export: forward AIS (lower) or reverse AIS (upper).

    Returns
    -------
    EvidenceData
        ``pareto_k`` per example, ``elpd_evidence`` (the sum of the estimates) and ``se``.
    """
    ev = _evidence(data, bound)
    k = ev["pareto_k"]
    n_samples = int(k.attrs.get("n_samples", 0))
    good = float(k.attrs.get("good_k", -math.inf))
    lml = ev["log_marginal_likelihood"]
    se = float(np.sqrt(np.nansum(ev["mcse"].values ** 2))) if "mcse" in ev else math.nan
    return EvidenceData(data=[float(lml.sum()), se, n_samples, int(lml.size),
                     bool(np.any(k.values > good)), lml, k, "log", good],
               index=["elpd_evidence", "se", "n_samples", "n_data_points", "warning",
                      "evidence_i", "pareto_k", "scale", "good_k"])
