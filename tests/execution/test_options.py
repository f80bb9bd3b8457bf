"""Execution options: checked once, the seed resolved (drawn when None) and the shard found."""

from __future__ import annotations

import pytest

from pyrolik.execution.batches import Execution
from pyrolik.execution.distributed import Shard


def test_create_resolves_the_seed_and_the_shard():
    ex = Execution.create(seed=3, batch_size=2, desc="AIS")
    assert ex == Execution(3, Shard(0, 1), 2, True, "AIS", None, 100)
    drawn = Execution.create(seed=None)
    assert isinstance(drawn.seed, int) and drawn.seed >= 0


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(batch_size=0), ValueError, "batch_size must be a positive integer"),
    (dict(checkpoint_every=0), ValueError, "checkpoint_every must be a positive integer"),
    (dict(checkpoint=3), TypeError, "checkpoint must be a file path"),
    (dict(seed=-1), ValueError, "seed must be a non-negative int"),
    (dict(distributed=True), ValueError, "torch.distributed process group"),
])
def test_bad_options_are_refused_naming_the_fix(kwargs, error, match):
    with pytest.raises(error, match=match):
        Execution.create(**{"seed": 0, **kwargs})
