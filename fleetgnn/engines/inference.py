"""Streaming layer-wise full-neighbour inference: bounded memory, spread over ranks.

One layer at a time over every node (or only the nodes ``select`` needs, see below), in eval mode
(no dropout), each destination with all its in-edges, so the result is the model's exact full-graph
function. Rank ``r`` of ``W`` computes the contiguous destination range :func:`rank_range` gives
it, in chunks cut from the topology's CSC ``indptr`` (a memory map) so that a chunk holds at most
``max_nodes`` destinations and ``max_edges`` in-edges (:class:`Chunking`; a node with more in-edges
than that is a chunk alone): a hub never blows a chunk up.

Each non-final layer's output goes to a ``[N, width]`` ``.npy`` scratch file (``[|S_l|, width]``
with ``select``, below) with its space reserved (:func:`~fleetgnn.graph.files.create_npy`: a full
disk is a one-line :class:`~fleetgnn.errors.DiskFullError` on every rank, never a SIGBUS), in a
temporary directory named after its owner process (:func:`~fleetgnn.graph.files.temp_prefix`, so a
later ``train`` sweeps what a killed process left) inside ``scratch_dir`` (``fleetgnn train``: the
run directory; ``None``: the system's temporary directory), removed at the end, also on errors.
Rows are written with ``pwrite`` and the next layer reads the rows ``h_prev[src_ids]`` of each
chunk's sources with a :class:`~fleetgnn.graph.rows.RowReader`: rows in the page cache are copied
through its mapping and unmapped block by block, others read with coalesced ``preadv`` calls; the
files' pages stay in the page cache and never stay part of the process's resident memory.
One process whose hidden layers are each at most :data:`IN_MEMORY_LAYER_BYTES`
(``Chunking.in_memory_bytes``) keeps them in memory instead: a small graph never touches the
disk (Cora's evaluation would otherwise write and read two scratch files every epoch).

==============  ===========================================  ================================
ranks           scratch file of a layer                      before the next layer reads it
==============  ===========================================  ================================
one host        one file, every rank writes its range        a barrier
several hosts   one file per rank                            the other ranks' ranges are
                                                             all-gathered in blocks of bounded
                                                             rows (never a whole layer)
==============  ===========================================  ================================

The final layer's rows go to a *sink* chunk by chunk (:data:`Sink`): :class:`MetricSums` for
evaluation (per-split correct counts and the validation loss sum, all-reduced at the end: the
numbers :func:`~fleetgnn.engines.common.split_metrics` gives over all nodes at once),
:class:`RowWriter` for ``predict``/``embed`` (rows into ``.npy`` files).

With ``select`` (``train.eval_nodes=labelled``) every layer computes only the destinations the
selected nodes need: layer ``l`` of ``L`` (0-based) computes the set ``S_l``, where ``S_{L-1}``
is ``select`` and ``S_l = S_{l+1}`` plus the in-neighbours of ``S_{l+1}`` (the sources of the
next layer's full-neighbour blocks). :func:`needed_sets` builds ``S_{L-2}, ..., S_0`` before
the first layer by streaming over the in-edges of the previous set (``topology.all_neighbors``
in chunks; ranks split the destinations and OR their masks with bounded all-reduces), each kept
as a :class:`NodeSet` bitmap with per-word prefix counts (2 bits per node per set; 1 byte per
node while a set is built). A hidden layer's scratch file is then *compact*: ``[|S_l|, width]``,
row ``k`` holding the ``k``-th member of ``S_l`` in ID order (:meth:`NodeSet.position`), so its
space, the free-space check and the bytes written and read are ``|S_l|`` rows, not ``N``, and
each chunk (ascending members, none skipped) is still one contiguous ``pwrite``. (A sparse
``[N, width]`` file instead would allocate whole file-system blocks, 8 rows of 512 bytes each,
around scattered members, rely on the file system's holes, and need a write per run of
consecutive IDs.) Measured on papers-like 0.01 (1.1M nodes, 1.4% labelled, hidden 128, 2
ranks): 2 layers compute 178k instead of 1.1M rows in layer 1, scratch 91 MB instead of 569 MB,
evaluation 8.5 s instead of 20 s; with 3 layers ``S_0`` is 94% of the nodes (the saving is then
the middle layer's).

Memory per process: the model, one chunk's block, its source rows (at most ``max_nodes +
max_edges`` rows), its output rows and the layer's work on them; with the default chunking
(:data:`DEFAULT_CHUNK_BYTES` of source rows at the layer's wider width) that is about 6 x 32 MiB
whatever ``N`` (measured: 77 MB above the start for a 250k-node, hidden-320 evaluation whose one
layer is 320 MB; with ``select``, plus its sets: 2 bits per node each). No ``N``-sized float array
is ever held. When the ranks' device reads are collective (the minibatch engine's two-sided store),
every rank runs the same number of chunks per layer (shorter ranges add empty chunks).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fleetgnn.config.knobs import EVAL_NODES
from fleetgnn.engines.common import SPLITS, check_labels, metrics_from_sums
from fleetgnn.errors import ConfigError, FleetgnnError
from fleetgnn.graph import Graph
from fleetgnn.graph.files import create_npy, disk_full_error, free_bytes, temp_prefix
from fleetgnn.graph.rows import READ_GAP_BYTES as READ_GAP_BYTES
from fleetgnn.graph.rows import READ_RUN_BYTES as READ_RUN_BYTES
from fleetgnn.graph.rows import RowReader as RowReader
from fleetgnn.nn import LocalAggregator
from fleetgnn.sampling import Block, full_neighbor_block

#: Bytes of one chunk's input rows the default :class:`Chunking` aims at.
DEFAULT_CHUNK_BYTES = 32 << 20
#: A single process keeps a hidden layer in memory (no scratch file) up to this many bytes.
IN_MEMORY_LAYER_BYTES = 64 << 20
#: Most destinations in one chunk by default.
MAX_CHUNK_NODES = 65536

#: A final-layer consumer: ``sink(ids, rows)`` with ``ids`` int64 ``[D]`` ascending global IDs
#: and ``rows`` ``[D, width]`` the layer's output for them (called once per non-empty chunk).
Sink = Callable[[np.ndarray, torch.Tensor], None]
#: Destination filter of the final layer: ``select(a, b)`` -> bool ``[b - a]`` over ``[a, b)``.
Select = Callable[[int, int], np.ndarray]

_DISK_FIX = (
    "free some space there, or put the scratch files on another disk (they go to the run "
    "directory: fleetgnn train --run-dir; Python: scratch_dir=)"
)


@dataclasses.dataclass(frozen=True)
class Chunking:
    """How each rank cuts its destination range into chunks.

    Attributes:
        max_nodes: Destinations per chunk (``None``: ``min(65536, max_edges / 4)``: a layer
            keeps several tensors of a chunk's output rows).
        max_edges: In-edges per chunk (``None``: ``target_bytes`` over the size of the layer's
            wider row, input or output, at least 1024). A node with more in-edges is a chunk of
            its own.
        target_bytes: Bytes of one chunk's source rows (at the layer's wider width) that the
            defaults aim at: a chunk has at most ``max_nodes + max_edges`` source rows, which a
            layer may transform to its output width before aggregating.
        in_memory_bytes: A single process keeps each hidden layer in memory instead of a
            scratch file when the layer (``[N, width]``) is at most this many bytes: small
            graphs never touch the disk (0: always files).

    Raises:
        ConfigError: A limit below 1.
    """

    max_nodes: int | None = None
    max_edges: int | None = None
    target_bytes: int = DEFAULT_CHUNK_BYTES
    in_memory_bytes: int = IN_MEMORY_LAYER_BYTES

    def __post_init__(self) -> None:
        for name in ("max_nodes", "max_edges", "target_bytes", "in_memory_bytes"):
            v = getattr(self, name)
            low = 0 if name == "in_memory_bytes" else 1
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low):
                raise ConfigError(f"Chunking.{name}={v!r} is invalid: must be an int >= {low}")

    def limits(self, width: int, itemsize: int) -> tuple[int, int]:
        """``(max_nodes, max_edges)`` for a layer whose wider rows are ``width`` x ``itemsize``."""
        edges = self.max_edges
        if edges is None:
            edges = max(1024, self.target_bytes // max(1, width * itemsize))
        nodes = self.max_nodes
        if nodes is None:
            nodes = max(1, min(MAX_CHUNK_NODES, edges // 4))
        return int(nodes), int(edges)


def rank_range(num_nodes: int, world_size: int, rank: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous destination range ``[lo, hi)`` of ``[0, N)`` (even split)."""
    bounds = np.linspace(0, num_nodes, world_size + 1).astype(np.int64)
    return int(bounds[rank]), int(bounds[rank + 1])


