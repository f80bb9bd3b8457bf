"""The decoder-based models of models/: Pyro structure, known-answer densities, training,
checkpoints, the choice of sigma, and the shipped digits checkpoints."""

from __future__ import annotations

import importlib
import math

import pyro
import pyro.distributions as dist
import pyrolik_models as pm
import pytest
import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample

import pyrolik
import pyrolik.io.datasets

PAPER = ["vae-10", "vae-50", "gan-10", "gan-50", "gmmn-10", "gmmn-50", "iwae"]
DIGITS = ["digits-vae", "digits-gan", "digits-gmmn", "digits-iwae"]
KINDS = ["vae", "gan", "gmmn", "iwae"]



def submodule(name):
    """A module of models/ under the name the package was imported as (no duplicate classes)."""
    return importlib.import_module(f"{pm.__name__}.{name}")


def build(name, **kw):
    # GAN-50's 4096-wide discriminator (54M weights) plays no part in the Pyro program
    if name == "gan-50":
        kw.setdefault("discriminator_hidden", None)
    return pm.build(name, **kw)


def data_for(model, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, model.data_dim, generator=g)
    return torch.bernoulli(x, generator=g) if model.kind == "iwae" else x


def trace(fn, *args, **kwargs):
    tr = poutine.trace(fn).get_trace(*args, **kwargs)
    tr.compute_log_prob()
    return tr


def latent_sites(tr):
    return {k for k in tr.stochastic_nodes if not site_is_subsample(tr.nodes[k])}


def plate_frames(site):
    return {f.name: (f.size, f.dim) for f in site["cond_indep_stack"]}


# --- structure -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PAPER + DIGITS)
def test_model_structure(name):
    model = build(name)
    n = 3
    x = data_for(model, n)
    tr = trace(model, x)
    assert latent_sites(tr) == {"z"}
    assert set(tr.observation_nodes) == {"x"}
    for site in ("z", "x"):
        assert plate_frames(tr.nodes[site]) == {"data": (n, -1)}
        assert tr.nodes[site]["log_prob"].shape == (n,)
    assert tr.nodes["z"]["value"].shape == (n, model.latent_dim)
    assert model.latent_dim == int(name.split("-")[1]) if name[-1].isdigit() else True
    assert model.data_dim == (64 if name.startswith("digits") else 784)
    # the decoder is registered with pyro.module under "decoder"
    assert any(k.startswith("decoder$$$") for k, s in tr.nodes.items() if s["type"] == "param")
    mean = model.decode(tr.nodes["z"]["value"])
    assert mean.shape == (n, model.data_dim)
    assert (mean >= 0).all() and (mean <= 1).all()


def test_paper_architectures():
    """Layer widths and activations of Wu et al. (2017), section 5.2 and appendix A."""
    def widths(net):
        return [m.out_features for m in net if isinstance(m, torch.nn.Linear)]

    def acts(net):
        return {type(m).__name__ for m in net if not isinstance(m, torch.nn.Linear)}

    for kind in ("vae", "gan", "gmmn"):
        small, large = build(f"{kind}-10"), build(f"{kind}-50")
        assert [small.decoder[0].in_features, *widths(small.decoder)] == [10, 64, 256, 256, 1024,
                                                                           784]
        assert [large.decoder[0].in_features, *widths(large.decoder)] == [50, 1024, 1024, 1024,
                                                                           784]
        hidden = "ReLU" if kind == "gmmn" else "Tanh"
        assert acts(small.decoder) == {hidden, "Sigmoid"}
        assert isinstance(small.decoder[-1], torch.nn.Sigmoid)
    assert widths(build("vae-10").encoder.net) == [256, 64, 20]
    assert widths(build("vae-50").encoder.net) == [1024, 1024, 1024, 100]
    assert widths(build("gan-10").discriminator) == [512, 256, 1]
    iwae = build("iwae")
    assert [iwae.decoder[0].in_features, *widths(iwae.decoder)] == [50, 200, 200, 784]
    assert acts(iwae.decoder) == {"Tanh"}  # linear last layer: Bernoulli logits
    assert widths(iwae.encoder.net) == [200, 200, 100]


