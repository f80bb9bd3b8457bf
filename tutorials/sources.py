"""Cell sources of the tutorial notebooks (built and executed by ``tutorials/build.py``).

Each notebook calls only pyrolik's public API (and the example models in ``pyrolik_models``).
"""

from __future__ import annotations

SETUP = '''
import os, tempfile
smoke_test = "CI" in os.environ   # the test suite runs every notebook at tiny settings
import warnings; warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm without ipywidgets
import matplotlib.pyplot as plt
import pandas as pd
import torch, pyro
import pyrolik
pyrolik.set_threads()   # one CPU thread (PYROLIK_NUM_THREADS to change): fastest for small models
torch.manual_seed(0); pyro.set_rng_seed(0)
pd.set_option("display.precision", 3); pd.set_option("display.width", 140)
'''

QUICKSTART = [
    ("md", """
# 1. Quick start: from a Pyro VAE to a log-likelihood you can trust

pyrolik estimates $\\log p(x)$ of held-out data under a decoder-based generative model written as an
ordinary Pyro program. In this notebook we write a small VAE, train it on scikit-learn's 8x8 digits,
estimate the test log-likelihood with annealed importance sampling (AIS) and the IWAE bound, check
AIS with bidirectional Monte Carlo (BDMC), and read the result in ArviZ.
"""),
    ("code", SETUP),
    ("md", """
## Data and model

The digits are integer grey levels 0..16; we dequantize them to $(k + u)/17 \\in [0, 1]^{64}$.
The model follows pyrolik's convention: the data `x` first, a plate over the examples, and an
observation-noise site conditioned on `x`. The guide (encoder) has the same signature.
"""),
    ("code", '''
from torch import nn
import pyro.distributions as dist
from pyrolik.io.datasets import load_digits

x_all, labels = load_digits(dequantize_seed=0, dtype=torch.float32)
perm = torch.randperm(len(x_all), generator=torch.Generator().manual_seed(0))
train, test = x_all[perm[:1500]], x_all[perm[1500:]]

LATENT = 8
decoder = nn.Sequential(nn.Linear(LATENT, 128), nn.Tanh(), nn.Linear(128, 64), nn.Sigmoid())
encoder = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 2 * LATENT))

def model(x, sigma=0.1):
    dec = pyro.module("decoder", decoder)
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(x.new_zeros(LATENT), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(dec(z), sigma).to_event(1), obs=x)

def guide(x, sigma=0.1):
    enc = pyro.module("encoder", encoder)
    loc, log_scale = enc(x).chunk(2, dim=-1)
    with pyro.plate("data", x.shape[0]):
        pyro.sample("z", dist.Normal(loc, log_scale.exp()).to_event(1))
'''),
    ("code", '''
from pyro.infer import SVI, Trace_ELBO
from pyro.optim import Adam

svi = SVI(model, guide, Adam({"lr": 3e-3}), Trace_ELBO())
for epoch in range(3 if smoke_test else 150):
    for batch in train[torch.randperm(len(train))].split(100):
        loss = svi.step(batch)
decoder.eval(); encoder.eval()
print(f"last minibatch ELBO: {-loss / 100:.1f} nats per digit")
'''),
    ("md", """
## Estimate log p(x)

`pyrolik.ais` anneals from the prior $p(z)$ to the posterior through $p(z)\\,p(x\\mid z)^\\beta$
with HMC transitions; its estimate is a *stochastic lower bound*. With `init=guide` it starts from
the encoder instead (AIS+encoder), a much shorter path. `pyrolik.iwae` is the importance weighted
bound with the guide as proposal.
"""),
    ("code", '''
x = test[:8] if smoke_test else test[:100]
steps, chains = (20, 8) if smoke_test else (1000, 8)
ais = pyrolik.ais(model, x, num_steps=steps, num_chains=chains, seed=0, progress=False)
ais_enc = pyrolik.ais(model, x, num_steps=max(5, steps // 10), num_chains=chains, init=guide,
                      seed=0, progress=False)
iw = pyrolik.iwae(model, guide, x, num_samples=50 if smoke_test else 5000, seed=0, progress=False)
pd.concat([ais.summary(), ais_enc.summary(), iw.summary()])
'''),
    ("md", """
Each result holds per-example estimates. Since the three estimators ran on the same digits, the
paired differences are much more precise than the means' standard errors suggest:
"""),
    ("code", '''
diff = ais.log_likelihood - iw.log_likelihood
print(f"AIS - IWAE: {diff.mean():.3f} +- {diff.std() / len(diff) ** 0.5:.3f} nats per digit (paired)")
'''),
    ("md", """
## Can we trust the AIS number? BDMC

On data *simulated from the model* we know an exact posterior sample for each example, so reverse AIS
gives a stochastic *upper* bound. The gap between the two bounds bounds the error of AIS with these
settings on data like the model's.
"""),
    ("code", '''
sandwich = pyrolik.bdmc(model, 5 if smoke_test else 50, data_shape=(64,), num_steps=steps,
                        num_chains=chains, seed=0, progress=False)
print(f"BDMC gap: {sandwich.gap:.3f} +- {sandwich.gap_stderr:.3f} nats")
sandwich.summary()
'''),
    ("md", """
## Read it in ArviZ

Every result exports to an `xarray.DataTree` / `arviz.InferenceData`. ArviZ has no weighted draws,
so `posterior` holds the final AIS states *resampled* by their weights: the chains are split into
blocks (ArviZ's `chain`s) and each block is resampled, so `az.summary` gives the weighted posterior
of each digit's latent code, and its `r_hat` and ESS across blocks say how noisy those summaries
are (not whether log p(x) is right). The estimate of log p(x) itself, with its MCSE, ESS and Pareto
k-hat, is `log_marginal_likelihood` in `evidence`; per-step acceptance, step size and running log Z
are in `annealing`, against `beta`. Tutorial 7 walks through the whole ArviZ workflow.
"""),
    ("code", '''
import arviz as az
idata = ais.to_inference_data()
print(idata)
az.summary(idata, var_names=["z"], coords={"data": [0]})
'''),
    ("code", '''
idata.evidence.to_dataframe().head()  # one draw of the estimator per example
'''),
    ("code", '''
fig = pyrolik.diagnostics.plots.plot_diagnostics(ais)
'''),
    ("code", '''
path = os.path.join(tempfile.mkdtemp(), "ais.nc")
pyrolik.save(ais, path)
again = pyrolik.load(path)          # summarise later without rerunning
print(again.summary().iloc[0, :4])
print(pyrolik.diagnostics.check(again) or "no warnings")
'''),
]

