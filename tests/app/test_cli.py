"""The pyrolik command line: results equal to the API's, model/data/weights loading, one-line errors,
complete help, checkpoint and resume, summary, demo."""

from __future__ import annotations

import sys
import types
import warnings

import numpy as np
import pytest
import torch

import pyrolik
from pyrolik.app import cli
from pyrolik.execution.checkpoint import Checkpoint
from tests import scale_models as sm

MODEL = "tests.scale_models:model"
FAST = ["--num-steps", "6", "--num-chains", "2", "--num-leapfrog", "2", "-q"]


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, sm.sample(5).numpy())
    return path


def run(argv, capsys):
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_evaluate_writes_the_results_of_the_api(tmp_path, data, capsys, seed):
    out = tmp_path / "res.nc"
    status, _, err = run(["evaluate", MODEL, "--data", data, "-e", "ais,lw", "--num-samples", 7,
                          "--batch-size", 2, "--seed", seed, "-o", out, *FAST], capsys)
    assert status == 0, err
    x = torch.from_numpy(np.load(data))
    api = pyrolik.ais(sm.model, x, num_steps=6, num_chains=2, batch_size=2, seed=seed,
                      kernel=pyrolik.HMC(num_leapfrog=2), progress=False)
    got = pyrolik.load(tmp_path / "res.ais.nc")
    assert torch.equal(got.log_weights, api.log_weights) and got.bound == "lower"
    lw = pyrolik.likelihood_weighting(sm.model, x, num_samples=7, batch_size=2, seed=seed,
                                      progress=False)
    assert torch.equal(pyrolik.load(tmp_path / "res.lw.nc").log_likelihood, lw.log_likelihood)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.ais.nc", "res.lw.nc", "x.npy"]
    # existing outputs are not overwritten by accident
    status, _, err = run(["evaluate", MODEL, "--data", data, "-o", tmp_path / "res.ais.nc", *FAST],
                         capsys)
    assert status == 1 and "exists: pass --overwrite" in err

    status, text, _ = run(["summary", tmp_path / "res.ais.nc", tmp_path / "res.lw.nc",
                           "--per-example", "-q"], capsys)  # -q as every command takes it
    assert status == 0
    assert "log p(x) [nats]" in text and "likelihood_weighting" in text
    assert f"{api.mean:.3f}" in text and len(text.splitlines()) > 10


def test_evaluate_resamples_as_the_api_does(tmp_path, data, capsys, seed):
    out = tmp_path / "smc.nc"
    status, _, err = run(["evaluate", MODEL, "--data", data, "--resample", "0.9", "--islands",
                          "1", "--seed", seed, "-o", out, *FAST], capsys)
    assert status == 0, err
    x = torch.from_numpy(np.load(data))
    api = pyrolik.ais(sm.model, x, num_steps=6, num_chains=2, seed=seed, progress=False,
                      kernel=pyrolik.SMC(pyrolik.HMC(num_leapfrog=2), resample=0.9, islands=1))
    got = pyrolik.load(out)
    assert got.kernel.resample == 0.9 and got.kernel.islands == 1
    assert torch.equal(got.log_weights, api.log_weights)
    assert torch.equal(got.num_resampled, api.num_resampled)
    status, _, err = run(["evaluate", MODEL, "--data", data, "--resample", "none", "--seed", seed,
                          "-o", tmp_path / "ais.nc", *FAST], capsys)
    assert status == 0, err
    plain = pyrolik.load(tmp_path / "ais.nc")
    assert plain.kernel.resample is None and plain.num_resampled is None