@pytest.mark.parametrize("name", ["vae-10", "vae-50", "iwae", "digits-vae", "digits-iwae"])
def test_guide_structure(name):
    model = build(name)
    x = data_for(model, 4)
    kwargs = {} if model.kind == "iwae" else {"sigma": 0.1}  # same signature as the model
    tr = trace(model.guide, x, **kwargs)
    assert latent_sites(tr) == {"z"}
    assert not tr.observation_nodes
    assert plate_frames(tr.nodes["z"]) == {"data": (4, -1)}
    assert tr.nodes["z"]["value"].shape == (4, model.latent_dim)
    assert any(k.startswith("encoder$$$") for k, s in tr.nodes.items() if s["type"] == "param")
    # eval mode: the guide is deterministic in x (dropout off), so its density is reproducible
    z = tr.nodes["z"]["value"]
    again = trace(poutine.condition(model.guide, {"z": z}), x, **kwargs)
    torch.testing.assert_close(again.nodes["z"]["log_prob"], tr.nodes["z"]["log_prob"])


@pytest.mark.parametrize("name", DIGITS)
def test_observation_density_known_answer(name):
    """log p(x | z) and log p(z) equal the textbook formulas at the decoder's output."""
    model = build(name)
    x = data_for(model, 5)
    z = torch.randn(5, model.latent_dim, generator=torch.Generator().manual_seed(1))
    sigma = 0.07
    kwargs = {} if model.kind == "iwae" else {"sigma": sigma}
    tr = trace(poutine.condition(model, {"z": z}), x, **kwargs)
    log_prior = (-0.5 * z**2 - 0.5 * math.log(2 * math.pi)).sum(-1)
    torch.testing.assert_close(tr.nodes["z"]["log_prob"], log_prior, rtol=0, atol=1e-10)
    if model.kind == "iwae":
        p = model.decode(z)
        expected = (x * torch.log(p) + (1 - x) * torch.log1p(-p)).sum(-1)
        tol = 1e-8
    else:
        mu = model.decode(z)
        expected = (-0.5 * ((x - mu) / sigma) ** 2 - math.log(sigma)
                    - 0.5 * math.log(2 * math.pi)).sum(-1)
        tol = 1e-10
    torch.testing.assert_close(tr.nodes["x"]["log_prob"], expected, rtol=0, atol=tol)


@pytest.mark.parametrize("name", ["digits-vae", "digits-gan", "digits-gmmn", "digits-iwae"])
def test_rows_are_independent(name):
    """Chains are folded into the batch: changing row j of z leaves row i's density alone."""
    model = build(name)
    x = data_for(model, 6)
    z = torch.randn(6, model.latent_dim, generator=torch.Generator().manual_seed(2))
    z2 = z.clone()
    z2[3] += 1.0

    def log_joint(zz):
        tr = trace(poutine.condition(model, {"z": zz}), x)
        return tr.nodes["z"]["log_prob"] + tr.nodes["x"]["log_prob"]

    a, b = log_joint(z), log_joint(z2)
    keep = torch.arange(6) != 3
    torch.testing.assert_close(a[keep], b[keep], rtol=0, atol=0)
    assert a[3] != b[3]
    # the same holds for the gradient with respect to z, which AIS uses
    zg = z.clone().requires_grad_()
    (g,) = torch.autograd.grad(log_joint(zg)[0], zg)
    assert (g[1:] == 0).all() and (g[0] != 0).any()


def test_sigma_keyword_and_default():
    model = build("digits-gan", sigma=0.2)
    x = data_for(model, 3)
    z = torch.randn(3, model.latent_dim)
    cond = poutine.condition(model, {"z": z})
    default = trace(cond, x).nodes["x"]["fn"]
    given = trace(cond, x, sigma=0.05).nodes["x"]["fn"]
    assert (default.base_dist.scale == 0.2).all()
    assert (given.base_dist.scale == 0.05).all()
    tensor_sigma = trace(cond, x, sigma=torch.tensor(0.05)).nodes["x"]["log_prob"]
    torch.testing.assert_close(tensor_sigma, trace(cond, x, sigma=0.05).nodes["x"]["log_prob"])


