"""HongTu's second partitioning level: each part's contiguous ID range cut into chunks.

A chunk is a contiguous range of destination nodes (NEW IDs, after
:meth:`~fleetgnn.partition.book.PartitionBook.relabel`) together with all their in-edges, so
full-neighbour aggregation runs chunk by chunk. Chunks of one part are edge-balanced with the same
``searchsorted`` split as the ``range`` partitioner, restricted to the part's range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from fleetgnn.errors import FleetgnnError, PartitionError
from fleetgnn.graph.csc import Graph
from fleetgnn.partition.book import PartitionBook
from fleetgnn.partition.methods import (
    balanced_boundaries,
    metis_partition,
    partition,
    range_partition,
)


@dataclasses.dataclass(frozen=True, eq=False)
class ChunkBook:
    """``M`` contiguous chunks inside each of ``P`` parts, in NEW node IDs.

    Chunk ``j`` of part ``p`` holds the destinations ``[bounds[p, j], bounds[p, j + 1])`` and all
    their in-edges:

    ======  =======  ======================================  ===============================
    part    chunk    destinations (new IDs)                  in-edges
    ======  =======  ======================================  ===============================
    0       0        ``[bounds[0, 0], bounds[0, 1])``         ``chunk_edges[0, 0]``
    0       ``M-1``  ``[bounds[0, M-1], bounds[0, M])``       ``chunk_edges[0, M-1]``
    1       0        ``[bounds[1, 0], bounds[1, 1])``         ``chunk_edges[1, 0]``
    ...     ...      ...                                     ...
    ======  =======  ======================================  ===============================

    ``bounds[p, 0]`` and ``bounds[p, M]`` are the part's range ``[offsets[p], offsets[p + 1])``,
    so the flattened starts are non-decreasing and chunks may be empty.

    Args:
        num_parts: ``P``.
        chunks_per_part: ``M >= 1``.
        bounds: int64 ``[P, M + 1]`` chunk boundaries.
        chunk_edges: int64 ``[P, M]`` in-edges of each chunk's destinations.
    """

    num_parts: int
    chunks_per_part: int
    bounds: np.ndarray
    chunk_edges: np.ndarray

    def __post_init__(self) -> None:
        p, m = self.num_parts, self.chunks_per_part
        b = np.asarray(self.bounds)
        if b.shape != (p, m + 1) or b.dtype != np.int64:
            raise PartitionError(
                f"'bounds' must be int64 of shape ({p}, {m + 1}) (got {b.dtype}, {b.shape})"
            )
        if self.chunk_edges.shape != (p, m):
            raise PartitionError(
                f"'chunk_edges' must have shape ({p}, {m}) (got {self.chunk_edges.shape})"
            )
        if b[0, 0] != 0 or (np.diff(b, axis=1) < 0).any() or (b[1:, 0] != b[:-1, -1]).any():
            raise PartitionError(
                "'bounds' must start at 0, be non-decreasing along each part, and each part must "
                "start where the previous one ends; build it with chunk_partition"
            )

    @property
    def num_nodes(self) -> int:
        """Number of nodes ``N``."""
        return int(self.bounds[-1, -1])

    @property
    def num_chunks(self) -> int:
        """Total number of chunks ``P * M``."""
        return self.num_parts * self.chunks_per_part

    def chunk_range(self, part: int, chunk: int) -> tuple[int, int]:
        """The destinations ``[start, stop)`` (new IDs) of chunk ``chunk`` of part ``part``.

        Raises:
            PartitionError: If ``part`` or ``chunk`` is out of range.
        """
        if not 0 <= int(part) < self.num_parts or not 0 <= int(chunk) < self.chunks_per_part:
            raise PartitionError(
                f"chunk ({part}, {chunk}) does not exist: part must lie in [0, {self.num_parts}) "
                f"and chunk in [0, {self.chunks_per_part})"
            )
        return int(self.bounds[part, chunk]), int(self.bounds[part, chunk + 1])

    def chunk_sizes(self) -> np.ndarray:
        """Destinations per chunk, int64 ``[P, M]``."""
        return np.diff(self.bounds, axis=1)

    def locate(self, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ``(part, chunk)`` owning each new ID.

        Args:
            new_ids: int ``[K]`` new IDs in ``[0, N)``.

        Returns:
            ``(parts, chunks)``, both int64 ``[K]``.

        Raises:
            PartitionError: If an ID is outside ``[0, N)``.
        """
        ids = np.asarray(new_ids)
        n = self.num_nodes
        if ids.size and (
            not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= n
        ):
            raise PartitionError(
                f"'new_ids' must be integer node IDs in [0, {n}) (got dtype {ids.dtype}, "
                f"range {ids.min()}..{ids.max()})"
            )
        starts = self.bounds[:, :-1].ravel()  # [P * M], non-decreasing
        flat = np.searchsorted(starts, ids, side="right").astype(np.int64) - 1
        return np.divmod(flat, self.chunks_per_part)

    def node_chunks(self) -> tuple[np.ndarray, np.ndarray]:
        """``(part, chunk)`` of every node in new-ID order, both int32 ``[N]``."""
        sizes = self.chunk_sizes().ravel()
        flat = np.repeat(np.arange(self.num_chunks, dtype=np.int64), sizes)
        part, chunk = np.divmod(flat, self.chunks_per_part)
        return part.astype(np.int32), chunk.astype(np.int32)

    def __repr__(self) -> str:
        e = self.chunk_edges
        return (
            f"ChunkBook(num_parts={self.num_parts}, chunks_per_part={self.chunks_per_part}, "
            f"num_nodes={self.num_nodes}, chunk_edges(min/mean/max)="
            f"{int(e.min())}/{float(e.mean()):.1f}/{int(e.max())})"
        )


