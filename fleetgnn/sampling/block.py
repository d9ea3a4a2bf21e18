"""The :class:`Block`: one layer's bipartite sub-graph of a sampled mini-batch.

A block connects ``num_src`` source nodes to ``num_dst`` destination nodes. Destinations are a
prefix of the sources (``src_ids[:num_dst] == dst_ids``), so a layer can read a destination's own
previous-layer representation as ``x_src[:num_dst]``. Edges are stored in CSC over destination
rows with LOCAL source positions:

==================  ====================  ==================================================
field               dtype / shape         meaning
==================  ====================  ==================================================
``indptr``          int64 ``[D + 1]``     edges of destination ``d`` are ``indptr[d]:indptr[d+1]``
``indices``         int64 ``[E]``         local source position of each edge, in ``[0, S)``
``src_ids``         int64 ``[S]``         global node ID of each source (destinations first)
``num_dst``         int ``D``             number of destinations, ``D <= S``
``src_degree``      float32 ``[S]``       global in-degree of each source (optional)
``edge_weight``     float ``[E]``         weight of each edge (optional)
``edge_ids``        int64 ``[E]``         global ID of each edge, its CSC position (optional)
==================  ====================  ==================================================

For example, destinations ``[7, 3]`` sampled with neighbours ``7 <- {3, 9}`` and ``3 <- {9}``
give ``src_ids = [7, 3, 9]``, ``indptr = [0, 2, 3]``, ``indices = [1, 2, 2]``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch
from torch import Tensor

from fleetgnn.errors import GraphError


def _check_tensor(name: str, value: object, ndim: int = 1) -> Tensor:
    if not isinstance(value, Tensor) or value.dim() != ndim:
        raise GraphError(
            f"Block field '{name}' must be a {ndim}-D torch.Tensor (got {type(value).__name__} "
            f"with shape {tuple(getattr(value, 'shape', ()))}); build blocks with the sampler"
        )
    return value


@dataclasses.dataclass(frozen=True, eq=False)
class Block:
    """One layer of a sampled mini-batch: CSC edges from ``src_ids`` into ``src_ids[:num_dst]``.

    Construction runs cheap checks (types, dtypes and shapes, no pass over the data);
    :meth:`validate` checks every value.

    Attributes:
        indptr: int64 ``[num_dst + 1]`` CSC offsets over destination rows.
        indices: int64 ``[E]`` local source positions in ``[0, num_src)``.
        src_ids: int64 ``[num_src]`` global node IDs; destinations are ``src_ids[:num_dst]``.
        num_dst: Number of destination nodes.
        src_degree: Optional float32 ``[num_src]``: each source's in-degree in the whole graph.
        edge_weight: Optional float ``[E]`` aligned with ``indices``.
        edge_ids: Optional int64 ``[E]``: each edge's global ID (its position in the graph's
            CSC), the row of its features in ``Graph.edge_attr``.
    """

    #: A sampled block lives for one step: its aggregator may cache per-step patterns
    #: (:attr:`fleetgnn.ops.adjacency.Structure.transient`).
    transient: ClassVar[bool] = True

    indptr: Tensor
    indices: Tensor
    src_ids: Tensor
    num_dst: int
    src_degree: Tensor | None = None
    edge_weight: Tensor | None = None
    edge_ids: Tensor | None = None

    def __post_init__(self) -> None:
        for name in ("indptr", "indices", "src_ids"):
            t = _check_tensor(name, getattr(self, name))
            if t.dtype != torch.int64:
                raise GraphError(
                    f"Block field '{name}' must be int64 (got {t.dtype}); cast with .long()"
                )
        num_dst = self.num_dst
        if isinstance(num_dst, bool) or not isinstance(num_dst, int):
            raise GraphError(f"Block 'num_dst' must be an int (got {type(num_dst).__name__})")
        num_src = int(self.src_ids.numel())
        if not 0 <= num_dst <= num_src:
            raise GraphError(
                f"Block 'num_dst' must lie in [0, num_src] = [0, {num_src}] (got {num_dst}); "
                f"destinations must be a prefix of src_ids"
            )
        if self.indptr.numel() != num_dst + 1:
            raise GraphError(
                f"Block 'indptr' must have num_dst + 1 = {num_dst + 1} entries "
                f"(got {self.indptr.numel()})"
            )
        for name, rows in (("src_degree", num_src), ("edge_weight", self.num_edges)):
            value = getattr(self, name)
            if value is None:
                continue
            t = _check_tensor(name, value)
            if t.numel() != rows or not t.is_floating_point():
                raise GraphError(
                    f"Block '{name}' must be a float tensor of shape ({rows},) "
                    f"(got {t.dtype} with shape {tuple(t.shape)})"
                )
        if self.edge_ids is not None:
            t = _check_tensor("edge_ids", self.edge_ids)
            if t.dtype != torch.int64 or t.numel() != self.num_edges:
                raise GraphError(
                    f"Block 'edge_ids' must be an int64 tensor of shape ({self.num_edges},) "
                    f"(got {t.dtype} with shape {tuple(t.shape)})"
                )

    # ------------------------------------------------------------------ properties
    @property
    def num_src(self) -> int:
        """Number of source nodes ``S`` (destinations included)."""
        return int(self.src_ids.numel())

    @property
    def num_edges(self) -> int:
        """Number of edges ``E``."""
        return int(self.indices.numel())

    @property
    def dst_ids(self) -> Tensor:
        """Global IDs of the destination nodes, ``src_ids[:num_dst]`` (a view)."""
        return self.src_ids[: self.num_dst]

    @property
    def device(self) -> torch.device:
        """The device the block's tensors live on."""
        return self.indptr.device

    def dst_in_degree(self) -> Tensor:
        """Number of block edges into each destination, int64 ``[num_dst]``."""
        return self.indptr[1:] - self.indptr[:-1]

    # ------------------------------------------------------------------ methods
    def to(self, device: torch.device | str, non_blocking: bool = False) -> Block:
        """A copy of this block with every tensor on ``device``."""

        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return Block(
            indptr=self.indptr.to(device, non_blocking=non_blocking),
            indices=self.indices.to(device, non_blocking=non_blocking),
            src_ids=self.src_ids.to(device, non_blocking=non_blocking),
            num_dst=self.num_dst,
            src_degree=move(self.src_degree),
            edge_weight=move(self.edge_weight),
            edge_ids=move(self.edge_ids),
        )

    def validate(self) -> None:
        """Check every value (one pass over the block; synchronises with the device).

        Raises:
            GraphError: If ``indptr`` does not start at 0, decreases or does not end at
                ``num_edges``, or a local index lies outside ``[0, num_src)``.
        """
        indptr = self.indptr
        if int(indptr[0]) != 0 or int(indptr[-1]) != self.num_edges:
            raise GraphError(
                f"Block 'indptr' must run from 0 to num_edges = {self.num_edges} "
                f"(got {int(indptr[0])} .. {int(indptr[-1])})"
            )
        if self.num_dst and bool((indptr[1:] < indptr[:-1]).any()):
            raise GraphError("Block 'indptr' must be non-decreasing")
        if self.num_edges:
            lo, hi = int(self.indices.min()), int(self.indices.max())
            if lo < 0 or hi >= self.num_src:
                bad = lo if lo < 0 else hi
                raise GraphError(
                    f"Block 'indices' holds local index {bad}, outside [0, num_src) = "
                    f"[0, {self.num_src}); indices must be positions in src_ids, not global IDs"
                )

    def __repr__(self) -> str:
        parts = [
            f"num_dst={self.num_dst}",
            f"num_src={self.num_src}",
            f"num_edges={self.num_edges}",
        ]
        if self.src_degree is not None:
            parts.append("src_degree")
        if self.edge_weight is not None:
            parts.append(f"edge_weight:{self.edge_weight.dtype}")
        if self.edge_ids is not None:
            parts.append("edge_ids")
        if self.device.type != "cpu":
            parts.append(f"device={self.device}")
        return f"Block({', '.join(parts)})"
