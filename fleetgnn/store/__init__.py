"""Store layer: the unified feature + topology store across device, host and disk tiers.

Placement (hotness ranking, tier plans, XGNN's placement solver) lives in
:mod:`fleetgnn.store.placement`; the store itself in :mod:`fleetgnn.store.store`; PyG
``FeatureStore``/``GraphStore`` adapters in :mod:`fleetgnn.store.pyg` (optional dependency).
"""

from fleetgnn.store.placement import (
    TOPOLOGIES,
    HotnessRanking,
    PlacementPlan,
    StorePlan,
    TierBudgets,
    TierPlan,
    feature_row_bytes,
    hotness_order,
    parse_bytes,
    plan_store,
    plan_tiers,
    resolve_placement,
    solve_placement,
    topology_matrix,
    topology_row_bytes,
)
from fleetgnn.store.store import KINDS, SOURCE_LINKS, SOURCES, UnifiedStore

__all__ = [
    "KINDS",
    "SOURCES",
    "SOURCE_LINKS",
    "HotnessRanking",
    "PlacementPlan",
    "StorePlan",
    "TOPOLOGIES",
    "TierBudgets",
    "TierPlan",
    "UnifiedStore",
    "feature_row_bytes",
    "hotness_order",
    "parse_bytes",
    "plan_store",
    "plan_tiers",
    "resolve_placement",
    "solve_placement",
    "topology_matrix",
    "topology_row_bytes",
]
