"""Checkpoint and resume (``with pyrolik.checkpoint(path, every=k):``): bit-identical results after
interruption (SIGKILL included), clear errors for corrupt or mismatched checkpoints, atomic files."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyrolik
from pyrolik.annealing import Recording
from pyrolik.execution import checkpoint as ckpt_mod
from pyrolik.execution.checkpoint import Checkpoint, remove_checkpoint
from tests import scale_models as sm

ROOT = Path(__file__).resolve().parents[2]


class Interrupt(Exception):
    pass


def interrupt_after(monkeypatch, saves: int):
    """Make the run raise after ``saves`` checkpoints of a batch in progress (a crash)."""
    orig = Checkpoint.save_progress
    count = [0]

    def save_then_crash(self, start, state):
        orig(self, start, state)
        count[0] += 1
        if count[0] == saves:
            raise Interrupt

    monkeypatch.setattr(Checkpoint, "save_progress", save_then_crash)


def assert_same_ais(a, b):
    assert torch.equal(a.log_weights, b.log_weights)
    assert torch.equal(a.log_likelihood, b.log_likelihood)
    assert torch.equal(a.final_state, b.final_state)
    assert torch.equal(a.acceptance_rate, b.acceptance_rate)
    assert a.trace.keys() == b.trace.keys()
    assert all(torch.equal(a.trace[k], b.trace[k]) for k in a.trace)
    assert torch.equal(a.trace_steps, b.trace_steps)
    if a.step_sizes is not None:
        assert all(torch.equal(u, v) for u, v in zip(a.step_sizes, b.step_sizes, strict=True)
                   if u is not None)
    if a.latents is not None:
        assert all(torch.equal(a.latents[k], b.latents[k]) for k in a.latents)
    for name in ("ancestor", "num_resampled"):
        u, v = getattr(a, name), getattr(b, name)
        assert (u is None and v is None) or torch.equal(u, v)


PILOT_MASS = pyrolik.HMC(num_leapfrog=2, mass_matrix=True)
ONLINE = pyrolik.HMC(num_leapfrog=2, adapt="online")
MOMENTUM = pyrolik.HMC(num_leapfrog=2, momentum_persistence=0.8)
RESAMPLE = pyrolik.SMC(pyrolik.HMC(num_leapfrog=2), resample=0.9, islands=1)
ISLANDS = pyrolik.SMC(pyrolik.HMC(num_leapfrog=2), islands=2)  # 2 islands of 2, every step


@pytest.mark.parametrize("kernel, saves", [(PILOT_MASS, 1), (PILOT_MASS, 3), (PILOT_MASS, 6),
                                           (PILOT_MASS, 9), (ONLINE, 1), (ONLINE, 3),
                                           (ONLINE, 6), (MOMENTUM, 3), (MOMENTUM, 9),
                                           (RESAMPLE, 3), (RESAMPLE, 9), (ISLANDS, 3),
                                           (ISLANDS, 9)],
                         ids=["pilot+mass-1", "pilot+mass-3", "pilot+mass-6", "pilot+mass-9",
                              "online-1", "online-3", "online-6", "momentum-3", "momentum-9",
                              "resample-3", "resample-9", "islands-3", "islands-9"])
def test_ais_resumes_bit_identically(tmp_path, monkeypatch, saves, kernel, seed):
    """Interrupted after the ``saves``-th checkpoint: with the pilot, saves 1-7 of a batch fall in
    its pilot (31 transitions: 11 inner temperatures and 2 x 10 warm-ups) and 8-9 in its
    estimating run;
    online, at steps 4 and 8 of each of the 3 batches."""
    x = sm.sample(7, seed)
    kw = dict(num_steps=12, num_chains=4 if kernel is ISLANDS else 3, kernel=kernel, seed=seed,
              batch_size=3, progress=False, record=Recording(every=2, states=True))
    reference = pyrolik.ais(sm.model, x, **kw)
    if isinstance(kernel, pyrolik.SMC):  # the chains were resampled before the interruption
        assert int(reference.num_resampled.min()) >= 1
        assert reference.settings["islands"] == (2 if kernel is ISLANDS else 1)
    path = tmp_path / "run.ckpt"
    interrupt_after(monkeypatch, saves)
    with pytest.raises(Interrupt), pyrolik.checkpoint(path, every=4):
        pyrolik.ais(sm.model, x, **kw)
    monkeypatch.undo()
    assert path.exists()
    with pyrolik.checkpoint(path, every=4):
        resumed = pyrolik.ais(sm.model, x, **kw)
    assert_same_ais(resumed, reference)
    # a finished checkpoint returns the same result again without rerunning
    with pyrolik.checkpoint(path, every=4):
        again = pyrolik.ais(sm.model, x, **kw)
    assert_same_ais(again, reference)


def test_reverse_ais_and_bdmc_resume_bit_identically(tmp_path, monkeypatch, seed):
    x = sm.sample(4, seed)
    z = torch.randn(4, 2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    kw = dict(num_steps=10, num_chains=2, kernel=pyrolik.HMC(num_leapfrog=2), seed=seed,
              batch_size=2, progress=False)
    ref = pyrolik.reverse_ais(sm.model, x, z, **kw)
    interrupt_after(monkeypatch, 3)
    with pytest.raises(Interrupt), pyrolik.checkpoint(tmp_path / "r.ckpt", every=3):
        pyrolik.reverse_ais(sm.model, x, z, **kw)
    monkeypatch.undo()
    with pyrolik.checkpoint(tmp_path / "r.ckpt", every=3):
        assert_same_ais(pyrolik.reverse_ais(sm.model, x, z, **kw), ref)

    ref = pyrolik.bdmc(sm.model, 4, data_shape=(5,), **kw)
    interrupt_after(monkeypatch, 4)
    with pytest.raises(Interrupt), pyrolik.checkpoint(tmp_path / "b.ckpt", every=3):
        pyrolik.bdmc(sm.model, 4, data_shape=(5,), **kw)
    monkeypatch.undo()
    with pyrolik.checkpoint(tmp_path / "b.ckpt", every=3):
        out = pyrolik.bdmc(sm.model, 4, data_shape=(5,), **kw)
    assert_same_ais(out.lower, ref.lower)
    assert_same_ais(out.upper, ref.upper)
    assert out.gap == ref.gap


CHILD = """
import sys, torch
torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
import pyrolik
from tests import scale_models as sm
x = sm.sample(6, {seed})
with pyrolik.checkpoint(sys.argv[1], every=1):
    pyrolik.ais(sm.model, x, **{kw})