def iter_chunks(
    indptr: Any,
    lo: int,
    hi: int,
    max_nodes: int,
    max_edges: int,
    select: Select | None = None,
) -> Iterator[np.ndarray]:
    """Ascending destination IDs of ``[lo, hi)``, cut into chunks by node and in-edge count.

    Reads ``indptr`` (and ``select``) in windows of a few chunks, so a memory map is never read
    whole. Every chunk has at most ``max_nodes`` IDs and ``max_edges`` in-edges, except a single
    node with more in-edges, which is a chunk alone.

    Args:
        indptr: The CSC ``indptr`` ``[N + 1]`` (any array; a memory map is fine).
        lo: First destination.
        hi: One past the last destination.
        max_nodes: Destinations per chunk (>= 1).
        max_edges: In-edges per chunk (>= 1).
        select: Keep only the destinations it marks (``None``: all).

    Yields:
        int64 ``[D]`` arrays of destination IDs, ``0 < D <= max_nodes``.
    """
    window = max(8 * max_nodes, 1 << 16)
    for w0 in range(lo, hi, window):
        w1 = min(hi, w0 + window)
        deg = np.diff(np.asarray(indptr[w0 : w1 + 1], dtype=np.int64))
        ids = np.arange(w0, w1, dtype=np.int64)
        if select is not None:
            keep = np.asarray(select(w0, w1), dtype=bool)
            ids, deg = ids[keep], deg[keep]
        ends = np.cumsum(deg)
        start = 0
        while start < ids.size:
            base = int(ends[start - 1]) if start else 0
            end = int(np.searchsorted(ends, base + max_edges, side="right"))
            end = min(max(end, start + 1), start + max_nodes, ids.size)
            yield ids[start:end]
            start = end


