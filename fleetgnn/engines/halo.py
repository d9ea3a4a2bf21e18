"""MGG's workload layout for full-graph training: owned ranges, local/remote edges, halo plans.

Rank ``g`` owns the contiguous node range ``[lo, hi) = [bounds[g], bounds[g+1])`` (MGG's
edge-balanced split, Alg. 1, or any contiguous relabelling such as METIS + ``PartitionBook``) and
the in-edges of its nodes. Each in-edge ``u -> v`` is *local* when ``lo <= u < hi`` and *remote*
otherwise. The remote sources are deduplicated per rank into the *halo*: the rows this rank needs
from other owners, grouped by owner.

Example with ``N = 8`` nodes on 3 ranks (bounds ``[0, 3, 6, 8]``):

====  ==========  ======================================  ==================================
rank  owns        halo rows (need lists, by owner)        send rows (transposed need lists)
====  ==========  ======================================  ==================================
0     ``[0, 3)``  ``[3, 5 | 7]`` from ranks 1 and 2       what ranks 1, 2 need from ``[0, 3)``
1     ``[3, 6)``  ``[0 | 6]``                             ...
2     ``[6, 8)``  ``[2, 4]``                              ...
====  ==========  ======================================  ==================================

The halo is cut into ``K`` chunks (MGG's neighbour partitions, at the granularity of one
all-to-all): owner ``o``'s ``n_o`` needed rows, in ID order, go to chunk ``(i * K) // n_o`` for the
``i``-th of them, so every chunk takes a contiguous, balanced piece of every owner's list. The
sender computes the same assignment from the counts it received, so one exchange of the need lists
(:func:`exchange_need_lists`) serves every ``K``. Halo rows are stored chunk-major (chunk 0 from
owner 0, 1, ..., then chunk 1, ...), which is exactly the order the per-chunk all-to-alls deliver.

:class:`HaloAggregator` implements the :class:`~fleetgnn.nn.Aggregator` protocol over this layout,
so every layer in :mod:`fleetgnn.nn` runs unchanged; see its docstring for how remote rows enter.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from fleetgnn.distributed import Communicator
from fleetgnn.errors import ConfigError, PartitionError
from fleetgnn.graph import Graph
from fleetgnn.ops import edge_softmax, gsddmm, gspmm
from fleetgnn.ops.adjacency import Structure
from fleetgnn.ops.spmm import Reduce


# ---------------------------------------------------------------------------------- layout
@dataclasses.dataclass(frozen=True, repr=False)
class RankLayout:
    """One rank's share of the graph: owned range, its in-edges split local/remote, its halo.

    Edges are kept in the graph's CSC order (by destination, then as stored); that order is the
    aggregator's edge order (``E = num_local_edges + num_remote_edges`` edges).

    Attributes:
        rank: This rank.
        bounds: int64 ``[W + 1]`` range boundaries (``bounds[r]`` = first node of rank ``r``).
        indptr: int64 ``[M + 1]`` CSC offsets of the owned nodes' in-edges.
        src: int64 ``[E]`` global source ID of every in-edge (in the partitioned numbering).
        is_local: bool ``[E]`` whether the source is owned here.
        halo: int64 ``[H]`` unique remote sources, sorted (hence grouped by owner).
        halo_owner: int64 ``[H]`` owner rank of each halo row.
        need_counts: int64 ``[W]`` halo rows needed from each owner.
        halo_pos: int64 ``[E]`` position of each remote edge's source in ``halo`` (-1 if local).
        in_degree: int64 ``[M]`` global in-degree of each owned node.
    """

    rank: int
    bounds: np.ndarray
    indptr: np.ndarray
    src: np.ndarray
    is_local: np.ndarray
    halo: np.ndarray
    halo_owner: np.ndarray
    need_counts: np.ndarray
    halo_pos: np.ndarray
    in_degree: np.ndarray

    @property
    def lo(self) -> int:
        """First owned node."""
        return int(self.bounds[self.rank])

    @property
    def hi(self) -> int:
        """One past the last owned node."""
        return int(self.bounds[self.rank + 1])

    @property
    def num_owned(self) -> int:
        """``M``: owned nodes."""
        return self.hi - self.lo

    @property
    def num_edges(self) -> int:
        """In-edges of the owned nodes."""
        return int(self.src.size)

    @property
    def num_local_edges(self) -> int:
        """In-edges whose source is owned here."""
        return int(np.count_nonzero(self.is_local))

    @property
    def num_remote_edges(self) -> int:
        """In-edges whose source is owned elsewhere (MGG fetches one row per such edge)."""
        return self.num_edges - self.num_local_edges

    @property
    def num_halo(self) -> int:
        """``H``: unique remote sources (rows received per exchange with deduplication)."""
        return int(self.halo.size)

    def translate(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """MGG's address translation of global IDs: ``(owner(u), u - lb[owner])``."""
        owner = np.searchsorted(self.bounds, u, side="right") - 1
        return owner, u - self.bounds[owner]

    def __repr__(self) -> str:
        return (
            f"RankLayout(rank={self.rank}, range=[{self.lo}, {self.hi}), "
            f"local_edges={self.num_local_edges}, remote_edges={self.num_remote_edges}, "
            f"halo={self.num_halo}, need_counts={self.need_counts.tolist()})"
        )


