"""Random streams: a batch's generator depends on the seed and its first example only."""

from __future__ import annotations

import pytest
import torch

from pyrolik._random import fork_rng_from, generator_for, resolve_seed


def test_a_batch_stream_depends_on_seed_and_start_only():
    a = torch.rand(4, generator=generator_for(7, 10))
    assert torch.equal(a, torch.rand(4, generator=generator_for(7, 10)))
    assert not torch.equal(a, torch.rand(4, generator=generator_for(7, 11)))
    assert not torch.equal(a, torch.rand(4, generator=generator_for(8, 10)))


def test_pyro_draws_leave_the_global_stream_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    with fork_rng_from(generator_for(1, 0)):
        first = torch.rand(2)
    assert torch.equal(torch.rand(3), expected)
    with fork_rng_from(generator_for(1, 0)):
        assert torch.equal(torch.rand(2), first)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_bad_seeds_are_refused(bad):
    with pytest.raises(ValueError, match="non-negative int"):
        resolve_seed(bad)


def test_no_seed_draws_one_to_record():
    torch.manual_seed(3)
    s = resolve_seed(None)
    torch.manual_seed(3)
    assert isinstance(s, int) and s == resolve_seed(None)
