"""The keyed store: one feature table per node type of a typed graph, over the same tiers.

A :class:`KeyedStore` holds one :class:`~fleetgnn.store.UnifiedStore` per featured node type of a
:class:`~fleetgnn.graph.hetero.HeteroGraph` (its own row width ``F_t * itemsize`` and its own
global ID range), as cugraph-pyg's ``FeatureStore`` keys its WholeGraph tables by ``(type,
attribute)``. Each table is tiered like the homogeneous store's features (hottest rows on the
device shards by hot rank modulo ``N``, then the host tier, one copy per host, then the dataset's
arrays on disk) and read the same way; only the plan is made here, for all the types together.

Hotness: a node's in-degree summed over every relation into its type (the reads a sampler makes
of it). Budget split, the rule: the rows of all featured types compete in **one** ranking by
hotness (ties: schema order of the types, then type-local ID), and the device budget goes to the
hottest rows whatever their type, each costing its own width in bytes, until a rank's shard
would exceed ``budgets.device``; the host budget then goes the same way to the next-hottest rows.
A type's share of a budget is the bytes of its rows among them: byte-weighted hotness. Reading a
row costs its width in traffic, so a cached row of in-degree ``d`` saves ``d`` bytes of traffic
per byte of budget whatever its width: the ranking by in-degree is the greedy, traffic-optimal
fill. Each type's table is then planned with exactly its share (:func:`plan_keyed`), so no
rank's shard exceeds the device budget and each host's tier the host budget.

Featureless types have no table: their learnable embedding tables are model parameters
(:class:`~fleetgnn.nn.hetero.HeteroGNN`'s ``nn.Embedding``, replicated on every rank, gradients
summed by the engines' all-reduce like every parameter): a store table is read-only, and
training one through the tiers would need a sparse optimiser writing rows back to every tier.

Compact tables: a typed dataset written compact (``prepare --feature-dtype``) gives
:class:`~fleetgnn.graph.compact_rows.CompactRows` tables, which their stores take as stored (the
device and host tiers hold the file's rows, bit for bit; the disk tier reads the stored rows and
decodes them in the gather), so every byte count (the plan's budgets and shares,
:meth:`KeyedStore.memory`, the traffic) is of the stored rows. ``store.feature_dtype`` is one
dtype for every table (:func:`~fleetgnn.graph.compact_rows.applied_feature_dtypes`): unset or a
compact table's own dtype keeps it as stored, ``float32`` widens it, another compact dtype is
refused in one line naming the type; a float table converts to it.

Traffic: every table records into one :class:`TrafficMeter` (bytes served per link kind, as the
homogeneous store does); :meth:`KeyedStore.requests` and :meth:`KeyedStore.bytes_served` sum the
tables. Two-sided mode makes every table's device read a collective: :meth:`KeyedStore.gather`
reads every table, in schema order, on every call (with no rows where a type has none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from fleetgnn.distributed.comm import Communicator
from fleetgnn.distributed.traffic import TrafficMeter
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.compact_rows import applied_feature_dtypes
from fleetgnn.graph.csc import Graph
from fleetgnn.graph.hetero import HeteroGraph
from fleetgnn.store.hotness import HotnessRanking, id_dtype, inverse_order
from fleetgnn.store.store import SOURCE_LINKS, SOURCES, UnifiedStore
from fleetgnn.store.tiers import StorePlan, TierBudgets, TierPlan, feature_row_bytes, plan_tiers
from fleetgnn.types import Closing

__all__ = ["KeyedPlan", "KeyedStore", "keyed_hotness", "plan_keyed"]


def keyed_hotness(graph: HeteroGraph) -> dict[str, np.ndarray]:
    """In-degree over all relations of every node, per featured type (int64 ``[N_t]``)."""
    s = graph.schema
    out = {t: np.zeros(s.count(t), np.int64) for t in s.node_types if t in graph.x}
    for rel in s.relations:
        if rel[2] in out:
            out[rel[2]] += np.diff(np.asarray(graph.csc[rel][0], dtype=np.int64))
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class KeyedPlan:
    """The tier plan of every featured type's table (identical on every rank).

    Attributes:
        tables: Node type -> its feature :class:`TierPlan` (row IDs type-local).
        hotness: Node type -> its :class:`HotnessRanking` (type-local IDs).
        budgets: The budgets shared by all tables (device per rank, host per host).
        shares: Node type -> ``TierBudgets`` it was planned with (its byte-weighted share).
    """

    tables: dict[str, TierPlan]
    hotness: dict[str, HotnessRanking]
    budgets: TierBudgets
    shares: dict[str, TierBudgets]

    def device_bytes(self) -> np.ndarray:
        """Device bytes per rank over all tables, int64 ``[N]``."""
        return np.sum([p.device_bytes for p in self.tables.values()], axis=0).astype(np.int64)

    def host_bytes(self) -> int:
        """Host-tier bytes over all tables (one copy per host)."""
        return int(sum(p.host_bytes for p in self.tables.values()))


def plan_keyed(
    graph: HeteroGraph,
    budgets: TierBudgets,
    world_size: int,
    *,
    scores: Mapping[str, np.ndarray] | None = None,
    feature_dtype: str | None = None,
) -> KeyedPlan:
    """Plan every featured type's table over device / host / disk (see the module docstring).

    Args:
        graph: The typed graph.
        budgets: Device bytes per rank and host bytes per host, for all tables together.
        world_size: Number of device ranks ``N``.
        scores: Hotness per featured type (int ``[N_t]``; default :func:`keyed_hotness`).
        feature_dtype: How every table stores its rows (``store.feature_dtype``): the budgets
            count the stored bytes of each type's rows; ``None``: each table's own dtype (a
            compact table's stored rows).

    Returns:
        The :class:`KeyedPlan`.

    Raises:
        ConfigError: On a bad world size or scores of the wrong shape.
        GraphError: If the graph has no featured type.
    """
    if not isinstance(graph, HeteroGraph):
        raise GraphError(f"'graph' must be a HeteroGraph (got {type(graph).__name__})")
    types = [t for t in graph.schema.node_types if t in graph.x]
    if not types:
        raise GraphError(f"typed graph '{graph.name}' has no node features; nothing to store")
    applied_feature_dtypes(graph.x, feature_dtype)  # a compact table refuses another codec
    scores = keyed_hotness(graph) if scores is None else scores
    for t in types:
        if np.shape(scores.get(t)) != (graph.schema.count(t),):
            raise ConfigError(
                f"'scores' must give one score per node of type {t!r} "
                f"({graph.schema.count(t)}; got shape {np.shape(scores.get(t))})"
            )
    w = int(world_size)
    rb = np.array(
        [feature_row_bytes(_table_graph(graph, t), feature_dtype) for t in types], np.int64
    )
    counts = np.array([graph.schema.count(t) for t in types], np.int64)
    # one ranking of every featured row: hottest first, ties by type (schema order), local ID
    score = np.concatenate([np.asarray(scores[t], np.int64) for t in types])
    glob = np.argsort(-score, kind="stable")
    del score
    starts = np.concatenate([[0], np.cumsum(counts)])
    code = (np.searchsorted(starts[1:], glob, side="right")).astype(np.int8)
    local = glob - starts[code.astype(np.int64)]  # type-local ID of each global hot rank
    # k: hot rank within its own type (the position in the type's order)
    k = np.empty(glob.size, np.int64)
    for i in range(len(types)):  # loop over types
        sel = np.flatnonzero(code == i)
        k[sel] = np.arange(sel.size, dtype=np.int64)
    # device: a rank's shard grows by a row of type t when t's count passes a multiple of N
    # (partition 0, the largest, gains a row), so this is the fullest shard's bytes per prefix
    grow = np.cumsum(np.where(k % w == 0, rb[code], 0))
    n_dev = int(np.searchsorted(grow, budgets.device, side="right"))
    c = np.bincount(code[:n_dev], minlength=len(types)).astype(np.int64)
    dev_rows = np.minimum(-(-c // w) * w, counts)  # what a type's plan places for its share
    dev_share = -(-c // w) * rb
    # host: the next-hottest rows not on a device, each its full width, until the budget is spent
    off = k >= dev_rows[code]
    spent = np.cumsum(np.where(off, rb[code], 0))
    n_host = int(np.searchsorted(spent, budgets.host, side="right"))
    h = np.bincount(code[:n_host][off[:n_host]], minlength=len(types)).astype(np.int64)
    tables, hot, shares = {}, {}, {}
    for i, t in enumerate(types):  # loop over types
        order = local[code == i].astype(id_dtype(int(counts[i])))
        rank_of = inverse_order(order)
        share = TierBudgets(int(dev_share[i]), int(h[i] * rb[i]))
        hot[t] = HotnessRanking(order, rank_of, np.asarray(scores[t]), "degree")
        tables[t] = plan_tiers(int(counts[i]), int(rb[i]), share, w, order=order)
        shares[t] = share
    return KeyedPlan(tables=tables, hotness=hot, budgets=budgets, shares=shares)


def _table_graph(graph: HeteroGraph, ntype: str) -> Graph:
    """A :class:`Graph` of one type's feature table (no edges; its arrays are the disk tier)."""
    n = graph.schema.count(ntype)
    zeros = np.broadcast_to(np.zeros(1, np.int64), (n + 1,))  # read-only, no [n] allocation
    return Graph(
        indptr=zeros,
        indices=np.empty(0, np.int32),
        x=graph.x[ntype],
        name=f"{graph.name}:{ntype}",
        validate="none",
    )


class KeyedStore(Closing):
    """Per-type feature tables of a typed graph over device shards, host memory and disk.

    Build with :meth:`build`. IDs are the typed graph's global IDs (type ``t`` owns
    ``schema.type_range(t)``).

    Attributes:
        graph: The typed graph.
        plan: The :class:`KeyedPlan`.
        tables: Node type -> its :class:`UnifiedStore` (type-local row IDs), featured types in
            schema order.
        meter: Bytes served per link kind, all tables together.
    """

    def __init__(
        self,
        graph: HeteroGraph,
        plan: KeyedPlan,
        tables: dict[str, UnifiedStore],
        meter: TrafficMeter,
    ) -> None:
        self.graph = graph
        self.plan = plan
        self.tables = tables
        self.meter = meter
        self.schema = graph.schema
        self._offsets = {t: graph.schema.type_range(t)[0] for t in tables}
        self._closed = False

    @classmethod
    def build(
        cls,
        graph: HeteroGraph,
        comm: Communicator | None = None,
        budgets: TierBudgets | None = None,
        *,
        one_sided: bool = True,
        meter: TrafficMeter | None = None,
        host_comm: Communicator | None = None,
        name: str = "keyed",
        hosts: Sequence[int] | None = None,
        scores: Mapping[str, np.ndarray] | None = None,
        feature_dtype: str | None = None,
    ) -> KeyedStore:
        """Plan all tables together (:func:`plan_keyed`) and place each. Collective with ``comm``.

        Every table is a :meth:`UnifiedStore.build` of its own plan (its shards named
        ``{name}.{i}`` for the ``i``-th node type), so memory and communication are those of
        the homogeneous store, per table. Arguments as :meth:`UnifiedStore.build`; ``scores``
        as :func:`plan_keyed`; ``feature_dtype`` (``store.feature_dtype``): every table stores
        compact rows and reads them back in the gather.

        Raises:
            ConfigError: On bad budgets, hosts or scores.
            GraphError: If ``graph`` is not a typed graph with features.
        """
        budgets = TierBudgets.check(budgets)
        world = 1 if comm is None else comm.world_size
        plan = plan_keyed(graph, budgets, world, scores=scores, feature_dtype=feature_dtype)
        meter = TrafficMeter() if meter is None else meter
        tables: dict[str, UnifiedStore] = {}
        try:
            for t, fp in plan.tables.items():  # loop over types, schema order on every rank
                g = _table_graph(graph, t)
                topo = plan_tiers(
                    g.num_nodes, 8, TierBudgets(), world, order=fp.order, kind="topology"
                )
                tables[t] = UnifiedStore.build(
                    g,
                    comm,
                    one_sided=one_sided,
                    meter=meter,
                    host_comm=host_comm,
                    name=f"{name}.{graph.schema.type_index(t)}",
                    hosts=hosts,
                    plan=StorePlan(topo, fp, budgets, "features_first", 1),
                    feature_dtype=feature_dtype,
                )
        except BaseException:
            for s in tables.values():
                s.close()
            raise
        return cls(graph, plan, tables, meter)

    # ------------------------------------------------------------------ features
    def _check_open(self) -> None:
        if self._closed:
            raise GraphError("this KeyedStore is closed; build a new one")

    def _ids(self, ids: object) -> np.ndarray:
        t = torch.as_tensor(ids) if not isinstance(ids, Tensor) else ids
        if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
            raise GraphError(
                f"'ids' must be a 1-D integer tensor of global node IDs (got {t.dtype} with "
                f"shape {tuple(t.shape)})"
            )
        a = t.detach().cpu().numpy().astype(np.int64, copy=False)
        n = self.schema.total_nodes
        if a.size and (a.min() < 0 or a.max() >= n):
            bad = int(a.min()) if a.min() < 0 else int(a.max())
            raise GraphError(
                f"'ids' holds node ID {bad}, outside the valid interval [0, {n}); pass global "
                "IDs of this typed graph"
            )
        return a

    def gather_type(self, ntype: str, ids: Tensor) -> Tensor:
        """Feature rows of global IDs ``ids``, all of type ``ntype``, in input order.

        Bit-exact with ``graph.x[ntype][ids - offset(ntype)]``. Two-sided mode: a collective.

        Raises:
            GraphError: If ``ntype`` has no table or an ID is not of type ``ntype``.
        """
        self._check_open()
        if ntype not in self.tables:
            raise GraphError(
                f"node type {ntype!r} has no feature table; featured types are {list(self.tables)}"
            )
        idn = self._ids(ids)
        lo, hi = self.schema.type_range(ntype)
        if idn.size and (idn.min() < lo or idn.max() >= hi):
            bad = int(idn.min()) if idn.min() < lo else int(idn.max())
            raise GraphError(f"'ids' holds node ID {bad}, not of type {ntype!r} (IDs [{lo}, {hi}))")
        return self.tables[ntype].gather(torch.from_numpy(idn - lo))

    def gather(self, ids: Tensor) -> dict[str, Tensor]:
        """Feature rows of mixed global IDs, split by type: ``{type: rows}`` per featured type.

        ``rows`` of type ``t`` are those of ``ids[schema.type_of(ids) == t]``, in input order
        (``[0, F_t]`` where none); IDs of featureless types are skipped. Every table is read
        (two-sided mode: a collective per table).
        """
        self._check_open()
        idn = self._ids(ids)
        code = self.schema.type_of(idn)
        out = {}
        for t in self.tables:  # loop over types, schema order on every rank
            sel = idn[code == self.schema.type_index(t)]
            out[t] = self.tables[t].gather(torch.from_numpy(sel - self._offsets[t]))
        return out

    # ------------------------------------------------------------------ stats
    def requests(self) -> dict[str, int]:
        """Feature rows requested per source, all tables together."""
        return {s: sum(st.requests("features")[s] for st in self.tables.values()) for s in SOURCES}

    def bytes_served(self) -> dict[str, int]:
        """Feature bytes served per link kind, all tables together (each row's stored bytes)."""
        return {
            link: sum(st.bytes_served("features")[link] for st in self.tables.values())
            for link in SOURCE_LINKS.values()
        }

    def hit_rates(self) -> dict[str, float]:
        """Fraction of requested feature rows served by each source, all tables together."""
        req = self.requests()
        total = sum(req.values())
        return {k: (v / total if total else 0.0) for k, v in req.items()}

    def reset_stats(self) -> None:
        """Zero every table's counters and the meter."""
        for st in self.tables.values():
            st.reset_stats()

    @property
    def traffic(self) -> dict[str, dict[str, int]]:
        """Snapshot of :attr:`meter`: link kind -> ``{"bytes", "messages"}``."""
        return self.meter.snapshot()

    def memory(self) -> dict[str, int]:
        """Bytes held per tier by this rank, all tables together (see :meth:`UnifiedStore.memory`).

        ``disk`` counts the feature bytes left on disk (the tables hold no topology).
        """
        out = {"device": 0, "host": 0, "disk": 0}
        for t, st in self.tables.items():
            m = st.memory()
            out["device"] += m["device"]
            out["host"] += m["host"]
            out["disk"] += self.plan.tables[t].disk_bytes
        return out

    def close(self) -> None:
        """Release every table's mappings of the shared tiers (local; idempotent)."""
        for st in self.tables.values():
            st.close()
        self._closed = True

    def __repr__(self) -> str:
        tables = ",\n  ".join(f"{t}: {p!r}" for t, p in self.plan.tables.items())
        return f"KeyedStore(graph={self.graph.name!r}, {self.plan.budgets!r},\n  {tables})"
