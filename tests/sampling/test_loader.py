import numpy as np
import pytest
import torch

from fleetgnn.errors import ConfigError
from fleetgnn.sampling import SeedLoader


def loaders(ids: torch.Tensor, batch_size: int, world_size: int, **kw: object) -> list[SeedLoader]:
    return [
        SeedLoader(ids, batch_size, rank=r, world_size=world_size, **kw)  # type: ignore[arg-type]
        for r in range(world_size)
    ]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 3, 7, 10, 64, 101])
@pytest.mark.parametrize("batch_size", [1, 2, 5, 16])
def test_epoch_covers_train_set_exactly_once(world_size: int, n: int, batch_size: int) -> None:
    ids = torch.from_numpy(np.random.default_rng(n).permutation(1000)[:n])
    ls = loaders(ids, batch_size, world_size, seed=3)
    nb = ls[0].num_batches
    assert all(ld.num_batches == nb == len(ld) for ld in ls)
    assert nb == -(-n // (world_size * batch_size))
    seen = []
    sizes = []
    for ld in ls:
        batches = list(ld.iter_epoch(4))
        assert len(batches) == nb
        for b in batches:
            assert b.dtype == torch.int64 and b.numel() <= batch_size
            sizes.append(b.numel())
            seen.extend(b.tolist())
    assert sorted(seen) == sorted(ids.tolist())
    assert max(sizes) - min(sizes) <= 1
    if batch_size >= 2 and n >= world_size:
        assert min(sizes) >= 1  # never empty


def test_union_over_ranks_per_step_is_contiguous_in_epoch_order() -> None:
    ids = torch.arange(10)
    ls = loaders(ids, 4, 2, seed=1)
    order = ls[0].epoch_order(0)
    assert torch.equal(order, ls[1].epoch_order(0))  # same permutation on every rank
    assert [ld.batch(0, 0).numel() for ld in ls] == [3, 3]
    assert [ld.batch(0, 1).numel() for ld in ls] == [2, 2]
    assert torch.equal(torch.cat([ls[0].batch(0, 1), ls[1].batch(0, 1)]), order[6:10])


def test_shuffle_reproducible_and_epoch_dependent() -> None:
    ids = torch.arange(100)
    a = SeedLoader(ids, 8, seed=5)
    b = SeedLoader(ids, 8, seed=5)
    assert torch.equal(a.batch(2, 3), b.batch(2, 3))
    assert torch.equal(a.batch(2, 3), list(b.iter_epoch(2))[3])
    assert not torch.equal(a.epoch_order(0), a.epoch_order(1))
    assert not torch.equal(a.epoch_order(0), SeedLoader(ids, 8, seed=6).epoch_order(0))
    assert not torch.equal(a.epoch_order(0), ids)
    # random access does not depend on what was read before
    a.batch(7, 0)
    assert torch.equal(a.batch(2, 3), b.batch(2, 3))


def test_no_shuffle_keeps_order_and_start_step_resumes() -> None:
    ids = torch.tensor([9, 4, 7, 1, 3])
    ld = SeedLoader(ids, 2, shuffle=False)
    assert [b.tolist() for b in ld.iter_epoch(0)] == [[9, 4], [7, 1], [3]]
    assert [b.tolist() for b in ld.iter_epoch(0, start_step=1)] == [[7, 1], [3]]


def test_drop_last() -> None:
    ids = torch.arange(23)
    ls = loaders(ids, 4, 2, drop_last=True, seed=0)
    assert ls[0].num_batches == 2
    seen = [b for ld in ls for b in ld.iter_epoch(1)]
    assert all(b.numel() == 4 for b in seen)
    flat = torch.cat(seen)
    assert flat.unique().numel() == 16
    assert torch.equal(flat.sort().values, ls[0].epoch_order(1)[:16].sort().values)


def test_empty_batches_when_fewer_seeds_than_slots() -> None:
    ls = loaders(torch.tensor([5, 6]), 4, 3, shuffle=False)
    got = [ld.batch(0, 0).tolist() for ld in ls]
    assert got == [[5], [6], []]
    assert ls[2].batch(0, 0).dtype == torch.int64


def test_bool_mask_input() -> None:
    mask = np.zeros(10, dtype=bool)
    mask[[1, 4, 8]] = True
    ld = SeedLoader(mask, 2, shuffle=False)
    assert ld.train_ids.tolist() == [1, 4, 8] and ld.num_batches == 2


@pytest.mark.parametrize(
    ("args", "kw", "match"),
    [
        ((torch.arange(5), 0), {}, "batch_size"),
        ((torch.arange(5), 2), {"rank": 2, "world_size": 2}, "rank"),
        ((torch.arange(5), 2), {"world_size": 0}, "world_size"),
        ((torch.tensor([], dtype=torch.int64), 2), {}, "empty"),
        ((torch.tensor([1, 2, 1]), 2), {}, "repeats node ID 1"),
        ((torch.tensor([1, -2]), 2), {}, "negative"),
        ((torch.rand(4), 2), {}, "1-D integer"),
        ((torch.arange(5), 4), {"drop_last": True, "world_size": 2}, "leaves no batch"),
    ],
)
def test_loader_errors(args: tuple, kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        SeedLoader(*args, **kw)


def test_batch_step_out_of_range() -> None:
    ld = SeedLoader(torch.arange(5), 2)
    with pytest.raises(ConfigError, match=r"\[0, 3\)"):
        ld.batch(0, 3)
    assert "num_batches=3" in repr(ld)