def check_bounds(bounds: np.ndarray, num_nodes: int) -> np.ndarray:
    """Validate range boundaries: int64, ``bounds[0] == 0``, non-decreasing, ``bounds[-1] == N``.

    Raises:
        PartitionError: If they are not.
    """
    b = np.asarray(bounds, dtype=np.int64)
    if b.ndim != 1 or b.size < 2 or b[0] != 0 or b[-1] != num_nodes or np.any(np.diff(b) < 0):
        raise PartitionError(
            f"'bounds' must be non-decreasing from 0 to num_nodes={num_nodes} with at least 2 "
            f"entries (got {b.tolist()[:8]}{'...' if b.size > 8 else ''}); build them with "
            f"range_partition(graph, W).offsets"
        )
    return b


def build_layout(graph: Graph, bounds: np.ndarray, rank: int) -> RankLayout:
    """Slice rank ``rank``'s in-edges from ``graph`` and split them into local and remote.

    Vectorised: ``O(E_rank log E_rank)`` numpy work, no loop over nodes or edges; reads only the
    rank's slice of ``indices`` (the graph may be a memory map).

    Raises:
        PartitionError: If ``bounds`` are malformed or ``rank`` is out of range.
    """
    b = check_bounds(bounds, graph.num_nodes)
    w = b.size - 1
    if not 0 <= rank < w:
        raise PartitionError(f"'rank' must lie in [0, {w}) (got {rank})")
    lo, hi = int(b[rank]), int(b[rank + 1])
    gptr = np.asarray(graph.indptr[lo : hi + 1], dtype=np.int64)
    e0, e1 = int(gptr[0]), int(gptr[-1])
    src = np.asarray(graph.indices[e0:e1], dtype=np.int64)
    indptr = gptr - e0
    is_local = (src >= lo) & (src < hi)
    remote = src[~is_local]
    halo, inv = np.unique(remote, return_inverse=True)
    halo_owner = (np.searchsorted(b, halo, side="right") - 1).astype(np.int64)
    need_counts = np.bincount(halo_owner, minlength=w).astype(np.int64)
    halo_pos = np.full(src.size, -1, dtype=np.int64)
    halo_pos[~is_local] = inv.reshape(-1)
    return RankLayout(
        rank=rank,
        bounds=b,
        indptr=indptr,
        src=src,
        is_local=is_local,
        halo=halo.astype(np.int64),
        halo_owner=halo_owner,
        need_counts=need_counts,
        halo_pos=halo_pos,
        in_degree=np.diff(gptr),
    )


def exchange_need_lists(layout: RankLayout, comm: Communicator) -> tuple[np.ndarray, np.ndarray]:
    """Tell every owner which of its rows this rank needs; learn what to send to each rank.

    Collective: one count exchange and one all-to-all of int64 IDs (``H`` ids sent per rank),
    once per graph. Requires ``comm.world_size == len(layout.bounds) - 1``.

    Returns:
        ``(send_rows, send_counts)``: int64 local row offsets (``u - lo``) to send, grouped by
        requesting rank in rank order and sorted within each group; ``send_counts [W]``.
    """
    w = comm.world_size
    if w != layout.bounds.size - 1:
        raise PartitionError(
            f"the layout has {layout.bounds.size - 1} ranges but the communicator has {w} ranks; "
            f"partition with num_parts = world size"
        )
    if w == 1:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    ids = torch.from_numpy(layout.halo.copy())
    out, recv = comm.all_to_all(ids, layout.need_counts.tolist())  # type: ignore[misc]
    return out.numpy().astype(np.int64) - layout.lo, np.asarray(recv, dtype=np.int64)


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
        send_rows: ``K`` int64 tensors of local row offsets.
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

    def __repr__(self) -> str:
        sent = [int(sum(c)) for c in self.send_counts]
        recv = [int(sum(c)) for c in self.recv_counts]
        return f"HaloPlan(num_chunks={self.num_chunks}, sent_rows={sent}, recv_rows={recv})"