def chunk_partition(
    graph: Graph,
    book: PartitionBook,
    chunks_per_part: int,
    *,
    relabelled: bool = False,
) -> ChunkBook:
    """Cut each part's range of new IDs into ``chunks_per_part`` edge-balanced contiguous chunks.

    Within part ``p`` (``E_p`` in-edges over ``[offsets[p], offsets[p + 1])``), chunk ``j``
    starts at ``searchsorted(cum, cum[offsets[p]] + floor(j * E_p / M), side='left')`` where
    ``cum`` is the cumulative in-degree in new-ID order, so each chunk holds ``E_p / M`` in-edges
    up to less than the maximum in-degree. Parts without edges are split by node count.

    Args:
        graph: The graph in ORIGINAL IDs, or already relabelled with ``book.relabel`` when
            ``relabelled`` is true.
        book: The first-level partition.
        chunks_per_part: ``M >= 1``.
        relabelled: Whether ``graph`` is already in new IDs.

    Returns:
        The chunk book.

    Raises:
        PartitionError: If ``chunks_per_part < 1`` or graph and book disagree in size.
    """
    if isinstance(chunks_per_part, bool) or not isinstance(chunks_per_part, (int, np.integer)):
        raise PartitionError(f"'chunks_per_part' must be an integer >= 1 (got {chunks_per_part!r})")
    if chunks_per_part < 1:
        raise PartitionError(f"'chunks_per_part' must be >= 1 (got {chunks_per_part})")
    if graph.num_nodes != book.num_nodes:
        raise PartitionError(
            f"the partition book covers {book.num_nodes} nodes but graph '{graph.name}' has "
            f"{graph.num_nodes}; chunk the graph the book was computed for"
        )
    m = int(chunks_per_part)
    if relabelled:
        cum = np.asarray(graph.indptr, dtype=np.int64)
    else:
        deg = graph.in_degrees()[book.perm]  # in-degree in new-ID order
        cum = np.zeros(graph.num_nodes + 1, dtype=np.int64)
        np.cumsum(deg, out=cum[1:])
    offsets = np.asarray(book.offsets, dtype=np.int64)
    bounds = balanced_boundaries(cum, offsets[:-1], offsets[1:], m)  # [P, M + 1]
    chunk_edges = np.diff(cum[bounds], axis=1)  # [P, M]
    return ChunkBook(
        num_parts=book.num_parts, chunks_per_part=m, bounds=bounds, chunk_edges=chunk_edges
    )


class Broadcaster(Protocol):
    """What :func:`contiguous_book` and :func:`two_level_book` need of a communicator.

    :class:`~fleetgnn.distributed.Communicator` has it (the partition layer only calls it).
    """

    rank: int
    world_size: int
    device: torch.device

    def broadcast_object(self, obj: Any, src: int = 0) -> Any: ...  # noqa: D102

    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor: ...  # noqa: D102


