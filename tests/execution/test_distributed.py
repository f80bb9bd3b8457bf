"""Multi-process evaluation: torchrun with 2 gloo processes on CPU gives the single-process result,
bit for bit (same batch_size and seed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import pyrolik
from pyrolik.execution.distributed import Shard, current_shard, main_result, map_tensors
from tests import scale_models as sm

ROOT = Path(__file__).resolve().parents[2]


def test_two_processes_with_torchrun_equal_one_process(tmp_path, seed):
    x = sm.sample(5, seed)
    np.save(tmp_path / "x.npy", x.numpy())
    out = tmp_path / "res.nc"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "pyrolik", "evaluate", "tests.scale_models:model", "--data", str(tmp_path / "x.npy"),
           "-e", "ais,lw", "--num-steps", "6", "--num-chains", "2", "--num-leapfrog", "2",
           "--num-samples", "7", "--batch-size", "2", "--seed", str(seed), "--threads", "1",
           "--checkpoint", str(tmp_path / "run.ckpt"), "--checkpoint-every", "2", "-q",
           "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 3 batches: [0:2) and [4:5) on rank 0, [2:4) on rank 1; gathered on rank 0
    kernel = pyrolik.HMC(num_leapfrog=2)
    single = pyrolik.ais(sm.model, x, num_steps=6, num_chains=2, kernel=kernel, batch_size=2,
                         seed=seed, progress=False)
    got = pyrolik.load(tmp_path / "res.ais.nc")
    assert torch.equal(got.log_weights, single.log_weights)
    assert torch.equal(got.final_state, single.final_state)
    assert all(torch.equal(got.trace[k], single.trace[k]) for k in single.trace)
    assert torch.equal(got.step_sizes.log_step_size, single.step_sizes.log_step_size)
    lw = pyrolik.likelihood_weighting(sm.model, x, num_samples=7, batch_size=2, seed=seed,
                                      progress=False)
    assert torch.equal(pyrolik.load(tmp_path / "res.lw.nc").log_likelihood, lw.log_likelihood)
    # each process deleted its own checkpoint once the result was written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.ais.nc", "res.lw.nc", "x.npy"]


def test_shards_and_helpers():
    assert [Shard(1, 3).owns(i) for i in range(7)] == [False, True, False, False, True, False,
                                                       False]
    assert current_shard(False) == Shard(0, 1) and Shard().is_main
    nested = {"a": torch.ones(2), "b": [torch.zeros(1), (torch.ones(1), 3)], "c": None}
    doubled = map_tensors(nested, lambda t: 2 * t)
    assert torch.equal(doubled["a"], 2 * torch.ones(2)) and doubled["b"][1][1] == 3


def test_main_result_passes_a_result_and_refuses_a_non_zero_rank_s_none():
    result = object()
    assert main_result(result, "ais") is result
    with pytest.raises(RuntimeError, match=r"ais returned None.*pyrolik.distributed\(\) block.*"
                                           "run it outside the block"):
        main_result(None, "ais")


@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_a_process_group_of_one_is_a_single_process(tmp_path, seed):
    x = sm.sample(3, seed)
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    kw = dict(num_steps=4, num_chains=2, seed=seed, progress=False,
              kernel=pyrolik.HMC(num_leapfrog=1))
    try:
        with pyrolik.distributed():
            a = pyrolik.ais(sm.model, x, **kw)
            # the estimators that do not shard refuse the block, naming it
            with pytest.raises(ValueError, match=r"evidence .*one process.*outside "
                                                 r"pyrolik.distributed\(\)"):
                pyrolik.evidence(sm.model, x, **kw)
            with pytest.raises(ValueError, match=r"does not run in a pyrolik.distributed\(\) block"):
                pyrolik.sigma_curve(sm.model, x, [0.5, 1.0], **kw)
    finally:
        torch.distributed.destroy_process_group()
    b = pyrolik.ais(sm.model, x, **kw)
    assert torch.equal(a.log_weights, b.log_weights)