def build_plan(
    layout: RankLayout,
    send_rows: np.ndarray,
    send_counts: np.ndarray,
    num_chunks: int,
    comm: Communicator | None = None,
) -> HaloPlan:
    """Cut the halo and the send lists into ``num_chunks`` chunks (vectorised).

    Collective when ``comm`` is given (one ``all_gather_object`` of ``K`` ints to agree on which
    chunks are empty everywhere); without it every chunk is active.

    Raises:
        ConfigError: If ``num_chunks < 1``.
    """
    if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
        raise ConfigError(f"'num_chunks' must be a positive int (got {num_chunks!r})")
    k_all = num_chunks
    w = layout.need_counts.size
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


# ---------------------------------------------------------------------------------- volumes
@dataclasses.dataclass(frozen=True)
class HaloVolume:
    """Rows moved by one exchange of ``[M, D]`` rows, per rank (multiply by ``D * itemsize``).

    Attributes:
        remote_edges: MGG-style rows: one fetch per remote edge, no deduplication.
        halo_rows: Deduplicated rows received (unique remote sources).
        send_rows: Deduplicated rows sent to other ranks.
    """

    remote_edges: int
    halo_rows: int
    send_rows: int

    def bytes(self, row_bytes: int) -> dict[str, int]:
        """Closed-form bytes of one exchange: ``mgg`` (no dedup), ``dedup`` (received), ``sent``."""
        return {
            "mgg": self.remote_edges * row_bytes,
            "dedup": self.halo_rows * row_bytes,
            "sent": self.send_rows * row_bytes,
        }


# ---------------------------------------------------------------------------------- timing
@dataclasses.dataclass
class ExchangeTimes:
    """Seconds accumulated by a :class:`HaloAggregator` (mutable counters, reset per epoch).

    Both directions are covered: the forward chunk exchanges and, on the pipelined backward of
    ``sum``/``mean`` (:attr:`HaloAggregator.overlap_backward`), the transposed chunk exchanges that
    return the halo rows' gradients, so :attr:`hidden_fraction` is the share of all exchange time
    (forward and backward) hidden behind aggregation. Backward exchanges of the unpipelined paths
    (``max``, ``src_to_edge``, ``overlap_backward=False``) run inside autograd and are not timed.

    Attributes:
        comm_s: Sum over exchanges of the time from issue until completion was observed (polled
            after each piece of computation and at ``wait``): an upper bound on transfer time.
        wait_s: Time the computation was blocked waiting for an exchange (exposed communication).
        compute_s: Time in the aggregation kernels (local and remote parts, forward and the
            pipelined backward).
        exchanges: Number of forward chunk all-to-alls issued.
        backward_exchanges: Number of transposed chunk all-to-alls issued by the pipelined
            backward.
        mgg_bytes: MGG-style volume of the forward exchanges (remote edges x row bytes).
        dedup_bytes: Deduplicated volume received by the forward exchanges (halo x row bytes).
    """

    comm_s: float = 0.0
    wait_s: float = 0.0
    compute_s: float = 0.0
    exchanges: int = 0
    backward_exchanges: int = 0
    mgg_bytes: int = 0
    dedup_bytes: int = 0

    @property
    def hidden_fraction(self) -> float:
        """``1 - wait_s / comm_s``: share of communication time overlapped with computation.

        0 for synchronous exchanges (the computation waits for all of it), 1 when every exchange
        had completed before its rows were needed; 0 when nothing was exchanged.
        """
        if self.comm_s <= 0:
            return 0.0
        return float(min(1.0, max(0.0, 1.0 - self.wait_s / self.comm_s)))

    def reset(self) -> None:
        """Zero every counter."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, type(getattr(self, f.name))(0))


class _InFlight:
    """One issued chunk exchange and when it was issued / seen complete."""

    __slots__ = ("done_at", "handle", "issued_at")

    def __init__(self, handle: Any, issued_at: float) -> None:
        self.handle, self.issued_at = handle, issued_at
        self.done_at: float | None = None

    def poll(self) -> None:
        if self.done_at is None and self.handle.is_completed():
            self.done_at = time.perf_counter()


def _poll(flights: list[_InFlight | None]) -> None:
    """Note the completion time of every finished exchange (non-blocking)."""
    for f in flights:
        if f is not None:
            f.poll()


class _HaloSum(torch.autograd.Function):
    """The whole pipelined halo sum (local part + ``K`` remote chunks) as one autograd node.

    Forward: :meth:`HaloAggregator._sum_forward` with autograd off, keeping the received halo
    rows only when the edge weights need a gradient. Backward:
    :meth:`HaloAggregator._sum_backward`, chunked reverse exchanges overlapped with the local
    backward. Not twice differentiable.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, agg: HaloAggregator, x: Tensor, w: Tensor | None
    ) -> Tensor:
        out, received = agg._sum_forward(x, w)
        keep = w is not None and bool(ctx.needs_input_grad[2])
        ctx.agg = agg
        ctx.save_for_backward(x, w, *(received if keep else ()))
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        x, w, *received = ctx.saved_tensors
        agg: HaloAggregator = ctx.agg
        need_x, need_w = bool(ctx.needs_input_grad[1]), bool(ctx.needs_input_grad[2])
        gx, gw = agg._sum_backward(grad, x, w, received, need_x, need_w)
        return None, gx, gw