def _in_step(chunks: Iterator[np.ndarray], rounds: int) -> Iterator[np.ndarray]:
    """``chunks``, then empty ones up to ``rounds`` chunks in all.

    Every rank runs the same number of chunks, so collective reads (a two-sided store) stay in
    step.
    """
    n = 0
    for ids in chunks:
        n += 1
        yield ids
    for _ in range(n, rounds):
        yield np.zeros(0, dtype=np.int64)


def _count_chunks(*args: Any) -> int:
    return sum(1 for _ in iter_chunks(*args))


def labelled_selector(graph: Graph) -> Select:
    """``select`` keeping the nodes of any of the graph's train/val/test masks."""
    masks = [m for s in SPLITS if (m := getattr(graph, f"{s}_mask")) is not None]

    def select(a: int, b: int) -> np.ndarray:
        keep = np.zeros(b - a, dtype=bool)
        for m in masks:
            keep |= np.asarray(m[a:b], dtype=bool)
        return keep

    return select


_POPCOUNT8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits of each ``uint64`` word, int64."""
    count = getattr(np, "bitwise_count", None)  # numpy >= 2.0
    if count is not None:
        return count(words).astype(np.int64)
    data = np.ascontiguousarray(words, dtype=np.uint64)
    return _POPCOUNT8[data.view(np.uint8)].reshape(-1, 8).sum(axis=1)


class NodeSet:
    """A set of node IDs of ``[0, N)``: a bitmap and the members before each 64-bit word.

    Memory: ``N / 8`` bytes of bits plus ``N / 8`` bytes of int64 prefix counts, 2 bits per node
    (28 MB at 111M nodes). :meth:`select` is a :data:`Select`; :meth:`position` maps members to
    their rank in ID order (the row of a compact ``[size, width]`` file).

    Args:
        mask: bool ``[N]`` membership (read once; not kept).
    """

    def __init__(self, mask: np.ndarray) -> None:
        n = int(mask.size)
        self.num_nodes = n
        bits = np.packbits(np.asarray(mask, dtype=bool), bitorder="little")
        # one spare word, so that position() also counts below ID N
        self._bytes = np.zeros(8 * (n // 64 + 1), dtype=np.uint8)
        self._bytes[: bits.size] = bits
        self._words = self._bytes.view("<u8")
        self._prefix = np.zeros(self._words.size + 1, dtype=np.int64)
        np.cumsum(_popcount(self._words), out=self._prefix[1:])
        #: Number of members.
        self.size = int(self._prefix[-1])

    def select(self, a: int, b: int) -> np.ndarray:
        """Membership of ``[a, b)``, bool ``[b - a]``."""
        first = a // 8
        bits = np.unpackbits(self._bytes[first : (b + 7) // 8], bitorder="little")
        return bits[a - 8 * first : b - 8 * first].view(bool)

    def position(self, ids: np.ndarray) -> np.ndarray:
        """Members below each ID of ``[0, N]`` (a member's row in a compact file), int64."""
        ids = np.asarray(ids, dtype=np.int64)
        word = ids >> 6
        low = np.left_shift(np.uint64(1), (ids & 63).astype(np.uint64)) - np.uint64(1)
        return self._prefix[word] + _popcount(self._words[word] & low)


def needed_sets(
    topology: Any,
    indptr: Any,
    select: Select,
    layers: int,
    *,
    comm: Any = None,
    device: torch.device | str = "cpu",
    chunking: Chunking | None = None,
) -> list[NodeSet]:
    """``[S_0, ..., S_{layers-2}]``: the destinations each hidden layer computes for ``select``.

    ``S_{layers-1}`` is ``select``; ``S_l`` is ``S_{l+1}`` and every in-neighbour of it. Built
    from the last set back by streaming: chunks of ``S_{l+1}``'s members (at most
    ``Chunking.target_bytes / 32`` in-edges each) have their in-neighbours read with
    ``topology.all_neighbors`` and marked in a bool ``[N]`` mask (1 byte per node, freed once it
    is a :class:`NodeSet`). With several ranks each marks the in-edges of its own
    :func:`rank_range` (equal numbers of topology reads on every rank, as a store's reads may be
    collective), then the masks are OR-ed with ``all_reduce(max)`` in blocks of
    ``target_bytes``; every rank ends with the same sets. Collective with ``comm``.

    Args:
        topology: A sampler topology source.
        indptr: The CSC ``indptr`` (a memory map is fine), to cut chunks.
        select: The last layer's destinations.
        layers: Layers run (``>= 1``; 1 needs no set).
        comm: The communicator (``None``: one process).
        device: The communicator's device.
        chunking: Its ``target_bytes`` bounds the chunks and all-reduce blocks.

    Returns:
        The sets, ``S_0`` first (empty for one layer).
    """
    chunking = chunking or Chunking()
    world, rank = _world(comm)
    num_nodes = int(len(indptr)) - 1
    lo, hi = rank_range(num_nodes, world, rank)
    # per in-edge: its int64 neighbour ID plus the reader's int64 positions and repeats
    max_nodes, max_edges = chunking.limits(4, 8)
    sets: list[NodeSet] = []
    upper = select
    for _ in range(layers - 1):
        mask = np.zeros(num_nodes, dtype=bool)
        mine = _count_chunks(indptr, lo, hi, max_nodes, max_edges, upper) if world > 1 else 0
        rounds = _max_over_ranks(comm, mine, device)
        for ids in _in_step(iter_chunks(indptr, lo, hi, max_nodes, max_edges, upper), rounds):
            _, nbrs = topology.all_neighbors(torch.from_numpy(ids))
            mask[ids] = True
            mask[nbrs.cpu().numpy()] = True
        if world > 1:
            step = max(1, chunking.target_bytes)
            for a in range(0, num_nodes, step):
                part = torch.from_numpy(mask[a : a + step].view(np.uint8)).to(device)
                comm.all_reduce(part, op="max")
                mask[a : a + step] = part.cpu().numpy().view(bool)
        level = NodeSet(mask)
        del mask
        sets.append(level)
        upper = level.select
    sets.reverse()
    return sets


def rows_of(array: Any, ids: np.ndarray) -> np.ndarray:
    """``array[ids]`` for ascending ``ids``: one slice when they are contiguous."""
    if ids.size and int(ids[-1]) - int(ids[0]) + 1 == ids.size:
        return np.asarray(array[int(ids[0]) : int(ids[-1]) + 1])
    return np.asarray(array[ids])


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


# ---------------------------------------------------------------------------------- row files
#: Consecutive bytes a :class:`RowFile` writes before it flushes them and drops them from the
#: page cache.
DROP_WRITTEN_BYTES = 64 << 20


class RowFile:
    """A ``.npy`` file of ``[N, ...]`` rows written range by range with ``pwrite``.

    :meth:`create` reserves the file's space first (a full disk is a one-line
    :class:`~fleetgnn.errors.DiskFullError`); :meth:`open` opens an existing one (another rank's).
    Writes go straight to the file, never through a mapping, so nothing becomes resident here.
    Every :data:`DROP_WRITTEN_BYTES` of consecutive rows written are flushed (``fdatasync``) and
    dropped from the page cache (``POSIX_FADV_DONTNEED``): a layer's output would otherwise push
    the layer's input, which every chunk reads at random, out of the cache (at papers-like 0.3 the
    features, the topology and the first scratch layer together are about the machine's memory).
    The next layer reads the file back ahead in one sequential pass (see
    :mod:`fleetgnn.graph.rows`).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._pending: tuple[int, int] | None = None  # written, not yet flushed: [from, to)
        with open(self.path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            self.offset = f.tell()
        self.shape: tuple[int, ...] = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        self._fd: int | None = os.open(self.path, os.O_WRONLY)

    @classmethod
    def create(cls, path: Path, dtype: Any, shape: tuple[int, ...], fix: str = _DISK_FIX) -> Path:
        """Create ``path`` (space reserved) and return it; open it with :class:`RowFile`."""
        arr = create_npy(path, dtype, shape, fix)
        del arr
        return Path(path)

    def write(self, start: int, rows: np.ndarray) -> None:
        """Write ``rows`` (``[R, ...]`` of this file's dtype and row shape) at rows ``start..``."""
        if self._fd is None:
            raise ValueError(f"RowFile '{self.path}' is closed")
        data = np.ascontiguousarray(rows, dtype=self.dtype)
        if data.shape[1:] != self.shape[1:] or start < 0 or start + len(data) > self.shape[0]:
            raise ValueError(
                f"rows {tuple(data.shape)} at {start} do not fit '{self.path}' {self.shape}"
            )
        view = memoryview(data).cast("B")
        pos, off = 0, self.offset + start * self.row_bytes
        while pos < view.nbytes:
            pos += os.pwrite(self._fd, view[pos:], off + pos)
        end = off + view.nbytes
        if self._pending is not None and self._pending[1] != off:
            self._drop()  # not consecutive: flush what was
        self._pending = (off if self._pending is None else self._pending[0], end)
        if end - self._pending[0] >= DROP_WRITTEN_BYTES:
            self._drop()

    def _drop(self, whole: bool = False) -> None:
        """Flush the written rows and drop the file up to the last of them from the page cache.

        From the file's start (not the pending range's): the cache holds a file in folios of up
        to a few MiB, and only whole ones are dropped; clean pages of earlier rows (or other
        ranks' rows) go too, dirty ones stay.
        """
        span, self._pending = self._pending, None
        advise = getattr(os, "posix_fadvise", None)
        if (span is None and not whole) or self._fd is None or advise is None:
            return
        os.fdatasync(self._fd)
        advise(self._fd, 0, 0 if whole or span is None else span[1], os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        """Flush and drop the written rows, and close the file descriptor."""
        if self._fd is not None:
            self._drop(whole=self._pending is not None)
            os.close(self._fd)
            self._fd = None


class MemoryRows:
    """A hidden layer held in memory: the :class:`RowFile` interface over an array."""

    def __init__(self, dtype: Any, shape: tuple[int, ...]) -> None:
        self.array = np.empty(shape, dtype=dtype)

    def write(self, start: int, rows: np.ndarray) -> None:
        """Write ``rows`` at rows ``start..``."""
        self.array[start : start + len(rows)] = rows

    def close(self) -> None:
        """Nothing to release (the next layer reads :attr:`array`)."""


class RowWriter:
    """A :data:`Sink` writing the final layer's rows to ``.npy`` files (``predict``/``embed``).

    Args:
        files: ``kind -> RowFile``; kinds: ``"rows"`` (the rows as they are), ``"class"``
            (int64 argmax), ``"prob"`` (float32 softmax).
    """

    def __init__(self, files: dict[str, RowFile]) -> None:
        self.files = files

    def __call__(self, ids: np.ndarray, rows: torch.Tensor) -> None:
        """Write the rows of ``ids`` (ascending; contiguous, since every node is computed)."""
        start = int(ids[0])
        if int(ids[-1]) - start + 1 != ids.size:
            raise ValueError("RowWriter needs contiguous destinations (no select)")
        for kind, f in self.files.items():
            if kind == "rows":
                out = rows
            elif kind == "class":
                out = rows.argmax(dim=1)
            elif kind == "prob":
                out = torch.softmax(rows, dim=1)
            else:
                raise ValueError(f"unknown RowWriter kind {kind!r}")
            f.write(start, out.detach().cpu().numpy().astype(f.dtype, copy=False))

    def close(self) -> None:
        """Close every file."""
        for f in self.files.values():
            f.close()


class MetricSums:
    """A :data:`Sink` summing evaluation's numerators and denominators chunk by chunk.

    Per split present (train/val/test masks): correct predictions and masked nodes; and the
    validation loss sum (cross-entropy). Labels and masks are read per chunk from the graph's
    arrays (memory maps are fine). :meth:`result` all-reduces the sums (float64) and divides,
    exactly like :func:`~fleetgnn.engines.common.split_metrics` over all nodes at once.

    Args:
        graph: The dataset (labels and masks).
        device: Where the sums are all-reduced (the communicator's device).
    """

    def __init__(self, graph: Graph, device: torch.device | str = "cpu") -> None:
        if graph.y is None:
            raise ConfigError(f"dataset '{graph.name}' has no labels (y); evaluation needs them")
        self.graph = graph
        self.keys = [s for s in SPLITS if getattr(graph, f"{s}_mask") is not None]
        self.has_val = "val" in self.keys
        self.sums = [0.0] * (2 * len(self.keys) + int(self.has_val))
        self.device = device

    def __call__(self, ids: np.ndarray, logits: torch.Tensor) -> None:
        """Add one chunk's counts and validation loss."""
        dev = logits.device
        y = torch.from_numpy(np.array(rows_of(self.graph.y, ids), dtype=np.int64)).to(dev)
        pred = logits.argmax(dim=1)
        for i, s in enumerate(self.keys):
            m = np.array(rows_of(getattr(self.graph, f"{s}_mask"), ids), dtype=bool)
            mt = torch.from_numpy(m).to(dev)
            self.sums[2 * i] += float((pred[mt] == y[mt]).sum())
            self.sums[2 * i + 1] += float(m.sum())
            if s == "val" and m.any():
                check_labels(logits[mt], y[mt])
                self.sums[-1] += float(F.cross_entropy(logits[mt], y[mt], reduction="sum"))

    def result(self, comm: Any = None) -> dict[str, float]:
        """Accuracy per split and mean validation loss over every rank (collective with comm)."""
        t = torch.tensor(self.sums, dtype=torch.float64)
        if comm is not None and comm.world_size > 1:
            t = comm.all_reduce_sum(t.to(self.device)).cpu()
        return metrics_from_sums(self.keys, t, self.has_val)


# ---------------------------------------------------------------------------------- collectives
def _world(comm: Any) -> tuple[int, int]:
    if comm is None:
        return 1, 0
    return int(comm.world_size), int(comm.rank)


def agreed(comm: Any, fn: Callable[[], Any], *, everywhere: bool) -> Any:
    """``fn()`` on rank 0 (its value broadcast) or on every rank; every rank raises one error.

    Collective with a multi-rank ``comm`` (one ``broadcast_object`` or ``all_gather_object``).

    A :class:`~fleetgnn.errors.FleetgnnError` (a full disk) raised on any rank is raised on
    every rank, so no rank waits forever in the next collective.
    """
    world, rank = _world(comm)
    err: FleetgnnError | None = None
    value = None
    if everywhere or rank == 0:
        try:
            value = fn()
        except FleetgnnError as e:
            err = e
    if world > 1:
        if everywhere:
            errors = comm.all_gather_object(err)
            err = err or next((e for e in errors if e is not None), None)
        else:
            err, value = comm.broadcast_object((err, value))
    if err is not None:
        raise err
    return value


def _barrier(comm: Any) -> None:
    if comm is not None and comm.world_size > 1:
        comm.barrier()


def _max_over_ranks(comm: Any, n: int, device: torch.device | str) -> int:
    if comm is None or comm.world_size == 1:
        return n
    t = torch.tensor([n], dtype=torch.int64, device=device)
    comm.all_reduce(t, op="max")
    return int(t.item())


# ---------------------------------------------------------------------------------- the loop
def _empty_block() -> Block:
    z = torch.zeros(0, dtype=torch.int64)
    return Block(
        indptr=torch.zeros(1, dtype=torch.int64),
        indices=z,
        src_ids=z,
        num_dst=0,
        src_degree=torch.zeros(0, dtype=torch.float32),
    )


def layer_widths(
    module: torch.nn.Module,
    in_width: int,
    num_layers: int,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> list[int]:
    """``[in_width, width after layer 1, ..., width after layer num_layers]`` (no data needed).

    Runs each layer on an empty block (eval mode, no gradients).
    """
    widths = [int(in_width)]
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            agg = LocalAggregator(_empty_block().to(device), dtype=dtype, validate=False)
            for layer in range(num_layers):
                h = torch.zeros((0, widths[-1]), dtype=dtype, device=device)
                widths.append(int(module.layer_forward(layer, agg, h).shape[1]))
    finally:
        module.train(was_training)
    return widths


@dataclasses.dataclass
class _Scratch:
    """The temporary directory of one inference's scratch files (shared or this rank's)."""

    path: Path
    owner: bool  # this rank created it (and removes it)

    def remove(self) -> None:
        if self.owner:
            shutil.rmtree(self.path, ignore_errors=True)


def _make_scratch(base: str | os.PathLike[str] | None, need: int) -> Path:
    """A new owner-tagged directory in ``base`` after checking ``need`` bytes are free there."""
    root = Path(base) if base is not None else Path(tempfile.gettempdir())
    try:
        root.mkdir(parents=True, exist_ok=True)
        free = free_bytes(root)
        if need > free:
            raise disk_full_error(root, need, _DISK_FIX, checked=True)
        return Path(tempfile.mkdtemp(prefix=temp_prefix("inference"), dir=root))
    except OSError as e:  # a read-only or missing place (a full disk is a DiskFullError)
        raise ConfigError(
            f"cannot create the scratch directory of layer-wise inference in '{root}' "
            f"({e.strerror or e}); it needs {need} bytes of writable space there"
        ) from e


@dataclasses.dataclass
class InferenceStats:
    """What one rank's :func:`stream_inference` computed and stored.

    Attributes:
        rows: Destinations this rank computed, per layer.
        layer_rows: Rows of each hidden layer's output (``N``, or ``|S_l|`` with ``select``).
        scratch_bytes: Bytes of scratch space checked for (0: none, or in memory).
    """

    rows: list[int]
    layer_rows: list[int]
    scratch_bytes: int


@torch.no_grad()
def stream_inference(
    module: torch.nn.Module,
    topology: Any,
    features: Callable[[torch.Tensor], torch.Tensor],
    indptr: Any,
    sink: Sink,
    *,
    in_width: int,
    comm: Any = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    num_layers: int | None = None,
    select: Select | None = None,
    chunking: Chunking | None = None,
    scratch_dir: str | os.PathLike[str] | None = None,
    same_host: bool = True,
) -> InferenceStats:
    """Run layers ``1..num_layers`` streaming; the last one into ``sink``.

    Without ``select`` every layer covers every node; with it, each layer only the nodes the
    selected ones need (:func:`needed_sets`, compact scratch files).
    Collective when ``comm`` spans several ranks (every rank calls it with the same arguments
    except ``sink``): barriers between layers, one ``all_reduce`` of the chunk count per layer,
    and across hosts (``same_host=False``) bounded all-gathers of each layer's rows (metered).
    See the module docstring for the files and the memory.

    Args:
        module: The layer-wise model (unwrapped); run in eval mode, its flag restored.
        topology: A sampler topology source (``GraphTopology`` or a store).
        features: ``ids -> [len(ids), in_width]`` input rows on ``device``, cast and
            normalised (a store's reads may be collective: called once per chunk of layer 1).
        indptr: The graph's CSC ``indptr`` (a memory map is fine), to cut chunks.
        sink: Consumes the last layer's rows, chunk by chunk (only this rank's).
        in_width: Width of the input rows.
        comm: The communicator (``None``: one process).
        device: Where the computation runs.
        dtype: The model's dtype (also the scratch files').
        num_layers: Layers to run (``None``: all; fewer gives a hidden layer's output).
        select: Destinations of the last layer (``None``: every node); the earlier layers then
            compute only what those need.
        chunking: How ranges are cut (``None``: :class:`Chunking` defaults).
        scratch_dir: Where the scratch directory goes (``None``: the system's temporary one).
        same_host: Every rank runs on this host (one shared scratch file per layer); ``False``:
            one file per rank, filled by all-gathers.

    Returns:
        This rank's :class:`InferenceStats`.

    Raises:
        ConfigError: ``num_layers`` outside ``[1, module.num_layers]``.
        DiskFullError: Not enough space for the scratch files (on every rank).
    """
    total_layers = int(module.num_layers)
    layers = total_layers if num_layers is None else int(num_layers)
    if not 1 <= layers <= total_layers:
        raise ConfigError(
            f"num_layers={num_layers!r} is outside [1, {total_layers}], the model's layers"
        )
    chunking = chunking or Chunking()
    world, rank = _world(comm)
    num_nodes = int(len(indptr)) - 1
    lo, hi = rank_range(num_nodes, world, rank)
    np_dtype = _np_dtype(dtype)
    itemsize = np_dtype.itemsize
    widths = layer_widths(module, in_width, layers, device=device, dtype=dtype)
    shared = same_host or world == 1
    sets: list[NodeSet] = []
    if select is not None:
        sets = needed_sets(
            topology, indptr, select, layers, comm=comm, device=device, chunking=chunking
        )
    # rows of each hidden layer's output (its file); layer l's destinations
    layer_rows = [s.size for s in sets] if sets else [num_nodes] * (layers - 1)
    dests: list[Select | None] = [s.select for s in sets] if sets else [None] * (layers - 1)
    dests.append(select)
    layer_bytes = [r * w * itemsize for r, w in zip(layer_rows, widths[1:layers], strict=False)]
    in_memory = world == 1 and max(layer_bytes, default=0) <= chunking.in_memory_bytes
    stats = InferenceStats(rows=[0] * layers, layer_rows=list(layer_rows), scratch_bytes=0)
    scratch: _Scratch | None = None
    readers: list[RowReader] = []
    writers: list[RowFile] = []
    was_training = module.training
    module.eval()
    done = False
    try:
        if layers > 1 and not in_memory:
            # two consecutive layer files live at once; one per rank (all of them: the whole
            # layer's rows) when the ranks do not share a host
            need = max(a + b for a, b in zip(layer_bytes, [*layer_bytes[1:], 0], strict=True))
            stats.scratch_bytes = need
            if shared:
                path = agreed(comm, lambda: _make_scratch(scratch_dir, need), everywhere=False)
                scratch = _Scratch(path, owner=rank == 0)
            else:
                path = agreed(comm, lambda: _make_scratch(scratch_dir, need), everywhere=True)
                scratch = _Scratch(path, owner=True)
        prev: Path | np.ndarray | None = None
        for layer in range(layers):
            final = layer == layers - 1
            max_nodes, max_edges = chunking.limits(max(widths[layer : layer + 2]), itemsize)
            sel = dests[layer]
            # rows of this layer's output file / the previous layer's file, by global ID
            out_pos = sets[layer].position if sets and not final else None
            in_pos = sets[layer - 1].position if sets and layer > 0 else None
            mine = _count_chunks(indptr, lo, hi, max_nodes, max_edges, sel) if world > 1 else 0
            rounds = _max_over_ranks(comm, mine, device)
            out_file: RowFile | MemoryRows | None = None
            if not final and in_memory:
                out_file = MemoryRows(np_dtype, (layer_rows[layer], widths[layer + 1]))
            elif not final:
                assert scratch is not None
                target = scratch.path / f"h{layer + 1}.npy"
                shape = (layer_rows[layer], widths[layer + 1])
                agreed(
                    comm,
                    lambda t=target, s=shape: RowFile.create(t, np_dtype, s),
                    everywhere=not shared,
                )
                out_file = RowFile(target)
                writers.append(out_file)
            reader = RowReader(prev) if prev is not None else None
            if reader is not None:
                readers.append(reader)
            for ids in _in_step(iter_chunks(indptr, lo, hi, max_nodes, max_edges, sel), rounds):
                block = full_neighbor_block(topology, torch.from_numpy(ids))
                if reader is None:
                    src = features(block.src_ids)
                else:
                    rows = block.src_ids.numpy()
                    rows = in_pos(rows) if in_pos is not None else rows
                    src = torch.from_numpy(reader.take(rows)).to(device)
                agg = LocalAggregator(block.to(device), dtype=dtype, validate=False)
                out = module.layer_forward(layer, agg, src.to(device=device, dtype=dtype))
                if ids.size == 0:
                    continue
                stats.rows[layer] += int(ids.size)
                if final:
                    sink(ids, out)
                else:
                    # a chunk is consecutive members of the layer's set: one contiguous write
                    start = int(out_pos(ids[:1])[0]) if out_pos is not None else int(ids[0])
                    assert out_file is not None
                    out_file.write(start, out.cpu().numpy())
            if final:
                break
            if isinstance(out_file, MemoryRows):
                if reader is not None:
                    reader.close()
                    readers.remove(reader)
                prev = out_file.array
                continue
            assert out_file is not None and scratch is not None
            if not shared:
                bounds = [rank_range(num_nodes, world, r) for r in range(world)]
                if out_pos is not None:
                    bounds = [(int(out_pos([a])[0]), int(out_pos([b])[0])) for a, b in bounds]
                _fill_other_ranks(out_file, comm, bounds, chunking, device)
            out_file.close()
            _barrier(comm)  # every rank's rows are in the file; every rank is done with prev
            if reader is not None:
                reader.close()
                readers.remove(reader)
            if isinstance(prev, Path) and scratch.owner:
                prev.unlink(missing_ok=True)
            prev = out_file.path
        done = True
    finally:
        module.train(was_training)
        for r in readers:
            r.close()
        for w in writers:
            w.close()
        if scratch is not None:
            if done and shared:
                _barrier(comm)  # nobody still reads the last file
            scratch.remove()
    return stats


def _fill_other_ranks(
    out: RowFile,
    comm: Any,
    ranges: list[tuple[int, int]],
    chunking: Chunking,
    device: torch.device | str,
) -> None:
    """Copy every other rank's rows of this layer into this rank's file (ranks on several hosts).

    ``ranges[r]`` are rank ``r``'s rows of the file. All-gathers blocks of at most
    ``target_bytes / W`` bytes of rows from each rank, block ``k`` of every range at once,
    through ``comm`` (metered); collective.
    """
    world, rank = _world(comm)
    width = int(np.prod(out.shape[1:], dtype=np.int64))
    rows_per_block = max(1, chunking.target_bytes // max(1, world * width * out.dtype.itemsize))
    lo, hi = ranges[rank]
    longest = max(b - a for a, b in ranges)
    reader = RowReader(out.path)
    try:
        for k in range(math.ceil(longest / rows_per_block)):
            a = lo + k * rows_per_block
            b = min(hi, a + rows_per_block)
            block = np.zeros((rows_per_block, *out.shape[1:]), dtype=out.dtype)
            if b > a:
                block[: b - a] = reader.slice(a, b)
            parts = comm.all_gather(torch.from_numpy(block).to(device))
            for r, part in enumerate(parts):
                ra = ranges[r][0] + k * rows_per_block
                rb = min(ranges[r][1], ra + rows_per_block)
                if r != rank and rb > ra:
                    out.write(ra, part[: rb - ra].cpu().numpy())
    finally:
        reader.close()


# ---------------------------------------------------------------------------------- evaluation
def streaming_metrics(
    module: torch.nn.Module,
    graph: Graph,
    topology: Any,
    features: Callable[[torch.Tensor], torch.Tensor],
    *,
    comm: Any = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    eval_nodes: str = "all",
    chunking: Chunking | None = None,
    scratch_dir: str | os.PathLike[str] | None = None,
    same_host: bool = True,
) -> dict[str, float]:
    """Accuracy per split and mean validation loss by streaming layer-wise inference.

    The numbers :func:`~fleetgnn.engines.common.split_metrics` gives on the logits of every node
    (summed over ranks, then divided). Collective with ``comm``; see :func:`stream_inference`.

    Args:
        module: The layer-wise model (unwrapped).
        graph: The dataset (``indptr``, labels and masks; memory maps are fine).
        topology: A sampler topology source over ``graph``.
        features: ``ids -> [len(ids), F]`` input rows on ``device``, cast and normalised.
        comm: The communicator (``None``: one process).
        device: Where the computation runs.
        dtype: The model's dtype.
        eval_nodes: ``"all"`` or ``"labelled"`` (the last layer only for masked nodes).
        chunking: How ranges are cut into chunks.
        scratch_dir: Where the scratch files go.
        same_host: Every rank runs on this host.

    Raises:
        ConfigError: An unknown ``eval_nodes``.
    """
    if eval_nodes not in EVAL_NODES:
        raise ConfigError(
            f"train.eval_nodes={eval_nodes!r} is not an allowed value; choose one of: "
            f"{', '.join(EVAL_NODES)}"
        )
    sums = MetricSums(graph, device)
    stream_inference(
        module,
        topology,
        features,
        graph.indptr,
        sums,
        in_width=int(graph.num_features),
        comm=comm,
        device=device,
        dtype=dtype,
        select=labelled_selector(graph) if eval_nodes == "labelled" else None,
        chunking=chunking,
        scratch_dir=scratch_dir,
        same_host=same_host,
    )
    return sums.result(comm)
