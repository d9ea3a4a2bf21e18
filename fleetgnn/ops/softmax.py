"""Softmax over each destination's in-edges."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fleetgnn.errors import GraphError
from fleetgnn.ops.adjacency import Structure, check_rows, structure
from fleetgnn.ops.precision import float32_inputs, full_precision


def _segment_sum(st: Structure, t: Tensor) -> Tensor:
    return torch.segment_reduce(t, "sum", offsets=st.indptr, axis=0)


class _EdgeSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, st: Structure, scores: Tensor) -> Tensor:  # type: ignore[override]
        dst = st.dst_index()
        peak = torch.segment_reduce(scores, "max", offsets=st.indptr, axis=0)
        peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
        ex = torch.exp(scores - peak.index_select(0, dst))
        out = ex / _segment_sum(st, ex).index_select(0, dst)
        ctx.st = st
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        st: Structure = ctx.st
        (out,) = ctx.saved_tensors
        dot = _segment_sum(st, grad * out).index_select(0, st.dst_index())
        return None, out * (grad - dot)


def edge_softmax(adj: object, scores: Tensor) -> Tensor:
    r"""Softmax of edge scores over the in-edges of each destination.

    .. math::
        \alpha_e = \frac{\exp(s_e - m_v)}{\sum_{e' \to v} \exp(s_{e'} - m_v)}, \qquad
        m_v = \max_{e' \to v} s_{e'}

    Subtracting the per-destination maximum keeps it finite for any finite scores. The backward
    is analytic: :math:`\partial s_e = \alpha_e (g_e - \sum_{e' \to v} g_{e'} \alpha_{e'})`.

    Shapes:
        - scores: ``[E]`` or ``[E, H]`` (any trailing shape, one softmax per trailing index).
        - output: same as ``scores``; each destination's entries sum to 1 (destinations without
          in-edges have no entries).

    Args:
        adj: Adjacency-like object.
        scores: Float edge scores aligned with the adjacency's ``indices``.

    Raises:
        GraphError: If ``scores`` does not have one row per edge.
    """
    st = structure(adj)
    (scores,) = float32_inputs(scores)  # mixed precision: exp and sums in float32
    check_rows("scores", scores, st.num_edges, "edge")
    if not scores.is_floating_point():
        raise GraphError(f"'scores' must be a float tensor (got {scores.dtype})")
    with full_precision(scores.device):
        return _EdgeSoftmax.apply(st, scores)
