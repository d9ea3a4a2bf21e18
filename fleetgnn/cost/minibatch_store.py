"""The mini-batch engines' unified store for the cost models: its tiers and the bytes a step reads.

A graph known by its counts has its store modelled (:func:`modelled_store`: topology and
feature rows fill the device budgets, then the host's, in the store's order; reads served in
proportion to what each tier holds), or planned by XGNN's cache model (:func:`cached_store`);
the edge rows a model reads take their share of each tier as the engine's
:func:`~fleetgnn.store.edge_table.split_budgets` gives it (:func:`edge_split`,
:func:`edge_tiers`). :func:`store_loads` prices an epoch's reads per link kind.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from fleetgnn.config.units import parse_bytes
from fleetgnn.cost.store_model import plan_feature_cache
from fleetgnn.cost.workload import Workload
from fleetgnn.errors import ConfigError
from fleetgnn.store.edge_table import BudgetSplit, split_bytes
from fleetgnn.store.tiers import TierBudgets


def expected_unique(draws: float, population: float) -> float:
    """Expected distinct items in ``draws`` uniform draws from ``population`` items."""
    if population <= 0:
        return 0.0
    return population * (1.0 - math.exp(-draws / population))


#: Bytes of one feature element of a dataset known only by its shape (float32 datasets).
FEAT_ELEM = 4
#: Bytes the store records per node it looks up (two ``indptr`` entries).
LOOKUP = 16


def presample(wl: Workload, batch_size: int | None = None) -> dict[str, Any]:
    """One step's sample modelled from the counts (no dataset): rows and edges per hop.

    Every hop draws ``min(fanout, E / N)`` neighbours per frontier node (all for ``-1``); the
    new nodes of a hop are the distinct ones among its draws (uniform neighbours). With the
    dataset, the engines' own samples are replayed instead (:mod:`fleetgnn.cost.replay`).

    Returns:
        ``input_rows`` (rows of the first block), ``edges`` (sampled edges, all hops),
        ``nodes`` (block source rows summed over layers) and ``hop_edges`` (per block, input
        layer first, like the engines' ``blocks``).
    """
    frontier = float(batch_size if batch_size is not None else wl.batch_size)
    edges = nodes = 0.0
    hop_edges = []
    for f in wl.fanouts:  # hop 0 expands the seeds
        fan = wl.mean_degree if f < 0 else min(f, wl.mean_degree)
        e = frontier * fan
        hop_edges.append(e)
        edges += e
        frontier = min(frontier + expected_unique(e, wl.num_nodes), wl.num_nodes)
        nodes += frontier
    return {
        "input_rows": frontier,
        "edges": edges,
        "nodes": nodes,
        "hop_edges": hop_edges[::-1],
    }


def parse_budget(value: Any, default: int, name: str) -> int:
    """A byte budget knob (``"64MB"``, an int), ``default`` when ``None``."""
    return int(default) if value is None else parse_bytes(value, name)


def modelled_store(
    wl: Workload, world: int, device_budget: int, host_budget: int, order: str
) -> tuple[dict[str, tuple[float, float]], int, int, int]:
    """The store's tiers for a graph known by its counts (no dataset).

    Topology (``8 * N + index * E`` bytes) and features (``N * F * 4``) take the device
    budgets (``W * device_budget``) and then the host budget in ``order``; a kind's reads are
    served from each tier in proportion to the bytes it holds there (uniform access assumed).

    Returns:
        ``({kind: (device fraction, host fraction)}, device bytes per rank, host bytes, index
        bytes)``.
    """
    if order not in ("graph_first", "features_first"):
        raise ConfigError(f"order={order!r} is not one of graph_first, features_first")
    idx = 4 if wl.num_nodes < 2**31 else 8
    kinds = [
        ("topology", 8 * wl.num_nodes + idx * wl.num_edges),
        ("features", wl.num_nodes * wl.feature_row_bytes(FEAT_ELEM)),  # as stored
    ]
    if order == "features_first":
        kinds.reverse()
    dev_left, host_left = device_budget * world, host_budget
    fractions = {}
    for kind, size in kinds:
        on_dev = min(size, dev_left)
        on_host = min(size - on_dev, host_left)
        dev_left -= on_dev
        host_left -= on_host
        fractions[kind] = (on_dev / size, on_host / size) if size else (0.0, 0.0)
    return fractions, (device_budget * world - dev_left) // world, host_budget - host_left, idx


def xgnn_cache(
    wl: Workload, hw: Any, world: int, device_budget: Any, host_budget: int, order: Any
) -> Any:
    """:func:`~fleetgnn.cost.store_model.plan_feature_cache` for a graph known by its counts.

    The engine's ``batch_size`` is per rank; the store model's is global. ``None`` where the
    model refuses the workload (it says why in a :class:`ConfigError`; the caller then falls
    back to uniform access).
    """
    try:
        return plan_feature_cache(
            dataclasses.replace(wl, batch_size=wl.batch_size * world),
            hw,
            world,
            device_budget=None
            if device_budget is None
            else parse_budget(device_budget, 0, "device_budget"),
            host_budget=host_budget,
            order=order or None,
        )
    except ConfigError:
        return None


def cached_store(wl: Workload, cache: Any) -> tuple[dict[str, tuple[float, float]], int, int, int]:
    """:func:`modelled_store`'s tuple from XGNN's plan: device hits at its degree-skewed rates.

    A read the device misses goes to the host tier or disk in proportion to the bytes each
    holds of that kind (the host holds the next-hottest rows, so this overstates disk reads).
    """
    fractions = {}
    for kind, hit in (("features", cache.feature_hit), ("topology", cache.topology_hit)):
        host, disk = cache.host_bytes.get(kind, 0), cache.disk_bytes.get(kind, 0)
        on_host = (1.0 - hit) * (host / (host + disk) if host + disk else 1.0)
        fractions[kind] = (hit, on_host)
    idx = 4 if wl.num_nodes < 2**31 else 8
    return (
        fractions,
        int(sum(cache.device_bytes.values())),
        int(sum(cache.host_bytes.values())),
        idx,
    )


def edge_split(wl: Workload, budgets: TierBudgets) -> BudgetSplit:
    """The engine's split of ``budgets`` between node and edge rows, from the counts.

    :func:`~fleetgnn.store.edge_table.split_bytes` of the node store's bytes (``indptr``, one
    index per edge, the stored feature rows, as
    :func:`~fleetgnn.store.edge_table.node_store_bytes` counts them) and the edge rows'
    (``E`` rows of :meth:`~fleetgnn.cost.workload.Workload.edge_row_bytes`), by
    ``store.edge_share`` when given.
    """
    idx = 4 if wl.num_nodes < 2**31 else 8
    nodes = (
        8 * (wl.num_nodes + 1) + idx * wl.num_edges + wl.num_nodes * wl.feature_row_bytes(FEAT_ELEM)
    )
    return split_bytes(budgets, nodes, wl.num_edges * wl.edge_row_bytes(), wl.edge_share)


def edge_tiers(wl: Workload, world: int, budgets: TierBudgets) -> tuple[float, float, int, int]:
    """The edge table's tiers within its ``budgets``, for a graph known by its counts.

    As :func:`~fleetgnn.store.edge_table.plan_edge_rows` fills them: the longest prefix of rows
    dealt modulo ``world`` that fits every rank's device budget, then the host tier; reads are
    served in proportion to the rows each tier holds (uniform access assumed).

    Returns:
        ``(device fraction, host fraction, device bytes per rank, host bytes)``.
    """
    e, row = wl.num_edges, wl.edge_row_bytes()
    if not e or not row:
        return 0.0, 0.0, 0, 0
    on_dev = min(e, budgets.device // row * world)
    on_host = min(e - on_dev, budgets.host // row)
    return on_dev / e, on_host / e, -(-on_dev // world) * row, on_host * row


def store_loads(
    wl: Workload, world: int, per_host: int, steps: int, s: dict[str, Any], store: tuple
) -> dict[str, float]:
    """Store bytes per link kind of an epoch (all ranks), modelled (see :func:`modelled_store`).

    With an ``edges`` entry in the fractions, one edge row per sampled edge too; only the
    kinds ``fractions`` names are counted.
    """
    fractions, _, _, idx = store
    rows, edges = s["input_rows"], s["edges"]
    per_step = {
        "features": rows * wl.feature_row_bytes(FEAT_ELEM),  # stored bytes per row
        # the sampler looks up every seed, every sampled edge's destination and every new
        # node (edges + input rows lookups) and reads one index per sampled edge
        "topology": LOOKUP * (edges + rows) + idx * edges,
    }
    if "edges" in fractions:  # every sampled edge of a block reads its edge row
        per_step["edges"] = edges * wl.edge_row_bytes()
    loads = dict.fromkeys(("local", "peer", "net", "h2d", "disk"), 0.0)
    for kind, b in per_step.items():
        if kind not in fractions:
            continue
        total = b * steps * world
        on_dev, on_host = fractions[kind]
        dev = total * on_dev
        loads["local"] += dev / world
        loads["peer"] += dev * (per_host - 1) / world
        loads["net"] += dev * (world - per_host) / world
        loads["h2d"] += total * on_host
        loads["disk"] += total * max(0.0, 1.0 - on_dev - on_host)
    return loads
