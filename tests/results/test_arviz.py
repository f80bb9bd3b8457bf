"""Every result type through ArviZ's own calls: ``az.summary``, ``az.plot_trace``, ArviZ's netCDF
writer and reader, ``pyrolik.save`` / ``load``, and the ArviZ 1.x libraries (``arviz_base`` 0.8,
``arviz_stats`` 0.8) on ``result.to_datatree()``; finite numbers wherever ArviZ defines them."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
import torch
import xarray as xr

import pyrolik
from tests.export_cases import LG, build, collapsed_elements, summary_where_defined
from tests.io.test_export import assert_same_result

CASES = ["ais", "reverse_ais", "bdmc", "iwae", "likelihood_weighting", "sigma_curve"]


@functools.cache
def result(name: str):
    if name != "sigma_curve":
        return build()[name]
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        x = LG.sample(3, torch.Generator().manual_seed(0))
        return pyrolik.sigma_curve(LG, x, [0.3, 1.0], num_steps=20, num_chains=8, seed=0,
                                   kernel=pyrolik.HMC(num_leapfrog=3), progress=False)
    finally:
        torch.set_default_dtype(old)


def group_of(name: str) -> str:
    return "prior" if name == "reverse_ais" else "posterior"


@pytest.mark.filterwarnings("ignore::matplotlib.MatplotlibDeprecationWarning")  # ArviZ 0.23 on mpl 3.11
@pytest.mark.filterwarnings("ignore:Your data appears to have a single value")  # a collapsed block
@pytest.mark.parametrize("name", CASES)
def test_every_result_goes_through_arviz(name, tmp_path):
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = result(name)
    group = group_of(name)
    idata = r.to_inference_data()
    table = summary_where_defined(idata, group)
    assert len(table) > 0
    az.plot_trace(idata[group])
    plt.close("all")
    path = tmp_path / "idata.nc"
    idata.to_netcdf(str(path))
    with az.rc_context({"data.load": "eager"}):
        back = az.from_netcdf(str(path))
    assert set(back.groups()) == set(idata.groups())
    for g in idata.groups():
        xr.testing.assert_equal(back[g], idata[g])
    again = pyrolik.load(pyrolik.save(r, tmp_path / "run.nc"))
    assert_same_result(again, r)
    # the saved file exports the same draws
    xr.testing.assert_equal(again.to_inference_data()[group], idata[group])


@pytest.mark.parametrize("converter", ["arviz", "arviz_base"])
@pytest.mark.parametrize("name", CASES)
def test_the_arviz_1_libraries_read_the_datatree(name, converter, monkeypatch):
    """``arviz_stats.summary`` and ``arviz_base.extract`` on the DataTree, its groups built by
    ArviZ 0.x's converter or by ``arviz_base``'s (what ArviZ 1.x uses)."""
    azb = pytest.importorskip("arviz_base", minversion="0.8")
    azs = pytest.importorskip("arviz_stats", minversion="0.8")
    monkeypatch.setattr("pyrolik.results.layout.CONVERTER", converter)
    r = result(name)
    tree = r.to_datatree()
    assert tree[group_of(name)].attrs["inference_library"] == "pyrolik"
    group = group_of(name)
    post = tree[group].to_dataset()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning)  # a collapsed block: inf
        table = azs.summary(tree, group=group, round_to="none")
    assert len(table) == sum(int(np.prod([post.sizes[d] for d in da.dims[2:]]))
                             for da in post.data_vars.values())
    stats = ["mean", "sd"]
    assert np.isfinite(table[stats].to_numpy(dtype=float)).all()
    collapsed = collapsed_elements(post)
    if post.sizes["chain"] >= 2 and post.sizes["draw"] >= 4:
        diag = table[["ess_bulk", "r_hat"]].to_numpy(dtype=float)[~collapsed]
        assert np.isfinite(diag).all()
    # the weighted mean: the resampled draws' plain mean
    first = next(iter(post.data_vars))
    np.testing.assert_allclose(table["mean"].to_numpy(dtype=float)[0],
                               post[first].values.reshape(-1, *post[first].shape[2:])
                               .mean(0).ravel()[0], rtol=1e-10)
    extracted = azb.extract(tree, group=group)
    assert extracted.sizes["sample"] == post.sizes["chain"] * post.sizes["draw"]
    if "evidence" in tree.children:
        ev = tree["evidence"]
        assert np.isfinite(ev["log_marginal_likelihood"].values).all()


# ArviZ 0.23's to_dataframe sorts in place and merges with copy=, which pandas 3.1 deprecates
@pytest.mark.filterwarnings("ignore:The inplace keyword in DataFrame.sort_index")
@pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")
@pytest.mark.parametrize("name", ["ais", "reverse_ais", "bdmc", "iwae", "likelihood_weighting",
                                  "kde"])
def test_arviz_tables_every_export(name):
    """``idata.to_dataframe()``, ArviZ's own call with its defaults, on every export: one row per
    (chain, draw), the evidence (one draw of the estimator) on the row of chain 0, draw 0."""
    r = build()[name]
    idata = r.to_inference_data()
    df = idata.to_dataframe()
    assert {"chain", "draw"} <= set(df.columns)
    group = "evidence" if name == "kde" else group_of(name)
    assert len(df) == idata[group].sizes["chain"] * idata[group].sizes["draw"]
    ev = idata.to_dataframe(groups="evidence")  # one row: the pooled estimate of every example
    lml = [c for c in ev.columns if isinstance(c, tuple) and c[0].startswith(
        "log_marginal_likelihood")]
    assert len(ev) == 1 and len(lml) == r.num_examples * (2 if name == "bdmc" else 1)
    expected = (np.stack([r.lower.log_likelihood, r.upper.log_likelihood]) if name == "bdmc"
                else r.log_likelihood.numpy())
    np.testing.assert_array_equal(np.sort(ev[lml].to_numpy().ravel()), np.sort(expected.ravel()))