"""


def test_sigkill_at_any_moment_then_resume_is_bit_identical(tmp_path, seed):
    """Kill a real process (SIGKILL: no clean-up) twice at random moments, then finish the run."""
    kw = dict(num_steps=40, num_chains=2, kernel=pyrolik.HMC(num_leapfrog=2), seed=seed,
              batch_size=3, progress=False)
    path = tmp_path / "killed.ckpt"
    code = CHILD.format(seed=seed, kw=repr(kw).replace("HMC(", "pyrolik.HMC("))
    # the delay is in the model's Python, which replayed evaluations skip: run the program each call
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYROLIK_TEST_DELAY": "0.004",
           "PYROLIK_REPLAY": "0", "OMP_NUM_THREADS": "1"}
    rng = random.Random(seed)
    for _ in range(2):
        before = path.stat().st_mtime_ns if path.exists() else None
        child = subprocess.Popen([sys.executable, "-c", code, str(path)], env=env, cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not path.exists() or path.stat().st_mtime_ns == before:  # it has made progress
            assert child.poll() is None, child.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL, err.decode()[-2000:]
    x = sm.sample(6, seed)
    with pyrolik.checkpoint(path, every=1):
        resumed = pyrolik.ais(sm.model, x, **kw)
    reference = pyrolik.ais(sm.model, x, **kw)
    assert_same_ais(resumed, reference)
    # a kill in the middle of a write leaves a temporary file, which the resumed run removes
    assert not list(tmp_path.glob(".*.tmp")) and not list(tmp_path.glob("*.batches/.*.tmp"))


def test_mismatched_checkpoints_are_refused_naming_what_differs(tmp_path, seed):
    x = sm.sample(4, seed)
    kw = dict(num_steps=4, num_chains=2, kernel=pyrolik.HMC(num_leapfrog=1, adapt=None),
              seed=seed, progress=False)
    with pyrolik.checkpoint(tmp_path / "c.ckpt", every=2):
        pyrolik.ais(sm.model, x, **kw)
    cases = [
        (dict(x=sm.sample(4, seed + 1)), "data"),
        (dict(seed=seed + 1), "seed"),
        (dict(num_steps=5), "num_steps"),
        (dict(num_chains=3), "num_chains"),
        (dict(kernel=pyrolik.HMC(num_leapfrog=2, adapt=None)), "kernel"),
        (dict(schedule="linear"), "schedule"),
        (dict(model=sm.nan_model), "model"),
    ]
    for change, what in cases:
        args = {**kw, "x": x, "model": sm.model, **change}
        with pytest.raises(ValueError, match=f"different run .*{what}.*delete the checkpoint"), \
                pyrolik.checkpoint(tmp_path / "c.ckpt", every=2):
            pyrolik.ais(args.pop("model"), args.pop("x"), **args)
    # the same model function with other parameter values
    old = sm.W.clone()
    try:
        sm.W.add_(0.1)
        with pytest.raises(ValueError, match="model parameters"), \
                pyrolik.checkpoint(tmp_path / "c.ckpt", every=2):
            pyrolik.ais(sm.model, x, **kw)
    finally:
        sm.W.copy_(old)
    # another method on the same file
    with pytest.raises(ValueError, match="method"), pyrolik.checkpoint(tmp_path / "c.ckpt", every=2):
        pyrolik.reverse_ais(sm.model, x, torch.zeros(4, 2), **kw)


SIGMA = 0.3


def _decode(z):
    return z @ sm.W.T


def test_what_the_model_reads_beyond_its_parameters_is_checked(tmp_path, seed):
    """A scalar global, a tensor read through a helper function and a tensor inside a list among
    model_kwargs: each change is refused (the probe found each resumed with the old numbers)."""
    def model(x, params):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(_decode(z) + params[0][0], SIGMA).to_event(1), obs=x)

    x, path = sm.sample(4, seed), tmp_path / "c.ckpt"
    kw = dict(num_steps=4, num_chains=2, seed=seed, progress=False)
    big = torch.zeros(40, 1, dtype=x.dtype)  # a repr shows only the ends of a large tensor
    with pyrolik.checkpoint(path, every=2):
        first = pyrolik.ais(model, x, model_kwargs={"params": [big[:1]]}, **kw)
    with pyrolik.checkpoint(path, every=2):  # the same run reads the file back
        assert torch.equal(pyrolik.ais(model, x, model_kwargs={"params": [big[:1]]},
                                       **kw).log_weights, first.log_weights)
    global SIGMA
    old_w = sm.W.clone()
    try:
        SIGMA = 0.5  # a number among the globals: seen in the density at a seeded draw
        with pytest.raises(ValueError, match="log-density at a seeded draw"), \
                pyrolik.checkpoint(path):
            pyrolik.ais(model, x, model_kwargs={"params": [big[:1]]}, **kw)
        SIGMA = 0.3
        sm.W.add_(1e-3)  # read through _decode: seen in the density at a seeded draw
        with pytest.raises(ValueError, match="log-density at a seeded draw"), \
                pyrolik.checkpoint(path):
            pyrolik.ais(model, x, model_kwargs={"params": [big[:1]]}, **kw)
    finally:
        SIGMA = 0.3
        sm.W.copy_(old_w)
    changed = big.clone()
    changed[20] = 1.0
    with pyrolik.checkpoint(tmp_path / "big.ckpt"):
        pyrolik.ais(model, x, model_kwargs={"params": [big]}, **kw)
    with pytest.raises(ValueError, match="model_args/model_kwargs"), \
            pyrolik.checkpoint(tmp_path / "big.ckpt"):
        pyrolik.ais(model, x, model_kwargs={"params": [changed]}, **kw)


def test_a_checkpointed_run_needs_a_seed(tmp_path):
    with pytest.raises(ValueError, match="needs seed= an int"), pyrolik.checkpoint(tmp_path / "c"):
        pyrolik.ais(sm.model, sm.sample(4, 0), num_steps=4, num_chains=2, progress=False)


def test_corrupt_checkpoints_are_refused(tmp_path, seed):
    x = sm.sample(4, seed)
    path = tmp_path / "c.ckpt"
    kw = dict(num_steps=4, num_chains=2, kernel=pyrolik.HMC(num_leapfrog=1, adapt=None),
              seed=seed, progress=False, batch_size=2)

    def run():
        with pyrolik.checkpoint(path, every=2):
            return pyrolik.ais(sm.model, x, **kw)

    run()
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])  # truncated
    with pytest.raises(ValueError, match="corrupt.*delete"):
        run()
    path.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))  # one flipped bit
    with pytest.raises(ValueError, match="corrupt"):
        run()
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a pyrolik checkpoint"):
        run()
    path.write_bytes(raw)
    batch = tmp_path / "c.ckpt.batches" / "2.pt"
    batch.write_bytes(batch.read_bytes()[:-3])
    with pytest.raises(ValueError, match="corrupt"):
        run()
    # a run killed while writing leaves a temporary file: ignored and removed on resume
    remove_checkpoint(path)
    run()
    (tmp_path / ".c.ckpt.0123abcd.tmp").write_bytes(raw[:100])
    (tmp_path / "c.ckpt.batches" / ".2.pt.0123abcd.tmp").write_bytes(b"half")
    run()
    assert not list(tmp_path.rglob("*.tmp"))
    remove_checkpoint(path)
    assert not path.exists() and not (tmp_path / "c.ckpt.batches").exists()
    with pytest.raises(ValueError, match="folder of checkpoint"), \
            pyrolik.checkpoint(tmp_path / "no" / "c.ckpt"):
        pyrolik.ais(sm.model, x, **kw)


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((123,), {}, TypeError, "checkpoint must be a file path, got int"),
    ((None,), {}, TypeError, "checkpoint must be a file path, got NoneType"),
    (("c.ckpt",), {"every": 0}, ValueError, "every must be a positive integer"),
    (("c.ckpt",), {"every": 2.5}, ValueError, "every must be a positive integer"),
    (("c.ckpt",), {"every": True}, ValueError, "every must be a positive integer"),
])
def test_a_bad_checkpoint_block_is_refused_when_made(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        pyrolik.checkpoint(*args, **kwargs)


def test_the_block_sets_the_path_and_stride_and_ends_with_it(tmp_path, seed):
    """Inside the block the annealing estimators save every ``every`` steps; nested blocks take the
    inner one's path, and after the block nothing is saved."""
    x = sm.sample(3, seed)
    kw = dict(num_steps=12, num_chains=2, kernel=pyrolik.HMC(num_leapfrog=1, adapt=None),
              seed=seed, progress=False)
    counts = {}

    def count_saves(every):
        orig, saves = Checkpoint.save_progress, []

        def counted(self, start, state):
            saves.append(self.every)
            orig(self, start, state)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Checkpoint, "save_progress", counted)
            with pyrolik.checkpoint(tmp_path / "outer.ckpt", every=1), \
                    pyrolik.checkpoint(tmp_path / f"every{every}.ckpt", every=every):
                result = pyrolik.ais(sm.model, x, **kw)
            pyrolik.ais(sm.model, x, **kw)  # outside: no saves
        counts[every] = saves
        return result

    a, b = count_saves(3), count_saves(6)
    assert set(counts[3]) == {3} and set(counts[6]) == {6}
    assert len(counts[3]) > len(counts[6]) > 0  # the stride sets how often
    assert not (tmp_path / "outer.ckpt").exists()  # the inner block's path was used
    assert (tmp_path / "every3.ckpt").exists() and (tmp_path / "every6.ckpt").exists()
    assert torch.equal(a.log_weights, b.log_weights)  # the stride changes nothing else
    assert torch.equal(a.log_weights, pyrolik.ais(sm.model, x, **kw).log_weights)


