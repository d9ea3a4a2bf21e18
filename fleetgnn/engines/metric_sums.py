"""Evaluation's sums over streamed chunks: per-split correct counts and the validation loss.

:class:`MetricSums` is the sink streaming evaluation
(:func:`~fleetgnn.engines.inference.streaming_metrics`) passes the last layer's rows to.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fleetgnn.engines.common import SPLITS, check_labels
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph
from fleetgnn.tasks import NODE_CLASSIFICATION


def rows_of(array: Any, ids: np.ndarray) -> np.ndarray:
    """``array[ids]`` for ascending ``ids``: one slice when they are contiguous."""
    if ids.size and int(ids[-1]) - int(ids[0]) + 1 == ids.size:
        return np.asarray(array[int(ids[0]) : int(ids[-1]) + 1])
    return np.asarray(array[ids])


class MetricSums:
    """A :data:`~fleetgnn.engines.inference.Sink` summing evaluation's numerators and denominators.

    Per split present (train/val/test masks): correct predictions and masked nodes; and the
    validation loss sum (cross-entropy). Labels and masks are read per chunk from the graph's
    arrays (memory maps are fine); each chunk's logits become sums through the task's
    :meth:`~fleetgnn.tasks.NodeClassification.metric_sums`, the one place logits turn into
    metrics. :meth:`result` all-reduces the sums (float64) and divides
    (:meth:`~fleetgnn.tasks.NodeClassification.metrics_from_sums`). Streaming evaluation passes
    chunks; the reference engine's full mode passes every node's logits at once.

    Args:
        graph: The dataset (labels and masks).
        device: Where the sums are all-reduced (the communicator's device).
    """

    def __init__(self, graph: Graph, device: torch.device | str = "cpu") -> None:
        if graph.y is None:
            raise ConfigError(f"dataset '{graph.name}' has no labels (y); evaluation needs them")
        self.graph = graph
        self.keys = [s for s in SPLITS if getattr(graph, f"{s}_mask") is not None]
        self.has_val = "val" in self.keys
        self.sums = torch.zeros(2 * len(self.keys) + int(self.has_val), dtype=torch.float64)
        self.device = device

    def __call__(self, ids: np.ndarray, logits: torch.Tensor) -> None:
        """Add one chunk's counts and validation loss."""
        dev = logits.device
        y = torch.from_numpy(np.array(rows_of(self.graph.y, ids), dtype=np.int64)).to(dev)
        masks = {
            s: torch.from_numpy(
                np.array(rows_of(getattr(self.graph, f"{s}_mask"), ids), dtype=bool)
            ).to(dev)
            for s in self.keys
        }
        val = masks.get("val")
        if val is not None and bool(val.any()):
            check_labels(logits[val], y[val])
        _, sums = NODE_CLASSIFICATION.metric_sums(logits, y, masks)
        self.sums += sums

    def result(self, comm: Any = None) -> dict[str, float]:
        """Accuracy per split and mean validation loss over every rank (collective with comm)."""
        t = self.sums.clone()
        if comm is not None and comm.world_size > 1:
            t = comm.all_reduce_sum(t.to(self.device)).cpu()
        return NODE_CLASSIFICATION.metrics_from_sums(self.keys, t, self.has_val)
