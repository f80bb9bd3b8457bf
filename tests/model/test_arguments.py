"""Per-example arguments: repeated over chains, sliced with batches, named when they do not fit."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from torch import nn

import pyrolik
from pyrolik.model.target import make_target
from tests.helpers import assert_unbiased
from tests.idiom_helpers import exact_guide, exact_iwae

# -- per-example arguments ---------------------------------------------------------------------------
V = torch.tensor([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.0]], dtype=torch.float64)  # (D, C): a label's
# shift of the mean


def _conditional(lg):
    def model(x, y, shift=V):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ lg.W.T + lg.b + y @ shift.T, lg.s).to_event(1), obs=x)

    def guide(x, y, shift=V):
        exact_guide(lg)(x - y @ shift.T)

    return model, guide


def test_per_example_arguments_follow_their_rows(lg, tmp_path):
    y = nn.functional.one_hot(torch.tensor([0, 1, 1, 0, 1]), 2).double()
    x = lg.sample(5, torch.Generator().manual_seed(0)) + y @ V.T
    truth = lg.exact_log_marginal(x - y @ V.T)
    model, guide = _conditional(lg)
    for batch_size in (None, 2):
        exact_iwae(model, x, guide, truth, model_args=(y,), batch_size=batch_size)
        r = pyrolik.likelihood_weighting(model, x, num_samples=3000, model_kwargs={"y": y},
                                         batch_size=batch_size, seed=0, progress=False)
        assert_unbiased(r.log_weights, truth, min_ess_frac=0.01)
    exact = dict(num_steps=5, num_chains=3, init=guide, model_args=(y,), seed=0, progress=False)
    for batch_size in (None, 2):
        r = pyrolik.ais(model, x, batch_size=batch_size, **exact)
        torch.testing.assert_close(r.log_weights, truth.expand(3, -1), rtol=1e-9, atol=1e-9)
    plain = pyrolik.ais(model, x, num_steps=4, num_chains=2, model_args=(y,), batch_size=2,
                        seed=1, progress=False)
    with pyrolik.checkpoint(tmp_path / "run.ckpt", every=2):
        saved = pyrolik.ais(model, x, num_steps=4, num_chains=2, model_args=(y,), batch_size=2,
                            seed=1, progress=False)
    assert torch.equal(plain.log_weights, saved.log_weights)  # the checkpoint's fingerprint too
    sim = pyrolik.simulate(model, 5, data_shape=(3,), model_args=(y,), seed=0)
    assert sim.x.shape == (5, 3) and sim.latents["z"].shape == (5, 2)
    truth = lg.exact_log_marginal(sim.x - y @ V.T)
    r = pyrolik.reverse_ais(model, sim.x, sim.latents, batch_size=2, **exact)
    torch.testing.assert_close(r.log_likelihood, truth, rtol=1e-9, atol=1e-9)
    r = pyrolik.bdmc(model, sim, batch_size=2, **exact)
    for bound in (r.lower, r.upper):  # from the exact posterior both directions are exact
        torch.testing.assert_close(bound.log_likelihood, truth, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(bound.log_weights, bound.log_weights[:1].expand(3, -1))
    r = pyrolik.bdmc(model, 5, data_shape=(3,), batch_size=3, **exact)
    torch.testing.assert_close(r.lower.log_weights, truth.expand(3, -1), rtol=1e-9, atol=1e-9)


def test_per_example_arguments_are_named_when_they_do_not_fit(lg):
    y = nn.functional.one_hot(torch.tensor([0, 1, 1]), 2).double()
    x = lg.sample(3, torch.Generator().manual_seed(0)) + y @ V.T
    model, guide = _conditional(lg)
    with pytest.raises(ValueError, match=r"model_kwargs\['y'\] is marked per example but has 2 rows, "
                       "and x has 3 examples"):
        make_target(model, x, 2, model_kwargs={"y": pyrolik.model.per_example(y[:2])})
    # V is (3, 2): with 3 examples its leading dimension looks per example; the error says so
    with pytest.raises(ValueError, match=r"model_kwargs\['shift'\] of shape \(3, 2\) \(per example: "
                       r"its leading dimension is the number of examples\).*pyrolik.model.shared"):
        make_target(model, x, 2, model_kwargs={"y": y, "shift": V})
    truth = lg.exact_log_marginal(x - y @ V.T)
    exact_iwae(model, x, guide, truth, model_kwargs={"y": y, "shift": pyrolik.model.shared(V)})


def test_the_command_line_passes_per_example_arguments(tmp_path, capsys):
    import numpy as np

    from pyrolik.app import cli

    (tmp_path / "cond.py").write_text(
        "import pyro, pyro.distributions as dist, torch\n"
        "W = torch.tensor([[1.0, 0.5], [0.0, -1.0], [2.0, 0.3]])\n"
        "V = torch.tensor([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.0]])\n"
        "def model(x, y):\n"
        "    with pyro.plate('data', x.shape[0]):\n"
        "        z = pyro.sample('z', dist.Normal(x.new_zeros(2), 1.0).to_event(1))\n"
        "        loc = z @ W.T.to(x) + y.to(x) @ V.T.to(x)\n"
        "        pyro.sample('x', dist.Normal(loc, 0.7).to_event(1), obs=x)\n")
    y = np.eye(2)[[0, 1, 1, 0, 1]]
    x = np.random.default_rng(0).normal(size=(5, 3)) + y @ np.array([[1, -1], [0.5, 2], [-2, 0]]).T
    np.savez(tmp_path / "d.npz", x=x, y=y)
    out = tmp_path / "r.nc"
    status = cli.main(["evaluate", f"{tmp_path / 'cond.py'}:model", "--data", str(tmp_path / "d.npz"),
                       "--data-key", "x", "--per-example", "y=y", "-e", "lw", "--num-samples", "9",
                       "--batch-size", "2", "--seed", "0", "-q", "-o", str(out)])
    assert status == 0, capsys.readouterr().err
    import importlib.util

    spec = importlib.util.spec_from_file_location("cond", tmp_path / "cond.py")
    cond = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cond)
    api = pyrolik.likelihood_weighting(cond.model, torch.from_numpy(x), num_samples=9,
                                       model_kwargs={"y": torch.from_numpy(y)}, batch_size=2,
                                       seed=0, progress=False)
    assert torch.equal(pyrolik.load(out).log_weights, api.log_weights)
    status = cli.main(["evaluate", f"{tmp_path / 'cond.py'}:model", "--data", str(tmp_path / "d.npz"),
                       "--data-key", "x", "--per-example", "y=x", "--limit", "4", "-e", "lw", "-q",
                       "-o", str(tmp_path / "s.nc")])
    assert status == 1  # y=x: an array of the data file, but not the labels the model needs
    assert "tensor arguments: model_kwargs['y'] of shape (4, 3) (marked per example)" in \
        capsys.readouterr().err


def test_csl_and_the_chains_follow_per_example_arguments(lg):
    y = nn.functional.one_hot(torch.tensor([0, 1, 1, 0]), 2).double()
    x = lg.sample(4, torch.Generator().manual_seed(0)) + y @ V.T
    model, guide = _conditional(lg)
    h = {"z": torch.randn(6, 2, generator=torch.Generator().manual_seed(1))}
    got = pyrolik.csl(model, x, h, model_args=(y,), progress=False)
    want = pyrolik.csl(lg, x - y @ V.T, h, progress=False)
    torch.testing.assert_close(got.log_weights, want.log_weights)
    with pytest.raises(ValueError, match=r"prior samples shared by all examples cannot follow the "
                       r"per-example argument\(s\) \['model_args\[0\]'\]"):
        pyrolik.infer.prior_samples(model, x, 3, model_args=(y,))
    chain = pyrolik.infer.encoder_decoder(model, guide, model_args=(pyrolik.model.per_example(y),))
    r = pyrolik.infer.biased_csl(model, x, chain, num_chains=2, num_steps=3, seed=0,
                           model_args=(y,))
    assert torch.isfinite(r.log_likelihood).all()
