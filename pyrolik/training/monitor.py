"""Evaluate log p(x) on fixed train and test subsets while a model trains."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import xarray as xr
from torch import Tensor

from pyrolik._validate import check_count, check_model, validate_data
from pyrolik.annealing.kernel import Kernel, as_smc
from pyrolik.execution.distributed import main_result
from pyrolik.infer.annealing import ais
from pyrolik.infer.importance import iwae
from pyrolik.results import EstimateResult
from pyrolik.results.convert import versions

__all__ = ["TrainingMonitor", "plot_monitor"]

METHODS = ("ais", "iwae")
SUBSETS = ("train", "test")


class TrainingMonitor:
    """Track log p(x) of fixed train and test examples during training (Wu et al. 2017, fig. 3).

    Each evaluation runs :func:`pyrolik.ais` and/or :func:`pyrolik.iwae` in ``eval()`` mode with a
    fixed seed, leaving global random streams and gradients alone (``docs/sigma_and_rd.md``).

    Parameters
    ----------
    x_train, x_test : torch.Tensor, shape ``(n, *event_shape)``
        Fixed subsets (a few dozen examples each).
    guide : callable, optional
        The AIS start and the IWAE proposal (required for ``"iwae"``).
    every : int
        Evaluate at epochs ``0, every, 2 * every, ...`` (and whenever ``force=True``).
    methods : sequence of {"ais", "iwae"}
    num_steps, num_chains, num_samples, kernel, seed, model_args, model_kwargs
        The estimators' settings (no per-example tensors in the arguments).
    module : torch.nn.Module, optional
        Put in ``eval()`` mode while evaluating (default: ``model`` if a module).
    """

    def __init__(self, model: Callable[..., Any], x_train: Tensor, x_test: Tensor, *,
                 guide: Callable[..., Any] | None = None, every: int = 1,
                 methods: Sequence[str] = ("ais",), num_steps: int = 20, num_chains: int = 4,
                 num_samples: int = 100, kernel: Kernel | None = None, model_args: tuple = (),
                 model_kwargs: dict | None = None, module: torch.nn.Module | None = None,
                 seed: int = 0) -> None:
        check_model(model)
        self.subsets = {"train": validate_data(x_train), "test": validate_data(x_test)}
        if x_train.shape[1:] != x_test.shape[1:] or x_train.dtype != x_test.dtype:
            raise ValueError(f"x_train and x_test must have the same event shape and dtype, got "
                             f"{tuple(x_train.shape[1:])} {x_train.dtype} and "
                             f"{tuple(x_test.shape[1:])} {x_test.dtype}")
        methods = (methods,) if isinstance(methods, str) else tuple(methods)
        unknown = [m for m in methods if m not in METHODS]
        if unknown or not methods:
            raise ValueError(f"methods must be a non-empty subset of {METHODS}, got {methods}")
        if "iwae" in methods and guide is None:
            raise ValueError("the IWAE bound needs the guide (encoder): pass guide=")
        if guide is not None and not callable(guide):
            raise TypeError(f"guide must be a callable Pyro guide, got {type(guide).__name__}")
        for name, value in (("every", every), ("num_steps", num_steps),
                            ("num_chains", num_chains), ("num_samples", num_samples)):
            check_count(name, value)
        if module is None and isinstance(model, torch.nn.Module):
            module = model
        if module is not None and not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        if kernel is not None:
            as_smc(kernel)  # refuses another type
        self.model, self.guide, self.module = model, guide, module
        self.every, self.methods, self.seed = every, methods, int(seed)
        self.num_steps, self.num_chains, self.num_samples = num_steps, num_chains, num_samples
        self.kernel = kernel
        self.model_args, self.model_kwargs = tuple(model_args), dict(model_kwargs or {})
        self.epochs: list[int] = []
        self.estimates: dict[str, dict[str, list[Tensor]]] = {
            m: {s: [] for s in SUBSETS} for m in methods}
        self.mcse: dict[str, dict[str, list[Tensor]]] = {m: {s: [] for s in SUBSETS} for m in methods}
        self.eval_seconds: list[float] = []
        self.scalars: dict[str, list[float]] = {}
        self._last_call: float | None = None
        self._train_seconds = 0.0  # loop time since the last evaluation, evaluations excluded
        self._calls_since = 0
        self.train_seconds_per_epoch: list[float] = []  # per evaluation: mean over the epochs before

    # -- the callback -------------------------------------------------------------------------------
    def __call__(self, epoch: int, *, force: bool = False, **scalars: float) -> dict[str, Any] | None:
        """Call once per epoch, after training on it. Evaluates when ``epoch % every == 0`` or
        ``force``; keyword scalars (``loss=...``) are recorded beside the estimates of that epoch.
        Returns the evaluation's means ``{"ais/train": ..., ...}`` or None when not due."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        now = time.perf_counter()
        if self._last_call is not None:
            self._train_seconds += now - self._last_call
            self._calls_since += 1
        self._last_call = now
        if not (force or epoch % self.every == 0) or (self.epochs and self.epochs[-1] == epoch):
            return None
        row = self.evaluate(epoch, **scalars)
        self._last_call = time.perf_counter()  # the evaluation is not training time
        return row

    def evaluate(self, epoch: int, **scalars: float) -> dict[str, Any]:
        """Evaluate now and record the result under ``epoch``."""
        if self.epochs and epoch <= self.epochs[-1]:
            raise ValueError(f"epochs must increase (epoch {epoch} after {self.epochs[-1]}): number "
                             "a later training phase's epochs on from the earlier one's")
        start = time.perf_counter()
        was_training = self.module.training if self.module is not None else False
        if self.module is not None:
            self.module.eval()
        try:
            row: dict[str, Any] = {}
            # train and test in one call: one model trace, one pilot, one replay recording
            both = torch.cat([self.subsets["train"], self.subsets["test"]])
            n_train = self.subsets["train"].shape[0]
            for method in self.methods:
                ll, mcse = self._estimate(method, both)
                for subset, part in (("train", slice(None, n_train)), ("test", slice(n_train, None))):
                    self.estimates[method][subset].append(ll[part])
                    self.mcse[method][subset].append(mcse[part])
                    row[f"{method}/{subset}"] = float(ll[part].mean())
        finally:
            if self.module is not None:
                self.module.train(was_training)
        self.epochs.append(int(epoch))
        self.eval_seconds.append(time.perf_counter() - start)
        per_epoch = self._train_seconds / self._calls_since if self._calls_since else math.nan
        self.train_seconds_per_epoch.append(per_epoch)
        self._train_seconds, self._calls_since = 0.0, 0
        for name in set(self.scalars) | set(scalars):
            past = self.scalars.setdefault(name, [math.nan] * (len(self.epochs) - 1))
            past.append(float(scalars.get(name, math.nan)))
        return row

    def _estimate(self, method: str, x: Tensor) -> tuple[Tensor, Tensor]:
        common: dict[str, Any] = {"model_args": self.model_args, "model_kwargs": self.model_kwargs,
                                  "seed": self.seed, "progress": False}
        r: EstimateResult
        if method == "ais":
            r = main_result(ais(self.model, x, num_steps=self.num_steps, num_chains=self.num_chains,
                                kernel=self.kernel, init=self.guide, **common), "ais")
        else:
            assert self.guide is not None  # __init__ requires a guide for the IWAE bound
            r = main_result(iwae(self.model, x, self.guide, num_samples=self.num_samples, **common),
                            "iwae")
        assert r.mcse is not None  # both estimators report an MCSE per example
        return r.log_likelihood.detach().cpu().double(), r.mcse.detach().cpu().double()

    # -- what it measured ---------------------------------------------------------------------------
    @property
    def cost(self) -> dict[str, float]:
        """Seconds per evaluation and per training epoch (medians), their ratio, and the overhead
        per epoch when evaluating every ``every`` epochs (``ratio / every``)."""
        ev = torch.tensor(self.eval_seconds, dtype=torch.float64)
        tr = torch.tensor([t for t in self.train_seconds_per_epoch if math.isfinite(t)],
                          dtype=torch.float64)
        eval_s = float(ev.median()) if len(ev) else math.nan
        epoch_s = float(tr.median()) if len(tr) else math.nan
        ratio = eval_s / epoch_s if epoch_s > 0 else math.nan
        return {"eval_seconds": eval_s, "epoch_seconds": epoch_s,
                "epochs_per_evaluation": ratio, "overhead_per_epoch": ratio / self.every}

    def describe_cost(self) -> str:
        """The cost in words, e.g. for a notebook or a log."""
        c = self.cost
        return (f"one evaluation takes {c['eval_seconds']:.3g} s = {c['epochs_per_evaluation']:.3g} "
                f"training epochs ({c['epoch_seconds']:.3g} s each); evaluating every {self.every} "
                f"epochs adds {100 * c['overhead_per_epoch']:.3g}% to the training time")

    def to_dataset(self) -> xr.Dataset:
        """An :class:`xarray.Dataset` over ``epoch``: per method ``<method>`` and ``<method>_mcse``
        ``(epoch, subset, example)`` and ``<method>_mean``, ``<method>_stderr`` ``(epoch, subset)``;
        ``eval_seconds``, ``train_seconds_per_epoch`` and the recorded scalars ``(epoch,)``; subsets
        of different sizes padded with NaN."""
        e = len(self.epochs)
        width = max(len(x) for x in self.subsets.values())
        coords = {"epoch": np.asarray(self.epochs, dtype=np.int64), "subset": list(SUBSETS),
                  "example": np.arange(width)}
        data: dict[str, Any] = {}
        for method in self.methods:
            ll = _table(self.estimates[method], e, width)
            data[method] = (("epoch", "subset", "example"), ll)
            data[f"{method}_mcse"] = (("epoch", "subset", "example"),
                                      _table(self.mcse[method], e, width))
            n = np.sum(np.isfinite(ll), axis=-1)
            with np.errstate(invalid="ignore", divide="ignore"):
                data[f"{method}_mean"] = (("epoch", "subset"), np.nanmean(ll, axis=-1)
                                          if e else np.zeros((0, 2)))
                data[f"{method}_stderr"] = (("epoch", "subset"), np.nanstd(ll, axis=-1, ddof=1)
                                            / np.sqrt(n) if e else np.zeros((0, 2)))
        series = {"eval_seconds": self.eval_seconds,
                  "train_seconds_per_epoch": self.train_seconds_per_epoch, **self.scalars}
        for name, values in series.items():
            data[name] = (("epoch",), np.asarray(values, dtype=float))
        attrs = {**versions(), "pyrolik_result": "TrainingMonitor",
                 "methods": json.dumps(list(self.methods)), "every": int(self.every),
                 "settings": json.dumps({"num_steps": self.num_steps, "num_chains": self.num_chains,
                                         "num_samples": self.num_samples,
                                         "path": "guide" if self.guide is not None else "prior",
                                         "seed": self.seed}),
                 "cost": json.dumps({k: v if math.isfinite(v) else None
                                     for k, v in self.cost.items()}),
                 "cost_in_words": self.describe_cost(),
                 "bound": "lower (every estimate is a stochastic lower bound on log p(x))"}
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def plot(self, ax=None, start_epoch: int | None = None):
        """Train (solid) and test (dashed) mean log-likelihood against epoch, with 2 standard errors
        over the examples, per method: Wu et al.'s figure 3 (from ``start_epoch`` on)."""
        return plot_monitor(self.to_dataset(), ax=ax, start_epoch=start_epoch)


LABELS = {"ais": "AIS", "iwae": "IWAE bound"}


def _table(series: dict[str, list], epochs: int, width: int) -> np.ndarray:
    """``{subset: [per-epoch (n,) tensors]}`` -> ``(epoch, subset, example)``, NaN-padded."""
    out = np.full((epochs, len(SUBSETS), width), np.nan)
    for j, subset in enumerate(SUBSETS):
        for i, values in enumerate(series[subset]):
            out[i, j, : len(values)] = values.numpy()
    return out


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
    ax.set(xlabel="epoch", ylabel="mean log p(x) [nats]")
    ax.set_title("log-likelihood during training (lower bounds)", fontsize=10)
    ax.legend(frameon=False, fontsize="small")
    return ax
