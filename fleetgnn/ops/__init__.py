"""Single-device graph ops with autograd: gspmm, gsddmm, edge softmax, keyed randomness.

Nothing here imports ``torch.distributed``; engines wire communication around these ops.
"""

from fleetgnn.ops.adjacency import Adjacency, AdjacencyLike, check_adjacency, structure
from fleetgnn.ops.precision import LOW_PRECISION, float32_inputs, full_precision
from fleetgnn.ops.random import (
    hash_uniform,
    hash_uniform_edges,
    keyed_dropout,
    keyed_edge_dropout,
)
from fleetgnn.ops.sddmm import dst_to_edge, edge_reduce, gsddmm, src_to_edge
from fleetgnn.ops.softmax import edge_softmax
from fleetgnn.ops.spmm import REDUCES, ScaledSpMM, gspmm, gspmm_heads, gspmm_vjp

__all__ = [
    "LOW_PRECISION",
    "REDUCES",
    "Adjacency",
    "AdjacencyLike",
    "ScaledSpMM",
    "check_adjacency",
    "dst_to_edge",
    "edge_reduce",
    "edge_softmax",
    "float32_inputs",
    "full_precision",
    "gsddmm",
    "gspmm",
    "gspmm_heads",
    "gspmm_vjp",
    "hash_uniform",
    "hash_uniform_edges",
    "keyed_dropout",
    "keyed_edge_dropout",
    "src_to_edge",
    "structure",
]