def test_evaluate_with_a_tolerance_is_the_api_with_one(tmp_path, data, capsys, seed):
    """``--tolerance`` chooses the steps as ``pyrolik.ais(num_steps=Tolerance)`` does, bit for bit, and the
    result file keeps how (``budget``)."""
    out = tmp_path / "tol.nc"
    argv = ["--tolerance", "2.0", "--max-steps", "50", "--num-chains", "2", "--num-leapfrog", "2",
            "--seed", seed, "-q"]
    status, _, err = run(["evaluate", MODEL, "--data", data, "-o", out, *argv], capsys)
    assert status == 0, err
    x = torch.from_numpy(np.load(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyrolik.BudgetWarning)  # the cap, or the real-data check
        api = pyrolik.ais(sm.model, x, num_steps=pyrolik.Tolerance(2.0, max_steps=50),
                          num_chains=2, seed=seed, kernel=pyrolik.HMC(num_leapfrog=2),
                          progress=False)
    got = pyrolik.load(out)
    assert torch.equal(got.log_weights, api.log_weights)
    assert got.budget is not None and got.budget.num_steps == api.budget.num_steps
    assert got.settings["num_steps"] == api.budget.num_steps


def test_a_warning_shown_while_running_is_not_repeated_after_the_table(tmp_path, data, capsys, seed):
    status, _, err = run(["evaluate", MODEL, "--data", data, "-o", tmp_path / "cap.nc", "--tolerance",
                          "0.0001", "--max-steps", "25", "--num-chains", "2", "--seed", seed, "-q"],
                         capsys)
    assert status == 0 and err.count("reached max_steps=25") == 1, err
    status, _, err = run(["summary", tmp_path / "cap.nc"], capsys)  # the file still says it
    assert status == 0 and err.count("reached max_steps=25") == 1, err


@pytest.mark.parametrize("extra, message", [
    (["--tolerance", "1", "--num-steps", "6"], "either --num-steps (a budget you choose) or --tolerance"),
    (["--max-steps", "50", "--num-steps", "6"], "--max-steps caps the search of --tolerance"),
])
def test_tolerance_errors_are_one_clear_line(tmp_path, data, capsys, extra, message):
    status, _, err = run(["evaluate", MODEL, "--data", data, "-o", tmp_path / "r.nc", "-q",
                          *extra], capsys)
    assert status == 1 and err.startswith("pyrolik: error: ") and message in err, err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["evaluate", MODEL, "--data", str(data), "-o", str(tmp_path / "r.nc"),
                  "--tolerance", "0"])
    assert exit_.value.code == 2 and "expected a positive number" in capsys.readouterr().err


MODEL_FILE = '''
import pyro, pyro.distributions as dist, torch
from torch import nn

DECODER = nn.Linear(2, 5).double()
LOADED = []

def model(x):
    decoder = pyro.module("decoder", DECODER)
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(decoder(z), 0.3).to_event(1), obs=x)

def guide(x):
    with pyro.plate("data", x.shape[0]):
        pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
'''


def test_model_file_weights_hook_and_guide(tmp_path, data, capsys):
    (tmp_path / "vae.py").write_text(MODEL_FILE + "\ndef load(path):\n"
                                     "    DECODER.load_state_dict(torch.load(path))\n"
                                     "    LOADED.append(path)\n")
    weights = torch.nn.Linear(2, 5).double()
    with torch.no_grad():
        weights.weight.copy_(sm.W)
        weights.bias.copy_(sm.B)
    torch.save(weights.state_dict(), tmp_path / "w.pt")
    status, _, err = run(["evaluate", tmp_path / "vae.py:model", "--data", data, "-e", "iwae",
                          "--guide", f"{tmp_path / 'vae.py'}:guide", "--weights",
                          tmp_path / "w.pt", "--num-samples", 9, "-o", tmp_path / "r.nc", "-q"],
                         capsys)
    assert status == 0, err
    module = sys.modules["pyrolik_user_vae"]
    assert module.LOADED == [str(tmp_path / "w.pt")] and not module.DECODER.training
    # with the loaded weights the file's model is the linear-Gaussian model: same numbers
    x = torch.from_numpy(np.load(data))
    api = pyrolik.iwae(sm.model, x, module.guide, num_samples=9, seed=0, progress=False)
    torch.testing.assert_close(pyrolik.load(tmp_path / "r.nc").log_likelihood, api.log_likelihood)

    (tmp_path / "nohook.py").write_text(MODEL_FILE)
    status, _, err = run(["evaluate", tmp_path / "nohook.py:model", "--data", data, "--weights",
                          tmp_path / "w.pt", "-o", tmp_path / "q.nc", *FAST], capsys)
    assert status == 1 and "define a function load(path)" in err


