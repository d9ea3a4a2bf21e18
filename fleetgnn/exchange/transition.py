r"""HongTu's deduplicated host-device communication plan: transition sets, slots, reorganisation.

Full-graph training with host-resident vertex data (the ``offload`` engine) runs each of ``P``
partitions (one per rank) as ``M`` chunks of destination vertices with all their in-edges
(:class:`~fleetgnn.partition.ChunkBook`). Batch ``j`` runs chunk ``order[i, j]`` of every
partition ``i`` at once. Chunk ``S`` needs the rows ``N(S)`` = its destinations (first, in ID
order) followed by the other in-neighbours (ascending); everything below is in NEW node IDs
(partition ``k`` owns ``[offsets[k], offsets[k + 1])``).

Sets of batch ``j`` (HongTu Sec. 5)::

    T_j     = union_i N(S_ij)                 the transition set
    T_j^k   = T_j  intersect V_k              rows rank k brings onto its device
    D_j^k   = T_j^k intersect T_(j-1)^k       already there (reuse)
    R_j^k   = T_j^k \ T_(j-1)^k               loaded from host (h2d)

Rank ``k`` keeps ``T_j^k`` in a transition buffer of ``capacity[k] = max_j |T_j^k|`` slots;
rows that stay from batch ``j - 1`` keep their slot, leaving rows free theirs, entering rows take
the lowest free slots. Rank ``i`` then reads ``N(S_ij) intersect T_j^k`` from rank ``k``'s
buffer (``pulls``); in the backward pass it pushes the gradients of the same rows back to the same
slots, where they accumulate until the row leaves the transition set and is flushed to host.

Host-device volumes (rows; HongTu Table 8): no deduplication ``sum_ij |N(S_ij)|``; inter-rank
deduplication ``sum_j |T_j|``; plus intra-rank reuse ``sum_j |T_j \ T_(j-1)|``. The Eq. 4 cost
of an order is ``d * s * (sum_j |T_j \ T_(j-1)| / B_hg + sum_ij |N(S_ij) \ T_j^i| / B_gg
+ sum_j |T_j intersect T_(j-1)| / B_ru)`` (:meth:`TransitionPlan.modelled_seconds`).
:func:`reorganize` is Alg. 4: a greedy permutation of chunks within each partition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from fleetgnn.errors import PartitionError
from fleetgnn.partition.chunks import ChunkBook

#: Bandwidths of Eq. 4 (bytes/s) on HongTu's machine: PCIe 4 host-device, NVLink 3
#: device-device, HBM for in-device reuse.
HONGTU_BANDWIDTHS: Mapping[str, float] = {"h2d": 32e9, "peer": 200e9, "reuse": 1.5e12}


@dataclasses.dataclass(frozen=True, eq=False)
class ChunkHop:
    """One chunk's topology over its neighbour rows.

    Attributes:
        part: Partition (rank) of the chunk.
        chunk: Chunk index within the partition (before reorganisation).
        lo: First destination (new ID).
        hi: One past the last destination.
        rows: int64 ``[S]`` the chunk's rows ``N(S)`` (new IDs): ``lo..hi-1`` then the other
            in-neighbours ascending.
        indptr: int64 ``[hi - lo + 1]`` CSC offsets of the destinations' in-edges.
        indices: int64 ``[E]`` positions in ``rows`` of each in-edge's source.
    """

    part: int
    chunk: int
    lo: int
    hi: int
    rows: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray

    @property
    def num_dst(self) -> int:
        """Number of destinations."""
        return self.hi - self.lo

    @property
    def num_edges(self) -> int:
        """Number of in-edges."""
        return int(self.indices.size)

    @property
    def nbytes(self) -> int:
        """Bytes of the chunk's topology (rows, offsets, indices)."""
        return int(self.rows.nbytes + self.indptr.nbytes + self.indices.nbytes)