# ---------------------------------------------------------------------------------- aggregator
def _sub_structure(dst: np.ndarray, idx: np.ndarray, num_dst: int, num_src: int) -> Structure:
    """CSC structure of edges (already sorted by destination) with source rows ``idx``."""
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=num_dst), out=indptr[1:])
    return Structure(
        torch.from_numpy(indptr), torch.from_numpy(idx.astype(np.int64)), num_dst, num_src
    )


class HaloAggregator:
    """The :class:`~fleetgnn.nn.Aggregator` of one rank in full-graph training (MGG pipeline).

    How remote rows enter: the layer sees only the owned rows. ``num_src == num_dst == M``,
    ``x_src`` is ``[M, ...]`` (this rank's rows), and ``src_ids`` are the owned nodes' global IDs
    in the ORIGINAL numbering (``orig_ids``), so dropout masks equal the single-process ones.
    Everything that crosses edges fetches the halo rows internally: the edge set is all in-edges
    of the owned nodes (local and remote, ``E = E_local + E_remote``, in CSC order), so
    ``src_to_edge``, ``edge_softmax``, ``edge_ids`` and ``edge_weight`` arguments cover every
    edge; ``src_degree`` is the global in-degree of the owned rows (a remote row is scaled by its
    owner, which knows its degree) and ``dst_degree`` the global in-degree of the owned nodes.

    ``aggregate(x, "sum"|"mean")`` is pipelined: the halo exchange is issued as ``K`` chunked
    asynchronous all-to-alls, at most ``depth`` in flight; the local edges are aggregated while
    the first chunks travel, then each chunk's edges as it arrives (``depth = 0``: every chunk is
    exchanged synchronously before any aggregation, the unpipelined baseline). ``max`` and
    ``src_to_edge`` exchange every chunk first.

    Backward sends the halo rows' gradients back to their owners (the transposed all-to-all of
    each chunk). For ``sum``/``mean`` (weighted or not) it is pipelined the same way
    (``overlap_backward=True``, :class:`_HaloSum`): per chunk, the gradient of its received rows
    (the chunk's transposed remote CSR, cached, times ``grad_out``) is computed and its reverse
    all-to-all issued asynchronously, at most ``depth`` in flight; the local part of the gradient
    (transposed local CSR times ``grad_out``) is computed while they travel, then each chunk's
    returned rows are added into the owned rows' gradient (``index_add`` on the chunk's send
    rows) as it arrives (``depth = 0``: every chunk's rows are exchanged before the local part).
    Edge-weight gradients are computed in the same pass with no communication (per-edge dot of
    ``grad_out[dst]`` with the source row, local or received halo row, kept from the forward);
    when only the weights need a gradient nothing is exchanged. Every rank issues the reverse
    exchanges in chunk order, so the collectives match across ranks. ``max`` and
    ``src_to_edge`` (and ``overlap_backward=False``) backpropagate through the differentiable
    all-to-all of each chunk, one synchronous transposed exchange at a time.

    Collective: every ``aggregate`` / ``src_to_edge`` call communicates; all ranks must make the
    same calls in the same order (the same model on every rank guarantees it). Memory: the halo
    buffers, ``H`` rows of the exchanged width, plus per-chunk send buffers.

    Args:
        layout: This rank's :class:`RankLayout`.
        plan: The :class:`HaloPlan` (chunking) to use.
        comm: The communicator (``None`` only for a single rank).
        orig_ids: int64 ``[N]`` original ID of every node in the partitioned numbering (``None``:
            identity).
        depth: Chunks in flight during aggregation (>= 0).
        dtype: Float dtype of the degree tensors.
        device: Device of the structures.
        comm_stream: On CUDA, a separate stream for the exchanges (``None``: the current one).
        overlap_backward: Pipeline the backward of ``sum``/``mean`` (chunked reverse exchanges
            overlapped with the local backward); ``False``: backpropagate through each chunk's
            differentiable all-to-all (the synchronous baseline, same gradients).
    """

    def __init__(
        self,
        layout: RankLayout,
        plan: HaloPlan,
        comm: Communicator | None,
        *,
        orig_ids: np.ndarray | None = None,
        depth: int = 1,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        comm_stream: Any = None,
        overlap_backward: bool = True,
    ) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ConfigError(f"'depth' (chunks in flight) must be an int >= 0 (got {depth!r})")
        self.layout, self.plan, self.comm = layout, plan, comm
        self.depth = depth
        self.dtype = dtype
        self.device = torch.device(device)
        self.comm_stream = comm_stream
        self.overlap_backward = bool(overlap_backward)
        self.times = ExchangeTimes()
        m, lo = layout.num_owned, layout.lo
        self.num_dst = self.num_src = m
        gids = np.arange(lo, layout.hi, dtype=np.int64)
        if orig_ids is not None:
            gids = np.asarray(orig_ids[lo : layout.hi], dtype=np.int64)
        self.src_ids = torch.from_numpy(gids).to(self.device)
        dst = np.repeat(np.arange(m, dtype=np.int64), np.diff(layout.indptr))
        # chunk-major halo position of every halo row
        rank_of = np.empty(layout.num_halo, dtype=np.int64)
        rank_of[plan.halo_order] = np.arange(layout.num_halo, dtype=np.int64)
        ext = np.where(layout.is_local, layout.src - lo, 0)
        remote = ~layout.is_local
        ext[remote] = m + rank_of[layout.halo_pos[remote]]
        to = self.device
        # the combined structure over [owned rows; halo rows in chunk-major order]
        self._st = Structure(
            torch.from_numpy(layout.indptr.copy()).to(to),
            torch.from_numpy(ext).to(to),
            m,
            m + layout.num_halo,
        )
        eid = np.arange(layout.num_edges, dtype=np.int64)
        loc = layout.is_local
        self._local = _sub_structure(dst[loc], ext[loc], m, m)
        self._local_eid = torch.from_numpy(eid[loc]).to(to)
        chunk_of_edge = np.searchsorted(plan.halo_offsets, ext - m, side="right") - 1
        self._chunks: list[tuple[Structure, Tensor]] = []
        for k in range(plan.num_chunks):  # K pieces, not a loop over nodes or edges
            sel = remote & (chunk_of_edge == k)
            base = m + int(plan.halo_offsets[k])
            rows = int(plan.halo_offsets[k + 1] - plan.halo_offsets[k])
            st = _sub_structure(dst[sel], ext[sel] - base, m, rows)
            self._chunks.append((st, torch.from_numpy(eid[sel]).to(to)))
        if to.type != "cpu":
            self._local = Structure(self._local.indptr.to(to), self._local.indices.to(to), m, m)
            self._chunks = [
                (Structure(s.indptr.to(to), s.indices.to(to), s.num_dst, s.num_src), e)
                for s, e in self._chunks
            ]
        self._send_rows = [r.to(to) for r in plan.send_rows]
        # transposed pieces for the pipelined backward (index 0: local, k + 1: chunk k), lazily
        self._transposed: list[tuple[Structure, Tensor] | None] = [None] * (plan.num_chunks + 1)
        self._in_degree = torch.from_numpy(layout.in_degree).to(device=to, dtype=dtype)
        self._src_gid = torch.from_numpy(
            layout.src if orig_ids is None else np.asarray(orig_ids)[layout.src]
        ).to(to)
        self._dst_gid: Tensor | None = None
        self.volume = HaloVolume(
            remote_edges=layout.num_remote_edges,
            halo_rows=layout.num_halo,
            send_rows=int(sum(sum(c) for c in plan.send_counts)),
        )

    # ------------------------------------------------------------------ exchange
    def _issue(self, x: Tensor, k: int) -> _InFlight | None:
        if not self.plan.active[k] or self.comm is None:
            return None
        buf = x.index_select(0, self._send_rows[k])
        self.times.exchanges += 1
        return self._launch(buf, self.plan.send_counts[k], self.plan.recv_counts[k])

    def _launch(self, buf: Tensor, send: list[int], recv: list[int]) -> _InFlight:
        """Issue one asynchronous all-to-all of ``buf`` (on the comm stream on CUDA)."""
        comm = self.comm
        if comm is None:  # pragma: no cover - callers only launch with a communicator
            raise ConfigError("a single-rank HaloAggregator (comm=None) exchanges nothing")
        stream = self.comm_stream
        if stream is not None and buf.is_cuda:  # pragma: no cover - needs CUDA
            stream.wait_stream(torch.cuda.current_stream(buf.device))
            buf.record_stream(stream)
            with torch.cuda.stream(stream):
                h = comm.all_to_all(buf, send, recv_counts=recv, async_op=True)
        else:
            h = comm.all_to_all(buf, send, recv_counts=recv, async_op=True)
        return _InFlight(h, time.perf_counter())

    def _wait(self, f: _InFlight | None, x: Tensor, k: int) -> Tensor:
        if f is None:
            rows = int(self.plan.halo_offsets[k + 1] - self.plan.halo_offsets[k])
            return x.new_zeros((rows, *x.shape[1:]))
        return self._finish(f)

    def _finish(self, f: _InFlight) -> Tensor:
        """Wait for ``f``, account its time, return the received rows."""
        t0 = time.perf_counter()
        out = f.handle.wait()
        t1 = time.perf_counter()
        if self.comm_stream is not None and out.is_cuda:  # pragma: no cover - needs CUDA
            torch.cuda.current_stream(out.device).wait_stream(self.comm_stream)
            out.record_stream(torch.cuda.current_stream(out.device))
        self.times.wait_s += t1 - t0
        self.times.comm_s += (f.done_at if f.done_at is not None else t1) - f.issued_at
        return out

    def _record_volume(self, x: Tensor) -> None:
        row_bytes = x.element_size() * int(np.prod(x.shape[1:], dtype=np.int64))
        self.times.mgg_bytes += self.volume.remote_edges * row_bytes
        self.times.dedup_bytes += self.volume.halo_rows * row_bytes

    def halo_rows(self, x: Tensor) -> Tensor:
        """``[H, ...]``: the halo rows of ``x`` in chunk-major order (every chunk, then wait).

        Collective; differentiable.
        """
        self._check_rows(x)
        self._record_volume(x)
        flights = [self._issue(x, k) for k in range(self.plan.num_chunks)]
        parts = [self._wait(f, x, k) for k, f in enumerate(flights)]
        return torch.cat(parts) if parts else x[:0]

    def _check_rows(self, x: Tensor) -> None:
        if x.dim() < 1 or x.shape[0] != self.num_src:
            raise ConfigError(
                f"'x_src' must hold this rank's {self.num_src} owned rows (got shape "
                f"{tuple(x.shape)}); the full-graph aggregator fetches remote rows itself"
            )

    # ------------------------------------------------------------------ protocol
    def aggregate(
        self, x_src: Tensor, reduce: Reduce = "sum", edge_weight: Tensor | None = None
    ) -> Tensor:
        """``[M, ...] -> [M, ...]``: reduce ``w_e * x[u]`` over every in-edge (local + remote).

        Collective. See the class docstring for the pipeline.
        """
        self._check_rows(x_src)
        if edge_weight is not None and edge_weight.shape[:1] != (self._st.num_edges,):
            raise ConfigError(
                f"'edge_weight' must have one row per in-edge of the owned nodes, "
                f"{self._st.num_edges} (got shape {tuple(edge_weight.shape)})"
            )
        if reduce == "max":
            ext = torch.cat([x_src, self.halo_rows(x_src)])
            return gspmm(self._st, ext, "max", edge_weight)
        if reduce not in ("sum", "mean"):
            raise ConfigError(f"'reduce' must be 'sum', 'mean' or 'max' (got {reduce!r})")
        self._record_volume(x_src)
        w = None if edge_weight is None else edge_weight.to(x_src.dtype)
        if self.overlap_backward:
            out = _HaloSum.apply(self, x_src, w)
        else:
            out, _ = self._sum_forward(x_src, w)
        if reduce == "mean":
            deg = self._in_degree.to(out.dtype).clamp_min(1.0)
            out = out / deg.view(-1, *([1] * (out.dim() - 1)))
        return out

    def _sum_forward(self, x_src: Tensor, w: Tensor | None) -> tuple[Tensor, list[Tensor]]:
        """The pipelined weighted sum over every in-edge and the received halo rows per chunk.

        Differentiable through each chunk's all-to-all when called under autograd (the
        ``overlap_backward=False`` path); :class:`_HaloSum` calls it with autograd off.
        """
        k_all = self.plan.num_chunks
        flights: list[_InFlight | None] = [None] * k_all
        pre = k_all if self.depth == 0 else min(self.depth, k_all)
        for k in range(pre):
            flights[k] = self._issue(x_src, k)
        got: list[Tensor | None] = [None] * k_all
        if self.depth == 0:  # unpipelined: the whole halo arrives before any aggregation
            for k in range(k_all):
                got[k] = self._wait(flights[k], x_src, k)
        t0 = time.perf_counter()
        wk = None if w is None else w.index_select(0, self._local_eid)
        out = gspmm(self._local, x_src, "sum", wk)
        self.times.compute_s += time.perf_counter() - t0
        received: list[Tensor] = []
        for k in range(k_all):
            _poll(flights)
            recv = got[k] if got[k] is not None else self._wait(flights[k], x_src, k)
            received.append(recv)
            nxt = k + pre
            if self.depth > 0 and nxt < k_all:
                flights[nxt] = self._issue(x_src, nxt)
            st, eid = self._chunks[k]
            t0 = time.perf_counter()
            wk = None if w is None else w.index_select(0, eid)
            out = out + gspmm(st, recv, "sum", wk)
            self.times.compute_s += time.perf_counter() - t0
        return out, received

    def _piece_t(self, i: int) -> tuple[Structure, Tensor]:
        """Transposed structure of piece ``i`` (0: local, ``k + 1``: chunk ``k``), edge perm."""
        cached = self._transposed[i]
        if cached is None:
            st = self._local if i == 0 else self._chunks[i - 1][0]
            t_indptr, t_indices, perm = st.transposed()
            cached = (Structure(t_indptr, t_indices, st.num_src, st.num_dst), perm)
            self._transposed[i] = cached
        return cached

    def _piece_grads(
        self,
        i: int,
        g: Tensor,
        rows: Tensor | None,
        w: Tensor | None,
        need_x: bool,
        gw: Tensor | None,
    ) -> Tensor | None:
        """Backward of piece ``i``: returns ``A_i^T g`` (if ``need_x``), fills ``gw`` rows.

        Shapes:
            - g: ``[M, *feat]`` gradient of the summed output.
            - rows: ``[S_i, *feat]`` the piece's source rows (needed only for ``gw``).
            - output: ``[S_i, *feat]`` (``S_i = M`` for the local piece, chunk rows otherwise).
        """
        st, eid = (self._local, self._local_eid) if i == 0 else self._chunks[i - 1]
        wi = None if w is None else w.index_select(0, eid)
        t0 = time.perf_counter()
        gx = None
        if need_x:
            st_t, perm = self._piece_t(i)
            gx = gspmm(st_t, g, "sum", None if wi is None else wi.index_select(0, perm))
        if gw is not None and rows is not None and st.num_edges > 0:
            heads = int(np.prod(gw.shape[1:], dtype=np.int64))
            per = int(np.prod(g.shape[1:], dtype=np.int64)) // max(heads, 1)
            a = rows.reshape(st.num_src, heads, per)  # [S_i, K, R]
            b = g.reshape(st.num_dst, heads, per)  # [M, K, R]
            dots = gsddmm(st, a, b, "dot")  # [E_i, K]: <g[dst_e], x[src_e]> per head
            gw.index_copy_(0, eid, dots.reshape(eid.numel(), *gw.shape[1:]))
        self.times.compute_s += time.perf_counter() - t0
        return gx

    def _sum_backward(
        self,
        grad: Tensor,
        x: Tensor,
        w: Tensor | None,
        received: list[Tensor],
        need_x: bool,
        need_w: bool,
    ) -> tuple[Tensor | None, Tensor | None]:
        """Pipelined backward of :meth:`_sum_forward` (see the class docstring).

        Collective when ``need_x``: one reverse all-to-all per active chunk, in chunk order.
        """
        g = grad.contiguous()
        k_all = self.plan.num_chunks
        gw = torch.zeros_like(w) if need_w and w is not None else None
        exchange = need_x and self.comm is not None
        flights: list[_InFlight | None] = [None] * k_all

        def launch(k: int) -> None:
            rows = received[k] if gw is not None else None
            gk = self._piece_grads(k + 1, g, rows, w, need_x, gw)
            if exchange and self.plan.active[k] and gk is not None:
                self.times.backward_exchanges += 1
                # the chunk's transposed exchange: received rows' gradients go back to owners
                flights[k] = self._launch(gk, self.plan.recv_counts[k], self.plan.send_counts[k])
            _poll(flights)

        pre = k_all if self.depth == 0 else min(self.depth, k_all)
        for k in range(pre):
            launch(k)
        back: list[Tensor | None] = [None] * k_all
        if self.depth == 0:  # unpipelined: every chunk returns before the local part
            for k, f in enumerate(flights):
                back[k] = None if f is None else self._finish(f)
        gx = self._piece_grads(0, g, x if gw is not None else None, w, need_x, gw)
        for k in range(k_all):
            _poll(flights)
            f = flights[k]
            got = back[k] if back[k] is not None or f is None else self._finish(f)
            nxt = k + pre
            if self.depth > 0 and nxt < k_all:
                launch(nxt)
            if got is not None and gx is not None:
                t0 = time.perf_counter()
                gx.index_add_(0, self._send_rows[k], got)
                self.times.compute_s += time.perf_counter() - t0
        return gx, gw

    def src_to_edge(self, x_src: Tensor) -> Tensor:
        """``[M, ...] -> [E, ...]``: the source row of every in-edge (fetches the halo)."""
        ext = torch.cat([x_src, self.halo_rows(x_src)])
        return ext.index_select(0, self._st.indices)

    def dst_to_edge(self, x_dst: Tensor) -> Tensor:
        """``[M, ...] -> [E, ...]``: the destination row of every in-edge (no communication)."""
        if x_dst.shape[:1] != (self.num_dst,):
            raise ConfigError(
                f"'x_dst' must have {self.num_dst} rows (got shape {tuple(x_dst.shape)})"
            )
        return x_dst.index_select(0, self._st.dst_index())

    def edge_softmax(self, scores: Tensor) -> Tensor:
        """Softmax over each owned node's in-edges (all on this rank: no communication)."""
        return edge_softmax(self._st, scores)

    def dst_degree(self) -> Tensor:
        """Global in-degree of each owned node, ``[M]``."""
        return self._in_degree

    def src_degree(self) -> Tensor:
        """Global in-degree of each owned row, ``[M]`` (``x_src`` holds only owned rows)."""
        return self._in_degree

    def edge_ids(self) -> tuple[Tensor, Tensor]:
        """Original global ``(src_gid, dst_gid)`` of every in-edge, ``[E]`` each."""
        if self._dst_gid is None:
            self._dst_gid = self.src_ids.index_select(0, self._st.dst_index())
        return self._src_gid, self._dst_gid

    @property
    def num_edges(self) -> int:
        """In-edges of the owned nodes."""
        return self._st.num_edges

    def __repr__(self) -> str:
        return (
            f"HaloAggregator(rank={self.layout.rank}, num_dst={self.num_dst}, "
            f"edges={self.num_edges}, halo={self.layout.num_halo}, "
            f"chunks={self.plan.num_chunks}, depth={self.depth})"
        )
