"""Edge rows in the store: a graph's ``edge_attr`` keyed by edge ID, over the same tiers.

An :class:`EdgeTable` holds the rows of ``Graph.edge_attr`` (row ``e`` for the CSC edge ``e``, the
IDs sampled blocks carry in ``Block.edge_ids``) as one more keyed table of the store, as
:class:`~fleetgnn.store.keyed.KeyedStore` keys a table per node type: a
:class:`~fleetgnn.store.UnifiedStore` whose "nodes" are the ``E`` edges and whose feature rows
are their ``D`` features (no topology). So its tiers, sharding and reads are those of the node
rows:

==========  =============================================  ===========================
tier        holds (edge hot rank ``k``)                    read as
==========  =============================================  ===========================
device      rank ``r``: ``k < H_dev``, ``k mod N == r``,   :class:`ShardedTensor`
            local row ``k div N``                          (``local``/``peer``/``net``)
host        ``[H_dev, H_dev + H_host)`` (one copy a host)  :class:`SharedTensor` (``h2d``)
disk        the rest                                       ``edge_attr.npy`` (``disk``)
==========  =============================================  ===========================

Hot order of the edges (:func:`edge_hot_order`): a sampled block reads ``min(f, deg(v))`` of
the ``deg(v)`` in-edges of each destination ``v`` (fanout ``f``), so an in-edge of ``v`` is read
with chance ``min(1, f / deg(v))`` each time ``v`` is a destination: the in-edges of a hub are
each read rarely, however hot the hub's node row. The edges are ranked by, in turn: their reads
over pre-sampled batches (``counts``, with ``store.placement=presample``), that chance for the
largest fanout (``fanout``), and the node store's hot order of their destination (ties: edge
ID). Measured on the synthetic ``tiny`` and ``small`` graphs (fanouts ``[4, 3]``, ``[10, 5]``),
the 10% of edge rows first in this order serve 18% and 13% of the reads by the chance alone and
20% and 30% with 8 pre-sampled batches (counted on other batches than the ones measured), where
the in-edges of the hottest nodes first would serve 4% and 5% (fewer than a random 10%).
Placement across devices is the modulo split (no device topology: a table of edge rows is
planned without XGNN's solver).

Budget split (:func:`split_budgets`), explicit: the node rows (topology and features,
:class:`~fleetgnn.store.UnifiedStore`) and the edge rows share each tier's budget (device bytes
per rank, host bytes per host). With ``share=s`` the edge rows get ``floor(s * budget)`` of each
tier and the node rows the rest. Without a share the budget is split in proportion to the bytes
of each table: the edge rows get ``budget * B_e // (B_e + B_n)`` with ``B_e`` the edge rows'
stored bytes (``E`` rows of :func:`edge_row_bytes`) and ``B_n`` the node store's
(:func:`node_store_bytes`: ``8 (N + 1) + E * per-edge topology bytes`` and ``N`` stored feature
rows), so with a budget short of both, each table keeps the same fraction of its bytes in the
tier. Either way ``nodes + edges <= budget`` on every tier.

Memory: the plan holds the edge hot order and its inverse, ``id_dtype(E)`` (4 bytes an edge
below ``2^31`` edges) each, per rank; the tiers hold what the budgets give them.

Traffic: every read records a row's stored bytes (:func:`edge_row_bytes`) into the table's meter
(the node store's, when the engine passes it), by source as the node rows do;
:meth:`EdgeTable.requests`, :meth:`EdgeTable.bytes_served` and :meth:`EdgeTable.hit_rates` count
the edge rows alone.
Two-sided mode makes every :meth:`EdgeTable.gather` a collective.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.distributed.comm import Communicator
from fleetgnn.distributed.traffic import TrafficMeter
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.csc import Graph
from fleetgnn.store.hotness import id_dtype
from fleetgnn.store.store import UnifiedStore
from fleetgnn.store.tiers import StorePlan, TierBudgets, TierPlan, feature_row_bytes, plan_tiers
from fleetgnn.types import Closing

__all__ = [
    "BudgetSplit",
    "EdgeTable",
    "edge_hot_order",
    "edge_row_bytes",
    "node_store_bytes",
    "plan_edge_rows",
    "split_budgets",
    "split_bytes",
]

#: Nodes whose segments :func:`edge_hot_order` lays out per step (bounds its temporaries).
_ORDER_BLOCK = 1 << 16


def edge_row_bytes(graph: Graph, feature_dtype: str | None = None) -> int:
    """Bytes of one edge row as stored (0 without ``edge_attr``).

    ``D * itemsize`` of the dataset, or with ``feature_dtype`` (``store.edge_feature_dtype``)
    the compact row's (:func:`~fleetgnn.store.tiers.feature_row_bytes` of the table's graph).
    """
    if graph.edge_attr is None:
        return 0
    return feature_row_bytes(_table_graph(graph), feature_dtype)


def node_store_bytes(graph: Graph, feature_dtype: str | None = None) -> int:
    """Bytes of the node store's rows: every CSC segment (with ``indptr``) and feature row.

    Feature rows count as stored (``feature_dtype``: ``store.feature_dtype``).
    """
    per_edge = graph.indices.dtype.itemsize
    if graph.edge_weight is not None:
        per_edge += graph.edge_weight.dtype.itemsize
    total = 8 * (graph.num_nodes + 1) + per_edge * graph.num_edges
    return int(total + graph.num_nodes * feature_row_bytes(graph, feature_dtype))


@dataclasses.dataclass(frozen=True)
class BudgetSplit:
    """How one store budget is shared by node rows and edge rows (see the module docstring).

    Attributes:
        nodes: The node store's budgets (topology and features).
        edges: The edge table's budgets.
        share: The edge rows' fraction asked for (``None``: by bytes).
        node_bytes: Bytes of all node rows ``B_n`` (the split by bytes).
        edge_bytes: Bytes of all edge rows ``B_e``.
    """

    nodes: TierBudgets
    edges: TierBudgets
    share: float | None
    node_bytes: int
    edge_bytes: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"nodes": {"device", "host"}, "edges": {...}, "share", ...}``."""
        return {
            "nodes": {"device": self.nodes.device, "host": self.nodes.host},
            "edges": {"device": self.edges.device, "host": self.edges.host},
            "share": self.share,
            "node_bytes": self.node_bytes,
            "edge_bytes": self.edge_bytes,
        }


