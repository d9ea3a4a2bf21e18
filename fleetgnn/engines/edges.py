"""Edge features for the engines: a graph's ``edge_attr`` rows, read by edge ID.

A model whose layers read edge features (``needs_edge_attr``, e.g. ``GNN(conv="gine")``) gets
them through its aggregators (:func:`~fleetgnn.nn.aggregator.edge_attr`). Sampled blocks carry
their edges' global IDs (:attr:`~fleetgnn.sampling.Block.edge_ids`, the positions in the graph's
CSC), and :class:`EdgeRows` reads those rows of the graph's ``edge_attr``:

- ``minibatch``: through the store's edge table (:class:`~fleetgnn.store.edge_table.EdgeTable`:
  device shards, host, disk, within the store's budgets, ``store.edge_share``), in the prefetch
  thread with the batch's node rows, and in evaluation;
- ``reference``: from ``edge_attr`` directly (a memory map for a dataset on disk, so only the
  sampled edges' pages are read): one process, the ground truth;
- ``fullgraph``: a local slice of ``edge_attr``, read once (``fullgraph.py``): an edge belongs to
  its destination's rank, and a rank's node range owns one contiguous run of CSC edges, so no
  rank reads another's edge rows and no tiering is needed.

Memory: one ``[E_block, D]`` tensor per block on the device; nothing per graph (the store's edge
table holds what its budgets give it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.graph.compact import feature_codec
from fleetgnn.nn import LocalAggregator
from fleetgnn.store.edge_table import EdgeTable


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
        table: The store's :class:`~fleetgnn.store.edge_table.EdgeTable` of ``graph`` to read
            the rows through (``None``: index ``graph.edge_attr`` directly). Rows are the same
            bits either way; a two-sided table makes :meth:`rows` a collective.
        feature_dtype: How the rows are stored (``store.edge_feature_dtype``): read directly,
            each row takes the values its compact form reads back, the values a table built
            with the same ``feature_dtype`` returns. ``None``: as stored.

    Raises:
        ConfigError: The graph has no ``edge_attr``.
    """

    def __init__(
        self,
        graph: Graph,
        dtype: torch.dtype,
        device: torch.device | str,
        table: EdgeTable | None = None,
        feature_dtype: str | None = None,
    ) -> None:
        if graph.edge_attr is None:
            raise ConfigError(
                f"the model reads edge features but graph '{graph.name}' has no edge_attr; "
                f"prepare the dataset with edge features (e.g. 'fleetgnn prepare synthetic "
                f"--edge-features 4') or pick a model without them"
            )
        self.attr = graph.edge_attr
        self.table = table
        self.codec = None if table is not None else feature_codec(feature_dtype)
        self.dtype, self.device = dtype, torch.device(device)

    @classmethod
    def of(
        cls,
        model: Any,
        graph: Graph,
        dtype: torch.dtype,
        device: torch.device | str,
        feature_dtype: str | None = None,
    ) -> EdgeRows | None:
        """:class:`EdgeRows` of ``graph`` when ``model`` reads edge features, else ``None``."""
        if not needs_edge_attr(model):
            return None
        return cls(graph, dtype, device, feature_dtype=feature_dtype)

    @property
    def dim(self) -> int:
        """Width ``D`` of the edge features."""
        return int(self.attr.shape[1])

    def rows(self, edge_ids: Tensor) -> Tensor:
        """``edge_attr[edge_ids]``: ``[len(edge_ids), D]`` on :attr:`device` in :attr:`dtype`.

        Through :attr:`table` when there is one (its tiers, counters and traffic).
        """
        if self.table is not None:
            out = self.table.gather(edge_ids)
        else:
            ids = edge_ids.detach().cpu().numpy()
            out = torch.from_numpy(np.asarray(self.attr[ids]))
            if self.codec is not None:
                out = self.codec.round_trip(out)
        return out.to(device=self.device, dtype=self.dtype)

    def block_rows(self, blocks: Sequence[Any]) -> list[Tensor]:
        """:meth:`rows` of every block's ``edge_ids``, in block order (one read per block)."""
        return [self.rows(_edge_ids(b)) for b in blocks]

    def empty(self) -> Tensor:
        """``[0, D]``: the edge features of a block without edges."""
        return torch.zeros((0, self.dim), dtype=self.dtype, device=self.device)


def _edge_ids(block: Any) -> Tensor:
    ids = getattr(block, "edge_ids", None)
    if ids is None:
        raise ConfigError(
            "the model reads edge features but the block carries no edge IDs; sample with "
            "NeighborSampler(..., with_edge_ids=True)"
        )
    return ids  # type: ignore[no-any-return]


def block_aggregator(
    block: Any,
    dtype: torch.dtype,
    device: torch.device | str,
    edges: EdgeRows | None = None,
    attr: Tensor | None = None,
) -> LocalAggregator:
    """A sampled block's :class:`LocalAggregator` on ``device``, with its edge features.

    ``edges``: the graph's :class:`EdgeRows` (the block must carry ``edge_ids``); ``None``: none.
    ``attr``: the block's edge rows read already (:meth:`EdgeRows.block_rows`, e.g. by a
    prefetch thread); then ``edges`` is not read.
    """
    if attr is None and edges is not None:
        attr = edges.rows(_edge_ids(block))
    return LocalAggregator(block.to(device), dtype=dtype, validate=False, edge_attr=attr)
