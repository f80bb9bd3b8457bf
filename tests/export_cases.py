"""Tiny results of every estimator, built once per session for the export, diagnostics and plot tests."""

from __future__ import annotations

import functools

import pyro
import pyro.distributions as dist
import torch

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian
from pyrolik.annealing import Recording
from pyrolik.annealing.driver import run

ESTIMATORS = ["ais", "reverse_ais", "iwae", "likelihood_weighting", "kde", "bdmc"]
LG = LinearGaussian.random(data_dim=5, latent_dim=2, s=0.3, seed=0, dtype=torch.float64)


def two_sites(x):
    """Linear-Gaussian decoder with a per-example positive noise scale: a vector and a
    constrained scalar site, so constrained and unconstrained states differ."""
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
        tau = pyro.sample("tau", dist.LogNormal(x.new_zeros(()), 0.3))
        loc = z @ LG.W.to(x).T + LG.b.to(x)
        pyro.sample("x", dist.Normal(loc, 0.3 * tau.unsqueeze(-1)).to_event(1), obs=x)


@functools.cache
def build() -> dict:
    """``{estimator: result}`` on 3 examples, a few chains and steps (about a second in all)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        g = torch.Generator().manual_seed(0)
        x = LG.sample(3, g)
        kernel = pyrolik.HMC(num_leapfrog=3, mass_matrix=True)
        out = {"ais": pyrolik.ais(two_sites, x, num_steps=10, num_chains=8, kernel=kernel, seed=0,
                                  record=Recording(every=2, states=True), progress=False)}
        fwd = pyrolik.ais(LG, x, num_steps=10, num_chains=8, kernel=pyrolik.HMC(num_leapfrog=3),
                          seed=0, progress=False)
        post = LG.exact_posterior(x).sample()
        # reverse AIS on the forward run's pilot table (the driver behind pyrolik.reverse_ais,
        # which no longer takes a table)
        _, (out["reverse_ais"],) = run(
            "reverse_ais", LG, x, directions=("reverse",), num_steps=10, num_chains=8,
            schedule="auto", kernel=pyrolik.HMC(num_leapfrog=3), latents=post,
            step_sizes=fwd.step_sizes, seed=1, batch_size=None, progress=False)
        out["iwae"] = pyrolik.iwae(LG, x, LG.exact_guide, num_samples=30, seed=0, progress=False)
        out["likelihood_weighting"] = pyrolik.likelihood_weighting(LG, x, num_samples=40, seed=0,
                                                                   progress=False)
        out["kde"] = pyrolik.kde(LG.sample(200, g), x, bandwidth=[0.3, 1.0, 3.0],
                                 validation=LG.sample(20, g), progress=False)
        out["bdmc"] = pyrolik.bdmc(two_sites, 3, data_shape=(5,), num_steps=10, num_chains=8,
                                   kernel=pyrolik.HMC(num_leapfrog=3), seed=0, progress=False)
    finally:
        torch.set_default_dtype(old)
    return out


def collapsed_elements(ds):
    """Per summary row (variable element): True where some chain, or either half of one (ArviZ
    splits chains for ``r_hat``), holds one value only, so ArviZ's diagnostics are undefined."""
    import numpy as np

    half = ds.sizes["draw"] // 2
    return np.concatenate([
        np.stack([(part.std(axis=1) == 0).any(axis=0) for part in
                  (ds[v].values, ds[v].values[:, :half], ds[v].values[:, half:2 * half])]
                 ).any(axis=0).ravel() for v in ds.data_vars])


def summary_where_defined(idata, group: str = "posterior"):
    """``az.summary`` of ``group``, checked finite wherever ArviZ defines its numbers.

    Means, sds and intervals always; with fewer than 2 chains of 4 draws ArviZ computes no
    diagnostics (NaN). Otherwise ``r_hat``, ``ess_*`` and ``mcse_*`` except for elements where
    some chain (block), or half of one, holds one value only (its draws copy one particle: ArviZ
    splits every chain in two and divides by a half's zero variance, warns, and returns inf or NaN,
    which is the honest answer there).
    """
    import warnings

    import arviz as az
    import numpy as np

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning)
        table = az.summary(idata, group=group, round_to="none")
    ds = idata[group]
    collapsed = collapsed_elements(ds)
    assert len(collapsed) == len(table)
    stats = ["mean", "sd", "hdi_3%", "hdi_97%"]
    assert np.isfinite(table[stats].values).all()
    diag = [c for c in table.columns if c not in stats]
    if ds.sizes["chain"] < 2 or ds.sizes["draw"] < 4:  # ArviZ's minimum shape for diagnostics
        return table
    assert np.isfinite(table.loc[~collapsed, diag].values).all()
    return table
