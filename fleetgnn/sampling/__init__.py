"""Sampling layer: one sampler protocol (plain, temporal, typed), AppendUnique, blocks, loaders."""

from fleetgnn.sampling.base import (
    EdgeSample,
    NodeSample,
    Sampler,
    edge_seeds,
    pair_seeds,
    timed_seeds,
)
from fleetgnn.sampling.block import Block
from fleetgnn.sampling.hetero import HeteroNeighborSampler
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
    "EdgeSample",
    "EdgeTimeArray",
    "EdgeTimeSource",
    "GraphTopology",
    "HeteroNeighborSampler",
    "NeighborSampler",
    "NodeSample",
    "PositionLoader",
    "Sampler",
    "SeedLoader",
    "TemporalSample",
    "TemporalSampler",
    "TopologySource",
    "TypedTemporalSample",
    "TypedTemporalSampler",
    "append_unique",
    "edge_keys",
    "edge_seeds",
    "full_neighbor_block",
    "keyed_positions",
    "pair_seeds",
    "sample_neighbors",
    "sample_neighbors_from",
    "timed_seeds",
]
