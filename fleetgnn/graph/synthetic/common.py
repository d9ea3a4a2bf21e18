"""What every synthetic generator shares: keyed random streams, block writers, CSC passes, sinks.

Every random number of every generator comes from a counter-based Philox stream keyed by
``(seed, stream, block)`` (:func:`philox`) over fixed-size blocks of nodes, feature rows
and edge draws, so the arrays never depend on how many blocks a step processes. Stream IDs are
each generator's own (homogeneous 0..5, temporal 16..17, typed 100 and up).

The CSC of a generated graph is built by regenerating its draws instead of storing them:
:func:`count_in_degrees` (pass 1), :func:`cursor_positions` (pass 2, each edge at its
destination's cursor), then a per-segment sort
(:func:`~fleetgnn.graph.csc_passes.sort_segments_by_time`).
Arrays go to a :class:`Sink`: RAM (:class:`MemorySink`) or a dataset directory
(:class:`DiskSink`, memory maps).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np

from fleetgnn.errors import DatasetError
from fleetgnn.graph.csc_passes import add_counts
from fleetgnn.graph.dataset import DatasetWriter

NODE_BLOCK = 1 << 16  # nodes per random block (classes, weights, splits, label noise)
FEATURE_BLOCK = 1 << 14  # feature rows per random block
EDGE_BLOCK = 1 << 14  # undirected edge draws per random block

#: ``progress(done, total)``, called after each step of a generator.
Progress = Callable[[int, int], None]

MASKS = ("train_mask", "val_mask", "test_mask")


def is_real(value: object) -> bool:
    """Whether ``value`` is a finite int or float (numpy scalars included, bools not)."""
    return (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


# ---------------------------------------------------------------------------- random streams
def philox(seed: int, stream: int, block: int) -> np.random.Generator:
    """A Philox generator keyed by (seed, stream, block): the same numbers for any chunking."""
    return np.random.Generator(
        np.random.Philox(np.random.SeedSequence(entropy=seed, spawn_key=(stream, block)))
    )


def blocks(n: int, size: int) -> Iterator[tuple[int, int, int]]:
    """``(b, lo, hi)`` of the fixed blocks of ``size`` rows over ``[0, n)``; ``b`` keys a stream."""
    for b, lo in enumerate(range(0, n, size)):
        yield b, lo, min(n, lo + size)


def split_masks(
    masks: dict[str, np.ndarray], lo: int, hi: int, u: np.ndarray, fracs: tuple[float, ...]
) -> None:
    """Rows ``[lo, hi)`` of the split masks from the uniforms ``u``.

    Fractions ``(t, v, s)``: train ``[0, t)``, val ``[t, t + v)``, test ``[t + v, t + v + s)``.
    """
    t = float(fracs[0])
    v = t + float(fracs[1])
    s = v + float(fracs[2])
    masks["train_mask"][lo:hi] = u < t
    masks["val_mask"][lo:hi] = (u >= t) & (u < v)
    masks["test_mask"][lo:hi] = (u >= v) & (u < s)


def write_labels(
    y: np.ndarray,
    community: Callable[[int, int], np.ndarray],
    label_noise: float,
    redraw: Callable[[np.ndarray], np.ndarray],
    seed: int,
    stream: int,
) -> None:
    """Fill the int64 labels ``y`` block by block.

    A label is the node's community (``community(lo, hi)``) or, with probability
    ``label_noise``, ``redraw(u)`` of a uniform ``u`` (a stream of its own, so nothing else
    changes with ``label_noise``).
    """
    rho = float(label_noise)
    for b, lo, hi in blocks(int(y.shape[0]), NODE_BLOCK):
        block = community(lo, hi).astype(np.int64)
        if rho > 0.0:
            u = philox(seed, stream, b).random((2, hi - lo))
            flip = u[0] < rho
            block[flip] = redraw(u[1][flip])
        y[lo:hi] = block


def write_features(
    x: np.ndarray,
    mu: np.ndarray,
    noise: np.float32,
    community: Callable[[int, int], np.ndarray],
    seed: int,
    stream: int,
    tick: Callable[[int], None],
) -> None:
    """Fill ``x`` ``[N, F]`` block by block: ``mu[community(lo, hi)] + noise * eps`` (float32).

    Callers scale ``mu`` and ``noise`` by ``s = 1 / sqrt(1 + feature_noise**2)``, so every
    feature has unit variance without a change of the signal-to-noise ratio and deep models
    train at ordinary learning rates without a normalisation step.
    """
    n, f = int(x.shape[0]), int(x.shape[1])
    for b, lo, hi in blocks(n, FEATURE_BLOCK):
        block = philox(seed, stream, b).standard_normal((hi - lo, f), dtype=np.float32)
        block *= noise
        block += mu[community(lo, hi)]
        x[lo:hi] = block
        tick(hi - lo)


def check_seed(seed: object) -> int:
    """``seed`` as an int, or a :class:`DatasetError` unless it is an integer >= 0."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise DatasetError(f"'seed' must be an integer >= 0 (got {seed!r})")
    return int(seed)


