"""Graph neural network layers and models, written against the :class:`Aggregator` protocol.

Nothing here imports ``torch.distributed``: engines provide aggregators with communication
inside, and the same layer code runs on one device or many.
"""

from fleetgnn.nn.aggregator import Aggregator, LocalAggregator
from fleetgnn.nn.gat_conv import GATConv
from fleetgnn.nn.gcn_conv import GCNConv
from fleetgnn.nn.gin_conv import GINConv
from fleetgnn.nn.models import CONVS, GNN, MODEL_DEFAULTS, build_model
from fleetgnn.nn.protocol import KeyedDropout, LayerwiseModel, LayerwiseModule, check_model
from fleetgnn.nn.pyg import PygModel, from_pyg
from fleetgnn.nn.sage_conv import SAGEConv

__all__ = [
    "CONVS",
    "GNN",
    "MODEL_DEFAULTS",
    "Aggregator",
    "GATConv",
    "GCNConv",
    "GINConv",
    "KeyedDropout",
    "LayerwiseModel",
    "LayerwiseModule",
    "LocalAggregator",
    "PygModel",
    "SAGEConv",
    "build_model",
    "check_model",
    "from_pyg",
]
