"""CSC segment stores of the unified store's topology tiers (each node's in-neighbours)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.graph.csc import Graph

__all__ = ["SEGMENT_BLOCK", "Segments", "segment_arange", "segments_of"]


@dataclasses.dataclass
class Segments:
    """A CSC segment store of one tier: ``indices[indptr[i]:indptr[i + 1]]`` is row ``i``."""

    indptr: Any  # _Gatherable (device) | Tensor (host) | np.ndarray (disk)
    indices: Any
    weight: Any | None


#: Edges copied per step by :func:`segments_of` (its int64 positions: 32 MiB).
SEGMENT_BLOCK = 1 << 22


def segments_of(graph: Graph, rows: np.ndarray) -> tuple[Tensor, Tensor, Tensor | None]:
    """Local CSC (``indptr [m + 1]``, ``indices``, ``weight``) of the nodes ``rows``.

    The edges are copied in blocks of rows holding about :data:`SEGMENT_BLOCK` edges, so the
    int64 edge positions never exist for the whole tier at once (they would be 8 bytes per
    edge, twice the int32 indices themselves, plus temporaries).
    """
    start = np.asarray(graph.indptr[rows], dtype=np.int64)
    deg = np.asarray(graph.indptr[rows + 1], dtype=np.int64) - start
    indptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    total = int(indptr[-1])
    indices = np.empty(total, dtype=graph.indices.dtype)
    weight = None if graph.edge_weight is None else np.empty(total, graph.edge_weight.dtype)
    # row blocks: cut where the running edge count crosses a multiple of the block size
    cuts = np.searchsorted(indptr, np.arange(SEGMENT_BLOCK, total, SEGMENT_BLOCK), "right")
    bounds = np.unique(np.concatenate([[0], cuts, [rows.size]]))
    for r0, r1 in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        e0, e1 = int(indptr[r0]), int(indptr[r1])
        if e1 == e0:
            continue
        d = deg[r0:r1]
        pos = np.repeat(start[r0:r1] - indptr[r0:r1], d) + np.arange(e0, e1, dtype=np.int64)
        indices[e0:e1] = graph.indices[pos]
        if weight is not None:
            weight[e0:e1] = graph.edge_weight[pos]
    return (
        torch.from_numpy(indptr),
        torch.from_numpy(indices),
        None if weight is None else torch.from_numpy(weight),
    )


def segment_arange(counts: np.ndarray) -> np.ndarray:
    """``concat([arange(c) for c in counts])`` without a Python loop."""
    starts = np.cumsum(counts) - counts
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)