ERRORS = [
    (["evaluate", "tests.scale_models:nope"], "has no attribute 'nope'"),
    (["evaluate", "no/such/file.py:model"], "model file no/such/file.py does not exist"),
    (["evaluate", "no_such_module:model"], "cannot import module 'no_such_module'"),
    (["evaluate", "tests.scale_models"], "path/to/file.py:name"),
    (["evaluate", MODEL, "-e", "iwae"], "needs a guide: pass --guide"),
    (["evaluate", MODEL, "-e", "kde"], "kde needs --bandwidth"),
    (["evaluate", MODEL, "--ais-init", "guide"], "--ais-init guide needs --guide"),
    (["evaluate", MODEL, "--model-kwargs", "{sigma: 1}"], "--model-kwargs is not valid JSON"),
    (["evaluate", MODEL, "--model-kwargs", "[1]"], "must be a JSON object"),
    (["evaluate", MODEL, "--adapt", "online", "--mass-matrix"], "mass_matrix=True needs adapt"),
    (["evaluate", MODEL, "--momentum-persistence", "1.5"], "momentum_persistence must be a number"),
    (["evaluate", MODEL, "--resample", "1.5"], "resample must be a fraction in (0, 1]"),
    (["evaluate", MODEL, "--device", "cuda:7"], "no CUDA device"),
    (["evaluate", MODEL, "--data", "WIDE"], "matching the observed site"),
    (["evaluate", MODEL, "--data", "missing.npy"], "data file missing.npy does not exist"),
    (["evaluate", MODEL, "--data", "x.csv"], "does not exist"),
    (["evaluate", MODEL, "-o", "no/dir/r.nc"], "folder of the output"),
]


@pytest.mark.parametrize("argv,message", ERRORS)
def test_errors_are_one_clear_line(tmp_path, data, capsys, monkeypatch, argv, message):
    if "cuda:7" in argv and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    np.save(tmp_path / "wide.npy", np.zeros((3, 7)))
    monkeypatch.chdir(tmp_path)
    argv = [("wide.npy" if a == "WIDE" else a) for a in argv]
    if "--data" not in argv:
        argv += ["--data", str(data)]
    if "-o" not in argv:
        argv += ["-o", "r.nc"]
    status, out, err = run(argv + FAST, capsys)
    assert status == 1
    assert err.startswith("pyrolik: error: ") and len(err.strip().splitlines()) == 1, err
    assert message in err and "Traceback" not in err


def test_usage_errors_and_debug(tmp_path, data, capsys):
    for argv, message in [(["evaluate", MODEL, "--data", data], "-o/--output"),
                          (["evaluate", MODEL, "-o", "r.nc", "--data", data, "--num-chains", "0"],
                           "expected a positive integer, got 0"),
                          (["evaluate", MODEL, "-o", "r.nc", "--data", data, "-e", "ais,csl"],
                           "unknown estimator")]:
        with pytest.raises(SystemExit) as stop:
            cli.main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    with pytest.raises(ValueError, match="needs a guide"):
        cli.main(["evaluate", MODEL, "--data", str(data), "-o", str(tmp_path / "r.nc"), "-e",
                  "iwae", "--debug"])
    assert cli.main([]) == 2


def test_help_is_complete(capsys):
    parser = cli.build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert set(commands) == {"evaluate", "bdmc", "summary", "demo", "sigma-curve", "rate-distortion",
                             "distortion-bdmc"}
    for name, sub in commands.items():
        for action in sub._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"
        if name == "demo":
            continue
        with pytest.raises(SystemExit) as stop:
            cli.main([name, "--help"])
        text = capsys.readouterr().out
        assert stop.value.code == 0
        for action in sub._actions:
            for opt in action.option_strings:
                assert opt in text


def test_demo_is_called_lazily(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "pyrolik.app.demo",
                        types.SimpleNamespace(main=lambda argv: calls.append(argv) or 0))
    assert cli.main(["demo", "--fast", "x"]) == 0 and calls == [["--fast", "x"]]