TRUST = [
    ("md", """
# 2. Can I trust this number? BDMC, and AIS vs IWAE vs KDE

Wu et al. (2017) validate AIS with bidirectional Monte Carlo before trusting it, and show that the
kernel density estimator (KDE), the usual yardstick for GANs, can be off by more than the differences
between the models it ranks. We reproduce both findings on the small digits models that ship with
pyrolik (a VAE and a GAN with the same decoder; see `docs/models.md`).
"""),
    ("code", SETUP),
    ("code", '''
import pyrolik_models
from pyrolik_models.training.train_digits import digits_split
vae, gan = pyrolik_models.load("vae"), pyrolik_models.load("gan")
split = digits_split(dtype=torch.float32)
print(vae.meta["data"]); print("sigma:", vae.sigma, gan.sigma)
'''),
    ("md", """
## How many annealing steps? The BDMC gap against steps (figure 2b of the paper)

`bdmc_convergence` runs BDMC on one simulated data set for each number of steps. The gap is the price
of too few steps; the plot is the budget decision.
"""),
    ("code", '''
steps = [5, 20] if smoke_test else [10, 30, 100, 300, 1000]
table = pyrolik.bdmc_convergence(vae, steps, 4 if smoke_test else 40, data_shape=(64,),
                                 num_chains=2 if smoke_test else 8, progress=False)
table
'''),
    ("code", '''
ax = pyrolik.diagnostics.plots.plot_bdmc_convergence(table, title="digits VAE: BDMC bounds")
enough = table[table.gap < 1.0]
print("steps for a gap under 1 nat:", int(enough.num_steps.min()) if len(enough) else "more than tried")
'''),
    ("md", """
## AIS vs IWAE vs KDE on real test digits

KDE smooths samples of the model with a Gaussian kernel whose bandwidth is chosen on *validation*
digits (choosing it on the test digits would inflate it). It is not a bound on anything.
"""),
    ("code", '''
x = split.test[:8] if smoke_test else split.test[:100]
n_steps, chains = (20, 2) if smoke_test else (1000, 8)
rows = {}
for name, m in (("VAE", vae), ("GAN", gan)):
    ais = pyrolik.ais(m, x, num_steps=n_steps, num_chains=chains, seed=0, progress=False)
    samples = m.sample(1000 if smoke_test else 10000, torch.Generator().manual_seed(0))
    kde = pyrolik.kde(samples, x, bandwidth=torch.logspace(-2, -0.3, 15), validation=split.valid,
                      progress=False)
    rows[(name, "AIS")], rows[(name, "KDE")] = ais, kde
    if name == "VAE":
        rows[(name, "IWAE")] = pyrolik.iwae(m, m.guide, x, num_samples=100 if smoke_test else 5000,
                                           seed=0, progress=False)
summary = pd.DataFrame({k: {"log p(x)": r.mean, "stderr": r.stderr, "bound": r.bound or "none"}
                        for k, r in rows.items()}).T
summary
'''),
    ("code", '''
gap_ais = (rows[("VAE", "AIS")].log_likelihood - rows[("GAN", "AIS")].log_likelihood)
gap_kde = (rows[("VAE", "KDE")].log_likelihood - rows[("GAN", "KDE")].log_likelihood)
print(f"VAE - GAN according to AIS: {gap_ais.mean():7.2f} +- {gap_ais.std() / len(x) ** .5:.2f} nats")
print(f"VAE - GAN according to KDE: {gap_kde.mean():7.2f} +- {gap_kde.std() / len(x) ** .5:.2f} nats")
ax = pyrolik.diagnostics.plots.plot_bandwidth(rows[("GAN", "KDE")])
'''),
    ("md", """
AIS (validated by the small BDMC gap) separates the two models by far more than KDE does: KDE
compresses the differences, as the paper found on MNIST. The IWAE bound sits just below AIS for the
VAE because its encoder is a good proposal on these small images.
"""),
]

