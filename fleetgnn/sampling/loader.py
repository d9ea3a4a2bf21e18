"""Seed batches for data-parallel mini-batch training, equal in number on every rank.

Each epoch the training IDs are shuffled by a generator keyed by ``(seed, epoch)`` (the same
permutation on every rank, no communication) and dealt into ``num_batches * world_size``
consecutive slots of near-equal size; step ``s`` of rank ``r`` reads slot ``s * world_size + r``.
With ``n`` IDs, ``W`` ranks and batch size ``B``:

- ``num_batches = ceil(n / (W * B))`` (``floor`` with ``drop_last``), identical on every rank, so
  no rank waits in a collective for a peer that ran out of batches;
- slot sizes differ by at most one and never exceed ``B`` (``n = 10, W = 2, B = 4``:
  ``num_batches = 2`` and the four slots hold ``3, 3, 2, 2`` IDs);
- a slot is empty only when ``n < num_batches * W`` (possible only with ``B == 1`` or
  ``n < W``); an empty batch is an int64 tensor of length 0, and the rank must still run the step
  (a zero-seed forward and its share of every collective, contributing 0 to loss sums);
- with ``drop_last``, only ``num_batches * W * B`` IDs are used (the tail of the permutation is
  dropped) and every slot holds exactly ``B``.

Rank/step layout for ``n = 10, W = 2, B = 4`` (``p`` is the epoch's permutation)::

    step 0: rank 0 <- p[0:3]   rank 1 <- p[3:6]
    step 1: rank 0 <- p[6:8]   rank 1 <- p[8:10]

The union over ranks and steps of one epoch is every training ID exactly once.

:class:`PositionLoader` deals positions ``[0, n)`` into the same slots without materialising the
epoch's order: :func:`keyed_positions`, a keyed bijection (a Feistel network with
cycle-walking), computes any slice of it on its own, so a batch costs ``O(batch)`` memory however
large ``n`` is (a large graph's training edges).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import ConfigError
from fleetgnn.keyhash import base_key, mix64_numpy


def _int_arg(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ConfigError(f"'{name}' must be an int >= {low} (got {value!r})")
    return int(value)


class _Slots:
    """The dealing both loaders share.

    ``num_batches * world_size`` slots of near-equal size over the first ``_num_used`` positions
    of an epoch's order; step ``s`` of rank ``r`` reads slot ``s * world_size + r``.
    """

    batch_size: int
    rank: int
    world_size: int
    seed: int
    num_batches: int
    _num_used: int

    def _check_deal(self, batch_size: int, rank: int, world_size: int, seed: int) -> None:
        self.batch_size = _int_arg("batch_size", batch_size, 1)
        self.world_size = _int_arg("world_size", world_size, 1)
        self.rank = _int_arg("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ConfigError(
                f"'rank' must lie in [0, world_size) = [0, {self.world_size}) (got {self.rank})"
            )
        self.seed = _int_arg("seed", seed, 0)

    def __len__(self) -> int:
        return self.num_batches

    def slot_bounds(self, step: int, rank: int | None = None) -> tuple[int, int]:
        """``[start, stop)`` of the slot of ``(step, rank)`` in the epoch's order."""
        rank = self.rank if rank is None else rank
        k = step * self.world_size + rank
        q, r = divmod(self._num_used, self.num_batches * self.world_size)
        start = k * q + min(k, r)
        return start, start + q + (1 if k < r else 0)

    def global_count(self, step: int) -> int:
        """Items of ``step`` over every rank (the sizes of its slots; no communication)."""
        bounds = (self.slot_bounds(step, rank=r) for r in range(self.world_size))
        return int(sum(hi - lo for lo, hi in bounds))

    def _check_step(self, step: int) -> int:
        step = _int_arg("step", step, 0)
        if step >= self.num_batches:
            raise ConfigError(
                f"'step' must lie in [0, num_batches) = [0, {self.num_batches}) (got {step})"
            )
        return step


