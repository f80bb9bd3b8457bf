"""``pyrolik sigma-curve``, ``rate-distortion`` and ``distortion-bdmc``: the API's numbers, in files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pyrolik
from pyrolik.app import cli
from pyrolik.io.export import load as load_result
from tests import scale_models as sm

MODEL = "tests.scale_models:model"
FAST = ["--num-steps", "6", "--num-chains", "2", "--num-leapfrog", "2", "-q"]
KERNEL = pyrolik.HMC(num_leapfrog=2)


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, sm.sample(4).numpy())
    return path


def run(argv, capsys):
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_sigma_curve_command(tmp_path, data, capsys, seed):
    out = tmp_path / "curve.nc"
    status, quiet, err = run(["sigma-curve", MODEL, "--data", data, "--sigmas", "0.2,0.5,1",
                              "--seed", seed, "-o", out, *FAST], capsys)
    assert status == 0, err
    # -q silences progress only (as the other commands): the fixed-width table is printed
    assert "log p_sigma(x) [nats]" in quiet and "wrote" in quiet
    assert max(len(line) for line in quiet.split("best fixed sigma")[0].splitlines()) <= 80
    x = torch.from_numpy(np.load(data))
    api = pyrolik.sigma_curve(sm.model, x, [0.2, 0.5, 1.0], num_steps=6, num_chains=2,
                              kernel=KERNEL, seed=seed, progress=False)
    got = load_result(out)
    assert isinstance(got, pyrolik.distortion.DistortionCurve)
    assert torch.equal(got.log_weights, api.log_weights)
    torch.testing.assert_close(got.log_likelihood, api.log_likelihood)
    status, text, _ = run(["summary", out], capsys)
    assert status == 0 and "log p_sigma(x) [nats]" in text
    # --per-example: one row per (sigma, example), the file's numbers
    status, text, _ = run(["summary", out, "--per-example"], capsys)
    rows = [line.split() for line in text.splitlines()[-4 * 3:]]
    assert status == 0 and "log_likelihood  distortion" in text and len(rows) == 12
    assert float(rows[-1][-3]) == pytest.approx(float(got.log_likelihood[-1, -1]), abs=1e-5)
    # printed: the curve, the best fixed sigma and Table 3 with its warning
    status, text, _ = run(["sigma-curve", MODEL, "--data", data, "--sigmas", "0.2,0.5,1",
                           "--fixed-sigma", "0.5", "-o", out, "--overwrite",
                           *[a for a in FAST if a != "-q"]], capsys)
    assert status == 0
    assert "best fixed sigma on these data" in text and "fixed sigma = 0.5" in text
    assert "not a generative model" in text


def test_sigma_curve_command_with_a_tolerance(tmp_path, data, capsys, seed):
    """``--tolerance`` chooses the base steps as ``sigma_curve(num_steps=Tolerance)`` does; the file keeps
    the search."""
    import warnings

    out = tmp_path / "tol.nc"
    argv = ["--tolerance", "3", "--max-steps", "50", "--num-chains", "2", "--num-leapfrog", "2",
            "--seed", seed, "-q"]
    status, _, err = run(["sigma-curve", MODEL, "--data", data, "--sigmas", "0.5,1", "-o", out,
                          *argv], capsys)
    assert status == 0, err
    x = torch.from_numpy(np.load(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyrolik.BudgetWarning)
        api = pyrolik.sigma_curve(sm.model, x, [0.5, 1.0],
                                  num_steps=pyrolik.Tolerance(3.0, max_steps=50),
                                  num_chains=2, kernel=KERNEL, seed=seed, progress=False)
    got = load_result(out)
    assert torch.equal(got.log_weights, api.log_weights)
    assert got.budget is not None and got.budget.num_steps == api.budget.num_steps
    status, _, err = run(["sigma-curve", MODEL, "--data", data, "--sigmas", "0.5,1", "-o", out,
                          "--overwrite", "--max-steps", "50", *FAST], capsys)
    assert status == 1 and "--max-steps caps the search of --tolerance" in err


def test_rate_distortion_command_with_a_user_distortion(tmp_path, data, capsys, seed):
    (tmp_path / "dist.py").write_text("def l1(x, x_hat):\n    return (x - x_hat).abs()\n")
    out = tmp_path / "rd.nc"
    status, _, err = run(["rate-distortion", MODEL, "--data", data, "--betas", "0.5,4",
                          "--distortion", tmp_path / "dist.py:l1", "--seed", seed, "-o", out,
                          *FAST], capsys)
    assert status == 0, err
    x = torch.from_numpy(np.load(data))
    api = pyrolik.rate_distortion(sm.model, x, [0.5, 4.0], distortion=lambda a, b: (a - b).abs(),
                                  num_steps=6, num_chains=2, kernel=KERNEL, seed=seed,
                                  progress=False)
    got = load_result(out)
    assert got.mode == "user" and torch.equal(got.log_weights, api.log_weights)
    torch.testing.assert_close(got.rate, api.rate)


def test_distortion_bdmc_command(tmp_path, capsys, seed):
    out = tmp_path / "bd.nc"
    status, _, err = run(["distortion-bdmc", MODEL, "--sigmas", "0.3,1", "--check", "0.3",
                          "--num-examples", 3, "--data-shape", 5, "--seed", seed, "-o", out,
                          *FAST], capsys)
    assert status == 0, err
    got = load_result(out)
    api = pyrolik.distortion_bdmc(sm.model, 3, sigmas=[0.3, 1.0], check=[0.3], data_shape=(5,),
                                  num_steps=6, num_chains=2, kernel=KERNEL, seed=seed,
                                  progress=False)
    torch.testing.assert_close(got.lower, api.lower)
    torch.testing.assert_close(got.upper, api.upper)
    status, text, _ = run(["summary", out], capsys)
    assert status == 0 and "gap [nats]" in text
    status, text, _ = run(["summary", out, "--per-example"], capsys)
    last = text.splitlines()[-1].split()
    assert status == 0 and "lower     upper  distortion" in text
    assert float(last[-3]) == pytest.approx(float(got.lower[-1, -1]), abs=1e-5)


def test_errors_are_one_line(tmp_path, data, capsys):
    (tmp_path / "bern.py").write_text(
        "import pyro, pyro.distributions as dist\n"
        "def model(x):\n"
        "    with pyro.plate('data', x.shape[0]):\n"
        "        z = pyro.sample('z', dist.Normal(x.new_zeros(2), 1.).to_event(1))\n"
        "        pyro.sample('x', dist.Bernoulli(logits=z.sum(-1, keepdim=True).expand(x.shape))"
        ".to_event(1), obs=x)\n")
    np.save(tmp_path / "b.npy", np.zeros((3, 5)))
    status, _, err = run(["sigma-curve", tmp_path / "bern.py:model", "--data", tmp_path / "b.npy",
                          "--sigmas", "0.1", "-o", tmp_path / "c.nc", *FAST], capsys)
    assert status == 1 and "not Normal" in err and len(err.strip().splitlines()) == 1
    status, _, err = run(["sigma-curve", MODEL, "--data", data, "--sigmas", "0.1,-1",
                          "-o", tmp_path / "c.nc", *FAST], capsys)
    assert status == 1 and "positive finite" in err
    status, _, err = run(["distortion-bdmc", MODEL, "--sigmas", "0.3", "--check", "0.4",
                          "--num-examples", 2, "--data-shape", 5, "-o", tmp_path / "d.nc", *FAST],
                         capsys)
    assert status == 1 and "not a point of the grid" in err
