"""Device topologies as placement plans.

:func:`resolve_placement` solves a ``store.topology`` value (its matrix from
:func:`fleetgnn.config.topology.topology_matrix`, the one reader of the setting, torch-free so a
CLI refusal needs no torch) into the :class:`~fleetgnn.store.placement.PlacementPlan` the tier
plans apply.
"""

from __future__ import annotations

from fleetgnn.config.topology import (
    DGX1_V100_LINKS,
    TOPOLOGIES,
    TopologySpec,
    check_world,
    topology_matrix,
)
from fleetgnn.store.placement import PlacementPlan, check_placement, solve_placement

__all__ = [
    "DGX1_V100_LINKS",
    "TOPOLOGIES",
    "TopologySpec",
    "resolve_placement",
    "topology_matrix",
]


def resolve_placement(
    topology: TopologySpec | PlacementPlan, world_size: int, *, key: str = "store.topology"
) -> PlacementPlan:
    """The :class:`PlacementPlan` of a topology: :func:`solve_placement` of its matrix.

    Deterministic and local (no communication): every rank computing it from the same
    ``topology`` gets the same plan, so the ranks of a store agree without exchanging it.

    Args:
        topology: Anything :func:`topology_matrix` accepts, or a ready :class:`PlacementPlan`
            (checked against ``world_size``).
        world_size: Number of device ranks ``N``.
        key: The configuration key named in error messages.

    Returns:
        The plan; ``None`` / ``"uniform"`` give one partition per device
        (``stores[i] == (i,)``, ``sources[i][p] == p``).

    Raises:
        ConfigError: As :func:`topology_matrix`, or a plan for another number of devices.
    """
    if isinstance(topology, PlacementPlan):
        world_size, _ = check_world(world_size, None)
        check_placement(topology, world_size)
        return topology
    return solve_placement(topology_matrix(topology, world_size, key=key))
