"""Graph layer: CSC graphs, datasets on disk, loaders and synthetic generators."""

from fleetgnn.graph.csc import SPLITS, Graph, check_ids, coo_to_csc, from_edges, index_dtype
from fleetgnn.graph.dataset import (
    DatasetWriter,
    dataset_feature_norm,
    dataset_fingerprint,
    open_dataset,
    read_meta,
    write_dataset,
)
from fleetgnn.graph.hetero import HeteroGraph, HeteroSchema

__all__ = [
    "SPLITS",
    "DatasetWriter",
    "Graph",
    "HeteroGraph",
    "HeteroSchema",
    "check_ids",
    "coo_to_csc",
    "dataset_feature_norm",
    "dataset_fingerprint",
    "from_edges",
    "index_dtype",
    "open_dataset",
    "read_meta",
    "write_dataset",
]
