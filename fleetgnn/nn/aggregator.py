"""The :class:`Aggregator` protocol layers are written against, and its local implementation.

A layer sees one bipartite hop: ``num_src`` input rows (global IDs ``src_ids``) whose first
``num_dst`` rows are the output rows. Everything that crosses edges goes through the aggregator,
so an engine can put communication inside these methods (split-parallel all-to-all, full-graph
remote-row exchange, host offloading) and run the same layer code unchanged.
:class:`LocalAggregator` is the single-device implementation on :mod:`fleetgnn.ops`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.ops import (
    ScaledSpMM,
    check_adjacency,
    dst_to_edge,
    edge_softmax,
    float32_inputs,
    gspmm,
    src_to_edge,
    structure,
)
from fleetgnn.ops import edge_reduce as _edge_reduce
from fleetgnn.ops.spmm import Reduce

if TYPE_CHECKING:
    from fleetgnn.graph import Graph


@runtime_checkable
class Aggregator(Protocol):
    """One hop of message passing, as the layers see it.

    Attributes:
        num_src: Number of input rows ``S``.
        num_dst: Number of output rows ``M <= S``; they are the first ``M`` input rows.
        src_ids: int64 ``[S]`` global node IDs of the input rows (keys for dropout masks).
    """

    num_src: int
    num_dst: int
    src_ids: Tensor

    def aggregate(
        self, x_src: Tensor, reduce: Reduce = "sum", edge_weight: Tensor | None = None
    ) -> Tensor:
        """``[S, ...] -> [M, ...]``: reduce ``w_e * x_src[u]`` over each destination's in-edges."""
        ...

    def src_to_edge(self, x_src: Tensor) -> Tensor:
        """``[S, ...] -> [E, ...]``: the source row of every edge."""
        ...

    def dst_to_edge(self, x_dst: Tensor) -> Tensor:
        """``[M, ...] -> [E, ...]``: the destination row of every edge."""
        ...

    def edge_softmax(self, scores: Tensor) -> Tensor:
        """``[E, ...] -> [E, ...]``: softmax over each destination's in-edges."""
        ...

    def dst_degree(self) -> Tensor:
        """Number of in-edges aggregated into each destination, float ``[M]``."""
        ...

    def src_degree(self) -> Tensor:
        """Each source's in-degree in the WHOLE graph, float ``[S]``."""
        ...

    def edge_ids(self) -> tuple[Tensor, Tensor]:
        """``(src_gid [E], dst_gid [E])``: global IDs of every edge's endpoints."""
        ...


class BipartiteHop(NamedTuple):
    """One hop as a PyG ``MessagePassing`` layer takes it.

    ``conv((x_src, x_dst), edge_index, size=size)`` (see :meth:`LocalAggregator.bipartite`).

    Attributes:
        x_src: ``[S', ...]`` every source row the hop's edges read: the aggregator's ``num_src``
            rows, then any halo (remote) rows the engine fetched for them.
        x_dst: ``[M, ...]`` the destination rows (the first ``M`` source rows).
        edge_index: int64 ``[2, E]``: row 0 indexes ``x_src``, row 1 indexes ``x_dst`` (PyG's
            ``source_to_target`` flow); every in-edge of the destinations, in CSC order.
        size: ``(S', M)``, PyG's bipartite ``size``.
    """

    x_src: Tensor
    x_dst: Tensor
    edge_index: Tensor
    size: tuple[int, int]


def bipartite(agg: object, x_src: Tensor) -> BipartiteHop:
    """``agg.bipartite(x_src)``, or a one-line refusal for an aggregator that has none.

    Optional in the :class:`Aggregator` protocol: an aggregator that can hand a layer its source
    rows and an ``edge_index`` (the local one, the full-graph and split engines' exchanging ones)
    offers it; one that caches or chunks aggregations (the ``offload`` engine's) does not.

    Raises:
        ConfigError: If ``agg`` has no ``bipartite`` method.
    """
    fn = getattr(agg, "bipartite", None)
    if not callable(fn):
        raise ConfigError(
            f"{type(agg).__name__} cannot hand a layer its rows and an edge_index (it caches or "
            f"chunks aggregations); run layers that need one (PyG's) on the reference, minibatch, "
            f"split or fullgraph engine"
        )
    return fn(x_src)


#: The engines whose aggregators carry edge features (:func:`edge_attr`, :func:`edge_reduce`).
EDGE_FEATURE_ENGINES: tuple[str, ...] = ("reference", "minibatch", "fullgraph")


def _edge_method(agg: object, name: str) -> Any:
    fn = getattr(agg, name, None)
    if not callable(fn):
        raise ConfigError(
            f"{type(agg).__name__} carries no edge features ({name}); run layers that read "
            f"edge features on the {', '.join(EDGE_FEATURE_ENGINES)} engine"
        )
    return fn


