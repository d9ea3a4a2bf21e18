"""Counts of the mini-batch engines' epochs, by replaying their seed loaders and samplers.

The ``minibatch`` and ``split`` engines move what their samples touch, so their traffic is
counted by drawing the same samples: the same :class:`~fleetgnn.sampling.SeedLoader` slots, the
same :class:`~fleetgnn.sampling.NeighborSampler` keys ``(seed, epoch, step, stream)``, and every
row priced where the engine finds it. Nothing is trained and no data is moved: the replay reads
the topology (the sampler needs it) and counts bytes.

==========  =====================================================================================
engine      what one step of the replay counts (rank ``r``), as the engine meters it
==========  =====================================================================================
minibatch   the store's plan (:func:`~fleetgnn.store.tiers.plan_store`, the engine's budgets,
            hotness, order and topology); every topology read the sampler makes through the store
            (16 bytes of ``indptr`` per node looked up, one index per sampled edge, one weight
            per edge on weighted graphs) and every input feature row, at the link of its source
            (:data:`~fleetgnn.store.SOURCE_LINKS`: own shard ``local``, another rank's shard on
            this host ``peer``, on another host ``net``, host tier ``h2d``, disk ``disk``);
            with edge rows (a model that reads edge features), the store's edge table planned
            as the engine plans it (:func:`~fleetgnn.store.edge_table.split_budgets`,
            :func:`~fleetgnn.store.edge_table.plan_edge_rows`) and one edge row per sampled
            edge of every block, at the link of its source
split       the global batch (one sample per step), the offline partition
            (:func:`~fleetgnn.partition.partition`, the engine's method and seed), the store's
            partition-aware plan (:func:`~fleetgnn.store.plan_partitioned`: each rank's shard
            holds the hottest rows of its own part within ``device_budget``, the host tier the
            next-hottest within ``host_budget``): input rows from the owner's shard are
            ``local``, from the host tier ``h2d``, the others ``disk``; per layer the rows the
            forward shuffle sends: the partial sums per (destination, sending rank) of the edges
            that cross splits (pre-aggregation) and the source rows per (source, destination rank)
            (the halo path of edge-weighted aggregation)
==========  =====================================================================================

A temporal task (:class:`~fleetgnn.cost.workload.TemporalSeeds`, ``temporal=``) is replayed as its
engines train it: the steps' seeds are the task's (training nodes at their node times; a link
batch's endpoints and negatives at their positives' times, distinct ``(node, time)`` pairs) and a
:class:`~fleetgnn.sampling.TemporalSampler` with the run's keys and strategy samples each seed's
own subtree (no deduplication across seeds, only in-edges before the seed's time), through the
same metered store reads (its candidate counts look up each node's ``indptr``, 16 bytes).

The gradient all-reduce and the shuffles' widths depend on the model; the cost models
(:mod:`fleetgnn.cost.models`) add them. A replay of a large epoch (more sampled edges than
``max_edges``) draws only the first ``presample_steps`` steps of every rank and scales them to the
epoch (``exact`` is then ``False``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.config.units import UNLIMITED
from fleetgnn.cost.workload import TemporalSeeds
from fleetgnn.graph import Graph
from fleetgnn.graph.compact_rows import stored_row_bytes
from fleetgnn.partition import partition
from fleetgnn.sampling import Block, GraphTopology, NeighborSampler, SeedLoader, TemporalSampler
from fleetgnn.sampling.presample import presample_edge_counts as presampled_edge_counts
from fleetgnn.sampling.presample import presample_hotness as presampled_ranking
from fleetgnn.store import SOURCE_LINKS, plan_partitioned
from fleetgnn.store.device_topology import resolve_placement
from fleetgnn.store.edge_table import edge_row_bytes, plan_edge_rows, split_budgets
from fleetgnn.store.hotness import HotnessRanking, hotness_order
from fleetgnn.store.tiers import DEVICE, HOST, TierBudgets, TierPlan, plan_store

#: Link kinds the store serves from, in the order of :data:`~fleetgnn.store.SOURCE_LINKS`.
STORE_LINKS: tuple[str, ...] = tuple(SOURCE_LINKS.values())
_LOCAL, _PEER, _NET, _H2D, _DISK = range(5)
#: Sampled edges per epoch (all ranks) above which the replay presamples instead of counting.
EXACT_EDGES = 10_000_000
#: Steps per rank the presampled replay draws.
PRESAMPLE_STEPS = 4
#: Bytes the store records per node looked up: its two ``indptr`` entries.
_INDPTR_BYTES = 16


@dataclasses.dataclass(frozen=True)
class SampledCounts:
    """One epoch of a mini-batch engine, counted by replaying its samples.

    Attributes:
        steps: Steps per epoch (every rank runs them all).
        replayed: Steps replayed per rank (``steps`` when exact).
        exact: Whether every step of every rank was replayed.
        loads: Bytes the engine reads per link kind over the epoch, summed over ranks (store
            reads for ``minibatch``, input rows for ``split``).
        input_rows: Input rows per step and rank (mean).
        edges: Sampled edges per step and rank (mean; ``split``: of the global sample).
        nodes: Block source rows per step and rank, summed over layers (mean).
        max_input_rows: The largest step's input rows on one rank.
        max_edges: The largest step's sampled edges on one rank.
        max_nodes: The largest step's block source rows on one rank, summed over layers.
        layer_edges: Sampled edges per step and rank of each block (mean; input layer first).
        shuffle_rows: ``split`` only: rows the forward shuffle of each layer sends over the
            epoch, summed over ranks: ``(pre-aggregation, halo)`` per layer.
        device_bytes: Bytes each rank's store shard holds (node and edge rows).
        host_bytes: Bytes of the store's host tier (one per host; node and edge rows).
        disk_bytes: Bytes left on disk (``split``: feature rows only).
        edge_loads: Of ``loads``, the edge rows' bytes per link kind (``{}``: no edge rows).
        edge_device_bytes: Of ``device_bytes``, the edge table's shard on each rank.
        edge_host_bytes: Of ``host_bytes``, the edge table's host tier.
    """

    steps: int
    replayed: int
    exact: bool
    loads: dict[str, int]
    input_rows: float
    edges: float
    nodes: float
    max_input_rows: int
    max_edges: int
    max_nodes: int
    layer_edges: tuple[float, ...] = ()
    shuffle_rows: tuple[tuple[int, int], ...] = ()
    device_bytes: tuple[int, ...] = ()
    host_bytes: int = 0
    disk_bytes: int = 0
    edge_loads: dict[str, int] = dataclasses.field(default_factory=dict)
    edge_device_bytes: tuple[int, ...] = ()
    edge_host_bytes: int = 0


class _Tally:
    """Per-step sample sizes, and the scale from the replayed steps to the epoch."""

    def __init__(self) -> None:
        self.n = 0
        self.rows = self.edges = self.nodes = 0
        self.max_rows = self.max_edges = self.max_nodes = 0
        self.layer_edges: np.ndarray | None = None

    def add(self, blocks: list[Block]) -> None:
        rows = int(blocks[0].num_src)
        edges = sum(int(b.indices.numel()) for b in blocks)
        nodes = sum(int(b.num_src) for b in blocks)
        self.n += 1
        self.rows += rows
        self.edges += edges
        self.nodes += nodes
        self.max_rows = max(self.max_rows, rows)
        self.max_edges = max(self.max_edges, edges)
        self.max_nodes = max(self.max_nodes, nodes)
        per = np.array([int(b.indices.numel()) for b in blocks], dtype=np.int64)
        self.layer_edges = per if self.layer_edges is None else self.layer_edges + per

    def counts(self, steps: int, replayed: int) -> dict[str, Any]:
        """The :class:`SampledCounts` fields of the sample sizes: means and maxima per step."""
        k = max(self.n, 1)
        per = () if self.layer_edges is None else tuple(float(e) / k for e in self.layer_edges)
        return {
            "steps": steps,
            "replayed": replayed,
            "exact": replayed == steps,
            "input_rows": self.rows / k,
            "edges": self.edges / k,
            "nodes": self.nodes / k,
            "max_input_rows": self.max_rows,
            "max_edges": self.max_edges,
            "max_nodes": self.max_nodes,
            "layer_edges": per,
        }


def _link_codes(tp: TierPlan, ids: np.ndarray, rank: int, hosts: np.ndarray) -> np.ndarray:
    """The link (index into :data:`STORE_LINKS`) rank ``rank`` reads each row of ``ids`` over."""
    tier, owner, _ = tp.locate(ids, rank)
    code = np.full(ids.size, _DISK, dtype=np.int64)
    code[tier == HOST] = _H2D
    dev = np.flatnonzero(tier == DEVICE)
    own = owner[dev]
    here = hosts[own] == hosts[rank]
    code[dev] = np.where(own == rank, _LOCAL, np.where(here, _PEER, _NET))
    return code


class _MeteredTopology:
    """The topology reads rank ``rank`` makes through the store, counted per link kind.

    A :class:`~fleetgnn.sampling.TopologySource` answering from the graph's arrays and adding the
    bytes :class:`~fleetgnn.store.UnifiedStore` would record for the same call to ``counts``:
    16 bytes per node looked up (its ``indptr`` entries), plus the index (and weight) of every
    entry read, each at the link of the node's segment.
    """

    def __init__(
        self, graph: Graph, tp: TierPlan, rank: int, hosts: np.ndarray, counts: np.ndarray
    ) -> None:
        self._inner = GraphTopology(graph)
        self._tp, self._rank, self._hosts = tp, rank, hosts
        self._counts = counts
        #: Whether reads are counted (off while a sampler reads its setup, as the engines
        #: build theirs before their meters count).
        self.metering = True
        self._index = int(graph.indices.dtype.itemsize)
        ew = graph.edge_weight
        self._weight = 0 if ew is None else int(ew.dtype.itemsize)

    @property
    def num_nodes(self) -> int:
        """Number of nodes ``N``."""
        return self._inner.num_nodes

    @property
    def has_edge_weight(self) -> bool:
        """Whether the graph carries edge weights."""
        return self._inner.has_edge_weight

    def _charge(self, ids: Tensor, nbytes: int, per: np.ndarray | None = None) -> None:
        idn = ids.cpu().numpy().astype(np.int64, copy=False)
        if idn.size == 0 or not self.metering:
            return
        code = _link_codes(self._tp, idn, self._rank, self._hosts)
        w = None if per is None else per.astype(np.float64)
        self._counts += (np.bincount(code, weights=w, minlength=5) * nbytes).astype(np.int64)

    def in_degree(self, ids: Tensor) -> Tensor:
        """In-degree of each node in ``ids`` (16 bytes per node)."""
        self._charge(ids, _INDPTR_BYTES)
        return self._inner.in_degree(ids)

    def neighbors_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """The ``offsets``-th in-neighbour of each ID (16 bytes + one index per ID)."""
        self._charge(ids, _INDPTR_BYTES + self._index)
        return self._inner.neighbors_at(ids, offsets)

    def edge_weight_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """The weight of the ``offsets``-th in-edge of each ID (16 bytes + one weight per ID)."""
        self._charge(ids, _INDPTR_BYTES + self._weight)
        return self._inner.edge_weight_at(ids, offsets)

    def all_neighbors(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """Every in-neighbour of each ID (16 bytes per ID + one index per neighbour)."""
        counts, nbrs = self._inner.all_neighbors(ids)
        self._charge(ids, _INDPTR_BYTES)
        self._charge(ids, self._index, per=counts.numpy())
        return counts, nbrs

    def edge_ids_at(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """``indptr[ids] + offsets``: each in-edge's CSC position (uncharged, as the store's).

        The temporal sampler's edge times are read at these positions.
        """
        return self._inner.edge_ids_at(ids, offsets)


class _Steps:
    """One rank's steps as its engine draws them: the seeds, and the sampler's blocks.

    Plain node tasks: the :class:`~fleetgnn.sampling.SeedLoader` slots of the training nodes,
    sampled by a :class:`~fleetgnn.sampling.NeighborSampler`. Temporal tasks (``temporal``):
    the task's timed seeds, sampled by a :class:`~fleetgnn.sampling.TemporalSampler` with the
    run's strategy over the graph's edge times.
    """

    def __init__(
        self,
        graph: Graph,
        topology: Any,
        fanouts: tuple[int, ...],
        *,
        batch_size: int,
        rank: int,
        world: int,
        seed: int,
        shuffle: bool = True,
        temporal: TemporalSeeds | None = None,
        with_edge_ids: bool = False,
    ) -> None:
        self.batch_size, self.rank, self.world = batch_size, rank, world
        self.temporal = temporal
        if temporal is None:
            train_ids = torch.from_numpy(np.flatnonzero(np.asarray(graph.train_mask)))
            self.loader = SeedLoader(
                train_ids, batch_size, rank=rank, world_size=world, seed=seed, shuffle=shuffle
            )
            self.num_steps = self.loader.num_batches
            self.sampler: Any = NeighborSampler(
                topology, list(fanouts), seed=seed, with_edge_ids=with_edge_ids
            )
        else:
            if temporal.graph.num_nodes != graph.num_nodes or graph.edge_time is None:
                raise ValueError(
                    "a temporal replay samples the graph its seeds are for, with edge times"
                )
            self.num_steps = temporal.num_steps(batch_size, world)
            metered = getattr(topology, "metering", None)
            if metered is not None:  # its edge count, read once when it is built
                topology.metering = False
            self.sampler = TemporalSampler(
                topology,
                list(fanouts),
                seed=seed,
                edge_time=np.asarray(graph.edge_time),
                strategy=temporal.strategy,  # type: ignore[arg-type]
                validate=False,  # the graph format checked the order
                with_edge_ids=with_edge_ids,
            )
            if metered is not None:
                topology.metering = metered

    def blocks(self, epoch: int, step: int, stream: int) -> list[Block]:
        """The blocks of step ``(epoch, step)``, sampled with ``stream``."""
        if self.temporal is None:
            seeds, times = self.loader.batch(epoch, step), None
        else:
            seeds, times = self.temporal.seeds(self.batch_size, self.rank, self.world, epoch, step)
        sample = self.sampler.sample_from_nodes(
            seeds, seed_time=times, epoch=epoch, step=step, stream=stream
        )
        return list(sample.blocks)


def _train_ids(graph: Graph) -> torch.Tensor:
    return torch.from_numpy(np.flatnonzero(np.asarray(graph.train_mask)))


def presample_hotness(
    graph: Graph, batch_size: int, fanouts: tuple[int, ...], seed: int, batches: int = 8
) -> HotnessRanking:
    """The ``minibatch`` engine's ``placement="presample"`` ranking (the same draws)."""
    return presampled_ranking(graph, _train_ids(graph), batch_size, fanouts, seed, batches)


