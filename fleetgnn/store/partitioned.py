"""Partition-aware placement: each rank's device shard holds the hottest rows of its own part.

A split-parallel engine (``split``, GSplit) loads every input row on the rank that owns it by an
offline partition, so a row in another rank's shard would never be read as a hit by its reader.
:func:`plan_partitioned` plans the store's features for that access pattern: rank ``r``'s shard
holds the hottest rows (by the store's hotness ranking) of the nodes ``owner[v] == r``, as many as
its device budget holds; the host tier the next-hottest rows of all parts, one copy per host, up
to the host budget; the rest stays on disk. The topology is not placed (all on disk): the engine
samples from its own view of the graph.

The plan's hot order puts the device rows first, rank by rank, then every other row in hotness
order, and its feature :class:`~fleetgnn.store.tiers.TierPlan` uses the block layout
(``device_starts``) instead of the modulo split, so the parts' shards may differ in size
(a part smaller than the budget holds all its rows, an empty part none):

==========================================  ===========  ==================================
hot rank ``k``                              tier         where
==========================================  ===========  ==================================
``[starts[r], starts[r + 1])``              device       rank ``r``'s shard, row
                                                         ``k - starts[r]``
``[H, H + H_host)``, ``H = starts[N]``      host         host tier row ``k - H``
the rest                                    disk         the dataset's arrays
==========================================  ===========  ==================================

``starts[r + 1] - starts[r] = min(|part r|, device_budget // (F * itemsize))``. Reads go through
:meth:`UnifiedStore.gather <fleetgnn.store.UnifiedStore.gather>` unchanged (build the store with
``plan=``): a rank reading its own part's rows finds them in its own shard (``local``) or the host
tier or disk, never in a peer's shard.
"""

from __future__ import annotations

import numpy as np

from fleetgnn.config.topology import check_world
from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.graph.csc import Graph
from fleetgnn.store.hotness import HotnessRanking, hotness_order, inverse_order, ranking_array
from fleetgnn.store.tiers import StorePlan, TierBudgets, TierPlan, feature_row_bytes

__all__ = ["plan_partitioned"]

#: Hot ranks handled per step while picking the device rows and writing the order.
_BLOCK = 1 << 17


def _check_owner(owner: object, num_nodes: int, world_size: int) -> np.ndarray:
    own = np.asarray(owner)
    if own.shape != (num_nodes,) or own.dtype.kind not in "iu":
        raise ConfigError(
            f"'owner' must be an integer array with one part per node, shape ({num_nodes},) "
            f"(got {own.dtype} with shape {own.shape}); pass the partition book's part_of"
        )
    if num_nodes and (int(own.min()) < 0 or int(own.max()) >= world_size):
        bad = int(own.min()) if int(own.min()) < 0 else int(own.max())
        raise ConfigError(
            f"'owner' holds part {bad}, outside [0, {world_size}); the partition must have one "
            f"part per rank"
        )
    return own


