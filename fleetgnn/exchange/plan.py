"""Ownership plans of a distributed exchange: local/remote edges, need and send lists, chunks.

A rank computes ``M`` destination rows (``dst_ids``) from edges ``u -> v`` given in CSC over
those destinations, with every source ``u`` a GLOBAL node ID. An owner (array or function) says
which rank holds each node's row, and the rank holds the rows ``row_ids``: its *local rows*, the
rows of the ``x`` it passes to the exchange, in that order. An edge is *local* when this rank owns
its source and *remote* otherwise. The remote sources, deduplicated and grouped by owner (by ID
within an owner), are the *halo*: the rows this rank needs from each peer, its *need lists*.
Transposed, the need lists are the *send lists*: which local rows each peer needs from this rank.

Example: 8 nodes owned by ``u mod 3`` on 3 ranks (hash ownership, not contiguous ranges); every
rank computes its own nodes, ``row_ids == dst_ids``, from in-edges that need these rows:

====  ===========  ======================================  =======================================
rank  rows (IDs)   halo rows (need lists, by owner)        send rows (local rows, by requester)
====  ===========  ======================================  =======================================
0     ``0, 3, 6``  ``[1, 4 | 2]`` from ranks 1 and 2       ``[0, 2 | 1]``: IDs 0, 6 to 1; 3 to 2
1     ``1, 4, 7``  ``[0, 6 | 5]`` from ranks 0 and 2       ``[0, 1 | 0, 2]``: 1, 4 to 0; 1, 7 to 2
2     ``2, 5``     ``[3 | 1, 7]`` from ranks 0 and 1       ``[0 | 1]``: 2 to 0; 5 to 1
====  ===========  ======================================  =======================================

The send lists come either from one all-to-all of the need lists (:func:`exchange_need_lists`,
through the metered communicator), or without communication when every rank knows every rank's
edges, e.g. one sampled mini-batch replicated on all ranks (:func:`requests_from_edges`, then
:func:`send_lists`). The contiguous ranges of MGG (``owner = searchsorted(bounds)``,
:func:`range_owner`) are the special case used by :mod:`fleetgnn.engines.halo`.

The halo is then cut into ``K`` chunks (:func:`build_plan`, MGG's neighbour partitions at the
granularity of one all-to-all): owner ``o``'s ``n_o`` needed rows, in need-list order, go to chunk
``(i * K) // n_o`` for the ``i``-th of them, so every chunk takes a contiguous, balanced piece of
every owner's list. The sender applies the same rule to the counts it received, so one exchange of
the need lists serves every ``K``. Halo rows are ordered chunk-major (chunk 0 from owner 0, 1,
..., then chunk 1, ...), which is exactly the order the per-chunk all-to-alls deliver.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import Tensor

from fleetgnn.distributed import Communicator
from fleetgnn.errors import ConfigError, PartitionError
from fleetgnn.sampling import Block
from fleetgnn.types import OwnerFn, OwnerLike


# ---------------------------------------------------------------------------------- owners
def owner_function(owner: OwnerLike, world_size: int) -> OwnerFn:
    """A checked, vectorised ``ids -> ranks`` function from an owner array or function.

    Args:
        owner: int ``[N]`` array (``owner[u]`` is the rank holding node ``u``) or a function
            mapping an int64 array of IDs to ranks (``PartitionBook.owner``,
            :func:`range_owner`, ``lambda u: u % W``).
        world_size: Number of ranks ``W``; every returned rank must lie in ``[0, W)``.

    Returns:
        A function mapping int64 ``[n]`` IDs to int64 ``[n]`` ranks that raises
        :class:`~fleetgnn.errors.PartitionError` on an ID the owner does not cover or a rank
        outside ``[0, W)``.
    """
    w = _check_world_size(world_size)
    if callable(owner):
        fn = owner
    else:
        table = np.asarray(owner)
        if table.ndim != 1 or not (np.issubdtype(table.dtype, np.integer) or table.size == 0):
            raise PartitionError(
                f"'owner' must be a 1-D integer array (rank of every node) or a function of IDs "
                f"(got dtype {table.dtype}, shape {table.shape})"
            )

        def fn(ids: np.ndarray) -> np.ndarray:
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= table.size):
                raise PartitionError(
                    f"node IDs in [{int(ids.min())}, {int(ids.max())}] are outside the owner "
                    f"array's [0, {table.size}); pass an owner covering every node"
                )
            return table[ids]

    def checked(ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        ranks = np.asarray(fn(ids)).astype(np.int64, copy=False).reshape(ids.shape)
        if ranks.size and (int(ranks.min()) < 0 or int(ranks.max()) >= w):
            raise PartitionError(
                f"the owner function returned ranks in [{int(ranks.min())}, {int(ranks.max())}], "
                f"outside [0, {w}); partition into world_size = {w} parts"
            )
        return ranks

    return checked


def range_owner(bounds: np.ndarray) -> OwnerFn:
    """Owner of contiguous ranges: rank ``r`` owns ``[bounds[r], bounds[r + 1])`` (MGG's layout).

    ``owner(u) = searchsorted(bounds, u, side="right") - 1``, which skips empty ranges. ``bounds``
    must be validated by the caller (non-decreasing from 0 to ``N``).
    """
    b = np.asarray(bounds, dtype=np.int64)

    def owner(ids: np.ndarray) -> np.ndarray:
        return (np.searchsorted(b, ids, side="right") - 1).astype(np.int64)

    return owner


def _check_world_size(world_size: int) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int | np.integer):
        raise ConfigError(f"'world_size' must be an int >= 1 (got {world_size!r})")
    if world_size < 1:
        raise ConfigError(f"'world_size' must be an int >= 1 (got {world_size})")
    return int(world_size)


# ---------------------------------------------------------------------------------- rows
def _rows_of(row_ids: np.ndarray, ids: np.ndarray, what: str) -> np.ndarray:
    """Local row of every global ID in ``ids`` (position in ``row_ids``), vectorised.

    Contiguous ``row_ids`` take ``ids - row_ids[0]``; sorted ones a binary search; others an
    argsort first.

    Raises:
        PartitionError: If an ID is not among ``row_ids`` (naming ``what`` asked for it).
    """
    r = row_ids.size
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    if r and int(row_ids[-1]) - int(row_ids[0]) == r - 1 and np.all(np.diff(row_ids) == 1):
        pos = ids - row_ids[0]
        ok = (pos >= 0) & (pos < r)
    else:
        order = None if np.all(np.diff(row_ids) > 0) else np.argsort(row_ids, kind="stable")
        keys = row_ids if order is None else row_ids[order]
        pos = np.minimum(np.searchsorted(keys, ids), max(r - 1, 0))
        ok = keys[pos] == ids if r else np.zeros(ids.size, dtype=bool)
        if order is not None:
            pos = order[pos]
    if not np.all(ok):
        bad = ids[~ok]
        raise PartitionError(
            f"{what} {bad[:8].tolist()}{'...' if bad.size > 8 else ''} ({bad.size} IDs) that "
            f"this rank's 'row_ids' do not hold; the owner function and the rows each rank holds "
            f"must agree (every ID owned by a rank must be among its row_ids)"
        )
    return pos.astype(np.int64, copy=False)


def _check_ids(name: str, values: object) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise PartitionError(
            f"'{name}' must be a 1-D integer array (got dtype {arr.dtype}, shape {arr.shape})"
        )
    return arr.astype(np.int64, copy=False)


# ---------------------------------------------------------------------------------- layout
@dataclasses.dataclass(frozen=True, repr=False)
class ExchangeLayout:
    """One rank's view of an exchange: its edges split local/remote, its halo (need lists).

    Edges keep the given CSC order (by destination, then as given); that order is the order of
    edge tensors (weights, scores) of the aggregation built on it. See the module docstring for a
    rank table.

    Attributes:
        rank: This rank.
        world_size: Number of ranks ``W``.
        dst_ids: int64 ``[M]`` global IDs of the destination (output) rows.
        row_ids: int64 ``[R]`` global IDs of the local rows (the rows of ``x``), unique.
        indptr: int64 ``[M + 1]`` CSC offsets of the destinations' edges.
        src: int64 ``[E]`` global source ID of every edge.
        is_local: bool ``[E]`` whether the source is owned here.
        src_row: int64 ``[E]`` local row of a local edge's source (-1 if remote).
        halo: int64 ``[H]`` unique remote sources, grouped by owner, sorted by ID within one.
        halo_owner: int64 ``[H]`` owner rank of each halo row (non-decreasing).
        need_counts: int64 ``[W]`` halo rows needed from each owner (0 for this rank).
        halo_pos: int64 ``[E]`` position of each remote edge's source in ``halo`` (-1 if local).
    """

    rank: int
    world_size: int
    dst_ids: np.ndarray
    row_ids: np.ndarray
    indptr: np.ndarray
    src: np.ndarray
    is_local: np.ndarray
    src_row: np.ndarray
    halo: np.ndarray
    halo_owner: np.ndarray
    need_counts: np.ndarray
    halo_pos: np.ndarray

    @property
    def num_dst(self) -> int:
        """``M``: destination rows."""
        return int(self.dst_ids.size)

    @property
    def num_rows(self) -> int:
        """``R``: local rows (rows of the ``x`` passed to the exchange)."""
        return int(self.row_ids.size)

    @property
    def num_edges(self) -> int:
        """Edges into the destinations."""
        return int(self.src.size)

    @property
    def num_local_edges(self) -> int:
        """Edges whose source is owned here."""
        return int(np.count_nonzero(self.is_local))

    @property
    def num_remote_edges(self) -> int:
        """Edges whose source is owned elsewhere (MGG fetches one row per such edge)."""
        return self.num_edges - self.num_local_edges

    @property
    def num_halo(self) -> int:
        """``H``: unique remote sources (rows received per exchange with deduplication)."""
        return int(self.halo.size)

    def __repr__(self) -> str:
        return (
            f"ExchangeLayout(rank={self.rank}/{self.world_size}, dst={self.num_dst}, "
            f"rows={self.num_rows}, local_edges={self.num_local_edges}, "
            f"remote_edges={self.num_remote_edges}, halo={self.num_halo}, "
            f"need_counts={self.need_counts.tolist()})"
        )


def _layout_fields(
    dst_ids: np.ndarray,
    indptr: np.ndarray,
    src: np.ndarray,
    owner: OwnerLike,
    rank: int,
    world_size: int,
    row_ids: np.ndarray | None,
) -> dict[str, object]:
    """Validated fields of an :class:`ExchangeLayout` (shared by its subclasses' builders)."""
    w = _check_world_size(world_size)
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or not 0 <= rank < w:
        raise PartitionError(f"'rank' must lie in [0, {w}) (got {rank!r})")
    rank = int(rank)
    dst = _check_ids("dst_ids", dst_ids)
    ptr = _check_ids("indptr", indptr)
    srcs = _check_ids("src", src)
    if ptr.size != dst.size + 1 or ptr[0] != 0 or ptr[-1] != srcs.size or np.any(np.diff(ptr) < 0):
        raise PartitionError(
            f"'indptr' must be non-decreasing from 0 to len(src) = {srcs.size} with "
            f"len(dst_ids) + 1 = {dst.size + 1} entries (got {ptr.size} entries, "
            f"{ptr[:1].tolist()} .. {ptr[-1:].tolist()})"
        )
    rows = dst if row_ids is None else _check_ids("row_ids", row_ids)
    if rows.size > 1 and np.unique(rows).size != rows.size:
        raise PartitionError(
            f"'row_ids' must be unique (got {rows.size} IDs, {np.unique(rows).size} distinct); "
            f"a rank holds each of its rows once"
        )
    own = owner_function(owner, w)
    src_owner = own(srcs)
    is_local = src_owner == rank
    src_row = np.full(srcs.size, -1, dtype=np.int64)
    src_row[is_local] = _rows_of(rows, srcs[is_local], "local edges have sources")
    # halo: unique remote sources, grouped by owner (stable: by ID within an owner)
    remote = srcs[~is_local]
    uniq, inv = np.unique(remote, return_inverse=True)
    inv = inv.reshape(-1)
    any_edge = np.empty(uniq.size, dtype=np.int64)
    any_edge[inv] = np.arange(remote.size, dtype=np.int64)  # one edge per unique source
    uniq_owner = src_owner[~is_local][any_edge]
    by_owner = np.argsort(uniq_owner, kind="stable")
    halo, halo_owner = uniq[by_owner], uniq_owner[by_owner]
    pos_of_uniq = np.empty(uniq.size, dtype=np.int64)
    pos_of_uniq[by_owner] = np.arange(uniq.size, dtype=np.int64)
    halo_pos = np.full(srcs.size, -1, dtype=np.int64)
    halo_pos[~is_local] = pos_of_uniq[inv]
    return {
        "rank": rank,
        "world_size": w,
        "dst_ids": dst,
        "row_ids": rows,
        "indptr": ptr,
        "src": srcs,
        "is_local": is_local,
        "src_row": src_row,
        "halo": halo.astype(np.int64),
        "halo_owner": halo_owner.astype(np.int64),
        "need_counts": np.bincount(halo_owner, minlength=w).astype(np.int64),
        "halo_pos": halo_pos,
    }


def build_exchange_layout(
    dst_ids: np.ndarray,
    indptr: np.ndarray,
    src: np.ndarray,
    owner: OwnerLike,
    *,
    rank: int,
    world_size: int,
    row_ids: np.ndarray | None = None,
) -> ExchangeLayout:
    """Split a rank's edges into local and remote and deduplicate its halo, per owner.

    No communication. Vectorised: ``O(E log E)`` numpy work plus one owner call on ``E`` IDs.

    Args:
        dst_ids: int ``[M]`` global IDs of the destinations this rank computes.
        indptr: int ``[M + 1]`` CSC offsets of their edges.
        src: int ``[E]`` global source ID of every edge.
        owner: Owner array or function (see :func:`owner_function`).
        rank: This rank.
        world_size: Number of ranks.
        row_ids: int ``[R]`` global IDs of the rows this rank holds, in the order of its ``x``
            (``None``: ``dst_ids``, as in full-graph training). Every source owned by ``rank``
            must be among them.

    Raises:
        PartitionError: Malformed arrays, ``rank`` out of range, an owner outside
            ``[0, world_size)``, or a local source missing from ``row_ids``.
    """
    fields = _layout_fields(dst_ids, indptr, src, owner, rank, world_size, row_ids)
    return ExchangeLayout(**fields)  # type: ignore[arg-type]


def _segments(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edge positions of CSC rows ``rows`` (concatenated) and their new ``indptr``."""
    starts, counts = indptr[rows], indptr[rows + 1] - indptr[rows]
    ptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    eids = np.arange(int(ptr[-1]), dtype=np.int64) + np.repeat(starts - ptr[:-1], counts)
    return eids, ptr


def block_layout(block: Block, owner: OwnerLike, *, rank: int, world_size: int) -> ExchangeLayout:
    """This rank's share of a sampled block under split parallelism (GSplit).

    The rank computes the block's destinations it owns, from all of their sampled edges, and holds
    the rows of the block's sources it owns, in block order (``row_ids``; the owned destinations
    come first, since destinations are a prefix of the sources). No communication.

    ====  ==========================  ======================================================
    rank  destinations                local rows (``row_ids``)
    ====  ==========================  ======================================================
    r     ``dst_ids[own(dst) == r]``  ``src_ids[own(src) == r]`` (owned destinations first)
    ====  ==========================  ======================================================

    Args:
        block: The sampled block (the same on every rank).
        owner: Owner of the block's global IDs (``PartitionBook.owner`` for partitioned IDs,
            ``book.part_of`` for original ones).
        rank: This rank.
        world_size: Number of ranks.
    """
    own = owner_function(owner, world_size)
    src_ids = block.src_ids.cpu().numpy().astype(np.int64, copy=False)
    src_owner = own(src_ids)
    mine = np.flatnonzero(src_owner[: block.num_dst] == rank)
    eids, ptr = _segments(block.indptr.cpu().numpy().astype(np.int64, copy=False), mine)
    src = src_ids[block.indices.cpu().numpy()[eids]]
    fields = _layout_fields(
        src_ids[mine], ptr, src, own, rank, world_size, src_ids[src_owner == rank]
    )
    return ExchangeLayout(**fields)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- send lists
def exchange_need_lists(
    layout: ExchangeLayout, comm: Communicator
) -> tuple[np.ndarray, np.ndarray]:
    """Tell every owner which of its rows this rank needs; learn what to send to each rank.

    Collective: one count exchange and one all-to-all of int64 IDs (``H`` IDs sent by this rank),
    once per layout. Requires ``comm.world_size == layout.world_size``.

    Returns:
        ``(send_rows, send_counts)``: int64 local rows to send, grouped by requesting rank in rank
        order and in need-list order (by ID) within each group; ``send_counts [W]``.

    Raises:
        PartitionError: The world sizes differ, or a peer asks for a row this rank does not hold.
    """
    w = comm.world_size
    if w != layout.world_size:
        raise PartitionError(
            f"the layout has {layout.world_size} ranks but the communicator has {w}; "
            f"partition with num_parts = world size"
        )
    if w == 1:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    ids = torch.from_numpy(layout.halo.astype(np.int64))  # int64 on the wire (int32 layouts too)
    out, recv = comm.all_to_all(ids, layout.need_counts.tolist())  # type: ignore[misc]
    rows = _rows_of(layout.row_ids, out.numpy().astype(np.int64), "peers asked for nodes")
    return rows, np.asarray(recv, dtype=np.int64)


def requests_from_edges(
    src: np.ndarray, dst_owner: np.ndarray, owner: OwnerLike, *, rank: int, world_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """What every peer needs from ``rank``, derived from edges every rank knows (no communication).

    A peer ``q`` needs the unique sources owned by ``rank`` of the edges into its destinations
    (those with ``dst_owner == q != rank``), in ID order: exactly the need list ``q`` builds for
    ``rank`` with :func:`build_exchange_layout`. Pass the result to :func:`send_lists`.

    Args:
        src: int ``[E]`` global source of every edge (of all ranks).
        dst_owner: int ``[E]`` rank computing each edge's destination.
        owner: Owner array or function of the source IDs.
        rank: This rank.
        world_size: Number of ranks.

    Returns:
        ``(ids, counts)``: int64 global IDs grouped by requesting rank, sorted within a group;
        int64 ``[W]`` counts.
    """
    w = _check_world_size(world_size)
    s = _check_ids("src", src)
    d = _check_ids("dst_owner", dst_owner)
    if s.shape != d.shape:
        raise PartitionError(
            f"'src' and 'dst_owner' must have one entry per edge (got {s.size} and {d.size})"
        )
    if d.size and (int(d.min()) < 0 or int(d.max()) >= w):
        raise PartitionError(
            f"'dst_owner' must hold ranks in [0, {w}) (got [{int(d.min())}, {int(d.max())}])"
        )
    sel = (owner_function(owner, w)(s) == rank) & (d != rank)
    ids, req = s[sel], d[sel]
    order = np.lexsort((ids, req))
    ids, req = ids[order], req[order]
    first = np.ones(ids.size, dtype=bool)
    first[1:] = (ids[1:] != ids[:-1]) | (req[1:] != req[:-1])
    ids, req = ids[first], req[first]
    return ids, np.bincount(req, minlength=w).astype(np.int64)


def send_lists(
    layout: ExchangeLayout, ids: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Send lists from requests known without communication (see :func:`requests_from_edges`).

    Args:
        layout: This rank's layout (maps the requested IDs to local rows).
        ids: int ``[S]`` global IDs every peer needs from this rank, grouped by requesting rank in
            rank order, strictly increasing within a group (the peers' need-list order).
        counts: int ``[W]`` IDs per requesting rank (0 for this rank).

    Returns:
        ``(send_rows, send_counts)`` as :func:`exchange_need_lists` returns them.

    Raises:
        PartitionError: Counts of the wrong length or sum, a group out of order, a request to
            itself, or an ID this rank does not hold.
    """
    w = layout.world_size
    i = _check_ids("ids", ids)
    c = _check_ids("counts", counts)
    if c.size != w or np.any(c < 0) or int(c.sum()) != i.size:
        raise PartitionError(
            f"'counts' must hold {w} counts >= 0 summing to len(ids) = {i.size} (got {c.tolist()})"
        )
    if c[layout.rank] != 0:
        raise PartitionError(
            f"rank {layout.rank} cannot request its own rows (counts[{layout.rank}] = "
            f"{int(c[layout.rank])}); drop edges whose source it owns"
        )
    group = np.repeat(np.arange(w, dtype=np.int64), c)
    if np.any((np.diff(i) <= 0) & (group[1:] == group[:-1])):
        raise PartitionError(
            "'ids' must be strictly increasing within each requesting rank's group (the order "
            "of its need list); use requests_from_edges to build them"
        )
    return _rows_of(layout.row_ids, i, "peers asked for nodes"), c.copy()


# ---------------------------------------------------------------------------------- chunks
def _chunk_of(counts: np.ndarray, num_chunks: int) -> np.ndarray:
    """Chunk of every row of segments with ``counts`` rows: ``(i * K) // n`` within a segment."""
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    sizes = np.repeat(counts, counts)
    i = np.arange(int(counts.sum()), dtype=np.int64) - starts
    return (i * num_chunks) // np.maximum(sizes, 1)


@dataclasses.dataclass(frozen=True, repr=False)
class HaloPlan:
    """The chunked exchange schedule of one rank for ``K`` chunks (built once per ``K``).

    Chunk ``k``'s all-to-all sends ``x[send_rows[k]]`` (``send_counts[k][r]`` rows to rank ``r``)
    and receives ``recv_counts[k][o]`` rows from each owner ``o``; the received rows are halo rows
    ``halo_order[halo_offsets[k]:halo_offsets[k+1]]``.

    Attributes:
        num_chunks: ``K``.
        send_rows: ``K`` int64 tensors of local rows.
        send_counts: ``K`` lists of ``W`` ints.
        recv_counts: ``K`` lists of ``W`` ints.
        halo_order: int64 ``[H]``: chunk-major position -> index into ``layout.halo``.
        halo_offsets: int64 ``[K + 1]`` chunk boundaries in chunk-major halo order.
        active: ``K`` bools: whether any rank exchanges rows in chunk ``k`` (same on every rank;
            inactive chunks issue no collective).
    """

    num_chunks: int
    send_rows: tuple[Tensor, ...]
    send_counts: tuple[list[int], ...]
    recv_counts: tuple[list[int], ...]
    halo_order: np.ndarray
    halo_offsets: np.ndarray
    active: tuple[bool, ...]

    def chunk_rows(self, k: int) -> int:
        """Halo rows received in chunk ``k``."""
        return int(self.halo_offsets[k + 1] - self.halo_offsets[k])

    def __repr__(self) -> str:
        sent = [int(sum(c)) for c in self.send_counts]
        recv = [int(sum(c)) for c in self.recv_counts]
        return f"HaloPlan(num_chunks={self.num_chunks}, sent_rows={sent}, recv_rows={recv})"


def build_plan(
    layout: ExchangeLayout,
    send_rows: np.ndarray,
    send_counts: np.ndarray,
    num_chunks: int,
    comm: Communicator | None = None,
) -> HaloPlan:
    """Cut the halo and the send lists into ``num_chunks`` chunks (vectorised).

    Collective when ``comm`` is given (one ``all_gather_object`` of ``K`` ints to agree on which
    chunks are empty everywhere); without it a chunk is active when this rank sends or receives
    rows in it (pass ``comm`` whenever several ranks run the plan, so that they agree).

    Args:
        layout: This rank's layout (its need lists).
        send_rows: int64 local rows to send, grouped by requesting rank (from
            :func:`exchange_need_lists` or :func:`send_lists`).
        send_counts: int64 ``[W]`` rows per requesting rank.
        num_chunks: ``K >= 1``.
        comm: The communicator, to agree on the active chunks (``None``: decided locally).

    Raises:
        ConfigError: If ``num_chunks < 1``.
    """
    if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
        raise ConfigError(f"'num_chunks' must be a positive int (got {num_chunks!r})")
    k_all = num_chunks
    w = layout.need_counts.size
    send_rows = np.asarray(send_rows, dtype=np.int64)
    send_counts = np.asarray(send_counts, dtype=np.int64)
    # receiver side: chunk of each halo row, then chunk-major order (stable: owner, then ID)
    hc = _chunk_of(layout.need_counts, k_all)
    order = np.argsort(hc * w + layout.halo_owner, kind="stable")
    halo_offsets = np.zeros(k_all + 1, dtype=np.int64)
    np.cumsum(np.bincount(hc, minlength=k_all), out=halo_offsets[1:])
    recv = np.zeros((k_all, w), dtype=np.int64)
    np.add.at(recv, (hc, layout.halo_owner), 1)
    # sender side: the same rule applied to what each requester asked for
    sc = _chunk_of(send_counts, k_all)
    requester = np.repeat(np.arange(w, dtype=np.int64), send_counts)
    send = np.zeros((k_all, w), dtype=np.int64)
    np.add.at(send, (sc, requester), 1)
    sorder = np.argsort(sc * w + requester, kind="stable")
    soff = np.zeros(k_all + 1, dtype=np.int64)
    np.cumsum(np.bincount(sc, minlength=k_all), out=soff[1:])
    rows_sorted = torch.from_numpy(send_rows[sorder].astype(np.int64))
    per_chunk = send.sum(1) + recv.sum(1)
    if comm is not None and comm.world_size > 1:
        per_chunk = np.sum(comm.all_gather_object(per_chunk.tolist()), axis=0)
    return HaloPlan(
        num_chunks=k_all,
        send_rows=tuple(rows_sorted[soff[k] : soff[k + 1]] for k in range(k_all)),
        send_counts=tuple(send[k].tolist() for k in range(k_all)),
        recv_counts=tuple(recv[k].tolist() for k in range(k_all)),
        halo_order=order.astype(np.int64),
        halo_offsets=halo_offsets,
        active=tuple(bool(c > 0) for c in per_chunk),
    )
