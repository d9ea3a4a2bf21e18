"""Sampling layer: neighbour sampling (plain and temporal), AppendUnique, blocks, seed loaders."""

from fleetgnn.sampling.block import Block
from fleetgnn.sampling.hetero_temporal import TypedTemporalSample, TypedTemporalSampler
from fleetgnn.sampling.loader import PositionLoader, SeedLoader, keyed_positions
from fleetgnn.sampling.neighbor import (
    DeviceTopology,
    EdgeIdSource,
    GraphTopology,
    NeighborSampler,
    TopologySource,
    append_unique,
    edge_keys,
    full_neighbor_block,
    sample_neighbors,
    sample_neighbors_from,
)
from fleetgnn.sampling.temporal import (
    EdgeTimeArray,
    EdgeTimeSource,
    TemporalSample,
    TemporalSampler,
)

__all__ = [
    "Block",
    "DeviceTopology",
    "EdgeIdSource",
    "EdgeTimeArray",
    "EdgeTimeSource",
    "GraphTopology",
    "NeighborSampler",
    "PositionLoader",
    "SeedLoader",
    "TemporalSample",
    "TemporalSampler",
    "TopologySource",
    "TypedTemporalSample",
    "TypedTemporalSampler",
    "append_unique",
    "edge_keys",
    "full_neighbor_block",
    "keyed_positions",
    "sample_neighbors",
    "sample_neighbors_from",
]