def _device_rows(
    order: np.ndarray, owner: np.ndarray, need: np.ndarray, world_size: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """The first ``need[r]`` nodes of ``order`` owned by each rank, and their hot ranks (sorted).

    Walks the order in blocks until every rank has its rows; per block one stable sort by owner.
    """
    picked: list[list[np.ndarray]] = [[] for _ in range(world_size)]
    taken: list[np.ndarray] = []
    left = need.astype(np.int64, copy=True)
    for a in range(0, order.size, _BLOCK):
        if not left.any():
            break
        ids = order[a : a + _BLOCK]
        o = owner[ids]
        by_owner = np.argsort(o, kind="stable")  # hot order within each owner
        bounds = np.searchsorted(o[by_owner], np.arange(world_size + 1))
        for r in np.flatnonzero(left).tolist():  # loop over ranks; rows are vectorised
            pos = by_owner[bounds[r] : bounds[r + 1]][: left[r]]
            picked[r].append(ids[pos])
            taken.append(pos.astype(np.int64) + a)
            left[r] -= pos.size
    rows = [np.concatenate(p) if p else order[:0] for p in picked]
    hot = np.sort(np.concatenate(taken)) if taken else np.zeros(0, np.int64)
    return rows, hot


def plan_partitioned(
    graph: Graph,
    owner: np.ndarray,
    budgets: TierBudgets,
    world_size: int,
    *,
    hotness: HotnessRanking | None = None,
    ranks_per_host: int | None = None,
    feature_dtype: str | None = None,
) -> StorePlan:
    """Plan ``graph``'s features so that rank ``r``'s shard holds its own part's hottest rows.

    Deterministic (every rank computes the same plan without communicating). Pass the result as
    ``plan=`` to :meth:`UnifiedStore.build <fleetgnn.store.UnifiedStore.build>`. Memory: the
    plan's ``order`` and ``rank_of`` (one ID per node each, as every store plan), and the
    device rows' IDs.

    Args:
        graph: The graph (with features ``x``).
        owner: ``[N]`` int part of every node, in ``[0, world_size)`` (``book.part_of``).
        budgets: Feature bytes per rank on the device (``device``), per host on the host tier
            (``host``).
        world_size: Ranks ``N`` (one part each).
        hotness: The ranking rows are taken in (default :func:`hotness_order` by degree).
        ranks_per_host: Ranks sharing one host copy (recorded in the plan).
        feature_dtype: How feature rows are stored (``store.feature_dtype``): budgets count
            their stored bytes (:func:`~fleetgnn.store.tiers.feature_row_bytes`).

    Returns:
        A :class:`StorePlan` whose features use the block layout (``device_starts``) and whose
        topology is all on disk.

    Raises:
        ConfigError: On a bad world size, owner array or ranking.
        GraphError: If the graph has no features.
    """
    world_size, rph = check_world(world_size, ranks_per_host)
    budgets = TierBudgets.check(budgets, none_is_default=False)
    if graph.x is None:
        raise GraphError("the graph has no node features 'x'; a partitioned plan places features")
    n = graph.num_nodes
    own = _check_owner(owner, n, world_size)
    rank = hotness_order(graph) if hotness is None else hotness
    if rank.order.shape != (n,):
        raise ConfigError(
            f"'hotness' ranks {rank.order.size} nodes but the graph has {n}; compute it with "
            "hotness_order(graph, ...)"
        )
    rb = feature_row_bytes(graph, feature_dtype)
    sizes = np.bincount(own, minlength=world_size).astype(np.int64)
    cap = budgets.device // rb if rb else n
    need = np.minimum(sizes, cap)
    rows, taken = _device_rows(rank.order, own, need, world_size)
    starts = np.zeros(world_size + 1, np.int64)
    np.cumsum(need, out=starts[1:])
    num_dev = int(starts[-1])
    num_host = min(budgets.host // rb if rb else n, n - num_dev)
    order = ranking_array(n, rank.order.dtype)
    if num_dev:
        order[:num_dev] = np.concatenate(rows)
    at = num_dev
    for a in range(0, n, _BLOCK):  # the other rows in hot order, the device rows left out
        blk = rank.order[a : a + _BLOCK]
        lo, hi = np.searchsorted(taken, [a, a + blk.size])
        if hi > lo:
            keep = np.ones(blk.size, dtype=bool)
            keep[taken[lo:hi] - a] = False
            blk = blk[keep]
        order[at : at + blk.size] = blk
        at += blk.size
    rank_of = inverse_order(order)
    features = TierPlan(
        kind="features",
        order=order,
        rank_of=rank_of,
        world_size=world_size,
        num_device=num_dev,
        num_host=int(num_host),
        device_bytes=need * rb,
        host_bytes=int(num_host) * rb,
        disk_bytes=(n - num_dev - int(num_host)) * rb,
        device_starts=starts,
    )
    per_edge = graph.indices.dtype.itemsize
    if graph.edge_weight is not None:
        per_edge += graph.edge_weight.dtype.itemsize
    edges = int(graph.indptr[n]) - int(graph.indptr[0])
    topology = TierPlan(
        kind="topology",
        order=order,
        rank_of=rank_of,
        world_size=world_size,
        num_device=0,
        num_host=0,
        device_bytes=np.zeros(world_size, np.int64),
        host_bytes=0,
        disk_bytes=8 * n + per_edge * edges,
    )
    return StorePlan(topology, features, budgets, "features_first", rph)