def test_event_shape_images_and_mixed_dtypes():
    """x may be (N, 8, 8); a float32 model evaluates float64 data in float64."""
    model = build("digits-vae")
    x = data_for(model, 4)
    z = torch.randn(4, model.latent_dim)
    flat = trace(poutine.condition(model, {"z": z}), x).nodes["x"]["log_prob"]
    img = trace(poutine.condition(model, {"z": z}), x.reshape(4, 8, 8)).nodes["x"]["log_prob"]
    torch.testing.assert_close(flat, img, rtol=0, atol=1e-12)
    model32 = build("digits-vae").float()
    model32.load_state_dict(model.state_dict())
    lp32 = trace(poutine.condition(model32, {"z": z}), x).nodes["x"]["log_prob"]
    assert lp32.dtype == torch.float64
    torch.testing.assert_close(lp32, flat, rtol=1e-4, atol=1e-3)


def test_bad_input_raises():
    model = build("digits-vae")
    with pytest.raises(ValueError, match="values per example"):
        model(torch.rand(3, 65))
    with pytest.raises(ValueError, match="values per example"):
        model(torch.rand(64))
    with pytest.raises(TypeError, match="floating"):
        model(torch.ones(3, 64, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.Tensor"):
        model([[0.5] * 64])
    with pytest.raises(ValueError, match="positive"):
        model(torch.rand(3, 64), sigma=0.0)
    with pytest.raises(ValueError, match="scalar"):
        model(torch.rand(3, 64), sigma=torch.ones(2))
    with pytest.raises(TypeError, match="sigma"):
        model(torch.rand(3, 64), sigma="0.1")
    with pytest.raises(ValueError, match="unknown model"):
        pm.build("vae-20")
    with pytest.raises(ValueError, match="activation"):
        pm.VAE((2, 3, 4), activation="swish")
    with pytest.raises(ValueError, match="positive"):
        pm.GMMN((2, 0, 4))
    with pytest.raises(ValueError, match="no discriminator"):
        build("digits-gan").drop_discriminator().discriminate(torch.rand(2, 64))


def test_sample_ranges():
    g = torch.Generator().manual_seed(0)
    gan = build("digits-gan")
    mean = gan.sample(50, g)
    assert mean.shape == (50, 64) and mean.min() >= 0 and mean.max() <= 1
    noisy = gan.sample(50, g, noise=True, sigma=0.1)
    assert noisy.shape == (50, 64)
    iwae = build("digits-iwae")
    draws = iwae.sample(50, g, noise=True)
    assert set(draws.unique().tolist()) <= {0.0, 1.0}
    with pytest.raises(ValueError, match="num_samples"):
        gan.sample(0)


# --- MMD ------------------------------------------------------------------------------------

def test_mmd_known_answers():
    bw = (0.5, 2.0)
    x = torch.randn(7, 3)
    assert float(pm.mmd2(x, x, bw)) == pytest.approx(0.0, abs=1e-12)
    a, b = torch.zeros(1, 3), torch.tensor([[1.0, 2.0, 2.0]])  # squared distance 9
    expected = 2 * sum(1 - math.exp(-9 / (2 * s**2)) for s in bw)
    assert float(pm.mmd2(a, b, bw)) == pytest.approx(expected, rel=1e-12)
    mmd = submodule("training.mmd")
    assert mmd.default_bandwidths(784) == pytest.approx(mmd.GMMN_BANDWIDTHS)
    assert mmd.default_bandwidths(196) == pytest.approx([s / 2 for s in mmd.GMMN_BANDWIDTHS])
    with pytest.raises(ValueError, match="bandwidths"):
        pm.mmd2(a, b, ())
    with pytest.raises(ValueError, match="same number"):
        pm.mmd2(a, torch.zeros(1, 4), bw)


# --- training --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def digits():
    x, _ = pyrolik.io.datasets.load_digits(dequantize_seed=0, dtype=torch.float64)
    return x[:200]


def test_train_vae_decreases_loss_and_is_reproducible(digits, seed):
    runs = []
    for _ in range(2):
        pyro.set_rng_seed(seed)
        model = build("digits-vae")
        h = pm.train_vae(model, digits, num_epochs=8, batch_size=50, lr=3e-3, seed=seed + 1,
                         valid=digits[:40])
        runs.append((model, h))
    (model, h), (model2, h2) = runs
    assert h.losses[-1] < h.losses[0] - 10  # nats per example
    assert h.valid_losses[-1] < h.valid_losses[0]
    assert h.losses == h2.losses
    torch.testing.assert_close(model.state_dict(), model2.state_dict(), rtol=0, atol=0)
    assert not model.training  # handed back in eval mode
    assert h.num_steps == 8 * 4 and len(h.losses) == 8


def test_train_iwae_objective(digits, seed):
    binary = torch.bernoulli(digits, generator=torch.Generator().manual_seed(seed))
    pyro.set_rng_seed(seed)
    model = build("digits-iwae")
    h = pm.train_vae(model, binary, num_epochs=6, batch_size=50, objective="iwae",
                     num_particles=5, seed=seed)
    assert h.objective == "iwae"
    assert h.losses[-1] < h.losses[0] - 3
    with pytest.raises(ValueError, match="Bernoulli"):
        pm.train_vae(model, binary, num_epochs=1, sigma=0.1)
    with pytest.raises(ValueError, match="objective"):
        pm.train_vae(model, binary, num_epochs=1, objective="renyi")


def test_iwae_objective_is_per_example(seed):
    """RenyiELBO(alpha=0) is the IWAE bound, with the log-mean-exp per example.

    With the exact posterior as the guide every weight equals p(x): the loss is -sum log p(x)
    exactly. With the prior as the guide and K = 2000 samples per example, the per-example IWAE
    bound is within Monte Carlo error of sum log p(x), while a log-mean-exp over whole-batch
    weights would be pinned near the ELBO, many nats lower.
    """
    lg = pm.LinearGaussian.random(data_dim=3, latent_dim=1, s=0.7, seed=3)
    x = lg.sample(40, torch.Generator().manual_seed(0))
    exact = float(lg.exact_log_marginal(x).sum())
    loss = pm.make_elbo("iwae", 7).loss(lg, lg.exact_guide, x)
    assert loss == pytest.approx(-exact, abs=1e-8)

    def prior_guide(x):
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.Normal(x.new_zeros(1), 1.0).to_event(1))

    pyro.set_rng_seed(seed)
    iwae_bound = -pm.make_elbo("iwae", 2000).loss(lg, prior_guide, x)
    elbo = -pm.make_elbo("elbo", 2000).loss(lg, prior_guide, x)
    assert exact - elbo > 20  # the test can tell the two apart
    assert iwae_bound <= exact + 0.5 and exact - iwae_bound < 0.1 * (exact - elbo)


def test_train_gan_learns(digits, seed):
    """Measured by MMD to held-out digits (a GAN's own losses need not decrease)."""
    x_train, x_test = digits[:150], digits[150:]
    bw = submodule("training.mmd").default_bandwidths(64)
    pyro.set_rng_seed(seed)
    model = build("digits-gan", discriminator_dropout=0.0)

    def distance():
        s = model.sample(200, torch.Generator().manual_seed(5))
        return float(pm.mmd2(s, x_test, bw))

    before = distance()
    h = pm.train_gan(model, x_train, num_epochs=60, batch_size=30, lr=1e-3, seed=seed)
    assert distance() < 0.8 * before
    assert set(h.extra) == {"generator", "real_accuracy", "fake_accuracy"}
    assert all(0 <= a <= 1 for a in h.extra["real_accuracy"])
    assert not model.training
    h2 = pm.train_gan(model, x_train, num_epochs=1, generator_loss="minimax", seed=0)
    assert h2.objective == "gan-minimax" and math.isfinite(h2.losses[0])
    with pytest.raises(ValueError, match="generator_loss"):
        pm.train_gan(model, x_train, num_epochs=1, generator_loss="wasserstein")
    with pytest.raises(ValueError, match="no discriminator"):
        pm.train_gan(model.drop_discriminator(), x_train, num_epochs=1)


def test_train_gmmn_decreases_mmd(digits, seed):
    pyro.set_rng_seed(seed)
    model = build("digits-gmmn")
    h = pm.train_gmmn(model, digits, num_epochs=30, batch_size=100, lr=3e-3, seed=seed)
    assert h.losses[-1] < 0.5 * h.losses[0]
    h_sgd = pm.train_gmmn(model, digits, num_epochs=2, batch_size=100, lr=0.1, optimizer="sgd",
                          seed=0)
    assert h_sgd.objective == "gmmn-sgd"
    with pytest.raises(ValueError, match="optimizer"):
        pm.train_gmmn(model, digits, num_epochs=1, optimizer="lbfgs")


def test_training_leaves_rng_and_param_store_alone(digits):
    pyro.get_param_store().clear()
    pyro.param("users_param", torch.ones(2))
    model = build("digits-vae")
    state = torch.get_rng_state()
    pm.train_vae(model, digits[:50], num_epochs=1, batch_size=25, seed=0)
    assert torch.equal(torch.get_rng_state(), state)
    assert list(pyro.get_param_store().keys()) == ["users_param"]


def test_training_bad_input(digits):
    model = build("digits-vae")
    bad = digits[:10].clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        pm.train_vae(model, bad, num_epochs=1)
    with pytest.raises(ValueError, match="batch_size"):
        pm.train_vae(model, digits, num_epochs=1, batch_size=0)
    with pytest.raises(TypeError, match="num_epochs"):
        pm.train_vae(model, digits, num_epochs=1.5)
    with pytest.raises(ValueError, match="lr"):
        pm.train_vae(model, digits, num_epochs=1, lr=-1.0)
    with pytest.raises(TypeError, match="VAE or IWAE"):
        pm.train_vae(build("digits-gan"), digits, num_epochs=1)
    with pytest.raises(ValueError, match="values per example"):
        pm.train_gmmn(build("digits-gmmn"), torch.rand(5, 63), num_epochs=1)


# --- checkpoints ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", DIGITS)
def test_checkpoint_round_trip(name, tmp_path):
    model = build(name)
    path = pm.save(model, tmp_path / "m.pt", meta={"note": "test"}, dtype=None)
    back = pm.load(model.kind, path)
    assert type(back) is type(model) and not back.training
    assert back.config() == model.config()
    assert back.meta == {"note": "test"}
    x = data_for(model, 4)
    z = torch.randn(4, model.latent_dim)
    for m in (model, back):
        m.lp = trace(poutine.condition(m, {"z": z}), x).nodes["x"]["log_prob"]
    torch.testing.assert_close(back.lp, model.lp, rtol=0, atol=0)
    torch.testing.assert_close(back.state_dict(), model.state_dict(), rtol=0, atol=0)
    assert pm.load(None, path).kind == model.kind  # the file says what it holds
    # float32 storage (the default) and float32 loading
    small = pm.load(model.kind, pm.save(model, tmp_path / "f.pt"), dtype=torch.float32)
    assert small.param_dtype == torch.float32
    wrong = next(k for k in KINDS if k != model.kind)
    with pytest.raises(ValueError, match="holds"):
        pm.load(wrong, path)


def test_checkpoint_errors(tmp_path):
    gan = build("digits-gan", sigma=0.3).drop_discriminator()
    back = pm.load("gan", pm.save(gan, tmp_path / "g.pt"))
    assert back.discriminator is None and back.sigma == 0.3
    torch.save({"weights": torch.ones(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a models/ checkpoint"):
        pm.load("gan", tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError):
        pm.load("gan", tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="unknown kind"):
        pm.load("flow", tmp_path / "g.pt")
    with pytest.raises(TypeError, match="checkpoints store only"):
        pm.save(gan, tmp_path / "g2.pt", meta={"when": object()})
    meta = {"torch": torch.__version__, "curve": (1.0, 2), "t": torch.ones(2)}
    back = pm.load("gan", pm.save(gan, tmp_path / "g3.pt", meta=meta))
    assert back.meta["torch"] == str(torch.__version__) and back.meta["curve"] == [1.0, 2]
    with pytest.raises(TypeError, match="save expects"):
        pm.save(pm.LinearGaussian.random(), tmp_path / "lg.pt")


@pytest.mark.parametrize("kind", KINDS)
def test_shipped_digits_checkpoints(kind):
    path = pm.shipped_checkpoint(kind)
    assert path.stat().st_size < 1_000_000
    model = pm.load(kind)
    assert model.data_dim == 64 and model.param_dtype == torch.float64
    hist = model.meta["history"]
    assert hist["num_epochs"] >= 100
    if kind != "gan":  # a GAN's discriminator loss need not fall; the MMD check below covers it
        assert hist["losses"][-1] < hist["losses"][0]
    g = torch.Generator().manual_seed(0)
    samples = model.sample(200, g)
    assert samples.shape == (200, 64) and samples.min() >= 0 and samples.max() <= 1
    if kind != "iwae":
        assert model.sigma == model.meta["sigma_choice"]["chosen"]
        curve = model.meta["sigma_choice"]["mean_log_likelihood"]
        assert max(curve) == curve[model.meta["sigma_choice"]["sigmas"].index(model.sigma)]
    # trained: samples are much closer to held-out digits than an untrained model's
    data = submodule("training.train_digits").digits_split(binarize=kind == "iwae")
    bw = submodule("training.mmd").default_bandwidths(64)
    untrained = build(f"digits-{kind}").sample(200, torch.Generator().manual_seed(0))
    assert pm.mmd2(samples, data.test, bw) < 0.5 * pm.mmd2(untrained, data.test, bw)


# --- sigma ----------------------------------------------------------------------------------

def test_choose_sigma_linear_gaussian():
    """With the exact log-marginal as the estimator, the sigma that generated the data wins."""
    lg = pm.LinearGaussian.random(data_dim=6, latent_dim=2, s=0.5, seed=1)
    x = lg.sample(2000, torch.Generator().manual_seed(0))

    def exact(model, x, sigma):
        return pm.LinearGaussian(model.W, model.b, sigma).exact_log_marginal(x)

    choice = pm.choose_sigma(lg, x, [0.25, 0.4, 0.5, 0.63, 1.0], exact)
    assert choice.sigma == 0.5
    torch.testing.assert_close(choice.mean_log_likelihood[2], lg.exact_log_marginal(x).mean())
    assert choice.log_likelihood.shape == (5, 2000)
    torch.testing.assert_close(choice.stderr, choice.log_likelihood.std(1) / math.sqrt(2000))


def test_choose_sigma_trivial_estimator_and_errors():
    x = torch.zeros(4, 2)

    def peak(model, x, sigma):  # maximal at sigma = 0.1 for every example
        return -((torch.log(torch.tensor(sigma)) - math.log(0.1)) ** 2) * torch.ones(x.shape[0])

    assert pm.choose_sigma(None, x, (0.05, 0.1, 0.2), peak).sigma == 0.1
    with pytest.raises(ValueError, match="positive"):
        pm.choose_sigma(None, x, (0.1, -1.0), peak)
    with pytest.raises(ValueError, match="non-empty"):
        pm.choose_sigma(None, x, (), peak)
    with pytest.raises(ValueError, match="shape"):
        pm.choose_sigma(None, x, (0.1,), lambda m, x, s: torch.zeros(3))
    with pytest.raises(ValueError, match="non-finite"):
        pm.choose_sigma(None, x, (0.1,), lambda m, x, s: torch.full((4,), float("nan")))
    with pytest.raises(ValueError, match="2 examples"):
        pm.choose_sigma(None, x[:1], (0.1,), peak)
    with pytest.raises(TypeError, match="callable"):
        pm.choose_sigma(None, x, (0.1,), None)


# --- the estimators run on every model ------------------------------------------------------

@pytest.mark.parametrize("name", PAPER + DIGITS)
def test_importance_estimators_run(name):
    model = build(name)
    x = data_for(model, 2)
    lw = pyrolik.likelihood_weighting(model, x, num_samples=4, seed=0, progress=False)
    assert lw.log_likelihood.shape == (2,) and torch.isfinite(lw.log_likelihood).all()
    if hasattr(model, "guide"):
        r = pyrolik.iwae(model, x, model.guide, num_samples=4, seed=0, progress=False)
        assert r.log_likelihood.shape == (2,) and torch.isfinite(r.log_likelihood).all()


@pytest.mark.parametrize("name", PAPER + DIGITS)
def test_tiny_ais_runs(name):
    """STYLE.md section 9: a tiny AIS on every model (prior path, and the encoder path)."""
    model = build(name)
    x = data_for(model, 2)
    # a fixed step size keeps the paper-sized models fast; the digits ones use the pilot tuning
    kernel = pyrolik.HMC(num_leapfrog=2, step_size=0.01,
                         adapt="pilot" if name.startswith("digits") else None)
    r = pyrolik.ais(model, x, num_steps=3, num_chains=2, kernel=kernel, seed=0, progress=False)
    assert r.bound == "lower"
    assert r.log_likelihood.shape == (2,) and torch.isfinite(r.log_likelihood).all()
    assert r.log_weights.shape == (2, 2)
    if hasattr(model, "guide"):
        r = pyrolik.ais(model, x, num_steps=3, num_chains=2, kernel=kernel, init=model.guide,
                        seed=0, progress=False)
        assert torch.isfinite(r.log_likelihood).all()


def test_train_mnist_cli(tmp_path):
    """The paper-scale command line trains a reduced run and writes a loadable checkpoint."""
    if pyrolik.io.datasets.find_data_dir() is None:
        pytest.skip("MNIST not found: set PYROLIK_DATA to the folder holding mnist_test.npz")
    out = submodule("training.train_mnist").main(["gmmn-10", "--epochs", "1", "--max-train", "200",
                                          "--batch-size", "100", "--out", str(tmp_path / "g.pt")])
    model = pm.load("gmmn", out)
    assert model.data_dim == 784 and model.meta["history"]["num_steps"] == 2
    assert "8000/1000/1000" in model.meta["data"]


def test_the_example_model_is_evaluated_by_pyrolik(seed):
    """models/example.py, the model a reader copies: every estimator takes it as it stands, and
    BDMC sandwiches its log-likelihood on data simulated from it."""
    ex = submodule("example")
    dtype = next(ex.decoder.parameters()).dtype
    sim = pyrolik.simulate(ex.model, 4, data_shape=(ex.DATA,), seed=seed, dtype=dtype)
    assert sim.x.shape == (4, ex.DATA) and sim.latents["z"].shape == (4, ex.LATENT)
    b = pyrolik.bdmc(ex.model, sim, num_steps=200, num_chains=8, seed=seed, progress=False)
    se = float((b.lower.mcse**2 + b.upper.mcse**2).sum().sqrt()) / 4
    assert -4 * se <= b.gap <= 1.0  # upper above lower (within noise) and close to it
    iwae = pyrolik.iwae(ex.model, sim.x, ex.guide, num_samples=500, seed=seed, progress=False)
    lw = pyrolik.likelihood_weighting(ex.model, sim.x, num_samples=500, seed=seed, progress=False)
    for r in (iwae, lw):  # stochastic lower bounds: not above BDMC's upper bound beyond noise
        assert torch.isfinite(r.log_likelihood).all() and r.example_dim == "data"
        assert (r.log_likelihood <= b.upper.log_likelihood + 4 * (r.mcse**2 + b.upper.mcse**2)
                .sqrt()).all()


def test_pyproject_lists_every_subpackage():
    """A non-editable install ships only the packages pyproject names: every folder with an
    __init__.py under pyrolik/ and models/ (installed as pyrolik_models) must be listed."""
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for name, folder in config["package-dir"].items():
        for init in (root / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(root / folder).parts
            found.add(".".join((name, *rel)))
    assert found == listed
    assert "checkpoints/*.pt" in config["package-data"]["pyrolik_models"]