def edge_attr(agg: object) -> Tensor:
    """``agg.edge_attr()``: the hop's edge features ``[E, D]`` in its edge order.

    Optional in the :class:`Aggregator` protocol, like :func:`bipartite`: the local aggregator
    (reference, minibatch) and the full-graph engine's carry them when the graph has
    ``edge_attr``; the others refuse in one line.

    Raises:
        ConfigError: ``agg`` carries no edge features.
    """
    return _edge_method(agg, "edge_attr")()  # type: ignore[no-any-return]


def edge_reduce(agg: object, messages: Tensor, reduce: Reduce = "sum") -> Tensor:
    """``agg.edge_reduce(messages, reduce)``: per-edge messages ``[E, ...]`` into ``[M, ...]``.

    The messages are in the order of :func:`edge_attr` and of ``agg.src_to_edge`` /
    ``agg.dst_to_edge``; optional in the protocol like :func:`edge_attr`.

    Raises:
        ConfigError: ``agg`` cannot reduce edge messages.
    """
    return _edge_method(agg, "edge_reduce")(messages, reduce)  # type: ignore[no-any-return]


def aggregates_raw(agg: object) -> bool:
    """Whether ``agg`` asks layers to aggregate their raw (parameter-free) inputs.

    An engine that caches ``aggregate()`` outputs and replays them in the backward pass (the
    ``offload`` engine's recompute/cache hybrid) sets ``aggregate_raw = True`` on its
    aggregators; a layer that can choose (GCN, SAGE) then applies its weights after aggregating,
    so the aggregation has no parameters. Optional: absent means ``False``.
    """
    return bool(getattr(agg, "aggregate_raw", False))


def gcn_propagate(agg: Aggregator, h_src: Tensor) -> Tensor:
    r"""GCN's propagation with its self loop, through :meth:`Aggregator.aggregate`.

    .. math::
        \mathrm{out}_i = \sum_{j \in N(i)} \frac{h_j}{\sqrt{(d_j + 1)(d_i + 1)}}
            + \frac{h_i}{d_i + 1}

    with ``agg.src_degree()`` as ``d_j`` and ``agg.dst_degree()`` as ``d_i``: the rows are scaled
    around one sum aggregation. An aggregator may offer the same product as ``gcn_aggregate``
    (:meth:`LocalAggregator.gcn_aggregate`); :class:`~fleetgnn.nn.GCNConv` prefers it.

    Shapes:
        - h_src: ``[S, D]``; output: ``[M, D]``.
    """
    inv_src = (agg.src_degree().to(h_src.dtype) + 1.0).rsqrt()
    inv_dst = (agg.dst_degree().to(h_src.dtype) + 1.0).rsqrt()
    out = agg.aggregate(h_src * inv_src[:, None], "sum") * inv_dst[:, None]
    return out + h_src[: agg.num_dst] * (inv_dst * inv_dst)[:, None]