def split_budgets(
    budgets: TierBudgets,
    graph: Graph,
    share: float | None = None,
    *,
    feature_dtype: str | None = None,
    edge_feature_dtype: str | None = None,
) -> BudgetSplit:
    """Split ``budgets`` between the node store and the edge table of ``graph``.

    Args:
        budgets: The store's budgets (device bytes per rank, host bytes per host).
        graph: The graph (``edge_attr`` gives the edge rows; none: they get nothing).
        share: The edge rows' fraction of each tier, in ``[0, 1]`` (``store.edge_share``);
            ``None``: in proportion to the bytes of each table.
        feature_dtype: How the node store stores feature rows (``store.feature_dtype``).
        edge_feature_dtype: How the edge table stores its rows (``store.edge_feature_dtype``).

    Returns:
        The :class:`BudgetSplit` (``nodes + edges <= budgets`` on each tier).

    Raises:
        ConfigError: ``share`` outside ``[0, 1]``.
    """
    nb = node_store_bytes(graph, feature_dtype)
    eb = graph.num_edges * edge_row_bytes(graph, edge_feature_dtype)
    return split_bytes(budgets, nb, eb, share)


def split_bytes(
    budgets: TierBudgets, node_bytes: int, edge_bytes: int, share: float | None = None
) -> BudgetSplit:
    """:func:`split_budgets` from the two tables' bytes ``B_n`` and ``B_e`` (no graph needed).

    The cost model of a graph known by its counts splits its modelled bytes with it.

    Raises:
        ConfigError: ``share`` outside ``[0, 1]``.
    """
    if share is not None and (
        isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1
    ):
        raise ConfigError(
            f"'share' (store.edge_share) must be a fraction in [0, 1] of each tier's budget for "
            f"the edge rows (got {share!r}); leave it null to split by bytes"
        )
    nb, eb = int(node_bytes), int(edge_bytes)

    def edges_of(budget: int) -> int:
        if share is not None:
            return min(budget, int(budget * float(share)))
        return budget * eb // (eb + nb) if eb else 0

    dev, host = edges_of(budgets.device), edges_of(budgets.host)
    return BudgetSplit(
        nodes=TierBudgets(budgets.device - dev, budgets.host - host),
        edges=TierBudgets(dev, host),
        share=None if share is None else float(share),
        node_bytes=nb,
        edge_bytes=eb,
    )


