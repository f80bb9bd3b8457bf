"""Cell sources of tutorial 05, loss-data curves for representations (``tutorials/build.py``).

Calls only the public API (``pyrolik.curves``, ``pyrolik.io.datasets``) and scikit-learn.
"""

from __future__ import annotations

REPRESENTATIONS = [
    ("md", r"""
# 05 — Is a representation any good? Loss-data curves with `pyrolik.curves`

A likelihood tells you how well a generative model fits the data; it does not tell you whether
the model's **latent representation** is useful for a downstream task. Whitney et al. (2020),
*Evaluating representations by the complexity of learning low-loss predictors*, answer with the
**loss-data curve**: train a probe (a linear classifier, or a small MLP) on `n` labelled examples
of the representation, measure its validation loss, and repeat over a grid of `n` and several
seeds. The usual measures of representation quality are all functions of that curve:

| measure | read off the curve |
| --- | --- |
| VA | the validation loss (or accuracy) at one `n` |
| MI proxy | the loss at the largest `n` |
| MDL | the area under the curve up to `n` (the online code length of `n` labels) |
| SDL | the area between the curve and a loss threshold `eps` |
| eps-SC | the smallest `n` whose loss is at most `eps` |

The point of the paper: VA and MDL depend on how much data you evaluate with, and the ranking of
two representations can **switch** as `n` grows; SDL and eps-SC say "not determined yet" until
there is enough data, and once they decide, they stick.

Here `pyrolik.curves` trains all `sizes x seeds` probes at once, as one batched model.
"""),
    ("code", r"""
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's notice in bare Jupyter
"""),
    ("code", r"""
import os
import time

import matplotlib
import numpy as np
import pandas as pd
import torch
from sklearn.cluster import KMeans

from pyrolik import curves
from pyrolik.io.datasets import find_data_dir, load_digits, load_mnist_test

%matplotlib inline
matplotlib.rcParams["figure.dpi"] = 72
smoke_test = "CI" in os.environ          # CI runs a shrunken version of this notebook
torch.set_num_threads(1)                  # small probes: one thread is fastest on a busy machine
torch.manual_seed(0)
pd.set_option("display.precision", 3)
NUM_SEEDS = 2 if smoke_test else 8        # probes per training-set size
NUM_SIZES = 5 if smoke_test else 8        # log-spaced training-set sizes
NUM_STEPS = 50 if smoke_test else 500     # Adam steps per probe
print(f"smoke_test={smoke_test}: {NUM_SIZES} sizes x {NUM_SEEDS} seeds, {NUM_STEPS} steps")
"""),
    ("md", r"""
## Data and representations

scikit-learn's 1,797 handwritten 8x8 digits, split once into a training pool (the probes draw
their `n` points from it) and a validation set. A representation is any function from data to
features: here the raw pixels, PCA onto 8 components, a random projection to 8 dimensions, and a
small *learned* code of our own, the soft assignment of each image to 30 k-means centroids (an
unsupervised, clustered, low-dimensional code, in the spirit of a VAE's latent). Unsupervised
representations are fitted on the training pool only. With a trained VAE you would pass its
encoder mean in the same way, e.g. `"VAE": lambda x: encoder(x)[0]`.
"""),
    ("code", r"""
x, y = load_digits(dtype=torch.float32)
train, valid = curves.train_valid_split(x, y, valid_size=0.2, seed=0)
print(f"training pool {tuple(train[0].shape)}, validation {tuple(valid[0].shape)}")

kmeans = KMeans(30, n_init=3, random_state=0).fit(train[0].numpy())
centroids = torch.as_tensor(kmeans.cluster_centers_, dtype=torch.float32)

def kmeans_code(images):
    # soft assignment to the 30 centroids: a 30-dimensional, clustered code
    return torch.softmax(-torch.cdist(images, centroids) ** 2 / 4.0, dim=1)

representations = {
    "raw pixels": curves.raw(),
    "PCA 8": curves.pca(train[0], 8),
    "random projection 8": curves.random_projection(8, seed=0),
    "k-means 30": kmeans_code,
}
"""),
    ("md", r"""
## Loss-data curves

`evaluate_representations` applies each representation to the same split and, for each, trains
`len(sizes) x NUM_SEEDS` linear probes at once: their parameters are stacked along a leading
dimension and trained with batched matrix products, with masks for the probes whose `n` is smaller
than the batch. The sizes are log-spaced from 10 to the pool size (`default_sizes`); every seed
fixes one data order and initialisation shared by all sizes.
"""),
    ("code", r"""
t0 = time.perf_counter()
sizes = curves.default_sizes(len(train[0]), NUM_SIZES)
print("training-set sizes:", sizes.tolist())
lc = curves.evaluate_representations(representations, train, valid, probe="linear", sizes=sizes,
                                     num_seeds=NUM_SEEDS, num_steps=NUM_STEPS, seed=0)
print(f"{len(lc)} curves x {NUM_SEEDS * len(lc['raw pixels'].sizes)} probes in "
      f"{time.perf_counter() - t0:.1f} s")
lc["raw pixels"].to_frame().head()
"""),
    ("md", r"""
## The measures, as a function of the evaluation size

`eps` is set as the source suggests: the raw representation's loss with the most data, plus a
slack for estimation error. `measures_table` then computes every measure as if only `n` points
were available, for each `n` of the grid; `inf` means *not determined with this much data*.
"""),
    ("code", r"""
eps = curves.epsilon_from_baseline(lc["raw pixels"], slack=0.1)
print(f"epsilon = {eps:.3f} nats (raw pixels at n = {lc['raw pixels'].sizes[-1]}: "
      f"{curves.mi_proxy(lc['raw pixels']):.3f}, plus 0.1)")
table = curves.measures_table(lc, eps)
table.unstack("representation")[["va_loss", "mdl", "sdl", "eps_sc"]]
"""),
    ("md", r"""
Who wins at each evaluation size? `best_representation` gives each measure's verdict at each `n`.
For SDL and eps-SC the verdict is `None` (undecided) until the data decide it: eps-SC decides as soon as one
representation reaches `eps` (the others are known to need more than `n` points); SDL decides once
every undetermined representation's partial area (`sdl_partial`, a lower bound on its SDL) exceeds
the best determined SDL. Read each column down the `n` axis: a change of name means the verdict
depended on how much data the evaluation happened to use.
"""),
    ("code", r"""
curves.best_representation(table)
"""),
    ("code", r"""
fig = curves.plot_curves(lc, eps)
"""),
    ("md", r"""
What to look for (in the full run; the shrunken CI run trains too little to be read):

* **Left panel.** The low-dimensional codes learn faster at first or level off higher than the
  raw pixels; where two curves cross, their VA ranking switches.
* **VA and MDL** are functions of the evaluation size: their lines cross, so "which representation
  is better" depends on `n`. MDL grows without bound with `n`.
* **SDL and eps-SC** have no value until a representation's curve reaches `eps` (hollow markers
  show their lower bounds meanwhile); after that they are flat, and once a verdict is given it does
  not change. A representation that never reaches `eps` (PCA 8, the random projection) is never
  declared good at this threshold.
"""),
    ("md", r"""
### The same point on two synthetic curves

A `LossDataCurve` can also be built from arrays. Take a representation **A** that learns fast but
levels off at 0.5 nats (like a small VAE latent), `L_A(n) = 0.5 + 1/sqrt(n)`, and **B** that learns
slowly down to 0.05 nats, `L_B(n) = 0.05 + 4/sqrt(n)`, with `eps = 0.31` between the floors. VA
prefers A until `n ~ 44`, MDL until `n ~ 100`; SDL and eps-SC say nothing until B reaches `eps` at
`n = 256`, then name B for good (A never reaches `eps`).
"""),
    ("code", r"""
n = 2 ** np.arange(1, 15)
synthetic = [curves.LossDataCurve(n, 0.5 + 1.0 / np.sqrt(n), name="A"),
             curves.LossDataCurve(n, 0.05 + 4.0 / np.sqrt(n), name="B")]
fig = curves.plot_curves(synthetic, 0.31)
curves.best_representation(curves.measures_table(synthetic, 0.31)).T
"""),
    ("md", r"""
## Riemann rules bracket the area

The paper's MDL is a sum over *every* training-set size, `sum_{i<=n} L(i)`; on a grid we charge
each block `(n_{j-1}, n_j]` either the loss at its right end (default, as in the authors' Reprieve
library) or at its left end (the online block code of Voita & Titov, with `log K` for the first
block). For a non-increasing curve the two bracket the exact sum.
"""),
    ("code", r"""
pd.DataFrame({
    name: {"MDL right (lower)": curves.mdl(c), "MDL left (upper)": curves.mdl(c, rule="left"),
           f"SDL right, eps={eps:.2f}": curves.sdl(c, eps),
           "eps-SC (grid)": curves.epsilon_sample_complexity(c, eps),
           "eps-SC (interpolated)": curves.epsilon_sample_complexity(c, eps, interpolate=True)}
    for name, c in lc.items()
}).T
"""),
    ("md", r"""
## A small MLP probe

The measures depend on the learning algorithm as well as on the representation. With a one-hidden
layer MLP probe (64 units) the curves move down, and nonlinear information in a representation
becomes usable.
"""),
    ("code", r"""
lc_mlp = curves.evaluate_representations(representations, train, valid, probe="mlp", hidden=64,
                                         sizes=sizes, num_seeds=NUM_SEEDS, num_steps=NUM_STEPS,
                                         seed=0)
eps_mlp = curves.epsilon_from_baseline(lc_mlp["raw pixels"], slack=0.1)
curves.measures_table(lc_mlp, eps_mlp, ns=[lc_mlp["raw pixels"].sizes[-1]])
"""),
    ("md", r"""
## The MNIST test set, when present

pyrolik never downloads data: `find_data_dir()` looks in `$PYROLIK_DATA` (or a folder you pass)
and returns `None` when the file is absent, and this section is then skipped. The 10,000 test
images are split into an 8,000-image training pool and 2,000 validation images.
"""),
    ("code", r"""
data_dir = find_data_dir()
if data_dir is None:
    print("MNIST test set not found (set PYROLIK_DATA to the folder holding mnist_test.npz): skipped")
else:
    images, labels = load_mnist_test(data_dir)
    keep = 3000 if smoke_test else len(images)
    xm = torch.as_tensor(images[:keep], dtype=torch.float32) / 255.0
    ym = torch.as_tensor(labels[:keep].astype(np.int64))
    mtrain, mvalid = curves.train_valid_split(xm, ym, valid_size=0.2, seed=0)
    mreps = {"raw pixels": curves.raw(), "PCA 16": curves.pca(mtrain[0], 16),
             "random projection 16": curves.random_projection(16)}
    t0 = time.perf_counter()
    msizes = curves.default_sizes(len(mtrain[0]), NUM_SIZES)
    lcm = curves.evaluate_representations(mreps, mtrain, mvalid, sizes=msizes,
                                          num_seeds=NUM_SEEDS, num_steps=NUM_STEPS, seed=0)
    print(f"MNIST-test curves in {time.perf_counter() - t0:.1f} s")
    eps_m = curves.epsilon_from_baseline(lcm["raw pixels"], slack=0.1)
    fig = curves.plot_curves(lcm, eps_m)
    display(curves.measures_table(lcm, eps_m, ns=[lcm["raw pixels"].sizes[-1]]))
"""),
    ("md", r"""
## Summary

* `curves.evaluate_representations(representations, train, valid, probe=...)` gives one
  `LossDataCurve` per representation, with all probes trained as one batched model.
* `curves.measures_table(curves, eps, ns)` gives VA, MDL, SDL and eps-SC at each evaluation size;
  `best_representation` the verdicts; `plot_curves` the picture.
* Prefer SDL or eps-SC, with `eps` from `epsilon_from_baseline`, when comparing representations:
  they report *not determined* rather than a verdict that flips with the amount of data.

See `docs/curves.md` for the formulas.
"""),
]