def presample_edge_counts(
    graph: Graph, batch_size: int, fanouts: tuple[int, ...], seed: int, batches: int = 8
) -> np.ndarray:
    """The ``minibatch`` engine's pre-sampled reads of each edge (int64 ``[E]``).

    Its edge hot order's ``counts`` with ``placement="presample"``: the draws of
    :func:`presample_hotness`, with their edge IDs.
    """
    return presampled_edge_counts(graph, _train_ids(graph), batch_size, fanouts, seed, batches)


def _row_bytes(graph: Graph, feature_dtype: str | None) -> int:
    """Bytes of one feature row as the store holds it (0 without features)."""
    return stored_row_bytes(graph.x, feature_dtype)


def _replayed_steps(
    steps: int, world: int, first_edges: int, max_edges: int, presample_steps: int
) -> int:
    """Steps per rank to replay: all of them, or a prefix when the epoch is too large."""
    if first_edges * steps * world <= max_edges:
        return steps
    return max(1, min(steps, presample_steps))


def minibatch_counts(
    graph: Graph,
    world: int,
    *,
    batch_size: int,
    fanouts: tuple[int, ...],
    seed: int = 0,
    epoch: int = 0,
    device_budget: int,
    host_budget: int,
    placement: str = "degree",
    order: str = "graph_first",
    topology: Any = None,
    ranks_per_host: int | None = None,
    max_edges: int = EXACT_EDGES,
    presample_steps: int = PRESAMPLE_STEPS,
    feature_dtype: str | None = None,
    temporal: TemporalSeeds | None = None,
    edge_rows: bool = False,
    edge_feature_dtype: str | None = None,
    edge_share: float | None = None,
) -> SampledCounts:
    """Replay one epoch of the ``minibatch`` engine: store reads per link kind, store memory.

    Every rank ``r`` (``W = world``) takes its slots of the shuffled training nodes
    (``SeedLoader(batch_size, rank=r, world_size=W, seed=seed)``), samples with
    ``stream=r`` through the store of plan ``plan_store(graph, budgets, W, ...)`` and gathers
    ``blocks[0].src_ids``; ranks ``[h * ranks_per_host, (h + 1) * ranks_per_host)`` share host
    ``h``.

    Args:
        graph: The dataset.
        world: Ranks ``W``.
        batch_size: Seeds per rank per step.
        fanouts: Neighbours per hop.
        seed: The run's seed.
        epoch: Which epoch to replay (the shuffle and the samples are keyed by it).
        device_budget: Device bytes per rank.
        host_budget: Host bytes per host.
        placement: ``"degree"`` or ``"presample"``.
        order: ``"graph_first"`` or ``"features_first"``.
        topology: The store's device topology (``store.topology``).
        ranks_per_host: Ranks per host (default: all on one host).
        max_edges: Sampled edges per epoch above which only a prefix of steps is replayed.
        presample_steps: The prefix's length per rank.
        feature_dtype: ``store.feature_dtype``: the tiers and the loads count the stored
            row's bytes (:meth:`~fleetgnn.graph.compact.FeatureCodec.row_bytes`).
        temporal: A temporal task's seeds (``graph`` is then ``temporal.graph``): rank ``r``'s
            steps are ``temporal.seeds(batch_size, r, W, epoch, step)``, sampled in time
            (module docstring); ``None``: the training nodes, sampled plainly.
        edge_rows: The model reads edge features and ``graph`` has ``edge_attr``: the budgets
            are split between node and edge rows (``edge_share``; ``None``: by bytes), the
            edge rows planned as the engine's edge table and read once per sampled edge.
        edge_feature_dtype: ``store.edge_feature_dtype``: the edge rows' stored bytes.
        edge_share: ``store.edge_share``.
    """
    rph = world if ranks_per_host is None else max(1, min(int(ranks_per_host), world))
    hosts = np.arange(world, dtype=np.int64) // rph
    hot = (
        presample_hotness(graph, batch_size, fanouts, seed)
        if placement == "presample"
        else hotness_order(graph, "degree")
    )
    placed = None if topology is None else resolve_placement(topology, world)
    budgets = TierBudgets(int(device_budget), int(host_budget))
    edges = edge_rows and graph.edge_attr is not None
    split = None
    if edges:  # the engine's split of its budgets between node rows and edge rows
        split = split_budgets(
            budgets,
            graph,
            edge_share,
            feature_dtype=feature_dtype,
            edge_feature_dtype=edge_feature_dtype,
        )
        budgets = split.nodes
    plan = plan_store(
        graph,
        budgets,
        world,
        hotness=hot,
        order=order,  # type: ignore[arg-type]
        ranks_per_host=rph,
        placement=placed,
        feature_dtype=feature_dtype,
    )
    fp = plan.features
    # a node row's bytes per link kind: the tiers hold stored rows, disk reads the dataset's own
    row = np.full(5, _row_bytes(graph, feature_dtype), dtype=np.int64)
    row[_DISK] = _row_bytes(graph, None)
    ep: TierPlan | None = None
    erow = np.zeros(5, dtype=np.int64)  # an edge row's bytes per link kind
    if split is not None:  # the edge table, as the engine builds it (EdgeTable.build)
        ep = plan_edge_rows(
            graph,
            split.edges,
            world,
            node_order=plan.topology.order,
            fanout=-1 if -1 in fanouts else max(int(f) for f in fanouts),
            counts=presample_edge_counts(graph, batch_size, fanouts, seed)
            if placement == "presample"
            else None,
            feature_dtype=edge_feature_dtype,
        )
        # the tiers hold stored rows; the disk tier reads the dataset's own (compact or not)
        erow[:] = edge_row_bytes(graph, edge_feature_dtype)
        erow[_DISK] = edge_row_bytes(graph)
    counts = np.zeros(5, dtype=np.int64)
    edge_counts = np.zeros(5, dtype=np.int64)
    tally = _Tally()
    steps = replayed = 0
    for r in range(world):
        topo = _MeteredTopology(graph, plan.topology, r, hosts, counts)
        drawn = _Steps(
            graph,
            topo,
            fanouts,
            batch_size=batch_size,
            rank=r,
            world=world,
            seed=seed,
            temporal=temporal,
            with_edge_ids=ep is not None,
        )
        steps = drawn.num_steps
        s = 0
        while s < (replayed or steps):
            blocks = drawn.blocks(epoch, s, stream=r)
            if not replayed:  # the first step decides how many to replay
                first = sum(int(b.indices.numel()) for b in blocks)
                replayed = _replayed_steps(steps, world, first, max_edges, presample_steps)
            tally.add(blocks)
            ids = blocks[0].src_ids.numpy()
            if fp is not None and ids.size:
                code = _link_codes(fp, ids, r, hosts)
                counts += np.bincount(code, minlength=5) * row
            if ep is not None:  # one edge row per sampled edge of every block
                for b in blocks:
                    eids = b.edge_ids.cpu().numpy().astype(np.int64, copy=False)
                    if eids.size:
                        code = _link_codes(ep, eids, r, hosts)
                        edge_counts += np.bincount(code, minlength=5) * erow
            s += 1
    scale = steps / replayed
    counts += edge_counts
    loads = {link: int(round(int(counts[i]) * scale)) for i, link in enumerate(STORE_LINKS)}
    disk = plan.topology.disk_bytes + (fp.disk_bytes if fp is not None else 0)
    device = plan.device_bytes()
    host = int(plan.host_bytes())
    extra: dict[str, Any] = {}
    if ep is not None:
        disk += ep.disk_bytes
        device = device + ep.device_bytes
        host += int(ep.host_bytes)
        extra = {
            "edge_loads": {
                link: int(round(int(edge_counts[i]) * scale)) for i, link in enumerate(STORE_LINKS)
            },
            "edge_device_bytes": tuple(int(b) for b in ep.device_bytes),
            "edge_host_bytes": int(ep.host_bytes),
        }
    return SampledCounts(
        **tally.counts(steps, replayed),
        loads=loads,
        device_bytes=tuple(int(b) for b in device),
        host_bytes=host,
        disk_bytes=int(disk),
        **extra,
    )