def edge_hot_order(
    graph: Graph,
    node_order: np.ndarray | None = None,
    *,
    fanout: int | None = None,
    counts: np.ndarray | None = None,
) -> np.ndarray:
    """Edge IDs hottest first (see the module docstring).

    Without ``fanout`` and ``counts``: the CSC segments of the nodes in ``node_order``, in turn,
    each in edge-ID order. With ``fanout`` the nodes are first sorted (stably) by the chance
    ``min(1, fanout / deg)`` that a sampled block reads one of their in-edges, highest first;
    with ``counts`` the edges are then sorted (stably) by their pre-sampled reads.

    Args:
        graph: The graph.
        node_order: ``[N]`` nodes hottest first (the node store's ``plan.topology.order``);
            ``None``: by in-degree, highest first (ties by ID), like the default node ranking.
        fanout: The largest fanout the sampler draws (``-1`` or ``None``: no such key).
        counts: ``[E]`` reads of each edge over pre-sampled batches (``None``: no such key).

    Returns:
        ``[E]`` edge IDs (``id_dtype(E)``), a permutation of ``0..E-1``.

    Raises:
        ConfigError: ``node_order`` or ``counts`` of the wrong shape, or a bad ``fanout``.
    """
    n, e = graph.num_nodes, graph.num_edges
    indptr = np.asarray(graph.indptr)
    deg = np.diff(indptr.astype(np.int64))
    if node_order is None:
        node_order = np.argsort(-deg, kind="stable")
    node_order = np.asarray(node_order)
    if node_order.shape != (n,):
        raise ConfigError(
            f"'node_order' must rank all {n} nodes (got shape {node_order.shape}); pass the node "
            "store's plan.topology.order"
        )
    if fanout is not None and (
        isinstance(fanout, bool) or not isinstance(fanout, (int, np.integer)) or fanout < -1
    ):
        raise ConfigError(f"'fanout' must be an int >= 0, or -1 for all (got {fanout!r})")
    if counts is not None and np.shape(counts) != (e,):
        raise ConfigError(
            f"'counts' must give the reads of each of the {e} edges (got shape {np.shape(counts)})"
        )
    if fanout is not None and fanout >= 0:
        # min(1, f / deg) descending == deg ascending where deg > f; nodes with deg <= f tie
        key = np.maximum(deg[node_order], max(int(fanout), 1))
        node_order = node_order[np.argsort(key, kind="stable")]
    out = np.empty(e, dtype=id_dtype(e))
    at = 0
    for a in range(0, n, _ORDER_BLOCK):  # blocks of nodes: temporaries of a block's edges
        nodes = node_order[a : a + _ORDER_BLOCK].astype(np.int64)
        start = indptr[nodes].astype(np.int64)
        deg = indptr[nodes + 1].astype(np.int64) - start
        m = int(deg.sum())
        first = np.cumsum(deg) - deg  # each segment's first slot within the block
        out[at : at + m] = np.repeat(start - first, deg) + np.arange(m, dtype=np.int64)
        at += m
    if counts is not None:
        out = out[np.argsort(-np.asarray(counts)[out], kind="stable")]
    return out


