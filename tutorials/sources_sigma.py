"""Cell sources of tutorial 06: one annealing run, the whole curve (``tutorials/build.py``).

Calls only the public API (``pyrolik``, ``pyrolik.distortion``) and the example models in
``pyrolik_models``.
"""

from __future__ import annotations

from sources import SETUP

SIGMA_RD = [
    ("md", r"""
# 6. One annealing run, the whole curve: sigma, per-example sigma, rate-distortion, training curves

A GAN's decoder is deterministic; its log-likelihood exists only once we add observation noise,
$x \mid z \sim \mathcal N(f(z), \sigma^2 I)$, and then it depends on $\sigma$. Wu et al. (2017) plot
the log-likelihood against $\sigma$ (their figure 2(a)), choose $\sigma$ on validation data, and tune
$\sigma$ per example to see how much a better noise model could gain (their Table 3). Huang et al.
(2020) draw the model's **rate-distortion curve**. Each of these looks like one AIS run per $\sigma$.

It is one run. With $d(x, f(z)) = \lVert x - f(z)\rVert^2$ and
$Z_\beta(x) = \int p(z)\, e^{-\beta d(x, f(z))}\, dz$,

$$\log p_\sigma(x) = \log Z_\beta(x) - \tfrac D2 \log(2\pi\sigma^2), \qquad \beta = \frac1{2\sigma^2},$$

and AIS along $p(z) e^{-\beta d}$ from $\beta = 0$ up to $1/(2\sigma_{\min}^2)$ passes through every
grid $\beta$ on the way: its running log-weights there are AIS estimates of every $Z_\beta$.
"""),
    ("code", SETUP),
    ("code", '''
import pyrolik_models
from pyrolik_models.training.train_digits import digits_split
gan, vae = pyrolik_models.load("gan"), pyrolik_models.load("vae")
split = digits_split(dtype=torch.float32)
sigmas = [0.05, 0.07, 0.1, 0.14, 0.2, 0.28]
n_valid = 4 if smoke_test else 50
steps, chains = (10, 2) if smoke_test else (500, 4)
# the default kernel tunes its step sizes in a pilot run; the smoke test skips it
kern = pyrolik.HMC(num_leapfrog=3, adapt=None, step_size=0.05) if smoke_test else pyrolik.HMC()
'''),
    ("md", """
## Figure 2(a): log-likelihood against sigma, from one run

`pyrolik.sigma_curve` anneals down to the smallest sigma and reads every grid sigma: per example,
a stochastic lower bound on $\\log p_\\sigma(x)$ with its Monte Carlo standard error. As a check we
also run ordinary AIS at two of the sigmas, the way one would without the one-run curve.
"""),
    ("code", '''
xv = split.valid[:n_valid]
curves = {name: pyrolik.sigma_curve(m, xv, sigmas, num_steps=steps, num_chains=chains, seed=0,
                                    kernel=kern, progress=False)
          for name, m in (("GAN", gan), ("VAE", vae))}
check = {s: pyrolik.ais(gan, xv, num_steps=steps, num_chains=chains, seed=1, progress=False,
                        kernel=kern, model_kwargs={"sigma": s})
         for s in ((0.1,) if smoke_test else (0.1, 0.2))}
fig, ax = plt.subplots(figsize=(5.5, 3.8))
for name, c in curves.items():
    pyrolik.distortion.plot_sigma_curve(c, ax=ax, label=f"{name}: one AIS run")
ax.plot(list(check), [r.mean for r in check.values()], "k*", ms=10, label="GAN: AIS at that sigma")
ax.legend(fontsize="small"); ax.set_title("log p_sigma(x) of validation digits (fig. 2a)")
curves["GAN"].summary()
'''),
    ("md", """
The best fixed sigma is chosen on validation data and then used on the test set (choosing it on
the evaluated data would inflate the score). `pyrolik_models.choose_sigma` takes the whole grid
from one call too.
"""),
    ("code", '''
choice = {name: c.best_sigma() for name, c in curves.items()}
xt = split.test[:n_valid]
test = {name: pyrolik.sigma_curve(m, xt, sigmas, num_steps=steps, num_chains=chains, seed=2,
                                  kernel=kern, progress=False)
        for name, m in (("GAN", gan), ("VAE", vae))}
rows = {}
for name, c in test.items():
    j = int(torch.argmin((c.sigmas - choice[name].sigma).abs()))
    rows[name] = {"sigma (validation)": choice[name].sigma,
                  "test log p(x)": float(c.log_likelihood[j].mean()),
                  "stderr": float(c.stderr[j])}
pd.DataFrame(rows).T
'''),
    ("md", """
## Table 3: sigma tuned for each example

Picking, for each example, its best grid sigma gains tens of nats in the paper. This is **not a
generative model**: no single model assigns these numbers. It is an upper bound on what a better,
radially symmetric (heavy-tailed) noise model could reach, and pyrolik says so with the result.
"""),
    ("code", '''
xtr = split.train[:n_valid]
table = {}
for name, m in (("GAN", gan), ("VAE", vae)):
    for subset, x, c in (("train", xtr, None), ("valid", xv, curves[name])):
        if c is None and smoke_test:
            continue
        c = c or pyrolik.sigma_curve(m, x, sigmas, num_steps=steps, num_chains=chains, seed=3,
                                     kernel=kern, progress=False)
        opt = c.optimal_sigma(fixed_sigma=choice[name].sigma)
        table[(name, subset)] = {"optimal": float(opt.log_likelihood.mean()),
                                 "fixed": float(opt.fixed_log_likelihood.mean()),
                                 "improvement": opt.mean_improvement}
print(opt.warning)
pd.DataFrame(table).T
'''),
    ("code", '''
fig, ax = plt.subplots(figsize=(5.5, 3.8))
pyrolik.distortion.plot_optimal_sigma(curves["GAN"], fixed_sigma=choice["GAN"].sigma, ax=ax);
'''),
    ("md", """
## The rate-distortion curve (Huang et al. 2020)

At each $\\beta$ the run's weighted chains give the distortion $\\hat D_\\beta$ and the rate
$\\hat R_\\beta = -\\beta \\hat D_\\beta - \\log \\hat Z_\\beta$ (nats): a point on or above the model's
rate-distortion curve in expectation. A lower rate at the same distortion is a better lossy code.
`pyrolik.distortion_bdmc` checks chosen points with BDMC on data simulated at that noise level,
along exactly the betas the one run visits: reverse AIS needs exact draws of
$q_\\beta(z \\mid x)$, which simulation gives, and only at its starting beta (see
`docs/sigma_and_rd.md`).
"""),
    ("code", '''
betas = [0.5 / s**2 for s in (1.0, 0.5, 0.28, 0.2, 0.14, 0.1, 0.07, 0.05, 0.035)]
rd = {name: pyrolik.rate_distortion(m, xt, betas, num_steps=steps, num_chains=chains, seed=4,
                                    kernel=kern, progress=False)
      for name, m in (("GAN", gan), ("VAE", vae))}
bd = pyrolik.distortion_bdmc(gan, 2 if smoke_test else 20, betas=betas,
                             check=[betas[6]] if smoke_test else [betas[3], betas[6]],
                             data_shape=(64,), num_steps=steps, num_chains=chains, seed=5,
                             kernel=kern, progress=False)
fig, ax = plt.subplots(figsize=(5.5, 3.8))
for name, c in rd.items():
    pyrolik.distortion.plot_rate_distortion(c, ax=ax, label=f"{name} (AIS, upper bound)",
                                            bdmc=bd if name == "GAN" else None)
bd.summary()[["sigma", "gap [nats]", "distortion (exact draws)", "rate lower", "rate upper"]]
'''),
    ("md", """
### A check against a closed form: the linear VAE

For a linear decoder $f(z) = Wz + b$ the rate-distortion curve is known exactly
(`LinearGaussian.rate_distortion`). The one-run points sit on or just above it.
"""),
    ("code", '''
lg = pyrolik_models.LinearGaussian.random(data_dim=20, latent_dim=4, s=0.3, seed=0)
xl = lg.sample(8 if smoke_test else 50, torch.Generator().manual_seed(0)).float()
lbetas = torch.logspace(-1.5, 2.5, 9).tolist()
lin = pyrolik.rate_distortion(lg, xl, lbetas, num_steps=steps // 4 if not smoke_test else steps,
                              num_chains=chains, seed=0, kernel=kern, progress=False)
fine = torch.logspace(-2, 3, 60).tolist()
exact = [lg.rate_distortion(xl.double(), b) for b in fine]
fig, ax = plt.subplots(figsize=(5, 3.5))
pyrolik.distortion.plot_rate_distortion(
    lin, ax=ax, analytic=([float(d.mean()) for _, d in exact], [float(r.mean()) for r, _ in exact]))
'''),
    ("md", """
## Figure 3: the train-test gap opening up during training

`pyrolik.TrainingMonitor` is a callback for any training loop: every `every` epochs it evaluates
AIS+encoder and the IWAE bound on fixed train and test subsets, with the same seed each time, in
`eval()` mode, and times itself against the epochs. A VAE trained long on few digits overfits: the
train curves keep rising while the test curves flatten, so the train-test gap opens up. On test
digits the IWAE bound also falls further below AIS than on train digits: the encoder generalises
worse than the decoder (Wu et al. saw it overfit first).
"""),
    ("code", '''
from pyro.infer import SVI, Trace_ELBO
epochs, every = (4, 2) if smoke_test else (600, 50)
small = split.train[:200]
pyro.set_rng_seed(0)
model = pyrolik_models.build("digits-vae")
n_mon = 4 if smoke_test else 40
monitor = pyrolik.TrainingMonitor(model, small[:n_mon], split.test[:n_mon], guide=model.guide,
                                  every=every, methods=("ais", "iwae"), kernel=kern,
                                  num_steps=3 if smoke_test else 20, num_chains=2 if smoke_test else 4,
                                  num_samples=10 if smoke_test else 100)
with pyro.get_param_store().scope():
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())
    model.train()
    for epoch in range(epochs + 1):
        loss = sum(svi.step(b) for b in small[torch.randperm(len(small))].split(50)) if epoch else 0
        monitor(epoch, force=epoch == epochs, elbo=-loss / len(small))
model.eval()
monitor.plot(start_epoch=every)
print(monitor.describe_cost())
'''),
    ("md", """
## Everything exports

Curves export to xarray with `beta` as the dimension and `sigma` as a coordinate beside it (and
to ArviZ); the monitor's record is an `xarray.Dataset` over epochs.
"""),
    ("code", '''
ds = curves["GAN"].to_dataset()
print(ds["log_likelihood_mean"].swap_dims(beta="sigma").to_series().round(2))
monitor.to_dataset()
'''),
]
