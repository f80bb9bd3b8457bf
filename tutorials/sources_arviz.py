"""Cell sources of tutorial 07: diagnose an estimate with ArviZ (built by ``tutorials/build.py``)."""

from __future__ import annotations

from sources import SETUP

ARVIZ = [
    ("md", """
# 7. Diagnose with ArviZ

Every pyrolik result exports to an `arviz.InferenceData` (and an `xarray.DataTree`, what ArviZ 1.x
reads). This notebook runs the whole ArviZ workflow on the small digits VAE that ships with pyrolik:
`az.summary`, `az.plot_khat`, `az.plot_forest`, `az.plot_rank`, `az.plot_pair` with divergences,
xarray plots along the annealing path, and a calibration check from BDMC. Along the way it says
which number answers which question, because the two questions, *is log p(x) right?* and *are the
posterior summaries precise?*, have different answers.
"""),
    ("code", SETUP + '''
import numpy as np
import arviz as az
from scipy import stats
# a block whose resampled draws all copy one chain (likely at the tiny CI settings): ArviZ says so
warnings.filterwarnings("ignore", message="Your data appears to have a single value")
warnings.filterwarnings("ignore", category=RuntimeWarning)  # its r_hat is then inf
'''),
    ("code", '''
import pyrolik_models
from pyrolik_models.training.train_digits import digits_split
vae = pyrolik_models.load("vae")
x = digits_split(dtype=torch.float32).test[:4 if smoke_test else 20]
steps, chains = (20, 8) if smoke_test else (200, 32)
ais = pyrolik.ais(vae, x, num_steps=steps, num_chains=chains, seed=0, progress=False)
idata = ais.to_inference_data()
ex = ais.example_dim   # the model's plate over the examples: "data"
idata
'''),
    ("md", """
## What the export holds

ArviZ has no weighted draws, and AIS gives weighted ones. So the 32 chains of each digit are split
into 4 blocks (ArviZ `chain`s) of 8, and each block's final states are *resampled* by their AIS
weights (systematic resampling, copies kept together): `posterior` holds equally weighted draws.
`sample_stats` has one row per draw (which chain it copies, its weight, acceptance, divergences);
`particles` the raw final states and weights; `evidence` the estimate of log p(x) per digit with its
MCSE, ESS and Pareto k-hat; `annealing` everything indexed by annealing step, against `beta`.

`az.summary` of the posterior is then the *weighted* posterior: means, sds and intervals of the
latent code of each digit, and `r_hat`/`ess` across the 4 blocks.
"""),
    ("code", '''
az.summary(idata, var_names=["z"], coords={ex: [0]})
'''),
    ("md", """
## Which number answers which question

- **Is log p(x) right?** Read `evidence`: `log_marginal_likelihood` (a stochastic lower bound), its
  `mcse`, the `ess` of the weights and `pareto_k` (below `good_k` the MCSE can be trusted). Whether
  the bound is *tight* (enough annealing steps) is what BDMC answers, below.
- **Are the posterior summaries precise?** `r_hat` and `ess_bulk` across blocks. A block whose
  weight sits on one or two chains gives copies of them, and the blocks disagree; `r_hat^2` is
  about `1 + 1/ESS` per block. This says how noisy a posterior *mean* is, not whether log p(x) is
  off: the mean of the weights converges much faster than a weighted mean of z.
"""),
    ("code", '''
idata.evidence.to_dataframe().head()  # one draw of the estimator per digit
'''),
    ("code", '''
elpd = pyrolik.diagnostics.to_elpd(idata)   # ArviZ's ELPDData of the evidence (not leave-one-out)
print(elpd)
ax = az.plot_khat(elpd, show_hlines=True)
ax.set_title("Pareto k-hat of each digit's AIS weights");
'''),
    ("md", """
## Per block: forest, rank and pair plots

`az.plot_forest` draws one interval per block (ArviZ chain) with `r_hat` and ESS beside it; on one
digit, `az.plot_rank` shows whether the blocks agree and `az.plot_pair(divergences=True)` marks the
draws that copy a chain with a divergent HMC proposal.
"""),
    ("code", '''
axes = az.plot_forest(idata, var_names=["z"], coords={ex: [0], "z_dim_0": [0, 1, 2]},
                      r_hat=True, ess=True, figsize=(8, 4))
'''),
    ("code", '''
one = idata.sel(**{ex: 0})
axes = az.plot_rank(one, var_names=["z"], coords={"z_dim_0": [0, 1]}, figsize=(8, 3))
'''),
    ("code", '''
axes = az.plot_pair(one, var_names=["z"], coords={"z_dim_0": [0, 1, 2]}, divergences=True,
                    figsize=(5, 5))
print("divergent draws:", int(one.sample_stats.diverging.sum()))
'''),
    ("md", """
## Five steps against many: the diagnostics tell them apart

With 5 annealing steps the final states are far from the posterior and their weights are
dominated by a few chains: the blocks' resampled posteriors disagree. `r_hat` grows and ESS
shrinks, and the lower bound on log p(x) drops.
"""),
    ("code", '''
rows = {}
for n in (5, steps):
    r = pyrolik.ais(vae, x, num_steps=n, num_chains=chains, seed=0, progress=False)
    s = az.summary(r.to_inference_data(), var_names=["z"])
    rows[f"{n} steps"] = {"max r_hat": s.r_hat.max(), "median ess_bulk": s.ess_bulk.median(),
                          "mean ESS of the weights": float(r.ess.mean()),
                          "mean log p(x)": r.mean, "mean MCSE": float(r.mcse.mean())}
pd.DataFrame(rows).T
'''),
    ("md", """
`r_hat` tells the runs apart (infinite when a block's draws all copy one chain). ArviZ's
`ess_bulk` does not here: with 8 draws per block its autocorrelation estimate cannot see the
duplicated draws, and it sits at ArviZ's cap of N log10 N (48 for 32 draws) in both rows, more than
the 32 draws there are. Read the weights' ESS (in `evidence`) for how many chains carry the estimate;
`ess_bulk` becomes informative with more chains per block (64 chains: 4 blocks of 16).
"""),
    ("md", """
## Along the annealing path

The `annealing` group is indexed by `step`, with the `beta` each chain was at: make the schedule
(the same for every chain here) a coordinate and plot anything against it with xarray. Acceptance
of the HMC moves, and the ESS of each block's weights:
"""),
    ("code", '''
ann = idata.annealing
ann = ann.assign_coords(beta=ann.beta.isel(chain=0, particle=0, drop=True))
fig, axes = plt.subplots(1, 2, figsize=(10, 3), layout="constrained")
ann.acceptance_rate.mean(["chain", "particle", ex]).plot(x="beta", ax=axes[0])
ann.ess.mean(ex).plot.line(x="beta", hue="chain", ax=axes[1])
axes[0].set_title("mean acceptance"); axes[1].set_title("ESS of each block's weights (of 8)")
for a in axes: a.set_xscale("log")
'''),
    ("md", """
## Is the bound tight? BDMC, and a calibration check for free

On data simulated from the model, reverse AIS from the exact latents gives an *upper* bound. The
BDMC export has both runs (`lower/`, `upper/`), the sandwich in `evidence` (`bound` = lower, upper;
`gap`, `gap_mcse`) and the running log Z of both directions in their `annealing` groups: where
the two curves part is where annealing is hardest.

It also has `calibration`: the rank (PIT) of each simulated latent among the forward run's
resampled draws. The simulated latents are exact posterior draws, so the PIT values are uniform
when the resampled posterior is right (simulation-based calibration).
"""),
    ("code", '''
bd = pyrolik.bdmc(vae, 8 if smoke_test else 50, data_shape=(64,), num_steps=steps,
                  num_chains=chains, seed=0, progress=False)
bd_idata = bd.to_inference_data()
ev = bd_idata.evidence
print(f"BDMC gap {float(ev.gap.mean()):.3f} nats (mean gap_mcse {float(ev.gap_mcse.mean()):.3f})")
fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
for side, color in (("lower", "C0"), ("upper", "C3")):
    ann = bd_idata[f"{side}_annealing"]
    lz = ann.log_marginal_likelihood.mean(["chain", ex])
    lz = lz.assign_coords(beta=ann.beta.isel(chain=0, particle=0, drop=True))
    lz.plot(x="beta", ax=ax, color=color, label=f"{side} (mean over digits)")
ax.set_xscale("log"); ax.legend(); ax.set_title("running log Z: forward and reverse");
'''),
    ("code", '''
pit = bd_idata.calibration.z.values.ravel()
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), layout="constrained")
uniform = stats.uniform(0, 1)
az.plot_ecdf(pit, cdf=uniform.cdf, confidence_bands=True, eval_points=np.linspace(0, 1, 101),
             rvs=lambda n, random_state=None: uniform.rvs(n, random_state=random_state),
             ax=axes[0])
axes[0].set_title(f"PIT of the simulated latents (KS p = {stats.kstest(pit, 'uniform').pvalue:.2f})")
pyrolik.diagnostics.plots.plot_bdmc(bd, ax=axes[1]);
'''),
    ("md", """
## What not to do

Summarising the raw final states (`particles`) as if they were posterior draws gives their
unweighted spread, which is wider than the posterior's when the run is short:
"""),
    ("code", '''
raw = az.summary(idata.particles[["z"]].rename({"particle": "draw"}), kind="stats")
right = az.summary(idata, var_names=["z"], kind="stats")
print(f"raw final states sd / resampled sd: {raw['sd'].mean() / right['sd'].mean():.2f}")
'''),
    ("md", """
More runs of the same settings join with `pyrolik.concat(a, b)`, which pools the chains and
recomputes `evidence`; `az.concat(dim="chain")` would not. Files saved with `pyrolik.save` open in
`az.from_netcdf` and load back with `pyrolik.load`. See `docs/export.md` for every group and
variable.
"""),
]
