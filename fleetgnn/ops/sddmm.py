"""Edge-wise ops: ``gsddmm``, gathers, and the reduction of per-edge messages.

``gsddmm`` combines a source and a destination value per edge, :func:`src_to_edge` and
:func:`dst_to_edge` gather rows onto edges, :func:`edge_reduce` reduces edges into destinations.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor

from fleetgnn.errors import ConfigError, GraphError
from fleetgnn.ops.adjacency import Structure, check_rows, structure
from fleetgnn.ops.precision import float32_inputs, full_precision
from fleetgnn.ops.spmm import REDUCES, Reduce, _sddmm_heads, _spmm_sum

SddmmOp = Literal["dot", "add", "mul"]
SDDMM_OPS: tuple[str, ...] = ("dot", "add", "mul")


def src_to_edge(adj: object, x_src: Tensor) -> Tensor:
    """The source row of every edge: ``x_src[indices]``, ``[S, ...] -> [E, ...]`` (autograd)."""
    st = structure(adj)
    check_rows("x_src", x_src, st.num_src, "source node")
    return x_src.index_select(0, st.indices)


def edge_reduce(adj: object, messages: Tensor, reduce: Reduce = "sum") -> Tensor:
    r"""Reduce per-edge messages into their destinations: ``[E, ...] -> [M, ...]`` (autograd).

    .. math::
        \mathrm{out}_v = \bigoplus_{e = (u \to v)} m_e, \qquad
        \oplus \in \{\mathrm{sum}, \mathrm{mean}, \mathrm{max}\}

    The transpose of :func:`dst_to_edge`; a destination without in-edges gets 0. ``sum`` and
    ``mean`` are one ``index_add`` (``mean`` then divides by the in-degree), ``max`` a
    ``scatter_reduce`` (its gradient goes to the maximal edges, split evenly among ties).
    Messages in a low precision are reduced in float32 (:func:`float32_inputs`).

    Shapes:
        - messages: ``[E, *feat]`` in the adjacency's edge (CSC) order; output: ``[M, *feat]``.

    Raises:
        ConfigError: ``reduce`` is not one of ``sum``, ``mean``, ``max``.
        GraphError: ``messages`` has not one row per edge.
    """
    st = structure(adj)
    if reduce not in REDUCES:
        raise ConfigError(f"'reduce' must be one of {REDUCES} (got {reduce!r})")
    check_rows("messages", messages, st.num_edges, "edge")
    (messages,) = float32_inputs(messages)
    dst = st.dst_index()
    shape = (st.num_dst, *messages.shape[1:])
    if reduce == "max":
        idx = dst.view(-1, *([1] * (messages.dim() - 1))).expand_as(messages)
        out = messages.new_zeros(shape)
        return out.scatter_reduce(0, idx, messages, "amax", include_self=False)
    out = messages.new_zeros(shape).index_add(0, dst, messages)
    if reduce == "mean":
        deg = st.in_degree().to(out.dtype).clamp(min=1)
        out = out / deg.view(-1, *([1] * (out.dim() - 1)))
    return out


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
