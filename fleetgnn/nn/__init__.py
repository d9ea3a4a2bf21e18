"""Graph neural network layers and models, written against the :class:`Aggregator` protocol.

Nothing here imports ``torch.distributed``: engines provide aggregators with communication
inside, and the same layer code runs on one device or many.
"""

from fleetgnn.nn.aggregator import (
    EDGE_FEATURE_ENGINES,
    Aggregator,
    LocalAggregator,
    edge_attr,
    edge_reduce,
)
from fleetgnn.nn.edge_conv import EdgeConditionedConv, GINEConv
from fleetgnn.nn.gat_conv import GATConv
from fleetgnn.nn.gcn_conv import GCNConv
from fleetgnn.nn.gin_conv import GINConv
from fleetgnn.nn.models import CONVS, GNN, MODEL_DEFAULTS, build_model
from fleetgnn.nn.protocol import KeyedDropout, LayerwiseModel, LayerwiseModule, check_model
from fleetgnn.nn.pyg import PygModel, from_pyg
from fleetgnn.nn.sage_conv import SAGEConv

__all__ = [
    "CONVS",
    "EDGE_FEATURE_ENGINES",
    "GNN",
    "MODEL_DEFAULTS",
    "Aggregator",
    "EdgeConditionedConv",
    "GATConv",
    "GCNConv",
    "GINConv",
    "GINEConv",
    "KeyedDropout",
    "LayerwiseModel",
    "LayerwiseModule",
    "LocalAggregator",
    "PygModel",
    "SAGEConv",
    "build_model",
    "check_model",
    "edge_attr",
    "edge_reduce",
    "from_pyg",
]