def plan_edge_rows(
    graph: Graph,
    budgets: TierBudgets,
    world_size: int,
    *,
    node_order: np.ndarray | None = None,
    fanout: int | None = None,
    counts: np.ndarray | None = None,
    ranks_per_host: int | None = None,
    feature_dtype: str | None = None,
) -> TierPlan:
    """Plan the edge rows over device (modulo split) / host / disk within ``budgets``.

    The rows are :func:`edge_row_bytes` each (compact with ``feature_dtype``), in
    :func:`edge_hot_order` (of ``node_order``, ``fanout`` and ``counts``); the device tier is
    the longest hot prefix whose rows, dealt by hot rank modulo ``world_size``, fit every rank's
    ``budgets.device``, the host tier the next run within ``budgets.host`` (per host).

    Raises:
        GraphError: The graph has no ``edge_attr``.
        ConfigError: A bad world size or ``node_order``.
    """
    if graph.edge_attr is None:
        raise GraphError(f"graph '{graph.name}' has no edge_attr; there are no edge rows to plan")
    order = edge_hot_order(graph, node_order, fanout=fanout, counts=counts)
    return plan_tiers(
        graph.num_edges,
        edge_row_bytes(graph, feature_dtype),
        budgets,
        world_size,
        order=order,
        ranks_per_host=ranks_per_host,
        kind="edges",
    )


def _table_graph(graph: Graph) -> Graph:
    """A :class:`Graph` of the edge rows: ``E`` "nodes" whose features are ``edge_attr``."""
    e = graph.num_edges
    zeros = np.broadcast_to(np.zeros(1, np.int64), (e + 1,))  # read-only, no [E] allocation
    return Graph(
        indptr=zeros,
        indices=np.empty(0, np.int32),
        x=graph.edge_attr,
        name=f"{graph.name}:edges",
        validate="none",
    )