def test_bdmc_command_matches_the_api(tmp_path, capsys, seed):
    status, text, err = run(["bdmc", MODEL, "--num-examples", 3, "--data-shape", 5, "--dtype",
                             "float64", "--num-steps", 6, "--num-chains", 2, "--num-leapfrog", 2,
                             "--seed", seed, "-o", tmp_path / "b.nc"], capsys)
    assert status == 0, err
    assert "BDMC gap" in text and "wrote" in text
    sim = pyrolik.simulate(sm.model, 3, data_shape=(5,), seed=seed, dtype=torch.float64)
    api = pyrolik.bdmc(sm.model, sim, num_steps=6, num_chains=2, seed=seed,
                       kernel=pyrolik.HMC(num_leapfrog=2), progress=False)
    got = pyrolik.load(tmp_path / "b.nc")
    assert torch.equal(got.lower.log_weights, api.lower.log_weights)
    assert torch.equal(got.upper.log_weights, api.upper.log_weights)


def test_record_every_is_an_option_of_evaluate_only(tmp_path, data, capsys, seed):
    """``--record-every`` sets the AIS trace's stride as ``record=`` does; ``pyrolik bdmc`` records
    its default trace and has no such option (argparse refuses it, exit status 2)."""
    status, _, err = run(["evaluate", MODEL, "--data", data, "--record-every", 3, "--seed", seed,
                          "-o", tmp_path / "r.nc", *FAST], capsys)
    assert status == 0, err
    x = torch.from_numpy(np.load(data))
    api = pyrolik.ais(sm.model, x, num_steps=6, num_chains=2, seed=seed, record=3,
                      kernel=pyrolik.HMC(num_leapfrog=2), progress=False)
    got = pyrolik.load(tmp_path / "r.nc")
    assert got.trace_steps.tolist() == [3, 6] == api.trace_steps.tolist()
    assert torch.equal(got.log_weights, api.log_weights)
    with pytest.raises(SystemExit) as stop:
        cli.main(["bdmc", MODEL, "--num-examples", "3", "--data-shape", "5", "--record-every", "3",
                  "-o", str(tmp_path / "b.nc"), *FAST])
    assert stop.value.code == 2
    assert "unrecognized arguments: --record-every" in capsys.readouterr().err


def test_checkpoint_resume_from_the_command_line(tmp_path, data, capsys, monkeypatch):
    ckpt = tmp_path / "run.ckpt"
    argv = ["evaluate", MODEL, "--data", data, "-o", tmp_path / "r.nc", "--batch-size", 2,
            "--checkpoint", ckpt, "--checkpoint-every", 2, *FAST]
    orig = Checkpoint.save_progress

    def interrupted(self, start, state):
        orig(self, start, state)
        if start == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(Checkpoint, "save_progress", interrupted)
    status, _, err = run(argv, capsys)
    assert status == 130 and "rerun the same command to resume" in err
    assert ckpt.exists() and not (tmp_path / "r.nc").exists()
    monkeypatch.undo()
    status, _, err = run(argv, capsys)
    assert status == 0, err
    assert not ckpt.exists() and not (tmp_path / "run.ckpt.batches").exists()
    x = torch.from_numpy(np.load(data))
    api = pyrolik.ais(sm.model, x, num_steps=6, num_chains=2, batch_size=2, seed=0,
                      kernel=pyrolik.HMC(num_leapfrog=2), progress=False)
    assert torch.equal(pyrolik.load(tmp_path / "r.nc").log_weights, api.log_weights)


