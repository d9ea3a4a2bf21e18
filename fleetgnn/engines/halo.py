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

This is the contiguous-range special case (``owner = searchsorted(bounds)``) of the generic
exchange in :mod:`fleetgnn.exchange`: :class:`RankLayout` is an
:class:`~fleetgnn.exchange.ExchangeLayout` with ``row_ids == dst_ids == [lo, hi)``. The need lists
(:func:`exchange_need_lists`), the cut into ``K`` chunks (:func:`build_plan`, :class:`HaloPlan`),
the chunk scheduler, timing (:class:`ExchangeTimes`) and volumes (:class:`HaloVolume`) are the
generic ones, re-exported here.

:class:`HaloAggregator` implements the :class:`~fleetgnn.nn.Aggregator` protocol over this layout
with the pipelined :class:`~fleetgnn.exchange.HaloSpmm`, so every layer in :mod:`fleetgnn.nn` runs
unchanged; see its docstring for how remote rows enter.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.distributed import Communicator
from fleetgnn.errors import ConfigError, PartitionError
from fleetgnn.exchange import (
    ExchangeLayout,
    ExchangeTimes,
    HaloPlan,
    HaloSpmm,
    HaloVolume,
    build_exchange_layout,
    build_plan,
    exchange_need_lists,
    range_owner,
)
from fleetgnn.graph import Graph
from fleetgnn.graph.csc import check_edge_ids
from fleetgnn.nn.aggregator import BipartiteHop
from fleetgnn.ops import edge_reduce, edge_softmax, gspmm
from fleetgnn.ops.spmm import Reduce

__all__ = [
    "ExchangeTimes",
    "HaloAggregator",
    "HaloPlan",
    "HaloVolume",
    "RankLayout",
    "build_layout",
    "build_plan",
    "check_bounds",
    "exchange_need_lists",
]


# ---------------------------------------------------------------------------------- layout
@dataclasses.dataclass(frozen=True, repr=False)
class RankLayout(ExchangeLayout):
    """One rank's share of the graph: owned range, its in-edges split local/remote, its halo.

    An :class:`~fleetgnn.exchange.ExchangeLayout` whose destinations and rows are the owned range
    (``dst_ids == row_ids == [lo, hi)``, ``src_row = src - lo`` on local edges). Edges are kept in
    the graph's CSC order (by destination, then as stored); that order is the aggregator's edge
    order (``E = num_local_edges + num_remote_edges`` edges).

    Narrow IDs (:func:`build_layout`): while the graph has fewer than ``2**31`` nodes, the node IDs
    and positions (``dst_ids``, ``row_ids``, ``src``, ``src_row``, ``halo_pos``, ``halo``,
    ``halo_owner``) are int32, 4 bytes per owned edge for each per-edge array instead of 8; so is
    ``in_degree`` while the rank has fewer than ``2**31`` in-edges. ``indptr``, ``need_counts``
    and ``bounds`` stay int64. Consumers widen at the point of use where an op needs int64 (the
    aggregator's index structures, the need lists on the wire).

    Attributes:
        bounds: int64 ``[W + 1]`` range boundaries (``bounds[r]`` = first node of rank ``r``).
        in_degree: int32 (or int64, see above) ``[M]`` global in-degree of each owned node.
    """

    bounds: np.ndarray
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


_INT32_MAX = 2**31 - 1
# the layout's node IDs and positions (all < N): int32 while N < 2**31 (see RankLayout)
_NARROW_FIELDS = ("dst_ids", "row_ids", "src", "src_row", "halo", "halo_owner", "halo_pos")


