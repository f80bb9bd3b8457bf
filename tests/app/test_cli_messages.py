"""The command line names the real cause of a newcomer's mistakes, keeps its warnings on stderr
(also under --quiet), shows every default in --help, and prints the estimate at 80 columns."""

from __future__ import annotations

import argparse
import pickle
import sys

import numpy as np
import pytest
import torch

import pyrolik
from pyrolik.app import cli
from tests import scale_models as sm

MODEL = "tests.scale_models:model"
FAST = ["--num-steps", "6", "--num-chains", "2", "--num-leapfrog", "2"]

FILE = '''
import pyro, pyro.distributions as dist, torch
from torch import nn

DECODER = nn.Linear(2, 5){cast}

def model(x):
    decoder = pyro.module("decoder", DECODER)
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(decoder(z), 0.3).to_event(1), obs=x)
'''
LOAD = "\ndef load(path):\n    DECODER.load_state_dict(torch.load(path))\n"


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, sm.sample(4).numpy())  # float64
    return path


def run(argv, capsys):
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def _model_file(tmp_path, name, *, cast=".double()", load=True):
    (tmp_path / f"{name}.py").write_text(FILE.format(cast=cast) + (LOAD if load else ""))
    return f"{tmp_path / name}.py:model"


def test_model_with_load_but_no_weights_warns_on_stderr_even_quiet(tmp_path, data, capsys):
    spec = _model_file(tmp_path, "untrained")
    status, out, err = run(["evaluate", spec, "--data", data, "-o", tmp_path / "r.nc", "-q",
                            *FAST], capsys)
    assert status == 0, err
    (line,) = [ln for ln in err.splitlines() if "defines load(path)" in ln]
    assert line.startswith("pyrolik: warning: ") and "--weights PATH" in line
    assert "log p(x) [nats]" in out  # --quiet silences progress only
    # with the weights given, or without a load() hook, there is nothing to warn about
    torch.save(torch.nn.Linear(2, 5).double().state_dict(), tmp_path / "w.pt")
    status, _, err = run(["evaluate", spec, "--data", data, "--weights", tmp_path / "w.pt",
                          "-o", tmp_path / "r2.nc", "-q", *FAST], capsys)
    assert status == 0 and "defines load" not in err, err
    plain = _model_file(tmp_path, "plain", load=False)
    status, _, err = run(["evaluate", plain, "--data", data, "-o", tmp_path / "r3.nc", "-q",
                          *FAST], capsys)
    assert status == 0 and "defines load" not in err, err


def test_result_warnings_go_to_stderr_and_survive_quiet(tmp_path, data, capsys):
    # a fixed step size far too large: acceptance collapses, and the advice fits adapt=None
    argv = ["evaluate", MODEL, "--data", data, "--adapt", "none", "--step-size", "40", *FAST]
    status, out, err = run(argv + ["-o", tmp_path / "a.nc", "-q"], capsys)
    assert status == 0, err
    warn = [ln for ln in err.splitlines() if "acceptance collapsed" in ln]
    assert len(warn) == 1 and warn[0].startswith("pyrolik: warning: ")
    assert "fixed step size (40.0) is too large" in warn[0] and "collapsed" not in out
    assert "%|" not in err  # no progress bar under --quiet
    status, out, err = run(argv + ["-o", tmp_path / "b.nc"], capsys)
    assert status == 0 and "pyrolik: warning: HMC acceptance collapsed" in err
    status, out, err = run(["summary", tmp_path / "a.nc"], capsys)
    assert status == 0 and "pyrolik: warning: HMC acceptance collapsed" in err


def test_summaries_show_the_estimate_at_80_columns(tmp_path, data, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short file name: the lines that name it fit too
    status, out, _ = run(["evaluate", MODEL, "--data", data, "-o", "r.nc", "-q", *FAST], capsys)
    assert status == 0
    result = pyrolik.load(tmp_path / "r.nc")
    for text in (out, run(["summary", "r.nc"], capsys)[1]):
        (line,) = [ln for ln in text.splitlines() if ln.startswith("log p(x) [nats]")]
        assert line.split()[-1] == f"{result.mean:.3f}"
        assert "..." not in text and max(len(ln) for ln in text.splitlines()) <= 80


def test_summary_refuses_what_is_not_a_result_and_never_unpickles(tmp_path, capsys):
    weights = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(2, 3).state_dict(), weights)
    status, out, err = run(["summary", weights], capsys)
    assert status == 1 and out == ""
    assert err.startswith(f"pyrolik: error: {weights} is not a pyrolik result file")
    assert "torch.save" in err and "OrderedDict" not in err and "attribute" not in err

    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt"
    torch.save({"x": _Trap(str(marker))}, evil)  # torch.load(weights_only=False) would run it
    status, _, err = run(["summary", evil], capsys)
    assert status == 1 and "is not a pyrolik result file" in err and not marker.exists()
    with open(tmp_path / "evil.pkl", "wb") as f:
        pickle.dump(_Trap(str(marker)), f)
    status, _, err = run(["summary", tmp_path / "evil.pkl"], capsys)
    assert status == 1 and "is not a pyrolik result file" in err and not marker.exists()
    np.save(tmp_path / "x.npy", np.zeros(3))
    status, _, err = run(["summary", tmp_path / "x.npy"], capsys)
    assert status == 1 and "is not a pyrolik result file" in err