def test_data_files(tmp_path):
    from pyrolik.app.loading import load_data

    x = np.arange(12, dtype=np.uint8).reshape(4, 3)
    np.savez(tmp_path / "d.npz", train=x, test=x[:2])
    with pytest.raises(ValueError, match="several arrays.*--data-key"):
        load_data(tmp_path / "d.npz")
    got = load_data(tmp_path / "d.npz", key="test")
    assert got.dtype == torch.float32 and got.shape == (2, 3)
    torch.save({"x": torch.ones(5, 2, dtype=torch.float64)}, tmp_path / "d.pt")
    got = load_data(tmp_path / "d.pt", limit=3)
    assert got.dtype == torch.float64 and got.shape == (3, 2)
    assert load_data(tmp_path / "d.pt", dtype="float32").dtype == torch.float32
    (tmp_path / "d.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="use one of .npy, .npz, .pt"):
        load_data(tmp_path / "d.csv")
    with pytest.raises(ValueError, match="has no array 'y'"):
        load_data(tmp_path / "d.npz", key="y")


def test_key_for_one_unnamed_array_is_refused(tmp_path):
    from pyrolik.app.loading import load_data, load_per_example

    x, lab = np.ones((4, 3), np.float32), np.arange(4.0)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "lab.npy", lab)
    torch.save(torch.ones(4, 3), tmp_path / "x.pt")
    for path in ("x.npy", "x.pt"):  # the key was ignored: the one array came back
        with pytest.raises(ValueError, match="one unnamed array, so the key 'k'.*--data-key"):
            load_data(tmp_path / path, key="k")
    for spec in ("lab=k", f"lab={tmp_path / 'lab.npy'}:k"):  # lab=k passed x itself as lab
        with pytest.raises(ValueError, match="names nothing.*NAME=PATH.npy"):
            load_per_example([spec], tmp_path / "x.npy", 4, None)
    got = load_per_example([f"lab={tmp_path / 'lab.npy'}"], tmp_path / "x.npy", 4, None)  # the fix
    assert np.array_equal(got["lab"].value.numpy(), lab)


def test_kde_validation_in_an_npy_beside_keyed_data(tmp_path, capsys):
    """--data-key names the array of an .npz; an .npy of validation data beside it has one array."""
    np.savez(tmp_path / "d.npz", x=sm.sample(4).numpy())
    np.save(tmp_path / "v.npy", sm.sample(4, seed=1).numpy())
    status, _, err = run(["evaluate", MODEL, "--data", tmp_path / "d.npz", "--data-key", "x", "-e",
                          "kde", "--bandwidth", "0.3,1", "--validation", tmp_path / "v.npy",
                          "--kde-samples", 50, "-o", tmp_path / "r.nc", "-q"], capsys)
    assert status == 0, err


def test_result_files_are_atomic_and_checked(tmp_path, monkeypatch, capsys):
    result = pyrolik.likelihood_weighting(sm.model, sm.sample(3), num_samples=4, progress=False)
    path = tmp_path / "r.nc"
    pyrolik.save(result, path)
    before = path.read_bytes()
    monkeypatch.setattr("pyrolik.io.export.os.replace",
                        lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        pyrolik.save(result, path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["r.nc"]
    (tmp_path / "junk.nc").write_bytes(b"junk")
    status, _, err = run(["summary", tmp_path / "junk.nc"], capsys)
    assert status == 1 and "is not a pyrolik result file" in err


class _Trap:
    """Unpickling this object writes a file: the summary of a pickle must not create it."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_summary_of_a_state_dict_says_it_is_not_a_result_and_unpickles_nothing(tmp_path, capsys):
    torch.save(torch.nn.Linear(2, 3).state_dict(), tmp_path / "model.pt")
    status, out, err = run(["summary", tmp_path / "model.pt"], capsys)
    assert status == 1 and out == ""
    assert "model.pt is not a pyrolik result file" in err
    assert "state dict" in err and "pyrolik.save(result" in err and "--output" in err
    marker = tmp_path / "unpickled"
    torch.save({"x": _Trap(marker)}, tmp_path / "trap.pt")
    status, _, err = run(["summary", tmp_path / "trap.pt"], capsys)
    assert status == 1 and "not a pyrolik result file" in err
    assert not marker.exists()
    with pytest.raises(ValueError, match="never unpickles"):
        pyrolik.load(tmp_path / "trap.pt")
    assert not marker.exists()
    # a netCDF file that pyrolik did not write
    import xarray as xr

    xr.Dataset({"a": ("i", np.arange(3))}).to_netcdf(tmp_path / "other.nc")
    status, _, err = run(["summary", tmp_path / "other.nc"], capsys)
    assert status == 1 and "not a pyrolik result" in err and "pyrolik.save" in err