def check_chunk_edges(chunk_edges: object) -> int:
    """``chunk_edges`` as an int, or a :class:`DatasetError` unless it is an integer >= 1."""
    if (
        isinstance(chunk_edges, bool)
        or not isinstance(chunk_edges, (int, np.integer))
        or chunk_edges < 1
    ):
        raise DatasetError(
            f"'chunk_edges' must be an integer >= 1 (got {chunk_edges!r}); it bounds the edges "
            f"held in memory per step, e.g. 4_000_000"
        )
    return int(chunk_edges)


# ---------------------------------------------------------------------------- CSC passes
def cumsum_in_place(a: np.ndarray) -> None:
    """Inclusive prefix sum of the int64 array ``a`` in place, one node block at a time."""
    carry = 0
    for lo in range(0, a.size, NODE_BLOCK):
        seg = a[lo : lo + NODE_BLOCK]
        seg[0] += carry
        np.cumsum(seg, out=seg)
        carry = int(seg[-1])


def count_in_degrees(
    ptr: np.ndarray,
    chunks: list[tuple[int, int]],
    draw: Callable[[int, int], tuple[np.ndarray, ...]],
    num_draws: int,
    tick: Callable[[int], None],
) -> None:
    """Pass 1: add the in-degree of both directions of every draw into ``ptr[1:]``."""
    for b0, b1 in chunks:
        src, dst = draw(b0, b1)[:2]
        add_counts(ptr[1:], src)
        add_counts(ptr[1:], dst)
        tick(2 * (min(b1 * EDGE_BLOCK, num_draws) - b0 * EDGE_BLOCK))


def cursor_positions(ptr: np.ndarray, fill: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Pass 2: the slots of the sorted destinations ``dst`` past their segments' fill counts.

    ``fill[d]`` (the count placed so far in ``d``'s segment) advances by ``d``'s count.
    """
    first = np.ones(dst.size, dtype=bool)
    first[1:] = dst[1:] != dst[:-1]
    starts = np.flatnonzero(first)
    group = np.cumsum(first) - 1
    pos = ptr[dst] + fill[dst] + (np.arange(dst.size, dtype=np.int64) - starts[group])
    fill[dst[starts]] += np.diff(np.append(starts, dst.size)).astype(fill.dtype)
    return pos


def sort_pairs(major: np.ndarray, minor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort ID pairs by ``(major, minor)``; both must be non-negative integers.

    IDs below 2^31 are packed into one int64 key (``major << 32 | minor``) and sorted with
    ``np.sort``, several times faster than ``argsort`` plus two gathers.
    """
    if major.size == 0:
        return major.astype(np.int64), np.asarray(minor, dtype=np.int64)
    if int(major.max()) < 2**31 and int(minor.max()) < 2**31:
        key = major.astype(np.int64)
        key <<= 32
        key |= minor
        key.sort()
        low = key & 0xFFFFFFFF
        key >>= 32
        return key, low
    order = np.lexsort((minor, major))  # pragma: no cover - beyond 2^31 nodes
    return np.asarray(major)[order].astype(np.int64), np.asarray(minor)[order].astype(np.int64)


# ---------------------------------------------------------------------------- sinks
class Sink(Protocol):
    """Where a generator puts its arrays (``create``) and its edge scratch (``scratch``)."""

    def create(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A new output array ``name`` (uninitialised)."""
        ...

    def scratch(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """The scratch edge array (one at a time), dropped by :meth:`drop_scratch`."""
        ...

    def drop_scratch(self) -> None:
        """Release the scratch array."""
        ...


class MemorySink:
    """Collects arrays in RAM (for :func:`~fleetgnn.graph.synthetic.generate_graph`)."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def create(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A new array kept as ``arrays[name]``."""
        self.arrays[name] = np.empty(shape, dtype=dtype)
        return self.arrays[name]

    def scratch(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A scratch array in RAM."""
        return np.empty(shape, dtype=dtype)

    def drop_scratch(self) -> None:
        """Nothing to do: the scratch array goes with its last reference."""


_SCRATCH = ".scratch-indices.npy"


class DiskSink:
    """Writes arrays through a :class:`DatasetWriter`; scratch lives in its temporary directory."""

    def __init__(self, writer: DatasetWriter) -> None:
        self.writer = writer
        self._scratch = writer.tmp / _SCRATCH

    def create(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A new ``.npy`` memory map ``name`` of the dataset."""
        return self.writer.create(name, dtype, shape)

    def scratch(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A scratch memory map in the writer's temporary directory."""
        return self.writer.scratch(_SCRATCH, dtype, shape)  # space reserved: no SIGBUS

    def drop_scratch(self) -> None:
        """Delete the scratch file."""
        self._scratch.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- progress
class Ticker:
    """Counts work done towards ``total`` and reports it as ``progress(done, total)``."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.done, self.total, self.progress = 0, total, progress

    def __call__(self, amount: int) -> None:
        """Add ``amount`` of work done (capped at ``total``) and report it."""
        self.done = min(self.total, self.done + int(amount))
        if self.progress is not None:
            self.progress(self.done, self.total)

    def to(self, done: int) -> None:
        """Advance to ``done`` (never back)."""
        self(max(0, done - self.done))
