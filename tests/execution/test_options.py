"""Execution options: checked once, the seed resolved (drawn when None), the shard found, and the
checkpoint / distributed options taken from the ``with`` block in force."""

from __future__ import annotations

import pytest

import pyrolik
from pyrolik.execution.batches import Execution, scope
from pyrolik.execution.distributed import Shard


def test_create_resolves_the_seed_and_the_shard():
    ex = Execution.create(seed=3, batch_size=2, desc="AIS")
    assert ex == Execution(3, Shard(0, 1), 2, True, "AIS", None, 100)
    drawn = Execution.create(seed=None)
    assert isinstance(drawn.seed, int) and drawn.seed >= 0


def test_create_takes_the_checkpoint_block(tmp_path):
    with pyrolik.checkpoint(tmp_path / "c.pt", every=7):
        ex = Execution.create(seed=3, desc="AIS")
        assert scope().checkpoint == tmp_path / "c.pt" and scope().checkpoint_every == 7
        with pytest.raises(ValueError, match=r"^lw does not run in a pyrolik.checkpoint\(\) block"):
            Execution.create(seed=3, desc="likelihood weighting", method="lw",
                             supports=("distributed",))
    assert ex == Execution(3, Shard(0, 1), None, True, "AIS", tmp_path / "c.pt", 7)
    assert scope().checkpoint is None  # the block ended
    assert Execution.create(seed=3, desc="AIS").checkpoint is None


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(batch_size=0), ValueError, "batch_size must be a positive integer"),
    (dict(seed=-1), ValueError, "seed must be a non-negative int"),
])
def test_bad_options_are_refused_naming_the_fix(kwargs, error, match):
    with pytest.raises(error, match=match):
        Execution.create(**{"seed": 0, **kwargs})


@pytest.mark.parametrize("make, error, match", [
    (lambda p: pyrolik.checkpoint(p, every=0), ValueError, "every must be a positive integer"),
    (lambda p: pyrolik.checkpoint(3), TypeError, "checkpoint must be a file path"),
    (lambda p: pyrolik.distributed(), ValueError, "torch.distributed process group"),
])
def test_bad_blocks_are_refused_naming_the_fix(tmp_path, make, error, match):
    with pytest.raises(error, match=match):
        make(tmp_path / "c.pt")
    assert scope() == type(scope())()  # nothing left in force
