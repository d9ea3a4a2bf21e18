"""CSC adjacency structures the graph ops run on, and the derived tensors they cache.

The ops take any *adjacency-like* object with these attributes (a
:class:`fleetgnn.sampling.Block`, an :class:`Adjacency`, an aggregator):

==============  ======================  =================================================
attribute       dtype / shape           meaning
==============  ======================  =================================================
``indptr``      int64 ``[M + 1]``       edges into destination ``v`` are ``indptr[v]:indptr[v+1]``
``indices``     int64 ``[E]``           source row of each edge, in ``[0, S)``
``num_dst``     int ``M``               number of destination rows
``num_src``     int ``S``               number of source rows
==============  ======================  =================================================

Derived tensors (the destination of every edge, the transposed CSR used by backward passes,
in-degrees) are computed once per adjacency object and cached on it, so the adjacency's tensors
must not be modified in place after the first op has run on it.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import GraphError
from fleetgnn.kernels import dense, overfull
from fleetgnn.kernels import sparse_csr as _sparse_csr

_CACHE_ATTR = "_fleetgnn_ops_cache"


@runtime_checkable
class AdjacencyLike(Protocol):
    """What the graph ops need from an adjacency: CSC over destination rows."""

    indptr: Tensor
    indices: Tensor

    @property
    def num_dst(self) -> int:
        """Number of destination rows ``M``."""
        ...

    @property
    def num_src(self) -> int:
        """Number of source rows ``S``."""
        ...


@dataclasses.dataclass(frozen=True, eq=False)
class Adjacency:
    """A plain CSC adjacency from ``num_src`` source rows into ``indptr.numel() - 1`` destinations.

    Attributes:
        indptr: int64 ``[num_dst + 1]`` CSC offsets.
        indices: int64 ``[E]`` source row of each edge.
        num_src: Number of source rows.
    """

    indptr: Tensor
    indices: Tensor
    num_src: int

    def __post_init__(self) -> None:
        check_adjacency(self)

    @property
    def num_dst(self) -> int:
        """Number of destination rows."""
        return int(self.indptr.numel()) - 1

    @property
    def num_edges(self) -> int:
        """Number of edges."""
        return int(self.indices.numel())

    @classmethod
    def from_edges(cls, src: Tensor, dst: Tensor, num_src: int, num_dst: int) -> Adjacency:
        """Build the CSC form of the edge list ``src[i] -> dst[i]`` (stable in input order).

        Args:
            src: int ``[E]`` source rows in ``[0, num_src)``.
            dst: int ``[E]`` destination rows in ``[0, num_dst)``.
            num_src: Number of source rows.
            num_dst: Number of destination rows.
        """
        src, dst = src.long(), dst.long()
        if src.shape != dst.shape or src.dim() != 1:
            raise GraphError(
                f"'src' and 'dst' must be 1-D of equal length (got {tuple(src.shape)} and "
                f"{tuple(dst.shape)})"
            )
        if dst.numel() and (int(dst.min()) < 0 or int(dst.max()) >= num_dst):
            raise GraphError(
                f"'dst' holds IDs in [{int(dst.min())}, {int(dst.max())}], outside [0, {num_dst})"
            )
        order = torch.argsort(dst, stable=True)
        indptr = torch.zeros(num_dst + 1, dtype=torch.int64, device=src.device)
        torch.cumsum(torch.bincount(dst, minlength=num_dst), 0, out=indptr[1:])
        return cls(indptr=indptr, indices=src[order], num_src=int(num_src))

    def __repr__(self) -> str:
        return (
            f"Adjacency(num_dst={self.num_dst}, num_src={self.num_src}, num_edges={self.num_edges})"
        )


def check_rows(name: str, t: Tensor, rows: int, what: str) -> None:
    """Raise unless ``t`` has ``rows`` rows, one per ``what`` (e.g. ``"edge"``, ``"source node"``).

    Raises:
        GraphError: Naming ``name``, the expected row count and the shape received.
    """
    if t.dim() < 1 or t.shape[0] != rows:
        raise GraphError(
            f"'{name}' must have one row per {what}, {rows} rows (got shape {tuple(t.shape)})"
        )


def check_adjacency(adj: object) -> None:
    """Check an adjacency-like object's types, shapes and index range (one pass over indices).

    Raises:
        GraphError: Naming the bad attribute and value.
    """
    for name in ("indptr", "indices"):
        t = getattr(adj, name, None)
        if not isinstance(t, Tensor) or t.dim() != 1 or t.dtype != torch.int64:
            raise GraphError(
                f"adjacency '{name}' must be a 1-D int64 torch.Tensor (got "
                f"{type(t).__name__} {getattr(t, 'dtype', '')} {tuple(getattr(t, 'shape', ()))}); "
                f"cast with torch.as_tensor(...).long()"
            )
    indptr, indices = adj.indptr, adj.indices  # type: ignore[attr-defined]
    num_dst, num_src = int(adj.num_dst), int(adj.num_src)  # type: ignore[attr-defined]
    if indptr.numel() != num_dst + 1:
        raise GraphError(
            f"adjacency 'indptr' must have num_dst + 1 = {num_dst + 1} entries "
            f"(got {indptr.numel()})"
        )
    first, last = int(indptr[0]), int(indptr[-1])
    if first != 0 or last != indices.numel():
        raise GraphError(
            f"adjacency 'indptr' must run from 0 to len(indices) = {indices.numel()} "
            f"(got {first} .. {last})"
        )
    if num_dst and bool((indptr[1:] < indptr[:-1]).any()):
        raise GraphError("adjacency 'indptr' must be non-decreasing")
    if indices.numel():
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= num_src:
            raise GraphError(
                f"adjacency 'indices' holds source row {lo if lo < 0 else hi}, outside "
                f"[0, num_src) = [0, {num_src}); indices must be local row positions"
            )


#: Bytes of source rows one column block of a CSR product reads, at :data:`BLOCK_WIDTH` values a
#: row (a quarter to a half of a server CPU's last-level cache: fewer, wider blocks spill it,
#: more, narrower ones pay each block's pass over the row pointers again).
BLOCK_BYTES = 12 << 20
#: The row width the blocks are sized for: one cut of the columns serves every width (each
#: layer's products), so the cut and what it holds depend only on the node count.
BLOCK_WIDTH = 96


def block_rows(elem: int) -> int:
    """Columns (source rows) per block for values of ``elem`` bytes."""
    return max(1, BLOCK_BYTES // (BLOCK_WIDTH * elem))


class ColumnBlocks:
    """A CSR matrix cut into ranges of its columns (source rows), for cache-sized products.

    ``A @ x`` is the sum over blocks ``b`` of ``A[:, lo_b:hi_b] @ x[lo_b:hi_b]``. Each block's
    random row reads then fall in ``x[lo_b:hi_b]``, which fits in the last-level cache, where
    one product over all of ``x`` reads most of its rows from memory. Block ``b`` holds the
    edges ``sel[starts[b]:starts[b + 1]]`` (edge IDs in the adjacency's CSC order), row-sorted,
    as int32 ``crows[b] [R + 1]`` and ``cols[b]`` (relative to ``lo_b``).

    Attributes:
        bounds: ``[(lo, hi)]`` column range of every block.
        crows: int32 row offsets per block.
        cols: int32 column (source row minus ``lo``) per edge, per block.
        starts: ``[B + 1]`` offsets of the blocks' edges in ``sel``.
        sel: int64 ``[E]`` edge IDs in block order (to gather per-edge values).
        num_rows: ``R``, the matrix's rows.
    """

    __slots__ = ("bounds", "cols", "crows", "num_rows", "sel", "starts")

    def __init__(
        self, rows: Tensor, cols: Tensor, num_rows: int, num_cols: int, per_block: int
    ) -> None:
        """Cut the edges ``(rows[e], cols[e])``, sorted by ``rows``, into column blocks.

        Args:
            rows: int64 ``[E]`` row of every edge, non-decreasing.
            cols: int64 ``[E]`` column of every edge.
            num_rows: ``R``.
            num_cols: Number of columns.
            per_block: Columns per block (the last block may be shorter).
        """
        nb = max(1, -(-num_cols // max(per_block, 1)))
        size = -(-num_cols // nb)  # equal blocks
        self.bounds = [(b * size, min(num_cols, (b + 1) * size)) for b in range(nb)]
        blk = torch.div(cols, size, rounding_mode="floor")
        # stable: each block keeps the row order, so its edges are already row-sorted
        self.sel = torch.sort(blk, stable=True).indices
        counts = torch.bincount(blk * num_rows + rows, minlength=nb * num_rows).view(nb, num_rows)
        per = counts.sum(1).tolist()
        self.starts = [0]
        for c in per:
            self.starts.append(self.starts[-1] + int(c))
        self.num_rows = num_rows
        self.crows, self.cols = [], []
        for b, (lo, _) in enumerate(self.bounds):
            crow = torch.zeros(num_rows + 1, dtype=torch.int32, device=rows.device)
            torch.cumsum(counts[b], 0, out=crow[1:])
            self.crows.append(crow)
            edges = self.sel[self.starts[b] : self.starts[b + 1]]
            self.cols.append((cols.index_select(0, edges) - lo).to(torch.int32))

    def __len__(self) -> int:
        return len(self.bounds)

    def matrices(self, values: Tensor | None, dtype: torch.dtype) -> list[Tensor]:
        """The blocks as sparse CSR matrices, ``values [E]`` (CSC order) or ones if ``None``."""
        out = []
        ones = None
        for b, (lo, hi) in enumerate(self.bounds):
            e0, e1 = self.starts[b], self.starts[b + 1]
            if values is None:
                if ones is None:
                    ones = torch.ones(
                        max(self.starts[i + 1] - self.starts[i] for i in range(len(self))),
                        dtype=dtype,
                        device=self.sel.device,
                    )
                vals = ones[: e1 - e0]
            else:
                vals = values.index_select(0, self.sel[e0:e1])
            out.append(_sparse_csr(self.crows[b], self.cols[b], vals, (self.num_rows, hi - lo)))
        return out


def blocked_mm(mats: list[Tensor], bounds: list[tuple[int, int]], x: Tensor) -> Tensor:
    """``sum_b mats[b] @ x[lo_b:hi_b]`` for 2-D ``x`` (see :class:`ColumnBlocks`).

    Every block accumulates into one output with ``addmm_``: on CPU ``mat @ x`` zeroes a
    result and then copies it once more (measured: 122k x 100 float32, 150 ms against 122). The
    first block writes the uninitialised output with ``beta=0`` (its old contents ignored, as
    ``addmm`` documents), which saves zeroing it (40k x 128 float32 from 150k edges, one thread:
    3.4 ms against 4.7).
    """
    if x.device.type != "cpu":
        if len(mats) == 1 and not overfull(mats[0]):  # accelerators: their own product
            return mats[0] @ x
        out = None
        for mat, (lo, hi) in zip(mats, bounds, strict=True):
            part = dense(mat) @ x[lo:hi] if overfull(mat) else mat @ x[lo:hi]
            out = part if out is None else out.add_(part)
        return out
    out = x.new_empty((mats[0].shape[0], x.shape[1]))
    for i, (mat, (lo, hi)) in enumerate(zip(mats, bounds, strict=True)):
        out.addmm_(mat, x[lo:hi], beta=0.0 if i == 0 else 1.0)
    return out


def _rows_per_head(indptr: Tensor, heads: int) -> Tensor:
    """Offsets of a CSR with every row repeated ``heads`` times (row ``r``'s copies adjacent)."""
    deg = indptr[1:] - indptr[:-1]
    out = torch.zeros(deg.numel() * heads + 1, dtype=torch.int64, device=indptr.device)
    torch.cumsum(deg.repeat_interleave(heads), 0, out=out[1:])
    return out


def _per_head(indptr: Tensor, cols: Tensor, ids: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """A CSR's entries repeated per head, each row's ``heads`` runs one after the other.

    Row ``r``'s entry ``j`` (edge ``e``) for head ``k`` is stored at ``heads * start_r +
    k * deg_r + j``: the layout of :meth:`Structure.head_layout` and
    :meth:`Structure.shared_layout`, whichever rows the runs are cut into.

    Args:
        indptr: int64 ``[R + 1]`` offsets of the CSR.
        cols: ``[E, heads]`` the stored column of each entry and head.
        ids: ``[E]`` each entry's edge ID (CSC order).
        heads: ``K``.

    Returns:
        ``(indices [E * K], order [E * K])``: ``order`` the position in ``w.reshape(-1)`` of
        each stored value, for edge weights ``w [E, K]``.
    """
    dev = indptr.device
    deg = indptr[1:] - indptr[:-1]
    row = torch.repeat_interleave(torch.arange(deg.numel(), device=dev), deg)
    start = indptr[:-1].index_select(0, row)  # [E]
    k = torch.arange(heads, device=dev)
    pos = (start * (heads - 1) + torch.arange(row.numel(), device=dev))[:, None] + k * (
        deg.index_select(0, row)[:, None]
    )
    pos = pos.reshape(-1)
    indices = torch.empty_like(pos)
    indices[pos] = cols.reshape(-1)
    order = torch.empty_like(pos)
    order[pos] = (ids[:, None] * heads + k).reshape(-1)
    return indices, order


class Structure:
    """Derived tensors of one adjacency, computed lazily and cached (internal to the ops).

    Attributes:
        indptr: int64 ``[M + 1]``.
        indices: int64 ``[E]`` source row per edge.
        num_dst: ``M``.
        num_src: ``S``.
        reused: The adjacency serves many products (a whole graph, every epoch): on CPU, products
            whose source rows exceed :data:`BLOCK_BYTES` then run over cached
            :class:`ColumnBlocks`, built on first use. ``False`` (a sampled block, used once or
            twice): one product, nothing more cached.
        transient: The adjacency lives for one step (a sampled block): multi-head products then
            run over its cached block-diagonal pattern (:meth:`head_layout`, ``24 E K`` bytes),
            freed with it. ``False`` (kept across steps: a whole graph, a full-graph engine's
            pieces): a product per head, nothing held.
    """

    __slots__ = (
        "_blocks",
        "_dst",
        "_heads",
        "_in_deg",
        "_t",
        "indices",
        "indptr",
        "num_dst",
        "num_src",
        "reused",
        "transient",
    )

    def __init__(
        self, indptr: Tensor, indices: Tensor, num_dst: int, num_src: int, reused: bool = False
    ) -> None:
        self.indptr = indptr
        self.indices = indices
        self.num_dst = num_dst
        self.num_src = num_src
        self.reused = reused
        self.transient = False
        self._dst: Tensor | None = None
        self._in_deg: Tensor | None = None
        self._t: tuple[Tensor, Tensor, Tensor] | None = None
        self._blocks: dict[bool, ColumnBlocks] = {}
        self._heads: dict[tuple[str, bool, int], tuple[Tensor, Tensor, Tensor]] = {}

    def head_layout(self, heads: int, transpose: bool) -> tuple[Tensor, Tensor, Tensor]:
        """The block-diagonal pattern of ``heads`` copies of ``A`` (``A^T``), one per head.

        Row ``i * heads + k`` of the ``[M * heads, S * heads]`` matrix holds row ``i``'s edges
        at columns ``j * heads + k``, so one CSR product with a contiguous ``x [S, heads, R]``
        viewed as ``[S * heads, R]`` gives every head's product (no per-head copy of ``x``).

        Returns:
            ``(indptr [M * heads + 1], indices [E * heads], order [E * heads])`` with ``order``
            the position in ``w.reshape(-1)`` of each stored value, for edge weights ``w [E,
            heads]`` in this structure's (CSC) edge order. Cached per ``(heads, transpose)``.
        """
        key = ("diagonal", transpose, heads)
        hit = self._heads.get(key)
        if hit is not None:
            return hit
        if transpose:
            indptr, indices, perm = self.transposed()
        else:
            indptr, indices = self.indptr, self.indices
            perm = torch.arange(self.num_edges, device=indptr.device)
        k = torch.arange(heads, device=indptr.device)
        big_indptr = _rows_per_head(indptr, heads)
        big_indices, order = _per_head(indptr, indices.long()[:, None] * heads + k, perm, heads)
        self._heads[key] = (big_indptr, big_indices, order)
        return self._heads[key]

    def shared_layout(
        self, heads: int, transpose: bool, head_major: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The pattern of ``A`` with every row repeated per head, its columns shared.

        Row ``i * heads + k`` of the ``[M * heads, S]`` matrix holds row ``i``'s edges, so one
        CSR product with ``x [S, R]`` gives every head's weighted sum of the same rows,
        ``[M, heads, R]``; a destination's ``heads`` rows are adjacent and read the same source
        rows while they are in cache (measured, one CPU thread, 4 heads, 27k edges, 256 wide:
        6.7 ms, against 11.8 ms with the heads stacked one after the other). The transpose
        (``transpose=True``) is ``[S, M * heads]``, row ``j`` holding column ``i * heads + k``
        for each of its edges and every head. With ``head_major`` the heads are stacked
        instead (row, or column, ``k * M + i``), for operands laid out ``[heads, M, R]``.

        Returns:
            ``(indptr, indices, order)``: ``order`` is the position in ``w.reshape(-1)`` of each
            stored value, for edge weights ``w [E, heads]`` in this structure's (CSC) edge
            order. Cached while the structure is :attr:`transient`.
        """
        key = ("head-major" if head_major else "shared", transpose, heads)
        hit = self._heads.get(key)
        if hit is not None:
            return hit
        k = torch.arange(heads, device=self.indptr.device)
        e = self.num_edges
        if transpose:
            t_indptr, t_indices, perm = self.transposed()
            if head_major:  # row j: head 0's columns, then head 1's, ...
                cols = t_indices[:, None] + k * self.num_dst
                layout = (t_indptr * heads, *_per_head(t_indptr, cols, perm, heads))
            else:
                layout = (
                    t_indptr * heads,
                    (t_indices[:, None] * heads + k).reshape(-1),
                    (perm[:, None] * heads + k).reshape(-1),
                )
        elif head_major:
            indptr = torch.cat(
                [
                    (self.indptr[:-1] + k[:, None] * e).reshape(-1),
                    self.indptr.new_full((1,), heads * e),
                ]
            )
            order = (torch.arange(e, device=k.device) * heads + k[:, None]).reshape(-1)
            layout = (indptr, self.indices.repeat(heads), order)
        else:  # the diagonal layout's rows, every head's columns the sources themselves
            indptr = _rows_per_head(self.indptr, heads)
            cols = self.indices.long()[:, None].expand(-1, heads)
            perm = torch.arange(e, device=k.device)
            layout = (indptr, *_per_head(self.indptr, cols, perm, heads))
        if self.transient:
            self._heads[key] = layout
        return layout

    @classmethod
    def from_sorted_edges(
        cls, dst: np.ndarray, src: np.ndarray, num_dst: int, num_src: int
    ) -> Structure:
        """The structure of edges sorted by destination row ``dst``, with source rows ``src``.

        CPU tensors; the offsets come from one ``bincount`` of ``dst``.
        """
        indptr = np.zeros(num_dst + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=num_dst), out=indptr[1:])
        src = torch.from_numpy(np.asarray(src, dtype=np.int64))
        return cls(torch.from_numpy(indptr), src, num_dst, num_src)

    def to(self, device: torch.device | str) -> Structure:
        """The same structure with its index tensors on ``device`` (itself when already there)."""
        if self.indptr.device == torch.device(device):
            return self
        return Structure(
            self.indptr.to(device),
            self.indices.to(device),
            self.num_dst,
            self.num_src,
            self.reused,
        )

    @property
    def num_edges(self) -> int:
        """``E``."""
        return int(self.indices.numel())

    def dst_index(self) -> Tensor:
        """Destination row of every edge, int64 ``[E]`` (``repeat_interleave`` of the degrees)."""
        if self._dst is None:
            rows = torch.arange(self.num_dst, device=self.indptr.device)
            self._dst = torch.repeat_interleave(rows, self.in_degree(), output_size=self.num_edges)
        return self._dst

    def in_degree(self) -> Tensor:
        """Number of edges into every destination, int64 ``[M]``."""
        if self._in_deg is None:
            self._in_deg = self.indptr[1:] - self.indptr[:-1]
        return self._in_deg

    def transposed(self) -> tuple[Tensor, Tensor, Tensor]:
        """CSR of the transpose: ``(t_indptr [S + 1], t_indices [E] (destinations), perm [E])``.

        Edge ``perm[k]`` is the ``k``-th edge of the transpose (edges sorted stably by source).
        """
        if self._t is None:
            ordered, perm = torch.sort(self.indices, stable=True)
            # row r of the transpose starts at the first edge whose source is >= r (a search,
            # not a bincount, whose output size costs a GPU a host sync)
            bounds = torch.arange(self.num_src + 1, dtype=ordered.dtype, device=ordered.device)
            t_indptr = torch.searchsorted(ordered, bounds)
            self._t = (t_indptr, self.dst_index()[perm], perm)
        return self._t

    def csr(self, values: Tensor) -> Tensor:
        """The sparse CSR matrix ``[M, S]`` with this pattern and ``values [E]``."""
        return _sparse_csr(self.indptr, self.indices, values, (self.num_dst, self.num_src))

    def csr_t(self, values: Tensor) -> Tensor:
        """The transposed CSR matrix ``[S, M]``; ``values [E]`` are in the original edge order."""
        t_indptr, t_indices, perm = self.transposed()
        return _sparse_csr(t_indptr, t_indices, values[perm], (self.num_src, self.num_dst))

    def column_blocks(self, transpose: bool, elem: int) -> ColumnBlocks | None:
        """Cached :class:`ColumnBlocks` of ``A`` (``A^T`` if ``transpose``), or ``None``.

        ``None`` (one product is best) unless the structure is :attr:`reused`, on CPU, and has
        more than 1.5 blocks of :func:`block_rows` columns for values of ``elem`` bytes.
        """
        cols = self.num_dst if transpose else self.num_src
        if not self.reused or self.indptr.device.type != "cpu" or self.num_edges == 0:
            return None
        per = block_rows(elem)
        if cols <= per * 3 // 2:
            return None
        blocks = self._blocks.get(transpose)
        if blocks is None:
            if transpose:
                t_indptr, t_indices, perm = self.transposed()
                rows = torch.repeat_interleave(
                    torch.arange(self.num_src), t_indptr[1:] - t_indptr[:-1]
                )
                blocks = ColumnBlocks(rows, t_indices, self.num_src, cols, per)
                blocks.sel = perm.index_select(0, blocks.sel)  # edge IDs in CSC order
            else:
                blocks = ColumnBlocks(self.dst_index(), self.indices, self.num_dst, cols, per)
            if self.num_edges < 2**31:
                blocks.sel = blocks.sel.to(torch.int32)
            self._blocks[transpose] = blocks
        return blocks


def structure(adj: object) -> Structure:
    """The cached :class:`Structure` of an adjacency-like object (created on first use).

    The cache is attached to ``adj`` itself (frozen dataclasses included); objects that cannot
    hold attributes get a fresh structure on every call. Only cheap shape checks run here; use
    :func:`check_adjacency` (or ``Block.validate``) to check every index.

    Raises:
        GraphError: If ``adj`` lacks the CSC attributes or their shapes disagree.
    """
    if isinstance(adj, Structure):
        return adj
    cached = getattr(adj, _CACHE_ATTR, None)
    indptr = getattr(adj, "indptr", None)
    indices = getattr(adj, "indices", None)
    if isinstance(cached, Structure) and cached.indptr is indptr and cached.indices is indices:
        return cached
    if not isinstance(indptr, Tensor) or not isinstance(indices, Tensor):
        raise GraphError(
            f"the adjacency must have torch.Tensor attributes 'indptr' and 'indices' (got "
            f"{type(adj).__name__}); pass a Block, an Adjacency or an Aggregator"
        )
    if indptr.dtype != torch.int64 or indices.dtype != torch.int64:
        raise GraphError(
            f"adjacency 'indptr' and 'indices' must be int64 (got {indptr.dtype} and "
            f"{indices.dtype}); cast with .long()"
        )
    num_dst, num_src = int(adj.num_dst), int(adj.num_src)  # type: ignore[attr-defined]
    if indptr.numel() != num_dst + 1:
        raise GraphError(
            f"adjacency 'indptr' must have num_dst + 1 = {num_dst + 1} entries "
            f"(got {indptr.numel()})"
        )
    st = Structure(indptr, indices, num_dst, num_src)
    try:
        object.__setattr__(adj, _CACHE_ATTR, st)
    except (AttributeError, TypeError):
        pass
    return st