class _Trap:
    """Unpickling it creates a file: proof that a loader ran code from the file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_data_dtype_differs_from_the_model_names_dtype(tmp_path, data, capsys):
    spec = _model_file(tmp_path, "single", cast=".float()", load=False)
    status, _, err = run(["evaluate", spec, "--data", data, "-o", tmp_path / "r.nc", *FAST],
                         capsys)
    assert status == 1 and len(err.strip().splitlines()) == 1
    assert "holds float64 data but the model's parameters are float32: pass --dtype float32" in err
    status, _, err = run(["evaluate", spec, "--data", data, "--dtype", "float32", "-q",
                          "-o", tmp_path / "r.nc", *FAST], capsys)
    assert status == 0, err
    assert pyrolik.load(tmp_path / "r.nc").x.dtype == torch.float32
    # integer data become the model's dtype; bdmc simulates in the model's dtype
    np.save(tmp_path / "k.npy", np.arange(8, dtype=np.uint8).reshape(4, 2).repeat(3, 1)[:, :5])
    double = _model_file(tmp_path, "double", load=False)
    status, _, err = run(["evaluate", double, "--data", tmp_path / "k.npy", "-q",
                          "-o", tmp_path / "k.nc", *FAST], capsys)
    assert status == 0, err
    assert pyrolik.load(tmp_path / "k.nc").x.dtype == torch.float64
    status, _, err = run(["bdmc", double, "--num-examples", 2, "--data-shape", 5, "-q",
                          "-o", tmp_path / "b.nc", *FAST], capsys)
    assert status == 0, err
    assert pyrolik.load(tmp_path / "b.nc").x.dtype == torch.float64


def test_interrupted_starts_its_own_line(tmp_path, data, capsys, monkeypatch):
    from pyrolik.annealing.transition import HMCTransition

    calls = []
    step = HMCTransition.step

    def interrupt(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return step(self, *args, **kwargs)

    monkeypatch.setattr(HMCTransition, "step", interrupt)
    status, _, err = run(["evaluate", MODEL, "--data", data, "-o", tmp_path / "r.nc",
                          "--adapt", "none", *FAST], capsys)  # no pilot: call 4 is in the run
    assert status == 130
    assert "%|" in err  # a progress bar was on screen when Ctrl-C came
    assert "pyrolik: interrupted" in err.split("\n")  # on a line of its own, from its start


def _options(parser):
    sub = parser._subparsers._group_actions[0].choices
    for name in ("evaluate", "bdmc", "summary", "sigma-curve", "rate-distortion", "distortion-bdmc"):
        for action in sub[name]._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                yield name, action


def test_help_shows_every_default():
    parser = cli.build_parser()
    for name, action in _options(parser):
        if action.default in (None, False) or action.required:
            continue
        assert "default" in action.help, f"{name} {action.option_strings}: {action.help}"
    for _, action in _options(parser):
        if "--num-leapfrog" in action.option_strings or "--step-size" in action.option_strings:
            assert f"default {action.default}" in action.help
        if "--target-accept" in action.option_strings:  # None: each adaptation's own default
            assert action.default is None and "default 0.9 with the pilot, 0.65 online" in action.help
    bdmc_output = [a for n, a in _options(parser) if n == "bdmc" and "-o" in a.option_strings]
    assert "several estimators" not in bdmc_output[0].help
    assert "reverse AIS" in bdmc_output[0].help


def test_threads_default_to_one_and_follow_the_environment(tmp_path, data, capsys, monkeypatch):
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        status, _, err = run(["evaluate", MODEL, "--data", data, "-o", tmp_path / "r.nc", "-q",
                              *FAST], capsys)
        assert status == 0 and torch.get_num_threads() == 1, err
        monkeypatch.setenv("PYROLIK_NUM_THREADS", "2")
        assert pyrolik.execution.set_threads() == 1 and torch.get_num_threads() == 2
        monkeypatch.setenv("PYROLIK_NUM_THREADS", "two")
        with pytest.raises(ValueError, match="PYROLIK_NUM_THREADS='two' is not a positive"):
            pyrolik.execution.set_threads()
        with pytest.raises(ValueError, match="positive integer"):
            pyrolik.execution.set_threads(0)
        assert pyrolik.execution.set_threads(3) == 2 and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(old)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