GANS = [
    ("md", """
# 3. GANs and GMMNs: an observation-noise site, choosing sigma, and the modes a model misses

A GAN or GMMN decoder is deterministic, so $p(x)$ is undefined until we add an observation model:
$x \\mid z \\sim \\mathcal N(g_\\theta(z), \\sigma^2 I)$. Its sigma is a modelling choice, made on
validation data (figure 2a of Wu et al.). With it, AIS gives the log-likelihood, and its final states
are approximate posterior samples that show which parts of a digit the generator cannot produce.
"""),
    ("code", SETUP),
    ("code", '''
import inspect
import pyrolik_models
from pyrolik_models.training.train_digits import digits_split
gan, gmmn = pyrolik_models.load("gan"), pyrolik_models.load("gmmn")
split = digits_split(dtype=torch.float32)
print(inspect.getsource(type(gan).__mro__[1]._observe))   # the observation-noise site
'''),
    ("md", """
## Log-likelihood against sigma: AIS and KDE

Too small a sigma and every pixel the decoder cannot reproduce costs a fortune; too large and the
density is spread thin. AIS traces the true curve; KDE's bandwidth plays the same role but its
estimate of the curve is biased.
"""),
    ("code", '''
sigmas = [0.05, 0.1, 0.2] if smoke_test else [0.03, 0.05, 0.07, 0.1, 0.14, 0.2]
xv = split.valid[:6] if smoke_test else split.valid[:50]
n_steps, chains = (15, 2) if smoke_test else (300, 4)

def ais_ll(model, x, sigma):
    return pyrolik.ais(model, x, num_steps=n_steps, num_chains=chains,
                       model_kwargs={"sigma": sigma}, seed=0, progress=False).log_likelihood

choice = pyrolik_models.choose_sigma(gan, xv, sigmas, ais_ll)
samples = gan.sample(1000 if smoke_test else 10000, torch.Generator().manual_seed(0))
kde_curve = pyrolik.infer.parzen.kde_log_density(samples, xv, torch.tensor(sigmas)).mean(-1)
fig, ax = plt.subplots(figsize=(5, 3.5))
ax.errorbar(sigmas, choice.mean_log_likelihood, 2 * choice.stderr, fmt="o-", label="AIS")
ax.plot(sigmas, kde_curve, "s--", label="KDE (bandwidth = sigma)")
ax.set_xscale("log"); ax.minorticks_off(); ax.set_xticks(sigmas, [f"{s:g}" for s in sigmas])
ax.set_xlabel("sigma"); ax.set_ylabel("mean log p(x) [nats]"); ax.legend()
print("sigma chosen by AIS on validation digits:", choice.sigma)
'''),
    ("md", """
## What the GAN cannot explain

Resampling AIS's final states by their weights gives approximate posterior samples; decoding them
shows the digits the generator produces to explain each test digit. Where they differ from the data,
the model misses that mode.
"""),
    ("code", '''
x = split.test[:6] if smoke_test else split.test[:100]
ais = pyrolik.ais(gan, x, num_steps=n_steps * 3, num_chains=chains, seed=0, progress=False)
worst = torch.argsort(ais.log_likelihood)[:4].tolist()
print("worst-explained test digits:", worst, ais.log_likelihood[worst].round(decimals=1).tolist())
fig = pyrolik.diagnostics.plots.plot_posterior_decodings(ais, lambda lat: gan.decode(lat["z"]), examples=worst,
                                       num_samples=6, image_shape=(8, 8))
'''),
    ("md", """
## GAN vs GMMN

Both decoders have the same architecture and training data; only the objective differs. AIS, checked
with BDMC, says how far apart they really are.
"""),
    ("code", '''
res = {name: pyrolik.ais(m, x, num_steps=n_steps * 3, num_chains=chains, seed=0, progress=False)
       for name, m in (("GAN", gan), ("GMMN", gmmn))}
bd = {name: pyrolik.bdmc(m, 4 if smoke_test else 20, data_shape=(64,), num_steps=n_steps * 3,
                         num_chains=chains, seed=0, progress=False).gap
      for name, m in (("GAN", gan), ("GMMN", gmmn))}
pd.DataFrame({name: {"log p(x)": r.mean, "stderr": r.stderr, "BDMC gap": bd[name]}
              for name, r in res.items()}).T
'''),
]