def test_estimators_that_do_not_checkpoint_refuse_the_block(tmp_path, seed):
    """iwae, likelihood weighting, kde and csl (and the curves, tests/distortion): a checkpoint block
    around them is refused, naming it, before anything runs; after the block they run."""
    x = sm.sample(3, seed)

    def guide(x):
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))

    calls = {
        "iwae": lambda: pyrolik.iwae(sm.model, x, guide, num_samples=4, progress=False),
        "likelihood_weighting": lambda: pyrolik.likelihood_weighting(sm.model, x, num_samples=4,
                                                                     progress=False),
        "kde": lambda: pyrolik.kde(sm.sample(5, seed + 1), x, bandwidth=0.5, progress=False),
        "csl": lambda: pyrolik.csl(sm.model, x, {"z": torch.zeros(4, 2, dtype=x.dtype)}),
    }
    for name, call in calls.items():
        with pyrolik.checkpoint(tmp_path / "c.ckpt"), pytest.raises(
                ValueError, match=rf"{name} does not run in a pyrolik.checkpoint\(\) block: "
                                  "call it outside the block"):
            call()
        assert call().log_likelihood.shape == (3,)  # after the block it runs
    assert not list(tmp_path.iterdir())


def test_a_budget_search_is_not_checkpointed_only_the_final_run(tmp_path, monkeypatch, seed):
    """``ais(num_steps=Tolerance(...))`` in a checkpoint block: the search's BDMC rounds and checks run
    without it; the file is the final run's (the steps the search chose), and a rerun in the block
    reads that run back and returns the same numbers."""
    x = sm.sample(6, seed)
    path = tmp_path / "t.ckpt"
    kw = dict(num_chains=2, kernel=pyrolik.HMC(num_leapfrog=2), seed=seed, progress=False)
    opened = []
    orig_init = Checkpoint.__init__

    def record(self, path, every, fingerprint, device="cpu"):
        opened.append(fingerprint)
        orig_init(self, path, every, fingerprint, device)

    monkeypatch.setattr(Checkpoint, "__init__", record)
    with pyrolik.checkpoint(path, every=5):
        r = pyrolik.ais(sm.model, x, num_steps=pyrolik.Tolerance(5.0, max_steps=50), **kw)
    assert len(r.budget.rounds) >= 1 and r.budget.check is not None  # the search ran
    assert len(opened) == 1  # one checkpoint: the final run's
    saved = ckpt_mod._read(path, x.device)["fingerprint"]
    assert saved["method"] == "ais" and saved["seed"] == seed
    assert saved["settings"]["num_steps"] == repr(r.budget.num_steps)
    assert sorted(ckpt_mod._read(path, x.device)["done"]) == ["0"]
    # the rerun: the search again (deterministic, unsaved), then the final run read back
    monkeypatch.setattr(Checkpoint, "save_progress", lambda *a: pytest.fail("the run reran"))
    monkeypatch.setattr(Checkpoint, "complete", lambda *a: pytest.fail("the run reran"))
    with pyrolik.checkpoint(path, every=5):
        again = pyrolik.ais(sm.model, x, num_steps=pyrolik.Tolerance(5.0, max_steps=50), **kw)
    assert len(opened) == 2
    assert_same_ais(again, r)
    assert again.budget.num_steps == r.budget.num_steps
    # the same numbers as the plain run with the chosen steps and seed, and the file is its run's
    with pyrolik.checkpoint(path, every=5):
        plain = pyrolik.ais(sm.model, x, num_steps=r.budget.num_steps, **kw)
    assert_same_ais(plain, r)


