"""Store layer: the unified feature + topology store across device, host and disk tiers.

Where rows go: hotness ranking in :mod:`fleetgnn.store.hotness`, tier plans in
:mod:`fleetgnn.store.tiers`, XGNN's placement solver in :mod:`fleetgnn.store.placement`, device
topologies (``store.topology``) in :mod:`fleetgnn.store.device_topology`; the store itself in
:mod:`fleetgnn.store.store`, per-type tables of typed graphs in :mod:`fleetgnn.store.keyed`, edge
rows keyed by edge ID in :mod:`fleetgnn.store.edge_table`; PyG
``FeatureStore``/``GraphStore`` adapters in :mod:`fleetgnn.store.pyg` (optional dependency);
the partition-aware placement of split-parallel engines in :mod:`fleetgnn.store.partitioned`.
"""

from fleetgnn.config.units import parse_bytes
from fleetgnn.store.device_topology import TOPOLOGIES, resolve_placement, topology_matrix
from fleetgnn.store.edge_table import BudgetSplit, EdgeTable, plan_edge_rows, split_budgets
from fleetgnn.store.hotness import HotnessRanking, hotness_order
from fleetgnn.store.keyed import KeyedPlan, KeyedStore, plan_keyed
from fleetgnn.store.partitioned import plan_partitioned
from fleetgnn.store.placement import PlacementPlan, solve_placement
from fleetgnn.store.store import KINDS, SOURCE_LINKS, SOURCES, UnifiedStore
from fleetgnn.store.tiers import (
    StorePlan,
    TierBudgets,
    TierPlan,
    feature_row_bytes,
    plan_store,
    plan_tiers,
    resolve_sampling,
    topology_row_bytes,
)

__all__ = [
    "KINDS",
    "SOURCES",
    "SOURCE_LINKS",
    "BudgetSplit",
    "EdgeTable",
    "HotnessRanking",
    "KeyedPlan",
    "KeyedStore",
    "PlacementPlan",
    "StorePlan",
    "TOPOLOGIES",
    "TierBudgets",
    "TierPlan",
    "UnifiedStore",
    "feature_row_bytes",
    "hotness_order",
    "parse_bytes",
    "plan_edge_rows",
    "plan_keyed",
    "plan_partitioned",
    "plan_store",
    "plan_tiers",
    "resolve_placement",
    "resolve_sampling",
    "solve_placement",
    "split_budgets",
    "topology_matrix",
    "topology_row_bytes",
]
