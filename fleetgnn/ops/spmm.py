"""Generalised sparse-dense matrix product (``gspmm``): aggregate source rows into destinations.

CPU path, chosen by measurement (``benchmarks/bench_ops.py``; 100k nodes, 2M edges, dim 64, 2
cores): ``sum``/``mean`` run as a sparse CSR @ dense product (41 ms) rather than a gather +
``index_add_`` (1180 ms) or a gather + ``segment_reduce`` (1170 ms), because the CSR product never
materialises the ``[E, D]`` messages. Its backward uses the cached transposed CSR for ``x`` and
``torch.sparse.sampled_addmm`` (an SDDMM, 42 ms vs 890 ms for a chunked gather-multiply-sum) for
the edge weights. ``max`` gathers messages in bounded chunks of destinations and reduces them with
``segment_reduce``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor

from fleetgnn.errors import GraphError
from fleetgnn.kernels import csr_mm
from fleetgnn.ops.adjacency import Structure, _sparse_csr, blocked_mm, check_rows, structure
from fleetgnn.ops.precision import float32_inputs, full_precision

Reduce = Literal["sum", "mean", "max"]
REDUCES: tuple[str, ...] = ("sum", "mean", "max")
_CHUNK_ELEMENTS = 1 << 22  # message elements materialised at once by the max path


def _split_shape(x: Tensor, w: Tensor | None, num_edges: int) -> tuple[int, int]:
    """``(K, R)``: heads carrying their own weight and the features per head of ``x``."""
    feat = tuple(x.shape[1:])
    if w is None or w.dim() == 1:
        return 1, math.prod(feat)
    wshape = tuple(w.shape[1:])
    if feat[: len(wshape)] != wshape:
        raise GraphError(
            f"'edge_weight' of shape {tuple(w.shape)} does not broadcast against 'x' of shape "
            f"{tuple(x.shape)}: expected [E] or [E, H] with x of shape [num_src, H, ...]; "
            f"give one weight per edge (and per head)"
        )
    return math.prod(wshape), math.prod(feat[len(wshape) :])


def _head(t: Tensor, k: int) -> Tensor:
    return t[:, k].contiguous()


def _csr_mm(st: Structure, vals: Tensor | None, x2: Tensor, transpose: bool) -> Tensor:
    """``A @ x2`` (``A^T`` if ``transpose``) with edge values ``vals [E]`` (CSC order) or ones.

    Over the structure's cached column blocks where it has them (a reused whole-graph
    adjacency whose source rows exceed the cache), else one CSR product by the device's
    :func:`~fleetgnn.kernels.csr_mm`.
    """
    blocks = st.column_blocks(transpose, x2.element_size())
    if blocks is not None:
        return blocked_mm(blocks.matrices(vals, x2.dtype), blocks.bounds, x2)
    if transpose:
        indptr, indices, perm = st.transposed()
        return csr_mm(indptr, indices, None if vals is None else vals[perm], x2, st.num_src)
    return csr_mm(st.indptr, st.indices, vals, x2, st.num_dst)


def _spmm_sum(st: Structure, x3: Tensor, w2: Tensor | None, transpose: bool = False) -> Tensor:
    """``A_k @ x3[:, k]`` per head ``k`` (``A^T`` if ``transpose``); x3 is ``[rows, K, R]``."""
    k_heads = x3.shape[1]
    rows = st.num_src if transpose else st.num_dst
    if k_heads == 1:  # one product, no copy into a preallocated output
        vals = None if w2 is None else w2[:, 0].contiguous()
        return _csr_mm(st, vals, x3[:, 0], transpose).unsqueeze(1)
    if st.transient:
        # one block-diagonal product over [rows * K, R]: no per-head copies (sampled blocks
        # only: a structure kept across steps would hold 24 * E * K bytes of pattern)
        indptr, indices, order = st.head_layout(k_heads, transpose)
        vals = x3.new_ones(order.numel()) if w2 is None else w2.reshape(-1).index_select(0, order)
        cols = st.num_dst if transpose else st.num_src
        mat = _sparse_csr(indptr, indices, vals, (rows * k_heads, cols * k_heads))
        x2 = x3.reshape(cols * k_heads, x3.shape[2])
        return blocked_mm([mat], [(0, x2.shape[0])], x2).view(rows, k_heads, x3.shape[2])
    out = x3.new_empty((rows, k_heads, x3.shape[2]))
    for k in range(k_heads):
        vals = None if w2 is None else _head(w2, k)
        out[:, k] = _csr_mm(st, vals, _head(x3, k), transpose)
    return out


def _sddmm_heads(st: Structure, b_dst: Tensor, a_src: Tensor) -> Tensor:
    """``out[e, k] = <b_dst[dst_e, k], a_src[src_e, k]>``; ``[rows, K, R]`` inputs -> ``[E, K]``."""
    k_heads = a_src.shape[1]
    if st.num_edges > st.num_dst * st.num_src:
        # more edges than matrix entries (repeated edges): torch's sampled_addmm refuses such a
        # pattern, so take the per-edge dot products directly (E * K * R transient elements)
        src, dst = st.indices, st.dst_index()
        return (b_dst.index_select(0, dst) * a_src.index_select(0, src)).sum(-1)
    if k_heads > 1 and st.transient:
        # one sampled product over the block-diagonal pattern of every head: no per-head copies
        indptr, indices, order = st.head_layout(k_heads, transpose=False)
        n, r = order.numel(), a_src.shape[2]
        shape = (st.num_dst * k_heads, st.num_src * k_heads)
        pattern = _sparse_csr(indptr, indices, a_src.new_zeros(n), shape)
        b2, a2 = b_dst.reshape(shape[0], r), a_src.reshape(shape[1], r)
        res = torch.sparse.sampled_addmm(pattern, b2, a2.t(), beta=0.0)
        return a_src.new_empty(n).index_copy_(0, order, res.values()).view(-1, k_heads)
    out = a_src.new_empty((st.num_edges, k_heads))
    pattern = st.csr(a_src.new_zeros(st.num_edges))
    for k in range(k_heads):
        res = torch.sparse.sampled_addmm(pattern, _head(b_dst, k), _head(a_src, k).t(), beta=0.0)
        out[:, k] = res.values()
    return out


def _chunks(st: Structure, width: int) -> list[tuple[int, int]]:
    """Destination ranges ``[d0, d1)`` holding about ``_CHUNK_ELEMENTS / width`` edges each."""
    per = max(1, _CHUNK_ELEMENTS // max(width, 1))
    if st.num_edges <= per:
        return [(0, st.num_dst)]
    marks = torch.arange(per, st.num_edges, per, device=st.indptr.device)
    cuts = torch.searchsorted(st.indptr, marks, right=True).tolist()
    bounds = sorted({0, st.num_dst, *(min(c, st.num_dst) for c in cuts)})
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _messages(st: Structure, x2: Tensor, w2: Tensor | None, e0: int, e1: int, r: int) -> Tensor:
    """Messages ``w_e * x[src_e]`` of edges ``[e0, e1)``, flattened to ``[e1 - e0, K * R]``."""
    msg = x2.index_select(0, st.indices[e0:e1])
    if w2 is not None:
        msg = (msg.view(e1 - e0, -1, r) * w2[e0:e1, :, None]).view(e1 - e0, -1)
    return msg


def _max_forward(st: Structure, x2: Tensor, w2: Tensor | None, r: int) -> Tensor:
    width = x2.shape[1]
    out = x2.new_zeros((st.num_dst, width))
    indptr = st.indptr
    for d0, d1 in _chunks(st, width):
        e0, e1 = int(indptr[d0]), int(indptr[d1])
        if e1 == e0:
            continue
        msg = _messages(st, x2, w2, e0, e1, r)
        out[d0:d1] = torch.segment_reduce(msg, "max", offsets=indptr[d0 : d1 + 1] - e0, axis=0)
    out[st.in_degree() == 0] = 0
    return out


def _max_winner(st: Structure, x2: Tensor, w2: Tensor | None, out: Tensor, r: int) -> Tensor:
    """Edge index of the maximum per ``(dst, feature)`` (smallest index on ties; ``E`` if none)."""
    num_edges, width = st.num_edges, x2.shape[1]
    winner = torch.full((st.num_dst, width), num_edges, dtype=torch.int64, device=x2.device)
    dst = st.dst_index()
    for d0, d1 in _chunks(st, width):
        e0, e1 = int(st.indptr[d0]), int(st.indptr[d1])
        if e1 == e0:
            continue
        msg = _messages(st, x2, w2, e0, e1, r)
        local = dst[e0:e1]
        eidx = torch.arange(e0, e1, device=x2.device)[:, None].expand(-1, width)
        cand = torch.where(msg == out.index_select(0, local), eidx, num_edges)
        winner.scatter_reduce_(0, local[:, None].expand(-1, width), cand, "amin")
    winner[st.in_degree() == 0] = num_edges
    return winner


class _GSpMM(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, st: Structure, reduce: str, x: Tensor, w: Tensor | None, k: int, r: int
    ) -> Tensor:
        s = x.shape[0]
        x3 = x.reshape(s, k, r)
        w2 = None if w is None else w.reshape(st.num_edges, k)
        if reduce == "max":
            out = _max_forward(st, x3.reshape(s, k * r), w2, r)
        else:
            out = _spmm_sum(st, x3, w2)
            if reduce == "mean":
                out = out / st.in_degree().clamp(min=1).to(out.dtype)[:, None, None]
        ctx.st, ctx.reduce, ctx.k, ctx.r = st, reduce, k, r
        ctx.has_w = w is not None
        ctx.save_for_backward(x, w, out if reduce == "max" else None)
        return out.reshape(st.num_dst, *x.shape[1:])

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        st: Structure = ctx.st
        x, w, out = ctx.saved_tensors
        k, r = ctx.k, ctx.r
        s = x.shape[0]
        g = grad.reshape(st.num_dst, k, r)
        w2 = None if w is None else w.reshape(st.num_edges, k)
        need_x, need_w = ctx.needs_input_grad[2], ctx.needs_input_grad[3]
        grad_x = grad_w = None
        if ctx.reduce == "max":
            x2 = x.reshape(s, k * r)
            winner = _max_winner(st, x2, w2, out.reshape(st.num_dst, k * r), r)
            width = k * r
            valid = winner < st.num_edges
            dst_f = valid.nonzero()  # [V, 2]: (destination, flat feature)
            edge = winner[valid]
            feat = dst_f[:, 1]
            gv = g.reshape(st.num_dst, width)[valid]
            src = st.indices.index_select(0, edge)
            head = torch.div(feat, r, rounding_mode="floor")
            if need_x:
                wv = gv if w2 is None else gv * w2[edge, head]
                grad_x = x.new_zeros(s * width).index_add_(0, src * width + feat, wv)
                grad_x = grad_x.view_as(x)
            if need_w and w2 is not None:
                xv = x2[src, feat]
                grad_w = x.new_zeros(st.num_edges * k).index_add_(0, edge * k + head, gv * xv)
                grad_w = grad_w.view_as(w)
            return None, None, grad_x, grad_w, None, None
        if ctx.reduce == "mean":
            g = g / st.in_degree().clamp(min=1).to(g.dtype)[:, None, None]
        if need_x:
            grad_x = _spmm_sum(st, g, w2, transpose=True).reshape(x.shape)
        if need_w and w is not None:
            grad_w = _sddmm_heads(st, g, x.reshape(s, k, r)).reshape(w.shape)
        return None, None, grad_x, grad_w, None, None


class ScaledSpMM:
    r"""A fixed, diagonally scaled aggregation, its edge values computed once.

    .. math::
        \mathrm{out} = \operatorname{diag}(a)\, A\, \operatorname{diag}(b)\, x
            + c \odot x_{[:M]}

    with ``A`` the adjacency (``M x S``), ``a`` ``[M]`` and ``b`` ``[S]`` per-row scales, and ``c``
    ``[M]`` an optional self-loop term (destination ``i`` is source row ``i``). GCN's symmetric
    normalisation is this product with ``a_i = (d_i + 1)^{-1/2}``, ``b_j = (d_j + 1)^{-1/2}``
    and ``c = a^2``. The values ``a_dst * b_src`` of the matrix and of its transpose (for the
    backward pass) are built once, so a call is one CSR product and one fused multiply-add,
    forward and backward, where scaling the rows around :func:`gspmm` costs three more passes
    over the rows and a rebuild of the values every call. The scales carry no gradient.

    Shapes:
        - dst_scale: ``[M]``; src_scale: ``[S]``; self_scale: ``[M]``; x: ``[S, *feat]``;
          output: ``[M, *feat]``.

    Raises:
        GraphError: If a scale has the wrong shape or requires grad.
    """

    def __init__(
        self,
        adj: object,
        dst_scale: Tensor,
        src_scale: Tensor,
        self_scale: Tensor | None = None,
    ) -> None:
        st = structure(adj)
        for name, t, n in (
            ("dst_scale", dst_scale, st.num_dst),
            ("src_scale", src_scale, st.num_src),
            ("self_scale", self_scale, st.num_dst),
        ):
            if t is None:
                continue
            if t.shape != (n,) or t.requires_grad:
                raise GraphError(
                    f"'{name}' must be a constant tensor of shape ({n},) (got shape "
                    f"{tuple(t.shape)}, requires_grad={t.requires_grad})"
                )
        self.values: Tensor | None = dst_scale.index_select(
            0, st.dst_index()
        ) * src_scale.index_select(0, st.indices)
        self.st = st
        self.dtype = self.values.dtype
        self.self_scale = None if self_scale is None else self_scale[:, None]
        self._mats: dict[bool, tuple[list[Tensor], list[tuple[int, int]]]] = {}

    def product(self, x: Tensor, transpose: bool) -> Tensor:
        """``diag(a) A diag(b) x`` (its transpose if ``transpose``) for 2-D ``x``, no self loop.

        The matrices (column blocks where the structure has them) are built on first use.
        """
        mats = self._mats.get(transpose)
        if mats is None:
            st = self.st
            values = self.values
            assert values is not None  # dropped only once both directions are built
            blocks = st.column_blocks(transpose, x.element_size())
            if blocks is None:
                whole = st.csr_t(values) if transpose else st.csr(values)
                cols = st.num_dst if transpose else st.num_src
                mats = self._mats[transpose] = ([whole], [(0, cols)])
            else:
                mats = self._mats[transpose] = (blocks.matrices(values, self.dtype), blocks.bounds)
            if len(self._mats) == 2:
                self.values = None  # the matrices hold what they need
        return blocked_mm(*mats, x)

    def __call__(self, x: Tensor) -> Tensor:
        """``[S, *feat] -> [M, *feat]``, differentiable in ``x`` (bfloat16 ``x``: widened)."""
        st = self.st
        (x,) = float32_inputs(x)
        if x.dim() < 1 or x.shape[0] != st.num_src:
            raise GraphError(
                f"'x' must have one row per source node, {st.num_src} rows (got shape "
                f"{tuple(x.shape)})"
            )
        if x.dtype != self.dtype:
            raise GraphError(f"'x' must be {self.dtype}, the scales' dtype (got {x.dtype})")
        with full_precision(x.device):
            out = _Scaled.apply(self, x.reshape(st.num_src, math.prod(x.shape[1:])))
        return out.reshape(st.num_dst, *x.shape[1:])


class _Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, op: ScaledSpMM, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.op = op
        out = op.product(x, False)
        if op.self_scale is not None:
            out.addcmul_(x[: op.st.num_dst], op.self_scale)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor]:  # type: ignore[override]
        op: ScaledSpMM = ctx.op
        grad = grad.contiguous()
        grad_x = op.product(grad, True)
        if op.self_scale is not None:
            grad_x[: op.st.num_dst].addcmul_(grad, op.self_scale)
        return None, grad_x


def gspmm_vjp(
    adj: object, grad: Tensor, reduce: Reduce = "sum", edge_weight: Tensor | None = None
) -> Tensor:
    """The input gradient of a linear aggregation: ``A^T grad`` (``mean``: rows scaled first).

    For ``out = gspmm(adj, x, reduce, edge_weight)`` with ``reduce`` ``"sum"`` or ``"mean"`` the
    gradient of ``<out, grad>`` with respect to ``x``, which does not depend on ``x``: an engine
    that cached ``out`` can back-propagate through the aggregation without the source rows.

    Shapes:
        - grad: ``[M, *feat]``; edge_weight: ``[E]`` or ``[E, H]``; output: ``[S, *feat]``.

    Raises:
        GraphError: For ``reduce="max"`` (not linear) or mismatched shapes.
    """
    st = structure(adj)
    if reduce not in ("sum", "mean"):
        raise GraphError(f"gspmm_vjp needs a linear reduction, 'sum' or 'mean' (got {reduce!r})")
    if grad.dim() < 1 or grad.shape[0] != st.num_dst:
        raise GraphError(
            f"'grad' must have {st.num_dst} rows, one per destination (got {tuple(grad.shape)})"
        )
    k, r = _split_shape(grad, edge_weight, st.num_edges)
    g = grad.reshape(st.num_dst, k, r)
    if reduce == "mean":
        g = g / st.in_degree().clamp(min=1).to(g.dtype)[:, None, None]
    w2 = None if edge_weight is None else edge_weight.reshape(st.num_edges, k)
    return _spmm_sum(st, g, w2, transpose=True).reshape(st.num_src, *grad.shape[1:])


class _SharedHeads(torch.autograd.Function):
    """``out[v, k] = sum_{e = (u -> v)} w[e, k] x[u]``: one set of rows, a weight per head."""

    @staticmethod
    def forward(ctx: Any, st: Structure, x: Tensor, w: Tensor) -> Tensor:  # type: ignore[override]
        k_heads, rows = w.shape[1], w.shape[1] * st.num_dst
        if st.num_edges:
            indptr, indices, order = st.shared_layout(k_heads, transpose=False)
            vals = w.reshape(-1).index_select(0, order)
            mat = _sparse_csr(indptr, indices, vals, (rows, st.num_src))
            out = blocked_mm([mat], [(0, st.num_src)], x)
        else:
            out = x.new_zeros((rows, x.shape[1]))
        ctx.st = st
        ctx.save_for_backward(x, w)
        return out.view(st.num_dst, k_heads, x.shape[1])

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        st: Structure = ctx.st
        x, w = ctx.saved_tensors
        k_heads = w.shape[1]
        grad_x = grad_w = None
        if st.num_edges == 0:
            return None, x.new_zeros(x.shape), w.new_zeros(w.shape)
        # a gradient laid out [K, M, R] (from a batched product per head) is read in place,
        # through the patterns with the heads stacked, rather than copied to [M, K, R]
        head_major = not grad.is_contiguous() and grad.transpose(0, 1).is_contiguous()
        g2 = (grad.transpose(0, 1) if head_major else grad).reshape(-1, x.shape[1])
        if ctx.needs_input_grad[1]:
            indptr, indices, order = st.shared_layout(k_heads, True, head_major)
            vals = w.reshape(-1).index_select(0, order)
            mat = _sparse_csr(indptr, indices, vals, (st.num_src, g2.shape[0]))
            grad_x = blocked_mm([mat], [(0, g2.shape[0])], g2)
        if ctx.needs_input_grad[2]:
            if st.num_edges > st.num_dst * st.num_src:  # repeated edges: see _sddmm_heads
                g3 = grad.reshape(st.num_dst, k_heads, x.shape[1])
                grad_w = (g3[st.dst_index()] * x.index_select(0, st.indices)[:, None]).sum(-1)
            else:
                indptr, indices, order = st.shared_layout(k_heads, False, head_major)
                shape = (g2.shape[0], st.num_src)
                pattern = _sparse_csr(indptr, indices, x.new_zeros(indices.numel()), shape)
                res = torch.sparse.sampled_addmm(pattern, g2, x.t(), beta=0.0)
                grad_w = w.new_empty(order.numel()).index_copy_(0, order, res.values())
                grad_w = grad_w.view(st.num_edges, k_heads)
        return None, grad_x, grad_w


def gspmm_heads(adj: object, x: Tensor, edge_weight: Tensor) -> Tensor:
    r"""Aggregate one set of source rows with a weight per edge and head.

    .. math::
        \mathrm{out}_{v, k} = \sum_{e = (u \to v)} w_{e, k} \, x_u

    The input rows are shared by every head (a layer that projects after aggregating, as
    :class:`~fleetgnn.nn.hetero.RGATConv` does where a relation has fewer destinations than
    sources). It runs as one sparse product over the adjacency with every row repeated per head
    (:meth:`~fleetgnn.ops.adjacency.Structure.shared_layout`), so ``x`` is never copied per
    head; the backward is one product with its transpose for ``x`` and one sampled product
    (SDDMM) for the weights.

    Shapes:
        - x: ``[S, R]``; edge_weight: ``[E, K]``; output: ``[M, K, R]``.

    Raises:
        GraphError: If shapes disagree.
    """
    st = structure(adj)
    x, edge_weight = float32_inputs(x, edge_weight)
    if x.dim() != 2 or x.shape[0] != st.num_src:
        raise GraphError(
            f"'x' must be [num_src, R] = [{st.num_src}, R] (got shape {tuple(x.shape)})"
        )
    if not x.is_floating_point():
        raise GraphError(f"'x' must be a float tensor (got {x.dtype})")
    if edge_weight.dim() != 2:
        raise GraphError(
            f"'edge_weight' must be [num_edges, heads] (got shape {tuple(edge_weight.shape)})"
        )
    check_rows("edge_weight", edge_weight, st.num_edges, "edge")
    with full_precision(x.device):
        return _SharedHeads.apply(st, x, edge_weight.to(x.dtype))


def gspmm(
    adj: object,
    x: Tensor,
    reduce: Reduce = "sum",
    edge_weight: Tensor | None = None,
) -> Tensor:
    r"""Aggregate source rows over each destination's in-edges.

    .. math::
        \mathrm{out}_v = \operatorname*{reduce}_{e = (u \to v)} w_e \, x_u

    ``mean`` divides the weighted sum by the number of in-edges (not by the sum of weights).
    A destination without in-edges gets 0 for every reduction (``max`` included). With ``max``
    the gradient of each ``(v, feature)`` goes to the one edge attaining the maximum; on ties the
    edge listed first in ``v``'s CSC segment wins.

    Shapes:
        - adj: CSC with ``M`` destinations, ``S`` sources and ``E`` edges (see
          :mod:`fleetgnn.ops.adjacency`).
        - x: ``[S, *feat]``, e.g. ``[S, D]`` or ``[S, H, D]``.
        - edge_weight: ``[E]`` (one weight per edge) or ``[E, H]`` (one per edge and head, for
          ``x`` of shape ``[S, H, ...]``).
        - output: ``[M, *feat]``.

    Args:
        adj: Adjacency-like object (Block, Adjacency, aggregator).
        x: Source features.
        reduce: ``"sum"``, ``"mean"`` or ``"max"``.
        edge_weight: Optional weights, differentiable.

    Returns:
        The aggregated destination features.

    Raises:
        GraphError: If shapes disagree or ``reduce`` is unknown.
    """
    st = structure(adj)
    x, edge_weight = float32_inputs(x, edge_weight)  # mixed precision: reduce in float32
    if reduce not in REDUCES:
        raise GraphError(f"'reduce' must be one of {REDUCES} (got {reduce!r})")
    if x.dim() < 1 or x.shape[0] != st.num_src:
        raise GraphError(
            f"'x' must have one row per source node, {st.num_src} rows (got shape "
            f"{tuple(x.shape)}); pass x_src, not x_dst"
        )
    if not x.is_floating_point():
        raise GraphError(f"'x' must be a float tensor (got {x.dtype})")
    if edge_weight is not None:
        check_rows("edge_weight", edge_weight, st.num_edges, "edge")
        edge_weight = edge_weight.to(x.dtype)
    k, r = _split_shape(x, edge_weight, st.num_edges)
    with full_precision(x.device):
        return _GSpMM.apply(st, reduce, x, edge_weight, k, r)