class SeedLoader(_Slots):
    """Random-access batches of training seeds for one rank.

    Args:
        train_ids: int ``[n]`` distinct node IDs, or a bool mask ``[N]`` (its nonzero positions).
            Every rank must pass the same IDs and ``seed``.
        batch_size: Maximum seeds per rank per step (>= 1).
        rank: This rank, in ``[0, world_size)``.
        world_size: Number of data-parallel ranks (>= 1).
        seed: Base seed of the per-epoch shuffle (>= 0).
        shuffle: Shuffle each epoch; otherwise IDs are dealt in the given order.
        drop_last: Drop the IDs that do not fill a whole step of ``world_size * batch_size``.

    Raises:
        ConfigError: On a bad argument, empty or repeated ``train_ids``, or when ``drop_last``
            leaves no batch.
    """

    def __init__(
        self,
        train_ids: Tensor | np.ndarray,
        batch_size: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
    ) -> None:
        ids = torch.as_tensor(train_ids).cpu() if not isinstance(train_ids, Tensor) else train_ids
        ids = ids.cpu()
        if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex():
            raise ConfigError(
                f"'train_ids' must be 1-D integer node IDs or a bool mask (got {ids.dtype} with "
                f"shape {tuple(ids.shape)})"
            )
        if ids.dtype == torch.bool:
            ids = torch.nonzero(ids).flatten()
        ids = ids.to(torch.int64)
        n = ids.numel()
        if n == 0:
            raise ConfigError(
                "'train_ids' is empty; the training split must hold at least one node"
            )
        if int(ids.min()) < 0:
            raise ConfigError(f"'train_ids' holds a negative node ID ({int(ids.min())})")
        sorted_ids = torch.sort(ids).values
        rep = torch.nonzero(sorted_ids[1:] == sorted_ids[:-1]).flatten()
        if rep.numel():
            raise ConfigError(
                f"'train_ids' repeats node ID {int(sorted_ids[rep[0]])}; each seed must appear "
                f"once per epoch (deduplicate with torch.unique)"
            )
        self._check_deal(batch_size, rank, world_size, seed)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.train_ids = ids
        per_step = self.world_size * self.batch_size
        self.num_batches = n // per_step if self.drop_last else -(-n // per_step)
        if self.num_batches == 0:
            raise ConfigError(
                f"drop_last=True with {n} training seeds, batch_size {self.batch_size} and "
                f"world_size {self.world_size} leaves no batch; lower batch_size or set "
                f"drop_last=False"
            )
        self._num_used = self.num_batches * per_step if self.drop_last else n
        self._perm_epoch: int | None = None
        self._perm: Tensor | None = None

    @property
    def num_seeds(self) -> int:
        """Number of training IDs (over all ranks)."""
        return int(self.train_ids.numel())

    def epoch_order(self, epoch: int) -> Tensor:
        """All training IDs in the order epoch ``epoch`` deals them (same on every rank)."""
        epoch = _int_arg("epoch", epoch, 0)
        if not self.shuffle:
            return self.train_ids
        if self._perm_epoch != epoch:
            rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, epoch])))
            perm = torch.from_numpy(rng.permutation(self.num_seeds))
            self._perm, self._perm_epoch = self.train_ids[perm], epoch
        return self._perm  # type: ignore[return-value]

    def batch(self, epoch: int, step: int) -> Tensor:
        """This rank's seeds for step ``step`` of epoch ``epoch`` (int64, possibly empty).

        Raises:
            ConfigError: If ``step`` is outside ``[0, num_batches)``.
        """
        step = self._check_step(step)
        start, stop = self.slot_bounds(step)
        return self.epoch_order(epoch)[start:stop]

    def iter_epoch(self, epoch: int, start_step: int = 0) -> Iterator[Tensor]:
        """Yield this rank's batches of epoch ``epoch`` from ``start_step`` on (to resume)."""
        start_step = _int_arg("start_step", start_step, 0)
        for step in range(start_step, self.num_batches):
            yield self.batch(epoch, step)

    def __repr__(self) -> str:
        return (
            f"SeedLoader(num_seeds={self.num_seeds}, batch_size={self.batch_size}, "
            f"rank={self.rank}, world_size={self.world_size}, num_batches={self.num_batches}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last})"
        )