class LocalAggregator:
    """:class:`Aggregator` over one local CSC adjacency (a sampled ``Block`` or a whole graph).

    Derived tensors (destination per edge, degrees, global edge IDs) are computed once and
    cached. The adjacency's own ``edge_weight`` is not applied implicitly: pass weights to
    :meth:`aggregate`.

    Args:
        adj: Block-like object with ``indptr`` (int64 ``[M + 1]``), ``indices`` (int64 ``[E]``,
            local source rows), ``src_ids`` (int64 ``[S]``), ``num_dst`` and optionally
            ``src_degree`` (``[S]`` global in-degrees) and ``reused`` (``True``: a whole graph
            serving every epoch, whose products cache more; see
            :meth:`~fleetgnn.ops.adjacency.Structure.column_blocks` and :meth:`gcn_aggregate`).
        dtype: Float dtype of the degree tensors.
        validate: Check every index once (one pass over the edges).
        edge_attr: Optional ``[E, D]`` edge features in the adjacency's edge order (default:
            the adjacency's own ``edge_attr``, if any), served by :meth:`edge_attr`.

    Index dtype, on every device: int64 ``indptr``/``indices`` (a dataset's int32 ``indices``
    are widened when the aggregator is built), 8 bytes per edge and 8 more for the transpose the
    backward builds. Chosen on purpose: torch's ``scatter``/``scatter_reduce`` (max and
    edge-softmax reductions) take int64 indices only, and ``index_select``/``index_add_`` are
    tuned for it on CUDA; int32 would save 8 of the ~16 index bytes per edge, which at the
    feature widths these engines train (hundreds of bytes per node, ~15 edges per node) is not
    what bounds device memory. On the CPU the whole-graph products keep int32 column blocks of
    their own (:class:`~fleetgnn.ops.adjacency.ColumnBlocks`), where the int32 CSR kernel is
    the faster one.

    Raises:
        GraphError: If the adjacency is malformed.
    """

    def __init__(
        self,
        adj: object,
        *,
        dtype: torch.dtype = torch.float32,
        validate: bool = True,
        edge_attr: Tensor | None = None,
    ):
        src_ids = getattr(adj, "src_ids", None)
        if not isinstance(src_ids, Tensor) or src_ids.dim() != 1:
            raise GraphError(
                f"the adjacency must carry 'src_ids', a 1-D int64 tensor of global IDs (got "
                f"{type(src_ids).__name__}); build it with the sampler or "
                f"LocalAggregator.from_graph"
            )
        self.indptr: Tensor = adj.indptr  # type: ignore[attr-defined]
        self.indices: Tensor = adj.indices  # type: ignore[attr-defined]
        self.src_ids: Tensor = src_ids.long()
        self.num_src: int = int(src_ids.numel())
        self.num_dst: int = int(adj.num_dst)  # type: ignore[attr-defined]
        self.dtype = dtype
        if not 0 <= self.num_dst <= self.num_src:
            raise GraphError(
                f"'num_dst' must lie in [0, num_src] = [0, {self.num_src}] (got {self.num_dst})"
            )
        if validate:
            check_adjacency(self)
        self._st = structure(self)
        self._st.reused = bool(getattr(adj, "reused", False))
        self._st.transient = bool(getattr(adj, "transient", False))  # a sampled block
        deg = getattr(adj, "src_degree", None)
        if deg is not None and (not isinstance(deg, Tensor) or deg.shape != (self.num_src,)):
            raise GraphError(
                f"'src_degree' must be a tensor of shape ({self.num_src},) "
                f"(got {tuple(getattr(deg, 'shape', ()))})"
            )
        self._src_degree: Tensor | None = None if deg is None else deg.to(dtype)
        self._dst_degree: Tensor | None = None
        self._edge_ids: tuple[Tensor, Tensor] | None = None
        self._edge_index: Tensor | None = None
        self._gcn: dict[torch.dtype, ScaledSpMM] = {}
        attr = getattr(adj, "edge_attr", None) if edge_attr is None else edge_attr
        if attr is not None and (
            not isinstance(attr, Tensor) or attr.dim() != 2 or attr.shape[0] != self.num_edges
        ):
            raise GraphError(
                f"'edge_attr' must be a tensor [num_edges, D] = [{self.num_edges}, D] "
                f"(got {tuple(getattr(attr, 'shape', ()))})"
            )
        self._edge_attr: Tensor | None = attr

    @classmethod
    def from_graph(
        cls,
        graph: Graph,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        *,
        with_edge_attr: bool = False,
        edge_attr: Tensor | None = None,
    ) -> LocalAggregator:
        """The full-graph aggregator: ``num_src = num_dst = N``, ``src_ids = arange(N)``.

        ``src_degree`` and ``dst_degree`` are both the graph's in-degrees. With
        ``with_edge_attr`` the graph's ``edge_attr`` is copied to ``device`` in ``dtype``
        (``[E, D]``; the graph must have it) and served by :meth:`edge_attr`; ``edge_attr``
        (``[E, D]``, CSC order) serves those rows instead (e.g. their stored values).

        Raises:
            GraphError: ``with_edge_attr`` on a graph without ``edge_attr``.
        """
        attr = None if edge_attr is None else edge_attr.to(device=device, dtype=dtype)
        if with_edge_attr and attr is None:
            if graph.edge_attr is None:
                raise GraphError(
                    f"the model reads edge features but graph '{graph.name}' has no edge_attr; "
                    f"prepare the dataset with edge features or pick a model without them"
                )
            attr = torch.from_numpy(np.asarray(graph.edge_attr)).to(device=device, dtype=dtype)
        indptr = torch.from_numpy(np.array(graph.indptr, dtype=np.int64)).to(device)  # own copy
        indices = torch.from_numpy(np.asarray(graph.indices).astype(np.int64)).to(device)
        n = graph.num_nodes
        adj = SimpleNamespace(
            indptr=indptr,
            indices=indices,
            src_ids=torch.arange(n, device=indptr.device),
            num_dst=n,
            src_degree=(indptr[1:] - indptr[:-1]).to(dtype),
            reused=True,  # every epoch: cache-sized column blocks pay off
        )
        return cls(adj, dtype=dtype, validate=False, edge_attr=attr)

    @property
    def num_edges(self) -> int:
        """Number of edges ``E``."""
        return int(self.indices.numel())

    def aggregate(
        self, x_src: Tensor, reduce: Reduce = "sum", edge_weight: Tensor | None = None
    ) -> Tensor:
        """See :func:`fleetgnn.ops.gspmm`."""
        return gspmm(self._st, x_src, reduce, edge_weight)

    def gcn_aggregate(self, h_src: Tensor) -> Tensor:
        """GCN's propagation with its self loop (:func:`gcn_propagate`): ``[S, D] -> [M, D]``.

        Optional in the :class:`Aggregator` protocol. On a reused adjacency (a whole graph:
        :meth:`from_graph`) the normalised matrix (and its transpose, in cache-sized column
        blocks on CPU) is built on the first call per dtype and kept, ``[E]`` values each way,
        so a call is one sparse product and one fused multiply-add. On a sampled block, used once,
        building it costs more than it saves (measured: a GCN mini-batch step ~10% slower), and
        the rows are scaled around :meth:`aggregate`.
        """
        (h_src,) = float32_inputs(h_src)  # mixed precision: scale and reduce in float32
        if not self._st.reused:
            return gcn_propagate(self, h_src)
        op = self._gcn.get(h_src.dtype)
        if op is None:
            inv_src = (self.src_degree().to(h_src.dtype) + 1.0).rsqrt()
            inv_dst = (self.dst_degree().to(h_src.dtype) + 1.0).rsqrt()
            op = self._gcn[h_src.dtype] = ScaledSpMM(self._st, inv_dst, inv_src, inv_dst * inv_dst)
        return op(h_src)

    def bipartite(self, x_src: Tensor) -> BipartiteHop:
        """The hop as PyG takes it: ``(x_src, x_src[:M], edge_index [2, E], (S, M))``.

        Optional in the :class:`Aggregator` protocol (see :func:`bipartite`). No copy of the rows;
        ``edge_index`` (``[indices; destination of every edge]``) is built on the first call and
        kept, 16 bytes per edge.
        """
        if x_src.dim() < 1 or x_src.shape[0] != self.num_src:
            raise ConfigError(
                f"'x_src' must have {self.num_src} rows (got shape {tuple(x_src.shape)})"
            )
        if self._edge_index is None:
            self._edge_index = torch.stack([self.indices, self._st.dst_index()])
        return BipartiteHop(
            x_src, x_src[: self.num_dst], self._edge_index, (self.num_src, self.num_dst)
        )

    def src_to_edge(self, x_src: Tensor) -> Tensor:
        """See :func:`fleetgnn.ops.src_to_edge`."""
        return src_to_edge(self._st, x_src)

    def edge_attr(self) -> Tensor:
        """The edge features ``[E, D]``, in edge (CSC) order (optional in the protocol).

        Raises:
            ConfigError: The aggregator was built without edge features.
        """
        if self._edge_attr is None:
            raise ConfigError(
                "this hop carries no edge features; build the aggregator with edge_attr "
                "(engines do so for a model whose needs_edge_attr is True on a graph with them)"
            )
        return self._edge_attr

    def edge_reduce(self, messages: Tensor, reduce: Reduce = "sum") -> Tensor:
        """``[E, ...] -> [M, ...]``: see :func:`fleetgnn.ops.edge_reduce`."""
        return _edge_reduce(self._st, messages, reduce)

    def dst_to_edge(self, x_dst: Tensor) -> Tensor:
        """See :func:`fleetgnn.ops.dst_to_edge`."""
        return dst_to_edge(self._st, x_dst)

    def edge_softmax(self, scores: Tensor) -> Tensor:
        """See :func:`fleetgnn.ops.edge_softmax`."""
        return edge_softmax(self._st, scores)

    def dst_degree(self) -> Tensor:
        """Number of in-edges of each destination in this adjacency, ``[M]``."""
        if self._dst_degree is None:
            self._dst_degree = self._st.in_degree().to(self.dtype)
        return self._dst_degree

    def src_degree(self) -> Tensor:
        """Global in-degree of each source, ``[S]``.

        Raises:
            GraphError: If the adjacency carries no ``src_degree``.
        """
        if self._src_degree is None:
            raise GraphError(
                "this adjacency has no 'src_degree' (global in-degree of each source), which GCN "
                "normalisation needs; sample blocks with src_degree or use "
                "LocalAggregator.from_graph"
            )
        return self._src_degree

    def edge_ids(self) -> tuple[Tensor, Tensor]:
        """Global ``(src_gid, dst_gid)`` of every edge, ``[E]`` each."""
        if self._edge_ids is None:
            self._edge_ids = (
                self.src_ids.index_select(0, self.indices),
                self.src_ids.index_select(0, self._st.dst_index()),
            )
        return self._edge_ids

    def __repr__(self) -> str:
        return (
            f"LocalAggregator(num_dst={self.num_dst}, num_src={self.num_src}, "
            f"num_edges={self.num_edges})"
        )