COMPARE = [
    ("md", """
# 4. Comparing models properly

Two models evaluated on the same test examples should be compared *example by example*: the
per-example differences cancel the variability between examples, which dominates the standard error
of each mean. `pyrolik.compare` reports the mean difference with its standard error, a paired t-test
and a Wilcoxon signed-rank test, corrects for multiple comparisons, and says when the estimates are
bounds of different kinds, so that a difference may be estimator bias rather than model quality.
"""),
    ("code", SETUP),
    ("code", """
import pyrolik_models
from pyrolik_models.training.train_digits import digits_split
split = digits_split(dtype=torch.float32)
x = split.test[:10] if smoke_test else split.test[:200]
steps, chains = (20, 2) if smoke_test else (500, 8)
models = {kind.upper(): pyrolik_models.load(kind) for kind in ("vae", "gan", "gmmn")}
results = {name: pyrolik.ais(m, x, num_steps=steps, num_chains=chains, seed=0, progress=False)
           for name, m in models.items()}
gaps = {name: pyrolik.bdmc(m, 5 if smoke_test else 30, data_shape=(64,), num_steps=steps,
                           num_chains=chains, seed=1, progress=False).gap
        for name, m in models.items()}
pd.DataFrame({n: {"mean log p(x)": r.mean, "stderr (over digits)": r.stderr, "BDMC gap": gaps[n]}
              for n, r in results.items()}).T
"""),
    ("md", """
The standard errors of the means are large because digits differ; the paired comparison does not
need them:
"""),
    ("code", """
cmp = pyrolik.compare(results, gaps=gaps)
cmp.pairs
"""),
    ("code", """
print(cmp.table)
print()
print("\\n".join(cmp.notes))
"""),
    ("md", """
## Mixing estimators: a difference that is partly bias

Comparing the VAE's IWAE bound with the GAN's AIS estimate mixes two lower bounds of different
tightness. `compare` says so in its notes; the BDMC gap tells how loose AIS can be, and only AIS tells
how loose the IWAE bound is.
"""),
    ("code", """
vae = models["VAE"]
iw = pyrolik.iwae(vae, vae.guide, x, num_samples=50 if smoke_test else 2000, seed=0, progress=False)
mixed = pyrolik.compare({"VAE (IWAE)": iw, "GAN (AIS)": results["GAN"]})
print("\\n".join(mixed.notes))
same = pyrolik.compare({"VAE (AIS)": results["VAE"], "VAE (IWAE)": iw})
same.pairs
"""),
    ("md", """
## Classifiers: proper scoring rules

For categorical predictions (a probe on a model's latent space, say) the log score is one of several
proper scoring rules; `compare` also reports the quadratic (Brier) and spherical scores. Here:
logistic regression on raw pixels against a random 8-dimensional projection of them.
"""),
    ("code", """
from sklearn.linear_model import LogisticRegression
from pyrolik.io.datasets import load_digits
xs, ys = load_digits(dequantize_seed=0, dtype=torch.float32)
perm = torch.randperm(len(xs), generator=torch.Generator().manual_seed(0))
tr, te = perm[:1000], perm[1000:]
projection = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
feats = {"pixels": xs.numpy(), "random 8-d projection": (xs @ projection).numpy()}
probs = {name: LogisticRegression(max_iter=200 if smoke_test else 2000).fit(f[tr], ys[tr])
         .predict_proba(f[te]) for name, f in feats.items()}
cls = pyrolik.compare(probs, y=ys[te].numpy())
cls.table
"""),
]

NOTEBOOKS = {
    "01_quickstart": QUICKSTART,
    "02_can_i_trust_this_number": TRUST,
    "03_gans_and_gmmns": GANS,
    "04_comparing_models": COMPARE,
}

# tutorial 05 (issue 9, helper `curves`): its cells live in their own module
from sources_representations import REPRESENTATIONS  # noqa: E402

NOTEBOOKS["05_representations"] = REPRESENTATIONS

# tutorial 06 (issue 18, helper `curves18`): one run, the whole curve
from sources_sigma import SIGMA_RD  # noqa: E402

NOTEBOOKS["06_sigma_and_rate_distortion"] = SIGMA_RD

# tutorial 07 (issue 24): the whole ArviZ workflow
from sources_arviz import ARVIZ  # noqa: E402

NOTEBOOKS["07_diagnose_with_arviz"] = ARVIZ
