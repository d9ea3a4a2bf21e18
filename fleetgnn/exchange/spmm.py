"""The pipelined weighted sum over local rows and exchanged halo rows, forward and backward.

For one rank's :class:`~fleetgnn.exchange.plan.ExchangeLayout` and
:class:`~fleetgnn.exchange.plan.HaloPlan`, the edges split into ``K + 1`` pieces: the local
piece (sources among this rank's ``R`` rows) and one piece per chunk (sources among the chunk's
halo rows), so

``y = A_local x + sum_k A_k h_k``,  ``h_k`` = the halo rows received in chunk ``k``

====================  ==========================  =================================================
piece                 structure                   source rows
====================  ==========================  =================================================
local                 ``[M, R]``                  ``x`` (this rank's rows, ``row_ids`` order)
chunk ``k``           ``[M, rows_k]``             ``h_k`` (chunk-major halo rows of chunk ``k``)
combined              ``[M, R + H]``              ``[x; h_0; h_1; ...]``, every edge, given order
====================  ==========================  =================================================

:meth:`HaloSpmm.sum` runs it through a :class:`~fleetgnn.exchange.pipeline.ChunkPipeline`: the
local piece is aggregated while the first chunks travel, then each chunk's piece as it arrives.
Its backward (:class:`_HaloSum`) runs the same pipeline transposed: per chunk, the gradient of
the received rows (``A_k^T g``, cached transposed CSR) is computed and sent back to the owners
while the local part ``A_local^T g`` is computed; the owners add the returned rows into their
rows' gradient. Edge-weight gradients need no communication (the received rows are kept).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from fleetgnn.distributed import Communicator
from fleetgnn.errors import ConfigError
from fleetgnn.exchange.pipeline import ChunkPipeline, ExchangeTimes, HaloVolume
from fleetgnn.exchange.plan import ExchangeLayout, HaloPlan
from fleetgnn.ops import float32_inputs, full_precision, gsddmm, gspmm
from fleetgnn.ops.adjacency import Structure


class HaloSpmm:
    """``[R, *F] -> [M, *F]``: the weighted sum over a rank's edges, halo rows exchanged in chunks.

    Collective: :meth:`sum`, :meth:`halo_rows` and :meth:`extended` communicate (one all-to-all
    per active chunk, and the same backward); all ranks must make the same calls in the same
    order. Memory: the ``K + 1`` piece structures (``E`` edges in all, plus the combined one and
    lazily the transposed pieces), the halo buffers (``H`` rows of the exchanged width) and
    per-chunk send buffers.

    Args:
        layout: This rank's layout.
        plan: The chunked schedule over it.
        comm: The communicator (``None``: a single rank).
        depth: Chunks in flight during local work (``>= 0``).
        device: Device of the structures and of the exchanged rows.
        comm_stream: On CUDA, a separate stream for the exchanges.
        times: Counters to accumulate into (``None``: fresh ones).
        wire_dtype: The dtype rows travel in (:class:`ChunkPipeline`; ``None``: as they are).
            Sums are taken in float32 whatever the rows' dtype (bfloat16 rows are widened).

    Attributes:
        pipeline: The :class:`ChunkPipeline` running the exchanges.
        structure: The combined ``[M, R + H]`` structure (every edge, the layout's order) over
            ``[x; halo rows in chunk-major order]``.
    """

    def __init__(
        self,
        layout: ExchangeLayout,
        plan: HaloPlan,
        comm: Communicator | None,
        *,
        depth: int = 1,
        device: torch.device | str = "cpu",
        comm_stream: Any = None,
        times: ExchangeTimes | None = None,
        wire_dtype: torch.dtype | None = None,
    ) -> None:
        to = torch.device(device)
        self.layout, self.plan = layout, plan
        self.pipeline = ChunkPipeline(
            plan,
            comm,
            depth=depth,
            volume=HaloVolume.of(layout, plan),
            device=to,
            comm_stream=comm_stream,
            times=times,
            wire_dtype=wire_dtype,
        )
        m, r, h = layout.num_dst, layout.num_rows, layout.num_halo
        dst = np.repeat(np.arange(m, dtype=np.int64), np.diff(layout.indptr))
        # chunk-major position of every halo row, then every edge's row in [x; halo]
        rank_of = np.empty(h, dtype=np.int64)
        rank_of[plan.halo_order] = np.arange(h, dtype=np.int64)
        loc = layout.is_local
        remote = ~loc
        ext = np.where(loc, layout.src_row, 0).astype(np.int64)  # int64: the ops' index dtype
        ext[remote] = r + rank_of[layout.halo_pos[remote]]
        self.structure = Structure(
            torch.from_numpy(layout.indptr.copy()).to(to), torch.from_numpy(ext).to(to), m, r + h
        )
        eid = np.arange(layout.num_edges, dtype=np.int64)
        self._local = Structure.from_sorted_edges(dst[loc], ext[loc], m, r).to(to)
        self._local_eid = torch.from_numpy(eid[loc]).to(to)
        chunk_of_edge = np.searchsorted(plan.halo_offsets, ext - r, side="right") - 1
        self._chunks: list[tuple[Structure, Tensor]] = []
        for k in range(plan.num_chunks):  # K pieces, not a loop over nodes or edges
            sel = remote & (chunk_of_edge == k)
            base = r + int(plan.halo_offsets[k])
            st = Structure.from_sorted_edges(dst[sel], ext[sel] - base, m, plan.chunk_rows(k))
            self._chunks.append((st.to(to), torch.from_numpy(eid[sel]).to(to)))
        # transposed pieces for the pipelined backward (index 0: local, k + 1: chunk k), lazily
        self._transposed: list[tuple[Structure, Tensor] | None] = [None] * (plan.num_chunks + 1)

    # ------------------------------------------------------------------ accessors
    @property
    def times(self) -> ExchangeTimes:
        """The pipeline's counters."""
        return self.pipeline.times

    @property
    def volume(self) -> HaloVolume:
        """Rows moved by one exchange."""
        volume = self.pipeline.volume
        if volume is None:  # pragma: no cover - always set by the constructor
            raise ConfigError("HaloSpmm's pipeline has no volume")
        return volume

    @property
    def num_edges(self) -> int:
        """Edges of the layout (every piece)."""
        return self.structure.num_edges

    # ------------------------------------------------------------------ public
    def sum(
        self, x: Tensor, edge_weight: Tensor | None = None, *, overlap_backward: bool = True
    ) -> Tensor:
        """``y[v] = sum_{e = (u -> v)} w_e * row(u)``, remote rows exchanged in chunks.

        Collective (forward, and backward when ``x`` needs a gradient).

        Shapes:
            - x: ``[R, *F]`` this rank's rows (``layout.row_ids`` order).
            - edge_weight: ``[E]`` or ``[E, *H]`` broadcasting against ``*F``.
            - output: ``[M, *F]``.

        Args:
            x: This rank's rows.
            edge_weight: Per-edge weights in the layout's edge order (``None``: 1).
            overlap_backward: Pipeline the backward too (:class:`_HaloSum`, chunked transposed
                exchanges overlapped with the local backward); ``False``: backpropagate through
                each chunk's differentiable all-to-all (the synchronous baseline, same gradients).

        Raises:
            ConfigError: ``x`` or ``edge_weight`` have the wrong number of rows.
        """
        self.check_rows(x)
        x, edge_weight = float32_inputs(x, edge_weight)  # mixed precision: sum in float32
        if edge_weight is not None and edge_weight.shape[:1] != (self.num_edges,):
            raise ConfigError(
                f"'edge_weight' must have one row per edge of the layout, {self.num_edges} "
                f"(got shape {tuple(edge_weight.shape)})"
            )
        w = None if edge_weight is None else edge_weight.to(x.dtype)
        with full_precision(x.device):
            if overlap_backward:
                return _HaloSum.apply(self, x, w)
            out, _ = self._sum_forward(x, w)
        return out

    def halo_rows(self, x: Tensor) -> Tensor:
        """``[R, *F] -> [H, *F]``: the halo rows, chunk-major (every chunk, then wait).

        Collective; differentiable.
        """
        self.check_rows(x)
        return self.pipeline.gather(x)

    def extended(self, x: Tensor) -> Tensor:
        """``[R, *F] -> [R + H, *F]``: ``[x; halo rows]``, the rows of :attr:`structure`.

        Collective; differentiable.
        """
        return torch.cat([x, self.halo_rows(x)])

    def check_rows(self, x: Tensor) -> None:
        """Raise unless ``x`` holds this rank's ``R`` rows.

        Raises:
            ConfigError: Naming the expected row count and the shape received.
        """
        r = self.layout.num_rows
        if x.dim() < 1 or x.shape[0] != r:
            raise ConfigError(
                f"'x' must hold this rank's {r} rows (got shape {tuple(x.shape)}); remote rows "
                f"are fetched by the exchange"
            )

    # ------------------------------------------------------------------ forward
    def _sum_forward(self, x: Tensor, w: Tensor | None) -> tuple[Tensor, list[Tensor]]:
        """The pipelined weighted sum and the received halo rows per chunk.

        Differentiable through each chunk's all-to-all when called under autograd (the
        ``overlap_backward=False`` path); :class:`_HaloSum` calls it with autograd off.
        """
        pipe = self.pipeline
        acc: list[Tensor] = []
        received: list[Tensor] = []

        def local() -> None:
            with pipe.timed():
                wk = None if w is None else w.index_select(0, self._local_eid)
                acc.append(gspmm(self._local, x, "sum", wk))

        def consume(k: int, rows: Tensor) -> None:
            received.append(rows)
            st, eid = self._chunks[k]
            with pipe.timed():
                wk = None if w is None else w.index_select(0, eid)
                acc[0] = acc[0] + gspmm(st, rows, "sum", wk)

        pipe.forward(x, consume, local)
        return acc[0], received

    # ------------------------------------------------------------------ backward
    def _piece_t(self, i: int) -> tuple[Structure, Tensor]:
        """Transposed structure of piece ``i`` (0: local, ``k + 1``: chunk ``k``), edge perm."""
        cached = self._transposed[i]
        if cached is None:
            st = self._local if i == 0 else self._chunks[i - 1][0]
            t_indptr, t_indices, perm = st.transposed()
            cached = (Structure(t_indptr, t_indices, st.num_src, st.num_dst), perm)
            self._transposed[i] = cached
        return cached

    def _piece_grads(
        self,
        i: int,
        g: Tensor,
        rows: Tensor | None,
        w: Tensor | None,
        need_x: bool,
        gw: Tensor | None,
    ) -> Tensor | None:
        """Backward of piece ``i``: returns ``A_i^T g`` (if ``need_x``), fills ``gw`` rows.

        Shapes:
            - g: ``[M, *F]`` gradient of the summed output.
            - rows: ``[S_i, *F]`` the piece's source rows (needed only for ``gw``).
            - output: ``[S_i, *F]`` (``S_i = R`` for the local piece, chunk rows otherwise).
        """
        st, eid = (self._local, self._local_eid) if i == 0 else self._chunks[i - 1]
        wi = None if w is None else w.index_select(0, eid)
        with self.pipeline.timed():
            gx = None
            if need_x:
                st_t, perm = self._piece_t(i)
                gx = gspmm(st_t, g, "sum", None if wi is None else wi.index_select(0, perm))
            if gw is not None and rows is not None and st.num_edges > 0:
                heads = int(np.prod(gw.shape[1:], dtype=np.int64))
                per = int(np.prod(g.shape[1:], dtype=np.int64)) // max(heads, 1)
                a = rows.reshape(st.num_src, heads, per)  # [S_i, K, R]
                b = g.reshape(st.num_dst, heads, per)  # [M, K, R]
                dots = gsddmm(st, a, b, "dot")  # [E_i, K]: <g[dst_e], x[src_e]> per head
                gw.index_copy_(0, eid, dots.reshape(eid.numel(), *gw.shape[1:]))
        return gx

    def _sum_backward(
        self,
        grad: Tensor,
        x: Tensor,
        w: Tensor | None,
        received: list[Tensor],
        need_x: bool,
        need_w: bool,
    ) -> tuple[Tensor | None, Tensor | None]:
        """Pipelined backward of :meth:`_sum_forward` (the pipeline run transposed).

        Collective when ``need_x``: one transposed all-to-all per active chunk, in chunk order.
        """
        g = grad.contiguous()
        gw = torch.zeros_like(w) if need_w and w is not None else None
        exchange = need_x and self.pipeline.comm is not None

        def produce(k: int) -> Tensor | None:
            rows = received[k] if gw is not None else None
            gk = self._piece_grads(k + 1, g, rows, w, need_x, gw)
            return gk if exchange else None

        def local() -> Tensor | None:
            return self._piece_grads(0, g, x if gw is not None else None, w, need_x, gw)

        return self.pipeline.backward(produce, local), gw

    def __repr__(self) -> str:
        lay = self.layout
        return (
            f"HaloSpmm(rank={lay.rank}, dst={lay.num_dst}, rows={lay.num_rows}, "
            f"edges={self.num_edges}, halo={lay.num_halo}, chunks={self.plan.num_chunks}, "
            f"depth={self.pipeline.depth})"
        )


class _HaloSum(torch.autograd.Function):
    """The whole pipelined halo sum (local part + ``K`` remote chunks) as one autograd node.

    Forward: :meth:`HaloSpmm._sum_forward` with autograd off, keeping the received halo rows only
    when the edge weights need a gradient. Backward: :meth:`HaloSpmm._sum_backward`, chunked
    transposed exchanges overlapped with the local backward. Not twice differentiable.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, spmm: HaloSpmm, x: Tensor, w: Tensor | None
    ) -> Tensor:
        out, received = spmm._sum_forward(x, w)
        keep = w is not None and bool(ctx.needs_input_grad[2])
        ctx.spmm = spmm
        ctx.save_for_backward(x, w, *(received if keep else ()))
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        x, w, *received = ctx.saved_tensors
        spmm: HaloSpmm = ctx.spmm
        need_x, need_w = bool(ctx.needs_input_grad[1]), bool(ctx.needs_input_grad[2])
        gx, gw = spmm._sum_backward(grad, x, w, received, need_x, need_w)
        return None, gx, gw
