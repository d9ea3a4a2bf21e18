"""Edge-wise ops: ``gsddmm`` (combine a source and a destination value per edge) and gathers."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor

from fleetgnn.errors import GraphError
from fleetgnn.ops.adjacency import Structure, check_rows, structure
from fleetgnn.ops.precision import float32_inputs, full_precision
from fleetgnn.ops.spmm import _sddmm_heads, _spmm_sum

SddmmOp = Literal["dot", "add", "mul"]
SDDMM_OPS: tuple[str, ...] = ("dot", "add", "mul")


def src_to_edge(adj: object, x_src: Tensor) -> Tensor:
    """The source row of every edge: ``x_src[indices]``, ``[S, ...] -> [E, ...]`` (autograd)."""
    st = structure(adj)
    check_rows("x_src", x_src, st.num_src, "source node")
    return x_src.index_select(0, st.indices)


def dst_to_edge(adj: object, x_dst: Tensor) -> Tensor:
    """The destination row of every edge, ``[M, ...] -> [E, ...]`` (autograd)."""
    st = structure(adj)
    check_rows("x_dst", x_dst, st.num_dst, "destination node")
    return x_dst.index_select(0, st.dst_index())


class _Dot(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, st: Structure, a: Tensor, b: Tensor) -> Tensor:  # type: ignore[override]
        ctx.st = st
        ctx.save_for_backward(a, b)
        return _sddmm_heads(st, b, a)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        st: Structure = ctx.st
        a, b = ctx.saved_tensors
        grad_a = grad_b = None
        if ctx.needs_input_grad[1]:
            grad_a = _spmm_sum(st, b, grad, transpose=True)
        if ctx.needs_input_grad[2]:
            grad_b = _spmm_sum(st, a, grad)
        return None, grad_a, grad_b


def gsddmm(adj: object, a_src: Tensor, b_dst: Tensor, op: SddmmOp = "dot") -> Tensor:
    r"""Combine the source value and the destination value of every edge ``e = (u -> v)``.

    .. math::
        \mathrm{dot}: \langle a_u, b_v \rangle \qquad
        \mathrm{add}: a_u + b_v \qquad \mathrm{mul}: a_u \odot b_v

    ``dot`` reduces the last dimension and runs as a sampled dense-dense product
    (``torch.sparse.sampled_addmm``) per head, never materialising ``[E, D]``; its backward is two
    sparse products. ``add``/``mul`` broadcast the trailing shapes like torch does.

    Shapes:
        - a_src: ``[S, *h, D]``; b_dst: ``[M, *h, D]``.
        - output: ``[E, *h]`` for ``dot``; ``[E, *broadcast(a.shape[1:], b.shape[1:])]`` else.

    Args:
        adj: Adjacency-like object.
        a_src: Source values.
        b_dst: Destination values.
        op: ``"dot"``, ``"add"`` or ``"mul"``.

    Raises:
        GraphError: If shapes disagree or ``op`` is unknown.
    """
    st = structure(adj)
    if op not in SDDMM_OPS:
        raise GraphError(f"'op' must be one of {SDDMM_OPS} (got {op!r})")
    check_rows("a_src", a_src, st.num_src, "source node")
    check_rows("b_dst", b_dst, st.num_dst, "destination node")
    if op == "add":
        return a_src.index_select(0, st.indices) + b_dst.index_select(0, st.dst_index())
    if op == "mul":
        return a_src.index_select(0, st.indices) * b_dst.index_select(0, st.dst_index())
    a_src, b_dst = float32_inputs(a_src, b_dst)  # mixed precision: the dot sums in float32
    if a_src.dim() < 2 or a_src.shape[1:] != b_dst.shape[1:]:
        raise GraphError(
            f"'dot' needs a_src [S, *h, D] and b_dst [M, *h, D] with equal trailing shapes "
            f"(got {tuple(a_src.shape)} and {tuple(b_dst.shape)})"
        )
    if a_src.dtype != b_dst.dtype:
        raise GraphError(
            f"'a_src' and 'b_dst' must share a dtype (got {a_src.dtype}, {b_dst.dtype})"
        )
    heads = tuple(a_src.shape[1:-1])
    k, d = math.prod(heads), a_src.shape[-1]
    a3 = a_src.reshape(st.num_src, k, d)
    b3 = b_dst.reshape(st.num_dst, k, d)
    with full_precision(a3.device):
        return _Dot.apply(st, a3, b3).reshape(st.num_edges, *heads)