def test_writes_are_atomic(tmp_path, monkeypatch):
    target = tmp_path / "f.bin"
    ckpt_mod.atomic_write_bytes(target, b"old")

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt_mod.os, "replace", crash)
    with pytest.raises(OSError):
        ckpt_mod.atomic_write_bytes(target, b"new content")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]  # the temporary file is gone


def test_the_pilot_checkpoints_as_a_phase_of_its_batch(tmp_path, monkeypatch, seed):
    """A crash inside the pilot leaves a checkpoint that names the pilot; resuming finishes the
    pilot from there and gives the uninterrupted run's table and estimate bit for bit."""
    x = sm.sample(3, seed)
    kw = dict(num_steps=12, num_chains=3, kernel=pyrolik.HMC(num_leapfrog=2), seed=seed,
              progress=False)
    reference = pyrolik.ais(sm.model, x, **kw)
    path = tmp_path / "pilot.ckpt"
    interrupt_after(monkeypatch, 2)  # the pilot's step 8 of 32
    with pytest.raises(Interrupt), pyrolik.checkpoint(path, every=4):
        pyrolik.ais(sm.model, x, **kw)
    monkeypatch.undo()
    saved = ckpt_mod._read(path, x.device)["partial"]["state"]
    assert saved["phase"] == "pilot" and saved["loop"]["step"] == 8
    with pyrolik.checkpoint(path, every=4):
        resumed = pyrolik.ais(sm.model, x, **kw)
    assert_same_ais(resumed, reference)
