"""Graph layer: CSC graphs, datasets on disk, loaders and synthetic generators."""

from fleetgnn.graph.csc import SPLITS, Graph, check_ids, coo_to_csc, from_edges, index_dtype
from fleetgnn.graph.dataset import (
    DatasetWriter,
    dataset_feature_norm,
    open_dataset,
    read_meta,
    write_dataset,
)
from fleetgnn.graph.hetero import HeteroGraph, HeteroSchema
from fleetgnn.graph.typed_dataset import (
    TypedDatasetWriter,
    any_dataset_fingerprint,
    open_any_dataset,
    open_typed_dataset,
    read_typed_meta,
    write_typed_dataset,
)

__all__ = [
    "SPLITS",
    "DatasetWriter",
    "Graph",
    "HeteroGraph",
    "HeteroSchema",
    "TypedDatasetWriter",
    "check_ids",
    "any_dataset_fingerprint",
    "coo_to_csc",
    "dataset_feature_norm",
    "from_edges",
    "index_dtype",
    "open_any_dataset",
    "open_dataset",
    "open_typed_dataset",
    "read_meta",
    "read_typed_meta",
    "write_dataset",
    "write_typed_dataset",
]