def split_owner(graph: Graph, method: str, world: int, seed: int = 0) -> np.ndarray:
    """The ``split`` engine's owner of every node: its offline partition's part."""
    if world == 1:
        return np.zeros(graph.num_nodes, dtype=np.int64)
    return np.asarray(partition(graph, method, world, seed=seed).part_of, dtype=np.int64)


def _unique_pairs(major: np.ndarray, minor: np.ndarray, span: int) -> int:
    """Number of distinct ``(major, minor)`` pairs, ``0 <= minor < span``."""
    if major.size == 0:
        return 0
    return int(np.unique(major * span + minor).size)


def split_counts(
    graph: Graph,
    world: int,
    *,
    batch_size: int,
    fanouts: tuple[int, ...],
    seed: int = 0,
    epoch: int = 0,
    partition_method: str = "metis",
    device_budget: int | None = None,
    host_budget: int | None = None,
    hotness: HotnessRanking | None = None,
    owner: np.ndarray | None = None,
    max_edges: int = EXACT_EDGES,
    presample_steps: int = PRESAMPLE_STEPS,
    feature_dtype: str | None = None,
    temporal: TemporalSeeds | None = None,
) -> SampledCounts:
    """Replay one epoch of the ``split`` engine: input rows per tier, shuffle rows per layer.

    One global sample per step (``SeedLoader(batch_size, seed=seed)``, ``stream=0``); the rows
    of ``blocks[0]`` are loaded once each, by their owner, through the engine's store plan
    (:func:`~fleetgnn.store.plan_partitioned`): from its own shard (``local``), the host tier
    (``h2d``) or disk. Layer ``l`` shuffles, for every edge whose source and destination
    have different owners, one partial sum per distinct (destination, source owner) pair (sum and
    mean aggregation) or one source row per distinct (source, destination owner) pair (the halo
    path). ``input_rows``/``edges``/``nodes`` are the global sample's (every rank draws it).

    Args:
        graph: The dataset.
        world: Ranks ``W``.
        batch_size: Seeds per step (the global batch).
        fanouts: Neighbours per hop.
        seed: The run's seed (batches, samples and the partition).
        epoch: Which epoch to replay.
        partition_method: The engine's ``partition``.
        device_budget: Device bytes per rank (``None``: its whole part).
        host_budget: Host-tier bytes per host (``None``: every other row).
        hotness: The store's ranking (default: by degree, the engine's ``placement=degree``).
        owner: The owner of every node (default: :func:`split_owner`).
        max_edges: Sampled edges per epoch above which only a prefix of steps is replayed.
        presample_steps: The prefix's length.
        feature_dtype: ``store.feature_dtype``: the shards and the loads count the stored
            row's bytes.
        temporal: A temporal task's seeds (``graph`` is then ``temporal.graph``): the global
            step is ``temporal.seeds(batch_size, 0, 1, epoch, step)``, sampled in time with
            stream 0, as every rank draws the reference's step; its blocks' rows are
            ``(seed, node)`` pairs, so the shuffles count copies of a node apart.
    """
    own = split_owner(graph, partition_method, world, seed) if owner is None else owner
    # the tiers hold stored rows; a disk row is read as the dataset stores it
    row = {"local": _row_bytes(graph, feature_dtype), "h2d": _row_bytes(graph, feature_dtype)}
    row["disk"] = _row_bytes(graph, None)
    fp: TierPlan | None = None
    if graph.x is not None:
        budgets = TierBudgets(
            UNLIMITED if device_budget is None else int(device_budget),
            UNLIMITED if host_budget is None else int(host_budget),
        )
        fp = plan_partitioned(
            graph, own, budgets, world, hotness=hotness, feature_dtype=feature_dtype
        ).features
    tiers = np.zeros(3, dtype=np.int64)  # input rows from the device, host and disk tiers
    drawn = _Steps(
        graph,
        GraphTopology(graph),
        fanouts,
        batch_size=batch_size,
        rank=0,
        world=1,
        seed=seed,
        temporal=temporal,
    )
    steps = drawn.num_steps
    layers = len(fanouts)
    pre = np.zeros(layers, dtype=np.int64)
    halo = np.zeros(layers, dtype=np.int64)
    tally = _Tally()
    replayed = 0
    s = 0
    while s < (replayed or steps):
        blocks = drawn.blocks(epoch, s, stream=0)
        if not replayed:
            first = sum(int(b.indices.numel()) for b in blocks)
            replayed = _replayed_steps(steps, 1, first, max_edges, presample_steps)
        tally.add(blocks)
        if fp is not None:  # a device row is on its owner's shard: the owner loads it
            tier, _, _ = fp.locate(blocks[0].src_ids.numpy().astype(np.int64))
            tiers += np.bincount(tier, minlength=3)
        if world > 1:
            for i, b in enumerate(blocks):
                indptr = b.indptr.numpy().astype(np.int64, copy=False)
                spos = b.indices.numpy().astype(np.int64, copy=False)
                dpos = np.repeat(np.arange(b.num_dst, dtype=np.int64), np.diff(indptr))
                o = own[b.src_ids.numpy()]
                eo_dst, eo_src = o[dpos], o[spos]
                cross = eo_dst != eo_src
                pre[i] += _unique_pairs(dpos[cross], eo_src[cross], world)
                halo[i] += _unique_pairs(spos[cross], eo_dst[cross], world)
        s += 1
    scale = steps / replayed
    return SampledCounts(
        **tally.counts(steps, replayed),
        loads={
            link: int(round(int(c) * row[link] * scale))
            for link, c in zip(("local", "h2d", "disk"), tiers.tolist(), strict=True)
            if c or link != "disk"
        },
        shuffle_rows=tuple(
            (int(round(int(p) * scale)), int(round(int(h) * scale)))
            for p, h in zip(pre, halo, strict=True)
        ),
        device_bytes=(0,) * world if fp is None else tuple(int(b) for b in fp.device_bytes),
        host_bytes=0 if fp is None else int(fp.host_bytes),
        disk_bytes=0 if fp is None else int(fp.disk_bytes),
    )


__all__ = [
    "EXACT_EDGES",
    "PRESAMPLE_STEPS",
    "STORE_LINKS",
    "SampledCounts",
    "minibatch_counts",
    "presample_edge_counts",
    "presample_hotness",
    "split_counts",
    "split_owner",
]
