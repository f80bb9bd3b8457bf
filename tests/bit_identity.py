"""Bit-identity check: every estimator and export on tiny fixed-seed problems, dumped and compared.

A refactoring step should not move a single number. This script runs every estimator (and every
export of its result) on small problems with fixed seeds, flattens each result, its summary table
and its exports into named numpy arrays, and either saves them or compares them with a dump made
at another commit::

    python -m tests.bit_identity dump /tmp/after.pkl
    git worktree add /tmp/base <commit>                  # the commit the step started from
    (cd /tmp/base && PYTHONPATH=/tmp/base python /path/to/tests/bit_identity.py dump /tmp/base.pkl)
    python -m tests.bit_identity compare /tmp/base.pkl /tmp/after.pkl
    python -m tests.bit_identity compare /tmp/base.pkl   # dumps this checkout, then compares

Arrays are compared exactly (NaN equal to NaN, shapes and dtypes too); timings, creation dates
and version strings are left out. A case that raises is dumped as its exception's type, so a
failure that a step mends shows up as a difference. ``compare`` exits 1 on any difference.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

# names whose values change from run to run (timings, dates, versions): not compared
VOLATILE = re.compile(r"(wall.time|seconds|created_at|_version|elapsed|time.per|\[s\])")
Dump = dict[str, np.ndarray]


def _array(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().copy()
    return np.asarray(value).copy()


def flatten(prefix: str, obj: Any, out: Dump) -> None:
    """Every number, string and array reachable from ``obj``, under dotted names."""
    if VOLATILE.search(prefix.rsplit(".", 1)[-1]):
        return
    if obj is None or isinstance(obj, str | int | float | bool | np.generic):
        out[prefix] = np.asarray("None" if obj is None else obj)
    elif isinstance(obj, torch.Tensor | np.ndarray):
        out[prefix] = _array(obj)
    elif isinstance(obj, torch.dtype | torch.device):
        out[prefix] = np.asarray(str(obj))
    elif hasattr(obj, "_fields"):  # NamedTuple
        for name in obj._fields:
            flatten(f"{prefix}.{name}", getattr(obj, name), out)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            flatten(f"{prefix}.{f.name}", getattr(obj, f.name), out)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            flatten(f"{prefix}[{k}]", v, out)
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            flatten(f"{prefix}[{i}]", v, out)
    elif _is_frame(obj):
        _frame(prefix, obj, out)
    elif hasattr(obj, "to_dict") and not callable(obj):
        flatten(prefix, obj.to_dict(), out)
    else:  # a kernel, a function: its type (reprs may hold addresses)
        out[prefix] = np.asarray(f"<{type(obj).__name__}>")


def _is_frame(obj: Any) -> bool:
    import pandas as pd

    return isinstance(obj, pd.DataFrame)


def _frame(prefix: str, df: Any, out: Dump) -> None:
    out[f"{prefix}.index"] = np.asarray([str(i) for i in df.index])
    for col in df.columns:
        if VOLATILE.search(str(col)):
            continue
        values = df[col].to_numpy()
        out[f"{prefix}[{col}]"] = (values if values.dtype.kind in "biufcM"
                                   else np.asarray([str(v) for v in values]))


def _tree(prefix: str, tree: Any, out: Dump) -> None:
    """Every variable, coordinate and attribute of a DataTree (or a Dataset), by path."""
    nodes = ([(node.path, node.to_dataset(inherit=False)) for node in tree.subtree]
             if hasattr(tree, "subtree") else [("/", tree)])
    for where, ds in nodes:
        path = f"{prefix}:{where}"
        _attrs(path, ds.attrs, out)
        for name, da in {**ds.coords, **ds.data_vars}.items():
            out[f"{path}/{name}"] = np.asarray(da.values).copy()
            out[f"{path}/{name}.dims"] = np.asarray(list(da.dims))
            _attrs(f"{path}/{name}", da.attrs, out)


def _attrs(prefix: str, attrs: dict, out: Dump) -> None:
    for k, v in attrs.items():
        if isinstance(v, str) and v.startswith(("{", "[")):  # JSON (settings, budget): its fields
            try:
                v = json.loads(v)
            except ValueError:
                pass
        if isinstance(v, dict | list):
            flatten(f"{prefix}@{k}", v, out)
        elif not VOLATILE.search(str(k)):
            out[f"{prefix}@{k}"] = np.asarray(v if isinstance(v, str | int | float | bool)
                                              else str(v))


def _try(prefix: str, fn: Callable[[], Any], out: Dump, into: Callable[..., None]) -> Any:
    """``into(prefix, fn(), out)``; an exception is recorded as its type."""
    try:
        value = fn()
    except Exception as err:  # noqa: BLE001 - a failure is a value to compare
        out[f"{prefix}!error"] = np.asarray(type(err).__name__)
        return None
    into(prefix, value, out)
    return value


def exports(name: str, result: Any, out: Dump, workdir: Path) -> None:
    """The result, its summary and every export: tree, InferenceData, netCDF round trip, table."""
    import pyrolik

    flatten(name, result, out)
    _try(f"{name}.summary()", lambda: result.summary(), out, flatten)
    _try(f"{name}.warnings()", lambda: result.warnings(), out, flatten)
    _try(f"{name}.to_datatree()", lambda: result.to_datatree(), out, _tree)
    idata = _try(f"{name}.to_inference_data()", lambda: result.to_inference_data(), out,
                 lambda p, v, o: [_tree(f"{p}.{g}", getattr(v, g), o) for g in v.groups()])
    if idata is not None:
        _try(f"{name}.to_dataframe()", idata.to_dataframe, out, flatten)
    path = workdir / f"{name}.nc"
    _try(f"{name}.load(save)", lambda: pyrolik.load(pyrolik.save(result, path)), out, flatten)


# --- the problems ------------------------------------------------------------------------------


def cases(workdir: Path) -> Dump:
    """Run every case; ``{name: array}``."""
    import pyro
    import pyro.distributions as dist
    from pyrolik_models.oracles import GlobalLinearGaussian, LinearGaussian
    from pyrolik_models.oracles.rbm import RBM

    import pyrolik
    from pyrolik.distortion import squared_error

    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    lg = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    x = lg.sample(3, g)

    def two_sites(x):  # a vector and a constrained scalar latent site
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            tau = pyro.sample("tau", dist.LogNormal(x.new_zeros(()), 0.3))
            loc = z @ lg.W.to(x).T + lg.b.to(x)
            pyro.sample("x", dist.Normal(loc, 0.3 * tau.unsqueeze(-1)).to_event(1), obs=x)

    out: Dump = {}
    quiet: dict[str, Any] = {"progress": False}
    run = dict(num_steps=12, num_chains=8, seed=0, **quiet)
    # the API of issue 39 (num_steps=Tolerance, record=), or the one before it (tolerance=,
    # max_steps=, record_every=, keep_states=): the script dumps a checkout of either
    new_api = hasattr(pyrolik, "Tolerance")

    def tolerance(nats: float, max_steps: int) -> dict[str, Any]:
        if new_api:
            return {"num_steps": pyrolik.Tolerance(nats, max_steps=max_steps)}
        return {"tolerance": nats, "max_steps": max_steps}

    if new_api:
        from pyrolik.annealing import Recording

        states: dict[str, Any] = {"record": Recording(every=3, states=True)}
    else:
        states = {"record_every": 3, "keep_states": True}
    results: dict[str, Callable[[], Any]] = {
        "ais_default": lambda: pyrolik.ais(lg, x, **run),
        "ais_fixed": lambda: pyrolik.ais(lg, x, kernel=pyrolik.HMC(adapt=None, step_size=0.3),
                                         schedule="sigmoid", **run),
        "ais_online": lambda: pyrolik.ais(lg, x, kernel=pyrolik.HMC(adapt="online"), **run),
        "ais_mass": lambda: pyrolik.ais(lg, x, kernel=pyrolik.HMC(mass_matrix=True), **run),
        "ais_per_example": lambda: pyrolik.ais(lg, x, schedule="adaptive_per_example", **run),
        "ais_states": lambda: pyrolik.ais(two_sites, x, **states, **run),
        "ais_guide": lambda: pyrolik.ais(lg, x, init=lg.exact_guide, **run),
        "ais_resample": lambda: pyrolik.ais(lg, x, kernel=pyrolik.HMC(resample=1.0), **run),
        "ais_batched": lambda: pyrolik.ais(lg, x, batch_size=2, **run),
        "reverse_ais": lambda: pyrolik.reverse_ais(
            lg, x, lg.exact_posterior(x).sample(), **{**run, "seed": 1}),
        # bdmc records its default trace (every step of 12): record_every=4 is gone with issue 39
        "bdmc": lambda: pyrolik.bdmc(two_sites, 3, data_shape=(5,), **run),
        "bdmc_lg": lambda: pyrolik.bdmc(lg, 3, data_shape=(5,), **run),
        "likelihood_weighting": lambda: pyrolik.likelihood_weighting(
            lg, x, num_samples=40, seed=0, keep_samples=True, **quiet),
        "iwae": lambda: pyrolik.iwae(lg, x, lg.exact_guide, num_samples=30, seed=0, **quiet),
        "kde": lambda: pyrolik.kde(lg.sample(200, torch.Generator().manual_seed(1)), x,
                                   bandwidth=[0.3, 1.0, 3.0],
                                   validation=lg.sample(20, torch.Generator().manual_seed(2)),
                                   **quiet),
        "ais_tolerance": lambda: pyrolik.ais(lg, x, **tolerance(2.0, 100), num_chains=4, seed=0,
                                             **quiet),
        "evidence": lambda: pyrolik.evidence(
            GlobalLinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=0),
            GlobalLinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=0).sample(5, seed=1),
            **run),
        "sigma_curve": lambda: pyrolik.sigma_curve(lg, x, [0.1, 0.3, 1.0], **run),
        "sigma_curve_tolerance": lambda: pyrolik.sigma_curve(
            lg, x, [0.3, 1.0], **tolerance(3.0, 50), num_chains=4, seed=0, **quiet),
        "rate_distortion": lambda: pyrolik.rate_distortion(lg, x, [0.5, 2.0, 8.0], **run),
        "rate_distortion_user": lambda: pyrolik.rate_distortion(
            lg, x, [0.5, 2.0, 8.0], distortion=squared_error, **run),
        "distortion_bdmc": lambda: pyrolik.distortion_bdmc(
            lg, 3, sigmas=[0.1, 0.3, 1.0], check=[0.1, 1.0], data_shape=(5,), **run),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, make in results.items():
            torch.manual_seed(0)  # a case that draws from the global stream draws the same
            result = _try(name, make, out, lambda *a: None)
            if result is not None:
                exports(name, result, out, workdir)
                if hasattr(result, "lower") and hasattr(result, "log_likelihood_bounds"):
                    flatten(f"{name}.bounds", result.log_likelihood_bounds(), out)
            if name.startswith("sigma_curve") and result is not None:
                _try(f"{name}.best_sigma()", result.best_sigma, out, flatten)
                _try(f"{name}.optimal_sigma()", result.optimal_sigma, out, flatten)
            if name == "ais_default" and result is not None:
                _try("posterior_samples", lambda r=result: pyrolik.infer.posterior_samples(
                    r, 5, seed=0), out, flatten)
        _try("simulate", lambda: pyrolik.simulate(two_sites, 4, data_shape=(5,), seed=0), out,
             flatten)
        budget_of = ((lambda: pyrolik.budget(lg, x, pyrolik.Tolerance(2.0, max_steps=100),
                                             num_chains=4, seed=0, **quiet)) if new_api else
                     (lambda: pyrolik.budget(lg, x, 2.0, num_chains=4, seed=0, max_steps=100,
                                             **quiet)))
        _try("budget", budget_of, out, flatten)
        _try("bdmc_convergence", lambda: pyrolik.infer.bdmc_convergence(
            lg, 3, num_steps=[5, 10], num_chains=4, data_shape=(5,), seed=0, **quiet), out,
            flatten)
        rbm = RBM.random(10, 4, seed=0)
        v = torch.bernoulli(torch.full((5, 10), 0.5), generator=torch.Generator().manual_seed(0))
        h = torch.bernoulli(torch.full((40, 4), 0.5), generator=torch.Generator().manual_seed(1))
        csls: dict[str, Callable[[], Any]] = {
            "csl_rbm": lambda: pyrolik.csl(rbm, v, h, keep_weights=True),
            "csl_pyro": lambda: pyrolik.csl(lg, x, _prior_samples(lg, x), keep_weights=True),
            "biased_csl": lambda: pyrolik.infer.biased_csl(rbm, v, rbm, num_chains=3,
                                                           num_steps=2, seed=5),
            "csl_chain": lambda: pyrolik.csl(rbm, v, _chain(rbm, v)),
        }
        for name, make in csls.items():
            torch.manual_seed(0)
            result = _try(name, make, out, lambda *a: None)
            if result is not None:
                exports(name, result, out, workdir)
    return out


def _prior_samples(lg: Any, x: torch.Tensor) -> Any:
    import pyrolik.infer as infer

    sampler = getattr(infer, "prior_samples", None)
    if sampler is None:  # where it lived before it moved
        from pyrolik.infer.chains import prior_samples as sampler
    return sampler(lg, x, 50, seed=0)


def _chain(rbm: Any, v: torch.Tensor) -> Any:
    import pyrolik.infer as infer

    sample_chain = getattr(infer, "sample_chain", None)
    if sample_chain is None:
        from pyrolik.infer.chains import sample_chain
    return sample_chain(rbm, v[:3], num_samples=6, thin=2, burn_in=2, seed=0, flatten=True)


# --- dump and compare -------------------------------------------------------------------------


def dump(path: str | None = None) -> Dump:
    with tempfile.TemporaryDirectory() as tmp:
        out = cases(Path(tmp))
    if path is not None:
        with open(path, "wb") as f:
            pickle.dump(out, f)
        import pyrolik

        print(f"{len(out)} arrays from {Path(pyrolik.__file__).parent} written to {path}")
    return out


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def differences(base: Dump, new: Dump) -> list[str]:
    """One line per array that is missing, added or not identical."""
    lines = [f"missing: {k}" for k in sorted(base.keys() - new.keys())]
    lines += [f"added:   {k}" for k in sorted(new.keys() - base.keys())]
    for k in sorted(base.keys() & new.keys()):
        a, b = base[k], new[k]
        if not _equal(a, b):
            detail = (f"{a.dtype}{a.shape} -> {b.dtype}{b.shape}" if a.shape != b.shape
                      or a.dtype != b.dtype else _worst(a, b))
            lines.append(f"differs: {k}: {detail}")
    return lines


def _worst(a: np.ndarray, b: np.ndarray) -> str:
    if a.dtype.kind not in "fc":
        return f"{a.ravel()[:3]} -> {b.ravel()[:3]}"
    with np.errstate(invalid="ignore"):
        d = np.abs(a - b)
    return f"max |diff| {np.nanmax(d) if np.isfinite(d).any() else 'nan/inf'}"


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("dump", "compare"):
        print(__doc__)
        return 2
    if argv[0] == "dump":
        dump(argv[1])
        return 0
    with open(argv[1], "rb") as f:
        base = pickle.load(f)
    if len(argv) > 2:
        with open(argv[2], "rb") as f:
            new = pickle.load(f)
    else:
        new = dump()
    lines = differences(base, new)
    for line in lines:
        print(line)
    same = len(base.keys() & new.keys()) - sum(line.startswith("differs") for line in lines)
    print(f"{same} of {len(base)} arrays equal; {len(lines)} differences"
          + ("" if lines else ": all equal"))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