def computed_once(compute: Callable[[], PartitionBook], comm: Broadcaster | None) -> PartitionBook:
    """``compute()`` on rank 0 of ``comm`` only; every rank gets the same book.

    Rank 0 broadcasts the book's method, part count and params (a small object), then its
    ``part_of`` (int32 ``[N]``, one tensor broadcast); the other ranks rebuild the book with
    :meth:`PartitionBook.from_part_of`, which is deterministic, so every rank holds the same
    permutation without running the partitioner (METIS: one run and one adjacency in memory
    per machine, not one per rank). An error on rank 0 is raised on every rank. Collective over
    ``comm`` (``None`` or one rank: just ``compute()``).

    Raises:
        PartitionError: ``compute()`` failed on rank 0 (its error, on the other ranks too).
    """
    if comm is None or comm.world_size == 1:
        return compute()
    book: PartitionBook | None = None
    head: Any = None
    if comm.rank == 0:
        try:
            book = compute()
        except Exception as err:  # the other ranks raise it too instead of waiting for ever
            if not isinstance(err, FleetgnnError):
                err = PartitionError(f"rank 0 could not partition the graph: {err!r}")
            comm.broadcast_object(err, src=0)
            raise
        head = (book.method, book.num_parts, book.num_nodes, dict(book.params))
    head = comm.broadcast_object(head, src=0)
    if isinstance(head, BaseException):
        raise head
    method, parts, n, params = head
    if comm.rank == 0:
        assert book is not None
        part_of = torch.from_numpy(np.ascontiguousarray(book.part_of, dtype=np.int32))
    else:
        part_of = torch.empty(n, dtype=torch.int32)
    if comm.device.type == "cpu":
        comm.broadcast(part_of, src=0)
    else:  # e.g. NCCL: through the communicator's device
        part_of = comm.broadcast(part_of.to(comm.device), src=0).cpu()
    if book is not None:
        return book
    return PartitionBook.from_part_of(part_of.numpy(), parts, method, params)


def contiguous_book(
    graph: Graph, method: str, parts: int, seed: int = 0, *, comm: Broadcaster | None = None
) -> PartitionBook:
    """A partition book of ``parts`` contiguous ranges (the book of :func:`contiguous_partition`).

    ``"range"``: edge-balanced ranges of the original IDs (identity numbering), computed on
    every rank (a streamed pass); ``"metis"``: METIS parts relabelled contiguous, computed once
    on rank 0 of ``comm`` and shared (:func:`computed_once`; collective when ``comm`` is given).
    """
    if method == "range":
        return range_partition(graph, parts)
    return computed_once(lambda: partition(graph, "metis", parts, seed=seed), comm)


def contiguous_partition(
    graph: Graph, method: str, parts: int, seed: int = 0
) -> tuple[PartitionBook, Graph]:
    """A partition book of ``parts`` contiguous ranges and the graph in its numbering.

    ``"range"``: edge-balanced ranges of the original IDs (identity numbering, the graph as
    given); ``"metis"``: METIS parts relabelled contiguous (``book.relabel(graph)``, a copy of
    the whole graph: engines read only their part, see :meth:`PartitionBook.part_graph`).
    """
    book = contiguous_book(graph, method, parts, seed)
    return book, (graph if method == "range" else book.relabel(graph))


#: Sub-parts per part of the ``metis`` two-level partition (locality inside each range).
SUBPARTS = 16


def two_level_book(
    graph: Graph, method: str, parts: int, seed: int = 0, *, comm: Broadcaster | None = None
) -> PartitionBook:
    """One contiguous range per part whose node order keeps locality for range chunks.

    ``"metis"``: one recursive-bisection METIS run into ``parts * K`` sub-parts balanced by
    in-edges (computation), ``K = min(16, N / (32 parts))``; part ``p`` gets sub-parts
    ``[p K, (p + 1) K)`` (siblings in the bisection tree) and nodes are numbered sub-part by
    sub-part, so the chunks of :func:`chunk_partition` (ranges) are unions of neighbouring
    sub-parts, whatever the dataset's own ID order. METIS runs once, on rank 0 of ``comm``
    (:func:`computed_once`; collective when ``comm`` is given). ``"range"``: edge-balanced
    ranges of the original IDs (the dataset's order decides the locality).
    """
    if method != "metis":
        return contiguous_book(graph, method, parts, seed, comm=comm)
    k = max(1, min(SUBPARTS, graph.num_nodes // max(32 * parts, 1)))
    if parts * k == 1:
        return contiguous_book(graph, method, parts, seed, comm=comm)
    sub = computed_once(
        lambda: metis_partition(graph, parts * k, seed=seed, balance=("edges",), recursive=True),
        comm,
    )
    return PartitionBook(
        num_parts=parts,
        part_of=(sub.part_of // k).astype(np.int32),
        method="metis",
        offsets=np.ascontiguousarray(sub.offsets[::k]),
        perm=sub.perm,
        inv_perm=sub.inv_perm,
        params={**sub.params, "subparts": k},
        validate=False,
    )


def two_level_partition(
    graph: Graph, method: str, parts: int, seed: int = 0
) -> tuple[PartitionBook, Graph]:
    """The book of :func:`two_level_book` and the graph in its numbering (a whole copy).

    Returns:
        ``(book, graph in the book's numbering)``.
    """
    book = two_level_book(graph, method, parts, seed)
    return book, (graph if method == "range" else book.relabel(graph))
