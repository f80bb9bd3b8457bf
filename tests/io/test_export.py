"""Export to DataTree / InferenceData: the exported values are the result tensors; save and load
lose nothing; a saved result summarises without rerunning; ArviZ accepts the groups."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr
from numpy.testing import assert_array_equal

import pyrolik
from pyrolik.io import export
from pyrolik.results import AISResult, BDMCResult
from pyrolik.results.layout import example_dim
from tests.export_cases import ESTIMATORS, summary_where_defined


def n(t):
    return t.detach().cpu().numpy()


def unblock(da, ex, *lead):
    """``(..., chain, particle, <plate>, ...)`` -> numpy ``(..., K, N, ...)``."""
    v = da.transpose(*lead, "chain", "particle", ex, ..., missing_dims="ignore").values
    i = len(lead)
    return v.reshape(*v.shape[:i], -1, *v.shape[i + 2:])


def check_estimate(tree: xr.DataTree, r) -> None:
    ex = example_dim(r)
    ev = tree["evidence"]  # one draw of the estimator
    assert ev["log_marginal_likelihood"].dims == ("chain", "draw", ex)
    assert ev.sizes["chain"] == ev.sizes["draw"] == 1
    assert_array_equal(ev["log_marginal_likelihood"].values[0, 0], n(r.log_likelihood))
    assert ev.attrs["bound"] == (r.bound or "none")
    for name, attr in (("ess", "ess"), ("mcse", "mcse"), ("pareto_k", "khat")):
        if getattr(r, attr) is None:
            assert name not in ev
        else:
            assert_array_equal(ev[name].values[0, 0], n(getattr(r, attr)))  # NaN == NaN here
    if r.log_weights is not None:
        k = r.log_weights.shape[0]
        assert ev["pareto_k"].attrs["n_samples"] == k
        assert tree["particles"]["log_weight"].dims == ("chain", "particle", ex)
        assert_array_equal(unblock(tree["particles"]["log_weight"], ex), n(r.log_weights))
        assert tree.attrs["num_blocks"] == tree["particles"].sizes["chain"]
    assert tree["observed_data"]["x"].dims == (ex, "x_dim_0")
    assert_array_equal(tree["observed_data"]["x"].values, n(r.x))
    a = tree.attrs
    assert a["inference_library"] == "pyrolik" and a["inference_library_version"]
    assert a["torch_version"] == torch.__version__ and "pyro_version" in a and "created_at" in a
    assert a["method"] == r.method and a["bound"] == (r.bound or "none")
    assert json.loads(a["settings"]) == r.settings
    assert a.get("seed") == r.seed and a["wall_time"] == r.wall_time


def check_draws(tree: xr.DataTree, r, sites: dict, group: str, stats: str) -> None:
    """Every draw of ``group`` is the particle ``sample_stats.particle`` names, with its weight."""
    ex = example_dim(r)
    src = tree[stats]["particle"].values  # (C, D, N): the chain each draw copies
    cols = np.arange(src.shape[-1])
    for site, v in sites.items():
        da = tree[group][site]
        extra = tuple(f"{site}_dim_{i}" for i in range(v.dim() - 2))
        assert da.dims == ("chain", "draw", ex, *extra)
        assert_array_equal(da.values, n(v)[src, cols])
    assert_array_equal(tree[stats]["log_weight"].values, n(r.log_weights)[src, cols])
    assert tree[stats]["particle"].dims == ("chain", "draw", ex)
    # each block draws from its own chains, in sorted order
    c, d, _ = src.shape
    m = r.log_weights.shape[0] // c
    assert (src // m == np.arange(c).reshape(c, 1, 1)).all()
    assert (np.diff(src, axis=1) >= 0).all()


def check_ais(tree: xr.DataTree, r: AISResult) -> None:
    check_estimate(tree, r)
    ex = example_dim(r)
    forward = r.direction == "forward"
    sites, flat, stats = (("posterior", "unconstrained_posterior", "sample_stats") if forward
                          else ("prior", "unconstrained_prior", "sample_stats_prior"))
    part = tree["particles"]
    for site, v in (r.latents or {}).items():
        assert_array_equal(unblock(part[site], ex), n(v))
    assert_array_equal(unblock(tree["unconstrained_particles"]["u"], ex), n(r.final_state))
    check_draws(tree, r, r.latents, sites, stats)
    src = tree[stats]["particle"].values
    cols = np.arange(src.shape[-1])
    assert_array_equal(tree[flat]["u"].values, n(r.final_state)[src, cols])
    if not forward:  # unresampled: every particle once, in order
        k = r.log_weights.shape[0]
        assert_array_equal(src.reshape(k, -1), np.broadcast_to(np.arange(k)[:, None],
                                                               (k, src.shape[-1])))
    assert_array_equal(tree[stats]["acceptance_rate"].values, n(r.acceptance_rate)[src, cols])
    assert_array_equal(tree[stats]["diverging"].values, n(r.num_divergent)[src, cols] > 0)
    ann = tree["annealing"]
    for name in {"acceptance_rate", "step_size", "log_weight", "diverging"} | set(r.trace) - {
            "beta", "z"}:
        assert ann[name].dims == ("step", "chain", "particle", ex)
        assert_array_equal(unblock(ann[name], ex, "step"), n(r.trace[name]))
    assert_array_equal(ann["step"].values, n(r.trace_steps))
    assert ann["beta"].dims == ("step", "chain", "particle")
    assert_array_equal(unblock(ann["beta"], ex, "step"), n(r.trace["beta"]))
    assert not set(ann.coords) - set(ann.dims)  # only index coordinates (ArviZ's tables)
    if "z" in r.trace:
        assert_array_equal(unblock(tree["trajectory"]["u"], ex, "step"), n(r.trace["z"]))
    const = tree["constant_data"]
    assert_array_equal(const["schedule"].values, n(r.schedule))
    assert_array_equal(const["pilot_beta"].values, n(r.step_sizes.betas))
    assert_array_equal(const["log_step_size"].values, n(r.step_sizes.log_step_size))
    if r.step_sizes.inv_mass is not None:
        assert_array_equal(const["inv_mass"].values, n(r.step_sizes.inv_mass))
    assert_array_equal(unblock(part["mean_acceptance_rate"], ex), n(r.acceptance_rate))
    assert_array_equal(unblock(part["num_divergent"], ex), n(r.num_divergent))
    assert tree.attrs["direction"] == r.direction and tree.attrs["path"] == r.path
    assert json.loads(tree.attrs["kernel"]) == r.kernel.to_dict()


def check_any(tree, r) -> None:
    if isinstance(r, BDMCResult):
        check_ais(tree["lower"], r.lower)
        check_ais(tree["upper"], r.upper)
        g = tree["evidence"].to_dataset().squeeze(("chain", "draw"))  # one draw of each estimator
        assert_array_equal(g["log_marginal_likelihood"].sel(bound="lower").values,
                           n(r.lower.log_likelihood))
        assert_array_equal(g["log_marginal_likelihood"].sel(bound="upper").values,
                           n(r.upper.log_likelihood))
        assert_array_equal(g["gap"].values, n(r.per_example_gap))
        np.testing.assert_allclose(g["gap_mcse"].values, np.hypot(n(r.lower.mcse),
                                                                   n(r.upper.mcse)))
        for site, v in r.latents.items():  # one exact draw
            assert tree["simulated"][site].dims == tree["posterior"][site].dims
            assert_array_equal(tree["simulated"][site].values[0, 0], n(v))
        xr.testing.assert_identical(tree["posterior"].to_dataset(),
                                    tree["lower/posterior"].to_dataset())
        assert tree.attrs["gap"] == r.gap and tree.attrs["bound"] == "sandwich"
    elif isinstance(r, AISResult):
        check_ais(tree, r)
    else:
        check_estimate(tree, r)
        if r.samples is not None:
            check_draws(tree, r, r.samples, "posterior", "sample_stats")


def assert_same_result(a, b) -> None:
    """Field by field: tensors equal in value, dtype and shape; everything else equal."""
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, BDMCResult | AISResult):
            assert_same_result(x, y)
        elif isinstance(x, list) and x and dataclasses.is_dataclass(x[0]):  # nested results
            assert len(x) == len(y), f.name
            for u, v in zip(x, y, strict=True):
                assert_same_result(u, v)
        elif isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.dtype == y.dtype, f.name
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True, msg=f.name)
        elif isinstance(x, dict) and x and isinstance(next(iter(x.values())), torch.Tensor):
            assert x.keys() == y.keys(), f.name
            for key in x:
                assert x[key].dtype == y[key].dtype, (f.name, key)
                torch.testing.assert_close(x[key], y[key], rtol=0, atol=0, equal_nan=True)
        elif f.name == "step_sizes" and x is not None:
            for u, v in zip(x, y, strict=True):
                assert (u is None and v is None) or torch.equal(u, v)
        else:
            assert x == y, f.name


@pytest.mark.parametrize("name", ESTIMATORS)
def test_exported_values_are_the_result_tensors(results, name):
    r = results[name]
    tree = r.to_datatree()
    assert isinstance(tree, xr.DataTree)
    check_any(tree, r)


def test_kde_exports_the_bandwidth_grid(results):
    r = results["kde"]
    const = r.to_datatree()["constant_data"]
    assert_array_equal(const["bandwidth_grid"].values, r.settings["bandwidth_grid"])
    assert_array_equal(const["validation_log_likelihood"].values,
                       r.settings["validation_log_likelihood"])


@pytest.mark.parametrize("name", ESTIMATORS)
def test_inference_data_holds_the_same_groups(results, name):
    import arviz as az

    r = results[name]
    tree, idata = r.to_datatree(), r.to_inference_data()
    assert isinstance(idata, az.InferenceData)
    if isinstance(r, BDMCResult):
        expected = {f"{p}_{g}" for p in ("lower", "upper") for g in tree[p].children}
        expected |= {"evidence", "simulated", "calibration", "posterior", "sample_stats"}
        assert set(idata.groups()) == expected
        xr.testing.assert_equal(idata["lower_posterior"], tree["lower/posterior"].to_dataset())
    else:
        assert set(idata.groups()) == set(tree.children)
        for group in tree.children:
            xr.testing.assert_equal(idata[group], tree[group].to_dataset())
    assert idata.attrs["pyrolik_result"] == type(r).__name__
    assert_same_result(export.from_datatree(idata), r)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_netcdf_round_trip_loses_nothing(results, name, tmp_path):
    r = results[name]
    tree = export.to_datatree(r)
    path = export.save(tree, tmp_path / "tree.nc")
    with xr.open_datatree(path) as reopened:  # a BDMC tree is written flat (ArviZ 0.x sees it)
        xr.testing.assert_identical(reopened.load(), export.flatten(tree))
    back = pyrolik.load(export.save(r, tmp_path / "result.nc"))
    assert_same_result(back, r)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


@pytest.mark.parametrize("name", ["bdmc", "ais"])
def test_saved_result_summarises_without_rerunning(results, name, tmp_path, monkeypatch):
    from pyrolik.diagnostics import checks as diagnostics

    r = results[name]
    path = pyrolik.save(r, tmp_path / "run.nc")

    def no_rerun(*args, **kwargs):
        raise AssertionError("loading must not rerun the estimator")

    for mod, fn in (("infer.annealing", "run"), ("infer.sandwich", "run"),
                    ("annealing.driver", "drive"), ("annealing.driver", "run_phase")):
        monkeypatch.setattr(f"pyrolik.{mod}.{fn}", no_rerun)
    back = pyrolik.load(path)
    pd.testing.assert_frame_equal(back.summary(), r.summary())
    assert diagnostics.check(back) == diagnostics.check(r)
    pd.testing.assert_frame_equal(diagnostics.example_table(back), diagnostics.example_table(r))


def test_arviz_summary_is_the_weighted_posterior(results):
    """``az.summary`` averages the resampled draws: finite diagnostics, weighted means."""
    import arviz as az

    r = results["ais"]
    idata = r.to_inference_data()
    full = summary_where_defined(idata)
    assert len(full) == 3 * 2 + 3
    z = idata.posterior["z"].values  # (C, D, N, 2), equally weighted
    np.testing.assert_allclose(full.loc["z[1, 0]", "mean"], z[:, :, 1, 0].mean(), rtol=1e-12)
    ess = az.ess(idata.posterior)
    dim = r.example_dim  # the model's plate over the examples
    assert dim == "data"
    assert ess["z"].dims == (dim, "z_dim_0") and ess["tau"].dims == (dim,)
    assert np.isfinite(ess["z"].values).all()


@pytest.mark.filterwarnings("ignore::matplotlib.MatplotlibDeprecationWarning")  # ArviZ 0.23 on mpl 3.11
@pytest.mark.filterwarnings("ignore:Attempting to set identical low and high xlims")  # one draw
# a block whose draws all copy one particle (10 annealing steps): ArviZ's KDE says so
@pytest.mark.filterwarnings("ignore:Your data appears to have a single value")
def test_arviz_plot_trace_accepts_the_posterior_group(results):
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = results["ais"]
    axes = az.plot_trace(r.to_datatree()["posterior"].to_dataset(), combined=True)
    assert axes.shape == (2, 2)  # z and tau, each density + trace
    idata = r.to_inference_data().sel(data=0)  # one example: the draws and their divergences
    az.plot_trace(idata)
    az.plot_pair(idata, var_names=["z"], divergences=True)
    plt.close("all")


def test_save_is_atomic(results, tmp_path, monkeypatch):
    r = results["iwae"]
    path = export.save(r, tmp_path / "r.nc")
    before = path.read_bytes()

    def broken(self, filepath, *args, **kwargs):
        with open(filepath, "wb") as f:
            f.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(xr.DataTree, "to_netcdf", broken)
    with pytest.raises(OSError, match="disk full"):
        export.save(results["likelihood_weighting"], path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.nc"]


def test_zarr_round_trip(results, tmp_path):
    pytest.importorskip("zarr")
    r = results["bdmc"]
    path = export.save(r, tmp_path / "r.zarr")
    assert_same_result(export.load(path), r)
    export.save(r, path)  # overwriting an existing store
    assert_same_result(export.load(path), r)


def test_bad_input_raises():
    with pytest.raises(TypeError, match="pyrolik result"):
        export.to_datatree({"log_likelihood": 1.0})
    with pytest.raises(TypeError, match="DataTree or arviz.InferenceData"):
        export.from_datatree(42)
    with pytest.raises(ValueError, match="not written by pyrolik"):
        export.from_datatree(xr.DataTree())
    with pytest.raises(FileNotFoundError, match="no saved result"):
        export.load("/nonexistent/run.nc")


def test_a_tree_of_another_layout_is_refused(results):
    tree = results["iwae"].to_datatree()
    tree.attrs["layout"] = 2
    with pytest.raises(ValueError, match="layout 2, not 3"):
        export.from_datatree(tree)


# --- ArviZ's and xarray's own readers and writers -----------------------------------------------


def _plain(value) -> bool:
    return type(value) in (str, int, float)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_attribute_is_a_plain_str_int_or_float(results, name):
    """netCDF, h5netcdf and zarr store str/int/float attrs; a TorchVersion or numpy object fails."""
    r = results[name]
    tree = r.to_datatree()
    nodes = list(tree.subtree) + list(export.flatten(tree).subtree)
    seen = 0
    for node in nodes:
        for key, value in node.attrs.items():
            assert _plain(value), (node.path, key, type(value))
            seen += 1
        for var_name, var in node.dataset.variables.items():
            for key, value in var.attrs.items():
                assert _plain(value), (node.path, var_name, key, type(value))
    idata = r.to_inference_data()
    for key, value in idata.attrs.items():
        assert _plain(value), ("InferenceData", key, type(value))
    for group in idata.groups():
        for key, value in idata[group].attrs.items():
            assert _plain(value), (group, key, type(value))
    assert seen > 10 and isinstance(tree.attrs["torch_version"], str)


@pytest.mark.parametrize("engine", [None, "h5netcdf", "netcdf4"])  # None: ArviZ's default
@pytest.mark.parametrize("name", ESTIMATORS)
def test_arviz_writes_and_reads_every_export(results, name, engine, tmp_path):
    import arviz as az

    r = results[name]
    idata = r.to_inference_data()
    path = tmp_path / "idata.nc"
    kw = {} if engine is None else {"engine": engine}
    idata.to_netcdf(str(path), **kw)
    with az.rc_context({"data.load": "eager"}):
        back = az.from_netcdf(str(path), **kw)
    assert set(back.groups()) == set(idata.groups())
    for group in idata.groups():
        xr.testing.assert_equal(back[group], idata[group])
    assert back.attrs["pyrolik_result"] == type(r).__name__
    assert_same_result(export.from_datatree(back), r)
    with xr.open_datatree(path) as tree:  # xarray's reader of the same file
        assert_same_result(export.from_datatree(tree.load()), r)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_saved_files_open_in_arviz_and_xarray(results, name, tmp_path):
    """``pyrolik.save`` files: ``az.from_netcdf`` sees every group (BDMC's bounds included)."""
    import arviz as az

    r = results[name]
    path = pyrolik.save(r, tmp_path / "run.nc")
    with az.rc_context({"data.load": "eager"}):
        idata = az.from_netcdf(str(path))
    expected = r.to_inference_data()
    assert set(idata.groups()) == set(expected.groups())
    for group in expected.groups():
        xr.testing.assert_equal(idata[group], expected[group])
    assert_same_result(export.from_datatree(idata), r)
    with xr.open_datatree(path) as tree:
        assert set(tree.children) == set(expected.groups())


def test_a_flat_bdmc_file_from_before_the_subtree_record_still_loads(results, tmp_path):
    from pyrolik.results.layout import SUBTREES

    r = results["bdmc"]
    flat = export.flatten(r.to_datatree())
    flat.attrs = {k: v for k, v in flat.attrs.items() if k != SUBTREES}
    assert_same_result(export.from_datatree(flat), r)


def test_arviz_sees_both_bdmc_bounds(results, tmp_path):
    import arviz as az

    r = results["bdmc"]
    with az.rc_context({"data.load": "eager"}):
        idata = az.from_netcdf(str(pyrolik.save(r, tmp_path / "bdmc.nc")))
    groups = set(idata.groups())
    assert {"lower_posterior", "lower_sample_stats", "lower_particles", "upper_prior",
            "upper_sample_stats_prior", "upper_evidence", "evidence", "simulated", "calibration",
            "posterior"} <= groups
    ex = example_dim(r)
    assert_array_equal(unblock(idata.lower_particles["log_weight"], ex), n(r.lower.log_weights))
    assert_array_equal(idata.upper_evidence["log_marginal_likelihood"].values[0, 0],
                       n(r.upper.log_likelihood))
    assert_array_equal(idata.evidence["gap"].values[0, 0], n(r.per_example_gap))
    # each bound's groups carry its run's description
    assert idata.lower_posterior.attrs["bound"] == "lower"
    assert idata.upper_prior.attrs["bound"] == "upper"
    assert idata.upper_prior.attrs["direction"] == "reverse"
    # ArviZ's own functions accept the bound's groups
    stats = summary_where_defined(idata, group="lower_posterior")
    pd.testing.assert_frame_equal(summary_where_defined(idata), stats)  # the root alias


def test_nested_bdmc_files_written_before_still_load(results, tmp_path):
    r = results["bdmc"]
    path = tmp_path / "nested.nc"
    r.to_datatree().to_netcdf(path)  # the layout pyrolik.save wrote before
    with xr.open_datatree(path) as tree:
        assert {"lower", "upper"} <= set(tree.children)
    assert_same_result(pyrolik.load(path), r)


@pytest.mark.parametrize("name", ["iwae", "likelihood_weighting"])
def test_the_example_dim_is_the_models_plate(results, name, tmp_path):
    r = results[name]
    assert r.example_dim == "data"  # the plate of the linear-Gaussian model
    tree = r.to_datatree()
    assert tree["particles"]["log_weight"].dims == ("chain", "particle", "data")
    assert tree["observed_data"]["x"].dims == ("data", "x_dim_0")
    back = pyrolik.load(pyrolik.save(r, tmp_path / "r.nc"))
    assert back.example_dim == "data"
    assert_same_result(back, r)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_a_plate_name_on_any_result_names_the_example_dim(results, name, tmp_path):
    r = results[name]
    if isinstance(r, BDMCResult):
        r = dataclasses.replace(r, lower=dataclasses.replace(r.lower, example_dim="pixels_row"),
                                upper=dataclasses.replace(r.upper, example_dim="pixels_row"))
    else:
        r = dataclasses.replace(r, example_dim="pixels_row")
    tree = r.to_datatree()
    check_any(tree, r)
    for node in tree.subtree:
        assert "example" not in node.dataset.sizes, node.path
    assert_same_result(pyrolik.load(pyrolik.save(r, tmp_path / "r.nc")), r)


def test_files_with_the_old_example_dim_still_load(results, tmp_path):
    """Files written before the dim was named after the plate have dim ``example``."""
    for name in ESTIMATORS:
        r = results[name]
        if isinstance(r, BDMCResult):
            old = dataclasses.replace(r, lower=dataclasses.replace(r.lower, example_dim="example"),
                                      upper=dataclasses.replace(r.upper, example_dim="example"))
        else:
            old = dataclasses.replace(r, example_dim="example")
        path = pyrolik.save(old, tmp_path / f"{name}.nc")
        with xr.open_datatree(path) as tree:
            assert "example" in tree["evidence"].dataset.sizes
        back = pyrolik.load(path)
        assert_same_result(back, old)
        assert example_dim(back) == "example"


def test_plate_names_that_clash_with_the_layout_export_as_example(results):
    r = results["ais"]
    for clash in ("chain", "draw", "sample", "latent_dim", "x_dim_0", ""):
        tree = dataclasses.replace(r, example_dim=clash).to_datatree()
        assert tree["evidence"]["log_marginal_likelihood"].dims == ("chain", "draw", "example"), \
            clash


def test_energy_error_goes_to_sample_stats_and_round_trips(results, tmp_path):
    r = results["ais"]
    energy = torch.randn(r.trace["acceptance_rate"].shape, dtype=torch.float64,
                         generator=torch.Generator().manual_seed(0))
    r = dataclasses.replace(r, trace={**r.trace, "energy_error": energy})
    tree = r.to_datatree()
    ann = tree["annealing"]
    assert ann["energy_error"].dims == ("step", "chain", "particle", example_dim(r))
    assert_array_equal(unblock(ann["energy_error"], example_dim(r), "step"), n(energy))
    src = tree["sample_stats"]["particle"].values
    biggest = np.abs(n(energy)).max(0)[src, np.arange(src.shape[-1])]
    assert_array_equal(tree["sample_stats"]["max_energy_error"].values, biggest)
    back = pyrolik.load(pyrolik.save(r, tmp_path / "r.nc"))
    torch.testing.assert_close(back.trace["energy_error"], energy, rtol=0, atol=0)
    assert_same_result(back, r)
    import arviz as az

    idata = r.to_inference_data()
    assert np.isfinite(az.ess(idata.sample_stats, var_names=["max_energy_error"])[
        "max_energy_error"]).all()


def test_a_seed_beyond_int64_is_kept_as_a_string(results, tmp_path):
    r = dataclasses.replace(results["iwae"], seed=2**70 + 3)
    tree = r.to_datatree()
    assert tree.attrs["seed"] == str(2**70 + 3)
    assert pyrolik.load(pyrolik.save(r, tmp_path / "r.nc")).seed == 2**70 + 3
    assert tree.attrs["seed"] == str(r.seed)


def test_the_export_does_not_import_the_results_module():
    """The export reads results by their attributes: the converters and the layout they share import
    neither the result classes nor any layer above them (only pure tensor ops and the version)."""
    import ast
    from pathlib import Path

    import pyrolik.results.convert as convert
    import pyrolik.results.layout as layout

    for module in (convert, layout):
        tree = ast.parse(Path(module.__file__).read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for a in node.names}
        assert not {m for m in imported if m and m.startswith("pyrolik")
                    and m not in ("pyrolik._version", "pyrolik.results.layout")
                    and not m.startswith("pyrolik.ops.")}, module.__name__
        assert "pyrolik.results" not in imported


def test_the_package_has_no_import_cycle():
    """Imports between pyrolik's modules form no cycle, function-level ones and imports for type
    checkers only included (the package root, which re-exports everything, aside)."""
    import ast
    from pathlib import Path

    root = Path(pyrolik.__file__).parent
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            deps |= {m for m in names if m in modules and m != name}
        graph[name] = deps - {"pyrolik"} if name != "pyrolik" else set()
    assert graph["pyrolik.results"] and graph["pyrolik.io.export"] >= {"pyrolik.results"}
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for d in graph[m]:
            if state.get(d) == 1:
                raise AssertionError(f"import cycle: {' -> '.join([*stack, m, d])}")
            if d not in state:
                visit(d, [*stack, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])