class EdgeTable(Closing):
    """The rows of ``graph.edge_attr`` by edge ID over device shards, host memory and disk.

    Build with :meth:`build`. Reads are bit-exact with ``edge_attr[ids]``.

    Attributes:
        graph: The graph (its ``edge_attr`` is the disk tier).
        plan: The edge rows' :class:`~fleetgnn.store.TierPlan` (identical on every rank).
        budgets: The budgets the table was planned with (its share of the store's).
        store: The :class:`~fleetgnn.store.UnifiedStore` holding the rows (rows = edge IDs).
        meter: Bytes served per link kind (shared with the node store when passed).
    """

    def __init__(
        self, graph: Graph, plan: TierPlan, budgets: TierBudgets, store: UnifiedStore
    ) -> None:
        self.graph = graph
        self.plan = plan
        self.budgets = budgets
        self.store = store
        self.meter = store.meter

    @classmethod
    def build(
        cls,
        graph: Graph,
        comm: Communicator | None = None,
        budgets: TierBudgets | None = None,
        *,
        node_order: np.ndarray | None = None,
        fanout: int | None = None,
        counts: np.ndarray | None = None,
        one_sided: bool = True,
        meter: TrafficMeter | None = None,
        host_comm: Communicator | None = None,
        name: str = "edges",
        hosts: Sequence[int] | None = None,
        device: torch.device | str | None = None,
        feature_dtype: str | None = None,
    ) -> EdgeTable:
        """Plan (:func:`plan_edge_rows`) and place the edge rows. Collective with ``comm``.

        Placement, communication and memory are those of :meth:`UnifiedStore.build` for one
        table of ``E`` rows of :func:`edge_row_bytes` bytes: each rank builds its device shard
        (``[m_r, D]``), the owner of each host tier builds it; shared-memory segments are
        named ``{name}.feat`` / ``{name}.feath``. Arguments as :meth:`UnifiedStore.build`;
        ``node_order``, ``fanout`` and ``counts`` as :func:`edge_hot_order` (pass the node
        store's ``plan.topology.order``, the sampler's largest fanout and the same counts on
        every rank); ``feature_dtype`` (``store.edge_feature_dtype``) as the node store's
        ``feature_dtype``: the device and host tiers hold compact rows, read back in the gather.

        Raises:
            GraphError: ``graph`` is not a Graph or has no ``edge_attr``.
            ConfigError: Bad budgets, hosts or ``node_order``.
        """
        if not isinstance(graph, Graph):
            raise GraphError(f"'graph' must be a fleetgnn Graph (got {type(graph).__name__})")
        budgets = TierBudgets.check(budgets)
        world = 1 if comm is None else comm.world_size
        plan = plan_edge_rows(
            graph,
            budgets,
            world,
            node_order=node_order,
            fanout=fanout,
            counts=counts,
            feature_dtype=feature_dtype,
        )
        # the table has no topology: a plan with every (empty) segment on disk, sharing arrays
        topo = TierPlan(
            kind="topology",
            order=plan.order,
            rank_of=plan.rank_of,
            world_size=world,
            num_device=0,
            num_host=0,
            device_bytes=np.zeros(world, np.int64),
            host_bytes=0,
            disk_bytes=0,
        )
        store = UnifiedStore.build(
            _table_graph(graph),
            comm,
            one_sided=one_sided,
            meter=meter,
            host_comm=host_comm,
            name=name,
            hosts=hosts,
            device=device,
            plan=StorePlan(topo, plan, budgets, "features_first", 1),
            feature_dtype=feature_dtype,
        )
        return cls(graph, plan, budgets, store)

    # ------------------------------------------------------------------ reads
    @property
    def num_edges(self) -> int:
        """Number of edge rows ``E``; valid edge IDs are ``[0, E)``."""
        return self.graph.num_edges

    @property
    def dim(self) -> int:
        """Width ``D`` of a row."""
        return int(self.graph.edge_attr.shape[1])  # type: ignore[union-attr]

    def gather(self, edge_ids: Tensor) -> Tensor:
        """Rows of ``edge_ids`` in input order, bit-exact with ``edge_attr[edge_ids]``.

        With compact rows (``feature_dtype``) bit-exact with the rows' read-back values
        (:meth:`FeatureCodec.round_trip <fleetgnn.graph.compact.FeatureCodec.round_trip>`).
        Each tier is read once per call (see :meth:`UnifiedStore.gather`); duplicates and empty
        input are fine. Records a row's stored bytes. Two-sided mode: a collective.

        Shapes:
            - edge_ids: ``[n]`` int
            - output: ``[n, D]``, dtype of ``edge_attr``, on the table's device.

        Raises:
            GraphError: An ID outside ``[0, E)`` or not a 1-D integer tensor.
        """
        t = torch.as_tensor(edge_ids) if not isinstance(edge_ids, Tensor) else edge_ids
        if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
            raise GraphError(
                f"'edge_ids' must be a 1-D integer tensor of edge IDs (got {t.dtype} with shape "
                f"{tuple(t.shape)})"
            )
        if t.numel():
            lo, hi = int(t.min()), int(t.max())
            if lo < 0 or hi >= self.num_edges:
                raise GraphError(
                    f"'edge_ids' holds edge ID {lo if lo < 0 else hi}, outside the valid interval "
                    f"[0, {self.num_edges}); pass CSC positions of this graph (Block.edge_ids)"
                )
        return self.store.gather(t)

    # ------------------------------------------------------------------ stats
    def requests(self) -> dict[str, int]:
        """Edge rows requested per source (``local``/``peer``/``net``/``host``/``disk``)."""
        return self.store.requests("features")

    def bytes_served(self) -> dict[str, int]:
        """Edge-row bytes served per link kind: ``requests`` times a row's stored bytes."""
        return self.store.bytes_served("features")

    def hit_rates(self) -> dict[str, float]:
        """Fraction of requested edge rows served by each source."""
        return self.store.hit_rates("features")

    def reads_by_source(self) -> dict[int, dict[str, int]]:
        """Device-tier edge rows and bytes this rank read from each rank's shard."""
        return self.store.reads_by_source("features")

    def reset_stats(self) -> None:
        """Zero the counters (and the meter, shared with the node store when passed)."""
        self.store.reset_stats()

    def memory(self) -> dict[str, int]:
        """Bytes held per tier by this rank.

        ``device``: its shard (within ``budgets.device``); ``host``: its host's copy (within
        ``budgets.host``); ``disk``: the edge rows left on disk.
        """
        return self.store.memory()  # no topology: its disk bytes are the edge rows'

    def close(self) -> None:
        """Release this rank's mappings of the shared tiers (local; idempotent)."""
        self.store.close()

    def __repr__(self) -> str:
        return f"EdgeTable(graph={self.graph.name!r}, {self.budgets!r},\n  {self.plan!r})"
