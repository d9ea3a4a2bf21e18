"""Partition quality: edge cut, local-edge ratio, replication factor and load balance.

Definitions, for a directed graph with ``N`` nodes and ``E`` edges ``u -> v`` and a partition
``part(.)`` into ``P`` parts:

- ``edge_cut``: edges with ``part(u) != part(v)``; ``local_edge_ratio = 1 - edge_cut / E``
  (1 for ``E == 0``; about ``1/P`` for a random partition).
- ``replication_factor``: the average number of parts that need a node's data. Part ``part(u)``
  owns ``u``, and every other part ``q`` that owns the destination of an edge ``u -> v`` needs a
  copy of ``u`` to aggregate into ``v``::

      replication_factor = (N + |{(u, q) : exists u -> v, part(v) = q != part(u)}|) / N

  (1 for ``N == 0``). It is HongTu's ``alpha_N``: the rows loaded per epoch over all parts,
  divided by ``N``.
- per part: owned nodes, in-edges of owned nodes (the aggregation work) and owned train nodes;
  balance of each = ``max / mean`` over parts (1 is perfect; 1 when the mean is 0), and GSplit's
  edge skew ``(max - min) / mean`` of the per-part edges.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fleetgnn.errors import PartitionError
from fleetgnn.graph.csc import Graph
from fleetgnn.partition.book import PartitionBook

_EDGE_CHUNK = 1 << 22  # edges scanned per step when counting replicas
_NODE_CHUNK = 1 << 22  # and at most this many destination nodes
_BITMAP_BYTES = 1 << 30  # memory for the (part, node) replica bitmap; more parts take more passes


@dataclasses.dataclass(frozen=True)
class PartitionQuality:
    """Quality numbers of one partition of one graph (see the module docstring for definitions).

    Attributes:
        method: Partitioner name.
        num_parts: ``P``.
        num_nodes: ``N``.
        num_edges: ``E``.
        edge_cut: Directed edges between different parts.
        local_edge_ratio: ``1 - edge_cut / E``.
        replication_factor: ``(N + distinct (node, foreign part) pairs) / N``.
        part_nodes: Owned nodes per part, length ``P``.
        part_edges: In-edges of owned nodes per part.
        part_train_nodes: Owned train nodes per part (``None`` without a train mask).
        node_balance: ``max / mean`` of ``part_nodes``.
        edge_balance: ``max / mean`` of ``part_edges``.
        train_balance: ``max / mean`` of ``part_train_nodes`` (``None`` without a train mask).
        edge_skew: ``(max - min) / mean`` of ``part_edges`` (GSplit).
    """

    method: str
    num_parts: int
    num_nodes: int
    num_edges: int
    edge_cut: int
    local_edge_ratio: float
    replication_factor: float
    part_nodes: tuple[int, ...]
    part_edges: tuple[int, ...]
    part_train_nodes: tuple[int, ...] | None
    node_balance: float
    edge_balance: float
    train_balance: float | None
    edge_skew: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (tuples become lists)."""
        out = dataclasses.asdict(self)
        for k, v in out.items():
            if isinstance(v, tuple):
                out[k] = list(v)
        return out

    def __repr__(self) -> str:
        train = "" if self.train_balance is None else f", train_balance={self.train_balance:.3f}"
        return (
            f"PartitionQuality(method={self.method!r}, P={self.num_parts}, "
            f"local_edge_ratio={self.local_edge_ratio:.4f}, "
            f"replication_factor={self.replication_factor:.4f}, "
            f"node_balance={self.node_balance:.3f}, edge_balance={self.edge_balance:.3f}"
            f"{train})"
        )


def _max_over_mean(counts: np.ndarray) -> float:
    mean = float(counts.mean()) if counts.size else 0.0
    return float(counts.max()) / mean if mean > 0 else 1.0


def evaluate(graph: Graph, book: PartitionBook) -> PartitionQuality:
    """Compute the quality of ``book`` on ``graph``.

    Args:
        graph: The graph in its ORIGINAL node IDs (the IDs ``book.part_of`` is indexed by).
        book: The partition.

    Returns:
        The quality numbers.

    Raises:
        PartitionError: If the book and the graph have different node counts.
    """
    n, e, p = graph.num_nodes, graph.num_edges, book.num_parts
    if book.num_nodes != n:
        raise PartitionError(
            f"the partition book covers {book.num_nodes} nodes but graph '{graph.name}' has {n}; "
            f"evaluate the book on the graph it was computed for"
        )
    part_of = np.asarray(book.part_of)
    indptr = graph.indptr
    # edges are grouped by destination, so destination ranges give contiguous edge chunks; every
    # per-node quantity is read chunk by chunk (no whole-graph degree or weight array)
    bounds = np.searchsorted(indptr, np.arange(0, e + _EDGE_CHUNK, _EDGE_CHUNK), side="left")
    bounds = np.unique(np.concatenate([[0], np.clip(bounds, 0, n), [n]]))
    bounds = np.unique(np.concatenate([bounds, np.arange(0, n, _NODE_CHUNK)]))
    part_nodes = np.zeros(p, dtype=np.int64)
    part_edges = np.zeros(p, dtype=np.int64)
    train = None if graph.train_mask is None else np.zeros(p, dtype=np.int64)
    # needed[q - q0, u]: foreign part q needs a copy of u; parts in blocks of bounded memory
    block = max(1, min(p, _BITMAP_BYTES // max(n, 1)))
    cut = replicas = 0
    for q0 in range(0, p, block):
        q1 = min(p, q0 + block)
        needed = np.zeros((q1 - q0, n), dtype=bool)
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            ptr = np.asarray(indptr[lo : hi + 1], dtype=np.int64)
            deg = np.diff(ptr)
            dst_parts = part_of[lo:hi]
            if q0 == 0:
                part_nodes += np.bincount(dst_parts, minlength=p)
                part_edges += np.bincount(dst_parts, weights=deg, minlength=p).astype(np.int64)
                if train is not None:
                    mask = np.asarray(graph.train_mask[lo:hi], dtype=bool)
                    train += np.bincount(dst_parts[mask], minlength=p)
            src = np.asarray(graph.indices[ptr[0] : ptr[-1]])
            dst_part = np.repeat(dst_parts, deg)
            foreign = part_of[src] != dst_part
            if q0 == 0:
                cut += int(np.count_nonzero(foreign))
            foreign &= (dst_part >= q0) & (dst_part < q1)
            needed[dst_part[foreign] - q0, src[foreign]] = True
        replicas += int(np.count_nonzero(needed))
    mean_edges = float(part_edges.mean())
    skew = (float(part_edges.max() - part_edges.min()) / mean_edges) if mean_edges > 0 else 0.0
    return PartitionQuality(
        method=book.method,
        num_parts=p,
        num_nodes=n,
        num_edges=e,
        edge_cut=cut,
        local_edge_ratio=1.0 - cut / e if e else 1.0,
        replication_factor=(n + replicas) / n if n else 1.0,
        part_nodes=tuple(int(c) for c in part_nodes),
        part_edges=tuple(int(c) for c in part_edges),
        part_train_nodes=None if train is None else tuple(int(c) for c in train),
        node_balance=_max_over_mean(part_nodes),
        edge_balance=_max_over_mean(part_edges),
        train_balance=None if train is None else _max_over_mean(train),
        edge_skew=skew,
    )
