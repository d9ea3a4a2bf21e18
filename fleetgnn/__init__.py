"""fleetgnn: train graph neural networks on graphs too large for one GPU."""

from fleetgnn.errors import FleetgnnError
from fleetgnn.graph import Graph, open_dataset, write_dataset

__version__ = "0.1.0"

__all__ = ["FleetgnnError", "Graph", "open_dataset", "write_dataset", "__version__"]