def chunk_rows(indptr: np.ndarray, indices: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``N(S)`` of destinations ``[lo, hi)``: ``lo..hi-1``, then the other sources ascending."""
    src = np.unique(np.asarray(indices[int(indptr[lo]) : int(indptr[hi])], dtype=np.int64))
    own = np.arange(lo, hi, dtype=np.int64)
    return np.concatenate([own, src[(src < lo) | (src >= hi)]])


def chunk_hop(
    graph_indptr: np.ndarray, graph_indices: np.ndarray, chunks: ChunkBook, part: int, chunk: int
) -> ChunkHop:
    """The :class:`ChunkHop` of chunk ``(part, chunk)`` of a graph in new IDs (CSC arrays)."""
    lo, hi = chunks.chunk_range(part, chunk)
    e0, e1 = int(graph_indptr[lo]), int(graph_indptr[hi])
    src = np.asarray(graph_indices[e0:e1], dtype=np.int64)
    rows = chunk_rows(graph_indptr, graph_indices, lo, hi)
    # positions of the sources in rows: own destinations map by offset, the rest by search
    pos = np.empty(src.size, dtype=np.int64)
    own = (src >= lo) & (src < hi)
    pos[own] = src[own] - lo
    others = rows[hi - lo :]
    pos[~own] = (hi - lo) + np.searchsorted(others, src[~own])
    indptr = np.asarray(graph_indptr[lo : hi + 1], dtype=np.int64) - e0
    return ChunkHop(part, chunk, lo, hi, rows, indptr, pos)


@dataclasses.dataclass(frozen=True, eq=False)
class Volumes:
    r"""Row counts of one pass over a layer (every batch, every rank).

    Attributes:
        baseline: ``sum_ij |N(S_ij)|``: rows loaded without deduplication.
        inter: ``sum_j |T_j|``: with inter-rank deduplication.
        intra: ``sum_j |T_j \ T_(j-1)|``: plus intra-rank reuse (the rows actually loaded).
        reuse: ``sum_j |T_j intersect T_(j-1)|``: rows kept on the device between batches.
        peer: ``sum_ij |N(S_ij) \ T_j^i|``: rows read from another rank's buffer.
        local: ``sum_ij |N(S_ij) intersect T_j^i|``: rows read from the own buffer.
    """

    baseline: int
    inter: int
    intra: int
    reuse: int
    peer: int
    local: int

    def reductions(self) -> dict[str, float]:
        """HongTu Table 8: host-device reduction by each technique, relative to the baseline."""
        b = float(self.baseline) or 1.0
        return {
            "inter_rank": (self.baseline - self.inter) / b,
            "intra_rank": (self.inter - self.intra) / b,
            "total": (self.baseline - self.intra) / b,
        }

    def to_dict(self) -> dict[str, int]:
        """Plain dict of the counts."""
        return dataclasses.asdict(self)


class _PlanCosts:
    """Staging capacities and Eq. 4 from :meth:`pull_counts` and :meth:`volumes`."""

    num_parts: int
    num_batches: int

    def pull_counts(self) -> np.ndarray:
        """int64 ``[M, P, P]``: rows rank ``i`` reads from rank ``k``'s buffer in batch ``j``."""
        raise NotImplementedError

    def volumes(self) -> Volumes:
        """Row counts of one pass (see :class:`Volumes`)."""
        raise NotImplementedError

    def staging_caps(self) -> np.ndarray:
        """Staging rows per (source, owner), int64 ``[P, P]``.

        Row ``i``, column ``k``: the most rows rank ``i`` pushes to owner ``k`` in one batch
        (``max_j`` of :meth:`pull_counts`); 0 on the diagonal, a rank adds its own in place.
        """
        caps = (
            self.pull_counts().max(axis=0)
            if self.num_batches
            else np.zeros((self.num_parts, self.num_parts), np.int64)
        )
        np.fill_diagonal(caps, 0)
        return caps

    def modelled_seconds(
        self, width: int, elem_bytes: int, bandwidths: Mapping[str, float] = HONGTU_BANDWIDTHS
    ) -> float:
        """HongTu's Eq. 4 for one pass of rows of ``width`` elements of ``elem_bytes`` bytes."""
        v = self.volumes()
        row = float(width * elem_bytes)
        return row * (
            v.intra / bandwidths["h2d"]
            + v.peer / bandwidths["peer"]
            + v.reuse / bandwidths["reuse"]
        )


class TransitionPlan(_PlanCosts):
    r"""Transition sets, slots, pulls and volumes of one chunk order (identical on every rank).

    Args:
        chunks: The two-level partition (``P`` parts of ``M`` chunks, new IDs).
        rows: ``rows[p][c]`` = ``N(S_pc)`` of chunk ``c`` of part ``p`` (see :func:`chunk_rows`).
        order: int ``[P, M]``: batch ``j`` runs chunk ``order[p, j]`` of part ``p``; each row is a
            permutation of ``0..M-1`` (``None``: identity).

    Raises:
        PartitionError: If ``order`` is not a permutation within each part, or ``rows`` does not
            hold ``M`` chunks for each of the ``P`` parts.

    Attributes (per batch ``j``, rank ``k``):
        trans[j][k]: int64 sorted ``T_j^k``.
        slots[j][k]: int64 slot of each row of ``trans[j][k]``.
        load[j][k]: bool mask over ``trans[j][k]``: ``True`` for ``R_j^k`` (loaded), ``False``
            for ``D_j^k`` (reused).
        leave[j][k]: ``(rows, slots)`` of ``T_(j-1)^k \ T_j^k`` (flushed before batch ``j``);
            ``leave[M][k]`` is everything left after the last batch.
        capacity[k]: ``max_j |T_j^k|``.
    """

    def __init__(
        self, chunks: ChunkBook, rows: list[list[np.ndarray]], order: np.ndarray | None = None
    ) -> None:
        p, m = chunks.num_parts, chunks.chunks_per_part
        if len(rows) != p or any(len(r) != m for r in rows):
            raise PartitionError(f"'rows' must hold {m} chunks for each of {p} parts")
        order = np.tile(np.arange(m, dtype=np.int64), (p, 1)) if order is None else order
        order = np.asarray(order, dtype=np.int64)
        if order.shape != (p, m) or any(
            not np.array_equal(np.sort(o), np.arange(m)) for o in order
        ):
            raise PartitionError(
                f"'order' must be [{p}, {m}] with a permutation of 0..{m - 1} per part"
            )
        self.chunks, self.order = chunks, order
        self.num_parts, self.num_batches = p, m
        self.offsets = np.concatenate([chunks.bounds[:, 0], chunks.bounds[-1:, -1]])
        self.batch_rows = [[rows[i][order[i, j]] for i in range(p)] for j in range(m)]
        self.trans: list[list[np.ndarray]] = []
        for j in range(m):
            union = (
                np.unique(np.concatenate(self.batch_rows[j]))
                if p > 1
                else np.sort(self.batch_rows[j][0])
            )
            cut = np.searchsorted(union, self.offsets)
            self.trans.append([union[cut[k] : cut[k + 1]] for k in range(p)])
        self._assign_slots()

    # ------------------------------------------------------------------ slots
    def _assign_slots(self) -> None:
        p, m = self.num_parts, self.num_batches
        self.slots = [[np.empty(0, np.int64)] * p for _ in range(m)]
        self.load = [[np.empty(0, bool)] * p for _ in range(m)]
        self.leave = [[(np.empty(0, np.int64), np.empty(0, np.int64))] * p for _ in range(m + 1)]
        self.capacity = np.zeros(p, dtype=np.int64)
        for k in range(p):
            prev_rows = np.empty(0, np.int64)
            prev_slots = np.empty(0, np.int64)
            used = np.zeros(0, dtype=bool)
            for j in range(m):
                cur = self.trans[j][k]
                stay = np.isin(cur, prev_rows, assume_unique=True)
                going = ~np.isin(prev_rows, cur, assume_unique=True)
                self.leave[j][k] = (prev_rows[going], prev_slots[going])
                used[prev_slots[going]] = False
                slots = np.empty(cur.size, dtype=np.int64)
                slots[stay] = prev_slots[np.searchsorted(prev_rows, cur[stay])]
                need = int((~stay).sum())
                free = np.flatnonzero(~used)[:need]
                if free.size < need:  # grow the high-water mark
                    extra = np.arange(used.size, used.size + need - free.size, dtype=np.int64)
                    used = np.concatenate([used, np.zeros(extra.size, dtype=bool)])
                    free = np.concatenate([free, extra])
                slots[~stay] = free
                used[free] = True
                self.slots[j][k], self.load[j][k] = slots, ~stay
                prev_rows, prev_slots = cur, slots
                self.capacity[k] = max(self.capacity[k], cur.size)
            self.leave[m][k] = (prev_rows, prev_slots)

    # ------------------------------------------------------------------ per-rank views
    def pulls(self, rank: int, batch: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """What rank ``rank`` reads in batch ``batch``: ``(owner k, positions, slots)`` per owner.

        ``positions`` index ``N(S)``, ``slots`` index ``k``'s transition buffer; owners come in
        HongTu's interleaved order ``(rank + s) mod P``.
        """
        rows = self.batch_rows[batch][rank]
        out = []
        for s in range(self.num_parts):
            k = (rank + s) % self.num_parts
            lo, hi = self.offsets[k], self.offsets[k + 1]
            pos = np.flatnonzero((rows >= lo) & (rows < hi))
            if pos.size == 0:
                continue
            where = np.searchsorted(self.trans[batch][k], rows[pos])
            out.append((k, pos, self.slots[batch][k][where]))
        return out

    def pull_counts(self) -> np.ndarray:
        """int64 ``[M, P, P]``: rows rank ``i`` reads from rank ``k``'s buffer in batch ``j``."""
        p, m = self.num_parts, self.num_batches
        out = np.zeros((m, p, p), dtype=np.int64)
        for j in range(m):
            for i in range(p):
                owners = np.searchsorted(self.offsets, self.batch_rows[j][i], side="right") - 1
                out[j, i] = np.bincount(owners, minlength=p)
        return out

    # ------------------------------------------------------------------ volumes and cost
    def volumes(self) -> Volumes:
        """Row counts of one pass (see :class:`Volumes`)."""
        baseline = sum(r.size for batch in self.batch_rows for r in batch)
        inter = sum(t.size for batch in self.trans for t in batch)
        intra = sum(int(lo.sum()) for batch in self.load for lo in batch)
        counts = self.pull_counts()
        local = int(sum(np.trace(c) for c in counts))
        return Volumes(baseline, inter, intra, inter - intra, baseline - local, local)

    def rank_view(self, rank: int) -> RankPlan:
        """What rank ``rank`` runs the plan with (:class:`RankPlan`), without the other ranks'."""
        p, m = self.num_parts, self.num_batches
        empty = np.empty(0, np.int64)
        incoming: list[list[tuple[int, np.ndarray]]] = []
        for j in range(m):
            inc = []
            for s in range(p):
                if s != rank:
                    inc += [(s, sl) for k, _, sl in self.pulls(s, j) if k == rank]
            incoming.append(inc)

        def own(arrays: list[list], blank: object) -> list[list]:
            return [[a[rank] if k == rank else blank for k in range(p)] for a in arrays]

        return RankPlan(
            rank=rank,
            num_parts=p,
            num_batches=m,
            order=self.order,
            capacity=self.capacity,
            trans=own(self.trans, empty),
            slots=own(self.slots, empty),
            load=own(self.load, np.empty(0, bool)),
            leave=own(self.leave, (empty, empty)),
            own_pulls=[self.pulls(rank, j) for j in range(m)],
            incoming=incoming,
            counts=self.pull_counts(),
            totals=self.volumes(),
        )


@dataclasses.dataclass(eq=False)
class RankPlan(_PlanCosts):
    """One rank's part of a :class:`TransitionPlan` (:meth:`TransitionPlan.rank_view`).

    The plan's per-rank lists keep their ``[batch][rank]`` indexing, filled for ``rank`` only
    (other ranks' entries are empty); the whole plan's pull counts and volumes come along (small:
    ``[M, P, P]`` and six numbers), so it gives the same :meth:`staging_caps`, :meth:`volumes`
    and :meth:`modelled_seconds`. Its size is this rank's rows, not every part's.

    Attributes:
        rank: The rank it is for.
        num_parts: ``P``.
        num_batches: ``M``.
        order: int64 ``[P, M]``, as the plan's.
        capacity: int64 ``[P]``, as the plan's.
        trans: ``trans[j][rank]`` as the plan's.
        slots: ``slots[j][rank]`` as the plan's.
        load: ``load[j][rank]`` as the plan's.
        leave: ``leave[j][rank]`` as the plan's (``M + 1`` batches).
        own_pulls: ``own_pulls[j]`` = the plan's ``pulls(rank, j)``.
        incoming: ``incoming[j]``: ``(source s, slots)`` of the rows rank ``s != rank`` pulls
            from this rank in batch ``j`` (the slots in this rank's buffer, in ``s``'s order).
        counts: The plan's :meth:`~TransitionPlan.pull_counts`.
        totals: The plan's :meth:`~TransitionPlan.volumes`.
    """

    rank: int
    num_parts: int
    num_batches: int
    order: np.ndarray
    capacity: np.ndarray
    trans: list[list[np.ndarray]]
    slots: list[list[np.ndarray]]
    load: list[list[np.ndarray]]
    leave: list[list[tuple[np.ndarray, np.ndarray]]]
    own_pulls: list[list[tuple[int, np.ndarray, np.ndarray]]]
    incoming: list[list[tuple[int, np.ndarray]]]
    counts: np.ndarray
    totals: Volumes

    def pulls(self, rank: int, batch: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """:meth:`TransitionPlan.pulls` of this view's rank.

        Raises:
            PartitionError: For another rank (the view does not hold its rows).
        """
        if rank != self.rank:
            raise PartitionError(
                f"this plan view holds rank {self.rank}'s pulls, not rank {rank}'s"
            )
        return self.own_pulls[batch]

    def pull_counts(self) -> np.ndarray:
        """The whole plan's :meth:`TransitionPlan.pull_counts`."""
        return self.counts

    def volumes(self) -> Volumes:
        """The whole plan's :meth:`TransitionPlan.volumes`."""
        return self.totals


def _overlap(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.intersect1d(a, b, assume_unique=True).size)


def reorganize(chunks: ChunkBook, rows: list[list[np.ndarray]]) -> np.ndarray:
    """HongTu Alg. 4: a greedy chunk order maximising inter- then intra-rank duplicates.

    Phase 1 (inter-rank): batch ``j`` starts with chunk ``j`` of part 0; for parts ``1..P-1`` in
    turn, batches ``j = 0..M-1`` each take the pool chunk ``s*`` with the largest
    ``|N(s) intersect T_j|`` (ties: lowest index). Phase 2 (intra-rank): starting from batch 0,
    append the remaining batch ``b`` with the largest ``|T_b intersect T_current|``. The result is
    a permutation within each part (``O(P M^2)`` set intersections).

    Returns:
        int64 ``[P, M]`` order for :class:`TransitionPlan`.
    """
    p, m = chunks.num_parts, chunks.chunks_per_part
    assign = np.zeros((p, m), dtype=np.int64)
    assign[0] = np.arange(m)
    t = [np.sort(rows[0][j]) for j in range(m)]  # chunk rows are distinct (chunk_rows)
    for i in range(1, p):
        pool = list(range(m))
        for j in range(m):
            best = max(pool, key=lambda s: (_overlap(rows[i][s], t[j]), -s))
            pool.remove(best)
            assign[i, j] = best
            t[j] = np.union1d(t[j], rows[i][best])
    seq = [0]
    left = list(range(1, m))
    while left:
        cur = t[seq[-1]]
        nxt = max(left, key=lambda b: (_overlap(t[b], cur), -b))
        left.remove(nxt)
        seq.append(nxt)
    return assign[:, seq]


def build_transition_plan(
    indptr: np.ndarray, indices: np.ndarray, chunks: ChunkBook, reorganise: bool = True
) -> tuple[TransitionPlan, list[list[np.ndarray]]]:
    """The plan for a graph in new IDs: the identity order, or Alg. 4's when it models cheaper.

    Reorganisation is guided by Eq. 4: the greedy order is kept only if its modelled time
    (HongTu's bandwidths, any row width) is below the identity order's.

    Returns:
        ``(plan, rows)`` where ``rows[p][c]`` is ``N(S_pc)`` for every chunk.
    """
    p, m = chunks.num_parts, chunks.chunks_per_part
    rows = [
        [chunk_rows(indptr, indices, *chunks.chunk_range(i, c)) for c in range(m)] for i in range(p)
    ]
    plan = TransitionPlan(chunks, rows)
    if reorganise and m > 1:
        greedy = TransitionPlan(chunks, rows, reorganize(chunks, rows))
        if greedy.modelled_seconds(1, 1) < plan.modelled_seconds(1, 1):
            plan = greedy
    return plan, rows
