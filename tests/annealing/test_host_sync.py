"""Ready for a GPU: the annealing loop makes no host synchronisation per step.

A ``TorchDispatchMode`` sees every aten op a run executes (on CPU, where it can be counted without a
GPU) and counts those that make the host wait for the device: reading a value back
(``_local_scalar_dense``, behind ``.item()``, ``bool(t)``, ``int(t)``, ``if t:``), ops returning a
Python bool (``equal``, ``allclose``, ``is_nonzero``), and ops whose output shape depends on the data
(``nonzero``, ``masked_select``, ``unique``, boolean-mask indexing). Set-up and results may do a few;
their number must not grow with ``num_steps``.
"""

from __future__ import annotations

import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import pyrolik
from models.oracles.linear_gaussian import LinearGaussian

SYNCING = {"_local_scalar_dense", "item", "is_nonzero", "nonzero", "nonzero_static", "equal",
           "allclose", "masked_select", "unique", "_unique", "_unique2", "unique_dim",
           "unique_consecutive"}


class SyncCounter(TorchDispatchMode):
    """Counts host-synchronising aten ops by name."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name.split("::")[-1]
        if name in SYNCING:
            self.counts[name] += 1
        elif name == "index" and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                     for i in (args[1] if len(args) > 1 else ())):
            self.counts["index (boolean mask)"] += 1
        elif name == "repeat_interleave" and isinstance(args[0], torch.Tensor) and len(args) > 1 \
                and isinstance(args[1], torch.Tensor):
            self.counts["repeat_interleave (tensor repeats)"] += 1
        return func(*args, **kwargs)


def test_the_counter_sees_a_sync():
    t = torch.ones(3)
    with SyncCounter() as c:
        float(t.sum())
        t[t > 0]
    assert c.counts["_local_scalar_dense"] == 1 and c.counts["index (boolean mask)"] == 1


@pytest.mark.parametrize("estimator", ["ais", "bdmc", "distortion_bdmc"])
def test_host_syncs_do_not_grow_with_num_steps(estimator):
    lg = LinearGaussian.random(5, 2, s=0.5, seed=0, dtype=torch.float64)
    sim = pyrolik.simulate(lg, 6, data_shape=(5,), seed=0)
    counts = []
    for steps in (10, 80):  # pilot of 20 and 20 steps, then 10 and 80 annealing steps
        with SyncCounter() as c:
            if estimator == "ais":
                pyrolik.ais(lg, sim.x, num_steps=steps, num_chains=4, seed=0, progress=False)
            elif estimator == "bdmc":
                pyrolik.bdmc(lg, sim, num_steps=steps, num_chains=4, seed=0, progress=False)
            else:  # two grid points in one pass, the first point's examples stopping early
                pyrolik.distortion_bdmc(lg, 3, sigmas=[0.3, 1.0], data_shape=(5,),
                                        num_steps=steps, num_chains=4, seed=0, progress=False)
        counts.append(dict(c.counts))
    assert counts[0] == counts[1], f"host syncs grew with num_steps: {counts}"
    # a fixed set-up cost (distortion_bdmc: simulating and checking each grid point's data)
    assert sum(counts[0].values()) < (400 if estimator == "distortion_bdmc" else 100)
