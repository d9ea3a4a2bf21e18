"""How streaming inference cuts the nodes into chunks, and which nodes each layer needs.

Rank ``r`` of ``W`` takes the contiguous destination range :func:`rank_range` gives it and cuts it,
from the CSC ``indptr`` (a memory map is fine), into chunks of at most ``max_nodes`` destinations
and ``max_edges`` in-edges (:class:`Chunking`, :func:`iter_chunks`). With a last-layer selection
(``train.eval_nodes=labelled``), :func:`needed_sets` gives the :class:`NodeSet` of destinations
each earlier layer computes. See :mod:`fleetgnn.engines.inference` for the loop that uses them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from fleetgnn.engines.collectives import max_over_ranks, world_of
from fleetgnn.engines.common import SPLITS
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph

#: Bytes of one chunk's input rows the default :class:`Chunking` aims at.
DEFAULT_CHUNK_BYTES = 32 << 20
#: A single process keeps a hidden layer in memory (no scratch file) up to this many bytes.
IN_MEMORY_LAYER_BYTES = 64 << 20
#: Most destinations in one chunk by default.
MAX_CHUNK_NODES = 65536

#: Destination filter of the final layer: ``select(a, b)`` -> bool ``[b - a]`` over ``[a, b)``.
Select = Callable[[int, int], np.ndarray]


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


def in_step(chunks: Iterator[np.ndarray], rounds: int) -> Iterator[np.ndarray]:
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


def count_chunks(*args: Any) -> int:
    """Chunks :func:`iter_chunks` gives for ``args``."""
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
    world, rank = world_of(comm)
    num_nodes = int(len(indptr)) - 1
    lo, hi = rank_range(num_nodes, world, rank)
    # per in-edge: its int64 neighbour ID plus the reader's int64 positions and repeats
    max_nodes, max_edges = chunking.limits(4, 8)
    sets: list[NodeSet] = []
    upper = select
    for _ in range(layers - 1):
        mask = np.zeros(num_nodes, dtype=bool)
        mine = count_chunks(indptr, lo, hi, max_nodes, max_edges, upper) if world > 1 else 0
        rounds = max_over_ranks(comm, mine, device)
        for ids in in_step(iter_chunks(indptr, lo, hi, max_nodes, max_edges, upper), rounds):
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
