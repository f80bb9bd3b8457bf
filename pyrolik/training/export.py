"""A :class:`~pyrolik.training.monitor.TrainingMonitor` as an xarray Dataset, and its plot (figure 3)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import xarray as xr

from pyrolik.results.convert import _versions

__all__ = ["monitor_dataset", "plot_monitor"]

SUBSETS = ("train", "test")
LABELS = {"ais": "AIS", "iwae": "IWAE bound"}


def _table(series: dict[str, list], epochs: int, width: int) -> np.ndarray:
    """``{subset: [per-epoch (n,) tensors]}`` -> ``(epoch, subset, example)``, NaN-padded."""
    out = np.full((epochs, len(SUBSETS), width), np.nan)
    for j, subset in enumerate(SUBSETS):
        for i, values in enumerate(series[subset]):
            out[i, j, : len(values)] = values.numpy()
    return out


def monitor_dataset(monitor: Any) -> xr.Dataset:
    """See :meth:`pyrolik.training.TrainingMonitor.to_dataset`.

    Subsets of different sizes share the ``example`` dim, the shorter one padded with NaN.
    """
    e = len(monitor.epochs)
    width = max(len(x) for x in monitor.subsets.values())
    coords = {"epoch": np.asarray(monitor.epochs, dtype=np.int64), "subset": list(SUBSETS),
              "example": np.arange(width)}
    data: dict[str, Any] = {}
    for method in monitor.methods:
        ll = _table(monitor.estimates[method], e, width)
        data[method] = (("epoch", "subset", "example"), ll)
        data[f"{method}_mcse"] = (("epoch", "subset", "example"),
                                  _table(monitor.mcse[method], e, width))
        n = np.sum(np.isfinite(ll), axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            data[f"{method}_mean"] = (("epoch", "subset"), np.nanmean(ll, axis=-1)
                                      if e else np.zeros((0, 2)))
            data[f"{method}_stderr"] = (("epoch", "subset"), np.nanstd(ll, axis=-1, ddof=1)
                                        / np.sqrt(n) if e else np.zeros((0, 2)))
    data["eval_seconds"] = (("epoch",), np.asarray(monitor.eval_seconds, dtype=float))
    data["train_seconds_per_epoch"] = (("epoch",),
                                       np.asarray(monitor.train_seconds_per_epoch, dtype=float))
    for name, values in monitor.scalars.items():
        data[name] = (("epoch",), np.asarray(values, dtype=float))
    cost = monitor.cost
    attrs = {**_versions(), "pyrolik_result": "TrainingMonitor",
             "methods": json.dumps(list(monitor.methods)), "every": int(monitor.every),
             "settings": json.dumps({"num_steps": monitor.num_steps,
                                     "num_chains": monitor.num_chains,
                                     "num_samples": monitor.num_samples,
                                     "path": "guide" if monitor.guide is not None else "prior",
                                     "seed": monitor.seed}),
             "cost": json.dumps({k: (None if not math.isfinite(v) else v) for k, v in cost.items()}),
             "cost_in_words": monitor.describe_cost(),
             "bound": "lower (every estimate is a stochastic lower bound on log p(x))"}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def plot_monitor(ds: xr.Dataset, ax=None, start_epoch: int | None = None):
    """Mean log-likelihood against epoch: train solid, test dashed, 2 standard errors shaded;
    from ``start_epoch`` on (the untrained model's values would set the scale otherwise)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    if start_epoch is not None:
        ds = ds.sel(epoch=ds["epoch"] >= start_epoch)
    methods = json.loads(ds.attrs["methods"])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    epochs = ds["epoch"].values
    for i, method in enumerate(methods):
        for subset, style in (("train", "-"), ("test", "--")):
            mean = ds[f"{method}_mean"].sel(subset=subset).values
            se = ds[f"{method}_stderr"].sel(subset=subset).values
            color = colors[i % len(colors)]
            ax.plot(epochs, mean, style, color=color, marker="o", markersize=3,
                    label=f"{LABELS.get(method, method)}, {subset}")
            ax.fill_between(epochs, mean - 2 * se, mean + 2 * se, color=color, alpha=0.15,
                            linewidth=0)
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean log p(x) [nats]")
    ax.set_title("log-likelihood during training (lower bounds)", fontsize=10)
    ax.legend(frameon=False, fontsize="small")
    return ax