def build_layout(graph: Graph, bounds: np.ndarray, rank: int) -> RankLayout:
    """Slice rank ``rank``'s in-edges from ``graph`` and split them into local and remote.

    The generic :func:`~fleetgnn.exchange.build_exchange_layout` with
    ``owner = searchsorted(bounds)`` (:func:`~fleetgnn.exchange.range_owner`). Vectorised:
    ``O(E_rank log E_rank)`` numpy work, no loop over nodes or edges; reads only the rank's slice
    of ``indices`` (the graph may be a memory map).

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
    check_edge_ids(graph, e0, e1)  # the rank's slice: a memory map may have changed on disk
    src = np.asarray(graph.indices[e0:e1], dtype=np.int64)
    base = build_exchange_layout(
        np.arange(lo, hi, dtype=np.int64), gptr - e0, src, range_owner(b), rank=rank, world_size=w
    )
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    del base, src  # each int64 array is freed as its int32 copy replaces it
    if graph.num_nodes <= _INT32_MAX:  # every ID, position and owner fits: int32
        for name in _NARROW_FIELDS:
            fields[name] = fields[name].astype(np.int32)
    in_degree = np.diff(gptr)
    if e1 - e0 <= _INT32_MAX:
        in_degree = in_degree.astype(np.int32)
    return RankLayout(**fields, bounds=b, in_degree=in_degree)


# ---------------------------------------------------------------------------------- aggregator
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
    (``overlap_backward=True``, :meth:`fleetgnn.exchange.HaloSpmm.sum`): per chunk, the gradient
    of its received rows (the chunk's transposed remote CSR, cached, times ``grad_out``) is
    computed and its reverse all-to-all issued asynchronously, at most ``depth`` in flight; the
    local part of the gradient (transposed local CSR times ``grad_out``) is computed while they
    travel, then each chunk's returned rows are added into the owned rows' gradient
    (``index_add`` on the chunk's send rows) as it arrives (``depth = 0``: every chunk's rows
    are exchanged before the local part).
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
        wire_dtype: The dtype halo rows (and their gradients) travel in (mixed precision:
            ``torch.bfloat16``, half the bytes); ``None``: the rows' own.
        edge_attr: ``[E, D]`` features of the rank's edges in the layout's (CSC) order, served
            by :meth:`edge_attr`. An edge belongs to its destination's rank, so these rows are
            local: nothing about them is exchanged (``None``: no edge features).
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
        wire_dtype: torch.dtype | None = None,
        edge_attr: Tensor | None = None,
    ) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ConfigError(f"'depth' (chunks in flight) must be an int >= 0 (got {depth!r})")
        self.layout, self.plan, self.comm = layout, plan, comm
        self.depth = depth
        self.dtype = dtype
        self.device = torch.device(device)
        self.comm_stream = comm_stream
        self.overlap_backward = bool(overlap_backward)
        self.spmm = HaloSpmm(
            layout,
            plan,
            comm,
            depth=depth,
            device=self.device,
            comm_stream=comm_stream,
            wire_dtype=wire_dtype,
        )
        self.times: ExchangeTimes = self.spmm.times
        self.volume: HaloVolume = self.spmm.volume
        self._st = self.spmm.structure
        m, lo, to = layout.num_owned, layout.lo, self.device
        self.num_dst = self.num_src = m
        gids = layout.dst_ids if orig_ids is None else np.asarray(orig_ids[lo : layout.hi])
        self.src_ids = torch.from_numpy(np.asarray(gids, dtype=np.int64)).to(to)
        self._in_degree = torch.from_numpy(layout.in_degree).to(device=to, dtype=dtype)
        self._orig_ids = orig_ids
        self._src_gid: Tensor | None = None  # int64 [E], built on the first edge_ids() call
        self._dst_gid: Tensor | None = None
        self._edge_index: Tensor | None = None  # int64 [2, E], built on the first bipartite()
        if edge_attr is not None and (
            edge_attr.dim() != 2 or edge_attr.shape[0] != layout.num_edges
        ):
            raise ConfigError(
                f"'edge_attr' must hold one row per in-edge of the owned nodes, "
                f"[{layout.num_edges}, D] (got {tuple(edge_attr.shape)})"
            )
        self._edge_attr = edge_attr

    # ------------------------------------------------------------------ exchange
    def halo_rows(self, x: Tensor) -> Tensor:
        """``[H, ...]``: the halo rows of ``x`` in chunk-major order (every chunk, then wait).

        Collective; differentiable.
        """
        self._check_rows(x)
        return self.spmm.halo_rows(x)

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
        out = self.spmm.sum(x_src, edge_weight, overlap_backward=self.overlap_backward)
        if reduce == "mean":
            deg = self._in_degree.to(out.dtype).clamp_min(1.0)
            out = out / deg.view(-1, *([1] * (out.dim() - 1)))
        return out

    def bipartite(self, x_src: Tensor) -> BipartiteHop:
        """The hop as PyG takes it: owned rows then halo rows, ``edge_index`` over them.

        ``x_src`` of the result is ``[M + H, ...]`` (``[x_src; halo rows]``), ``x_dst`` the
        ``M`` owned rows, ``edge_index`` every in-edge (local and remote, CSC order) and ``size``
        ``(M + H, M)``. Collective: the halo is fetched whole (every chunk, then wait), so a layer
        that aggregates over it overlaps nothing; its backward returns the halo rows' gradients
        through the differentiable all-to-all. Memory: ``H`` rows, and ``edge_index`` (16 bytes
        per edge, kept).
        """
        self._check_rows(x_src)
        if self._edge_index is None:
            self._edge_index = torch.stack([self._st.indices, self._st.dst_index()])
        ext = torch.cat([x_src, self.halo_rows(x_src)])
        return BipartiteHop(ext, x_src, self._edge_index, (int(ext.shape[0]), self.num_dst))

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

    def edge_attr(self) -> Tensor:
        """``[E, D]``: the features of every in-edge of the owned nodes (local, no exchange).

        Raises:
            ConfigError: The engine built the aggregator without edge features.
        """
        if self._edge_attr is None:
            raise ConfigError(
                "this full-graph aggregator carries no edge features; the engine adds them for "
                "a model whose needs_edge_attr is True on a graph with edge_attr"
            )
        return self._edge_attr

    def edge_reduce(self, messages: Tensor, reduce: Reduce = "sum") -> Tensor:
        """``[E, ...] -> [M, ...]``: reduce per-edge messages into the owned destinations.

        Local: every in-edge of an owned node is this rank's, so nothing is exchanged (the
        messages' source rows came through :meth:`src_to_edge`, which exchanges).
        """
        return edge_reduce(self._st, messages, reduce)

    def edge_ids(self) -> tuple[Tensor, Tensor]:
        """Original global ``(src_gid, dst_gid)`` of every in-edge, int64 ``[E]`` each (cached)."""
        if self._src_gid is None or self._dst_gid is None:
            src = self.layout.src
            gid = src if self._orig_ids is None else np.asarray(self._orig_ids)[src]
            self._src_gid = torch.from_numpy(np.asarray(gid, dtype=np.int64)).to(self.device)
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
