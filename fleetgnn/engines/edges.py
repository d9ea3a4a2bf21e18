"""Edge features for the engines: a graph's ``edge_attr`` rows, read by edge ID.

A model whose layers read edge features (``needs_edge_attr``, e.g. ``GNN(conv="gine")``) gets
them through its aggregators (:func:`~fleetgnn.nn.aggregator.edge_attr`). Sampled blocks carry
their edges' global IDs (:attr:`~fleetgnn.sampling.Block.edge_ids`, the positions in the graph's
CSC), and :class:`EdgeRows` reads those rows of the graph's ``edge_attr``: a memory map for a
dataset on disk, so only the sampled edges' pages are read. The full-graph engine's edges are
owned by their destination's rank, so its rows are a local slice (``fullgraph.py``).

Memory: one ``[E_block, D]`` tensor per block on the device; nothing per graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.nn import LocalAggregator


def needs_edge_attr(model: Any) -> bool:
    """Whether ``model`` (or the model a wrapper holds as ``module``) reads edge features."""
    inner = getattr(model, "module", model)
    return bool(
        getattr(model, "needs_edge_attr", False) or getattr(inner, "needs_edge_attr", False)
    )


class EdgeRows:
    """The rows of ``graph.edge_attr`` by edge ID, as ``dtype`` tensors on ``device``.

    Args:
        graph: A graph with ``edge_attr`` (its CSC positions are the edge IDs).
        dtype: The model's dtype.
        device: Where the rows go.

    Raises:
        ConfigError: The graph has no ``edge_attr``.
    """

    def __init__(self, graph: Graph, dtype: torch.dtype, device: torch.device | str) -> None:
        if graph.edge_attr is None:
            raise ConfigError(
                f"the model reads edge features but graph '{graph.name}' has no edge_attr; "
                f"prepare the dataset with edge features (e.g. 'fleetgnn prepare synthetic "
                f"--edge-features 4') or pick a model without them"
            )
        self.attr = graph.edge_attr
        self.dtype, self.device = dtype, torch.device(device)

    @classmethod
    def of(
        cls, model: Any, graph: Graph, dtype: torch.dtype, device: torch.device | str
    ) -> EdgeRows | None:
        """:class:`EdgeRows` of ``graph`` when ``model`` reads edge features, else ``None``."""
        return cls(graph, dtype, device) if needs_edge_attr(model) else None

    @property
    def dim(self) -> int:
        """Width ``D`` of the edge features."""
        return int(self.attr.shape[1])

    def rows(self, edge_ids: Tensor) -> Tensor:
        """``edge_attr[edge_ids]``: ``[len(edge_ids), D]`` on :attr:`device` in :attr:`dtype`."""
        ids = edge_ids.detach().cpu().numpy()
        out = torch.from_numpy(np.asarray(self.attr[ids]))
        return out.to(device=self.device, dtype=self.dtype)

    def empty(self) -> Tensor:
        """``[0, D]``: the edge features of a block without edges."""
        return torch.zeros((0, self.dim), dtype=self.dtype, device=self.device)


def block_aggregator(
    block: Any, dtype: torch.dtype, device: torch.device | str, edges: EdgeRows | None = None
) -> LocalAggregator:
    """A sampled block's :class:`LocalAggregator` on ``device``, with its edge features.

    ``edges``: the graph's :class:`EdgeRows` (the block must carry ``edge_ids``); ``None``: none.
    """
    attr = None
    if edges is not None:
        if getattr(block, "edge_ids", None) is None:
            raise ConfigError(
                "the model reads edge features but the block carries no edge IDs; sample with "
                "NeighborSampler(..., with_edge_ids=True)"
            )
        attr = edges.rows(block.edge_ids)
    return LocalAggregator(block.to(device), dtype=dtype, validate=False, edge_attr=attr)
