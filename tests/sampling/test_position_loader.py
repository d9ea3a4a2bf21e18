"""Positions dealt in a keyed order computed slice by slice (the training edges' order)."""

import tracemalloc

import numpy as np
import pytest
import torch

from fleetgnn.errors import ConfigError
from fleetgnn.sampling import PositionLoader, SeedLoader, keyed_positions


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 1000, 4097])
def test_the_order_is_a_permutation_of_every_position(n):
    order = keyed_positions(n, 7, 3, np.arange(n, dtype=np.uint64))
    assert np.array_equal(np.sort(order), np.arange(n))


def test_the_order_is_keyed_by_seed_and_epoch_and_deterministic():
    at = np.arange(5000, dtype=np.uint64)
    a = keyed_positions(5000, 1, 0, at)
    assert np.array_equal(a, keyed_positions(5000, 1, 0, at))
    assert not np.array_equal(a, keyed_positions(5000, 1, 1, at))
    assert not np.array_equal(a, keyed_positions(5000, 2, 0, at))
    assert not np.array_equal(a, np.arange(5000))  # shuffled, not the identity
    # any slice equals that slice of the whole order
    assert np.array_equal(keyed_positions(5000, 1, 0, at[1234:2345]), a[1234:2345])


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ranks_and_steps_deal_every_position_once_as_seed_loader_slots(world):
    n, batch = 1003, 40
    loaders = [PositionLoader(n, batch, rank=r, world_size=world, seed=5) for r in range(world)]
    seeds = SeedLoader(torch.arange(n), batch, rank=0, world_size=world, seed=5)
    assert loaders[0].num_batches == seeds.num_batches
    for epoch in (0, 1):
        got = []
        for step in range(loaders[0].num_batches):
            for r, loader in enumerate(loaders):
                b = loader.batch(epoch, step)
                assert b.numel() <= batch
                assert loader.slot_bounds(step) == seeds.slot_bounds(step, rank=r)
                got.append(b)
            assert seeds.global_count(step) == sum(int(b.numel()) for b in got[-world:])
        order = torch.cat(got)
        assert torch.equal(order, loaders[0].epoch_order(epoch))
        assert torch.equal(torch.sort(order).values, torch.arange(n))


def test_bad_arguments_are_refused():
    with pytest.raises(ConfigError, match="'n' must be an int >= 1"):
        PositionLoader(0, 4)
    with pytest.raises(ConfigError, match="'rank' must lie"):
        PositionLoader(10, 4, rank=2, world_size=2)
    with pytest.raises(ConfigError, match="'step' must lie"):
        PositionLoader(10, 4).batch(0, 3)


def test_a_batch_costs_memory_of_the_batch_not_of_the_positions():
    n, batch = 50_000_000, 1024  # an order of n int64 would be 400 MB
    loader = PositionLoader(n, batch, rank=1, world_size=2, seed=3)
    tracemalloc.start()
    try:
        b = loader.batch(2, loader.num_batches // 2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert b.numel() == batch and int(b.min()) >= 0 and int(b.max()) < n
    assert peak < 64 * batch * 8  # O(batch): a few arrays of the batch, nothing of n
