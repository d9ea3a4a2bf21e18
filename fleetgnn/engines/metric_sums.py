"""Evaluation's sums over streamed chunks: per-split correct counts and the validation loss.

:class:`MetricSums` is the sink streaming evaluation
(:func:`~fleetgnn.engines.inference.streaming_metrics`) passes the last layer's rows to.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fleetgnn.engines.common import SPLITS, check_labels, metrics_from_sums
from fleetgnn.errors import ConfigError
from fleetgnn.graph import Graph


def rows_of(array: Any, ids: np.ndarray) -> np.ndarray:
    """``array[ids]`` for ascending ``ids``: one slice when they are contiguous."""
    if ids.size and int(ids[-1]) - int(ids[0]) + 1 == ids.size:
        return np.asarray(array[int(ids[0]) : int(ids[-1]) + 1])
    return np.asarray(array[ids])


class MetricSums:
    """A :data:`~fleetgnn.engines.inference.Sink` summing evaluation's numerators and denominators.

    Per split present (train/val/test masks): correct predictions and masked nodes; and the
    validation loss sum (cross-entropy). Labels and masks are read per chunk from the graph's
    arrays (memory maps are fine). :meth:`result` all-reduces the sums (float64) and divides,
    exactly like :func:`~fleetgnn.engines.common.split_metrics` over all nodes at once.

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
        self.sums = [0.0] * (2 * len(self.keys) + int(self.has_val))
        self.device = device

    def __call__(self, ids: np.ndarray, logits: torch.Tensor) -> None:
        """Add one chunk's counts and validation loss."""
        dev = logits.device
        y = torch.from_numpy(np.array(rows_of(self.graph.y, ids), dtype=np.int64)).to(dev)
        pred = logits.argmax(dim=1)
        for i, s in enumerate(self.keys):
            m = np.array(rows_of(getattr(self.graph, f"{s}_mask"), ids), dtype=bool)
            mt = torch.from_numpy(m).to(dev)
            self.sums[2 * i] += float((pred[mt] == y[mt]).sum())
            self.sums[2 * i + 1] += float(m.sum())
            if s == "val" and m.any():
                check_labels(logits[mt], y[mt])
                self.sums[-1] += float(F.cross_entropy(logits[mt], y[mt], reduction="sum"))

    def result(self, comm: Any = None) -> dict[str, float]:
        """Accuracy per split and mean validation loss over every rank (collective with comm)."""
        t = torch.tensor(self.sums, dtype=torch.float64)
        if comm is not None and comm.world_size > 1:
            t = comm.all_reduce_sum(t.to(self.device)).cpu()
        return metrics_from_sums(self.keys, t, self.has_val)