#: Feistel rounds of :func:`keyed_positions` (four rounds of a keyed mix make a strong bijection).
_ORDER_ROUNDS = 4
_SALT_ORDER = 0x6F72646572  # "order"


def keyed_positions(n: int, seed: int, epoch: int, at: np.ndarray) -> np.ndarray:
    """``pi(at)`` for a keyed bijection ``pi`` of ``[0, n)``, keyed by ``(seed, epoch)``.

    A balanced Feistel network over ``[0, 4^k)`` (``4^k >= n``, the smallest such) with
    cycle-walking: a value landing at or beyond ``n`` is sent through the network again until it
    falls inside, which restricts the bijection of ``[0, 4^k)`` to one of ``[0, n)`` (each walk
    takes under four passes on average, since ``4^k < 4 n``). Memory is ``O(len(at))``: any slice of
    the epoch's order is computed on its own.
    """
    k = max(1, (max(n - 1, 1).bit_length() + 1) // 2)
    mask = np.uint64((1 << k) - 1)
    keys = [np.uint64(base_key(_SALT_ORDER, seed, epoch, r)) for r in range(_ORDER_ROUNDS)]

    def rounds(j: np.ndarray) -> np.ndarray:
        left, right = (j >> np.uint64(k)) & mask, j & mask
        for key in keys:
            left, right = right, left ^ (mix64_numpy(right ^ key) & mask)
        return (left << np.uint64(k)) | right

    out = rounds(np.asarray(at, dtype=np.uint64))
    walk = np.flatnonzero(out >= np.uint64(n))
    while walk.size:
        out[walk] = rounds(out[walk])
        walk = walk[out[walk] >= np.uint64(n)]
    return out.astype(np.int64)


class PositionLoader(_Slots):
    """Random-access batches of positions ``[0, n)`` for one rank, in ``O(batch)`` memory.

    Dealt as :class:`SeedLoader` deals its IDs (the same slots, steps and counts per rank), but
    each epoch's order is :func:`keyed_positions` keyed by ``(seed, epoch)`` rather than a
    materialised permutation: a batch computes only its own positions, so ``n`` (a large
    graph's training edges) costs no memory. Every rank derives the same order without
    communicating.

    Args:
        n: Number of positions (>= 1).
        batch_size: Maximum positions per rank per step (>= 1).
        rank: This rank, in ``[0, world_size)``.
        world_size: Number of data-parallel ranks (>= 1).
        seed: Base seed of the per-epoch order (>= 0).

    Raises:
        ConfigError: On a bad argument.
    """

    def __init__(
        self, n: int, batch_size: int, *, rank: int = 0, world_size: int = 1, seed: int = 0
    ) -> None:
        self.n = _int_arg("n", n, 1)
        self._check_deal(batch_size, rank, world_size, seed)
        self.num_batches = -(-self.n // (self.world_size * self.batch_size))
        self._num_used = self.n

    def epoch_order(self, epoch: int, start: int = 0, stop: int | None = None) -> Tensor:
        """Positions ``[start, stop)`` of epoch ``epoch``'s order (int64; default: all of it)."""
        epoch = _int_arg("epoch", epoch, 0)
        stop = self.n if stop is None else stop
        at = np.arange(start, stop, dtype=np.uint64)
        return torch.from_numpy(keyed_positions(self.n, self.seed, epoch, at))

    def batch(self, epoch: int, step: int) -> Tensor:
        """This rank's positions for step ``step`` of epoch ``epoch`` (int64, possibly empty).

        Raises:
            ConfigError: If ``step`` is outside ``[0, num_batches)``.
        """
        step = self._check_step(step)
        return self.epoch_order(epoch, *self.slot_bounds(step))

    def __repr__(self) -> str:
        return (
            f"PositionLoader(n={self.n}, batch_size={self.batch_size}, rank={self.rank}, "
            f"world_size={self.world_size}, num_batches={self.num_batches})"
        )
