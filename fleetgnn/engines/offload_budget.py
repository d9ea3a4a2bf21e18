"""The ``offload`` engine's device budget: the live bytes of one chunk, predicted and chosen.

:class:`OffloadBudget` is a part of :class:`~fleetgnn.engines.offload.OffloadEngine` (a mixin
over the engine's attributes: widths, plan, hops, model, device): the number of chunks is the
smallest power of two whose predicted peak fits ``device_budget``. The prediction adds the
static buffers, the copies in flight beside a chunk (``overlap_transfers``) and a bound of one
chunk's live bytes (autograd's saved tensors probed on the largest chunks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fleetgnn.config.units import parse_bytes
from fleetgnn.engines.common import loss_sum
from fleetgnn.errors import FleetgnnError
from fleetgnn.exchange import ChunkHop
from fleetgnn.exchange.transition import RankPlan
from fleetgnn.graph import Graph
from fleetgnn.nn.recompute import RecordingAggregator as _Recording
from fleetgnn.nn.recompute import ReplayAggregator as _Replay
from fleetgnn.nn.recompute import SavedBytesMeter as _SavedMeter
from fleetgnn.partition import chunk_partition

#: Chunk counts tried when none is given: powers of two.
_MAX_DOUBLINGS = 40
#: Chunks per part without a budget on CPU.
DEFAULT_CHUNKS = 4


class OffloadBudgetError(FleetgnnError):
    """The device budget cannot hold the live buffers of one chunk."""


def _ratio(hop: ChunkHop, probe: ChunkHop) -> float:
    """The largest of ``hop``'s rows, edges and destinations relative to ``probe``'s."""
    return max(
        hop.rows.size / max(probe.rows.size, 1),
        hop.num_edges / max(probe.num_edges, 1),
        hop.num_dst / max(probe.num_dst, 1),
    )


class OffloadBudget:
    """The offload engine's chunk count and peak prediction (see the module docstring)."""

    # provided by the engine
    budget: int | None
    overlap: bool
    widths: list[int]
    elem: int
    rank: int
    world_size: int
    num_layers: int
    hybrid: list[bool]
    book: Any
    comm: Any
    device: torch.device
    dtype: torch.dtype
    module: Any
    loss: Any

    if TYPE_CHECKING:  # the engine's methods this part calls

        def _rank_plan(self, chunks: Any, reorganise: bool) -> RankPlan: ...
        def _hop_of(self, chunks: Any, order_chunk: int) -> ChunkHop: ...
        def _aggregator(self, hop: ChunkHop) -> Any: ...

    def _budget(self, value: str | int | None) -> int | None:
        if value is not None:
            return parse_bytes(value, "offload.device_budget")
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            return int(free * 0.9)
        return None

    def _choose_chunks(self, g: Graph, given: int | None) -> int:
        """The number of chunks per part: ``given`` if it fits, else the smallest that does."""
        part_nodes = int(np.diff(np.asarray(self.book.offsets)).max()) if g.num_nodes else 1
        if self.budget is None:
            return int(given) if given is not None else max(1, min(DEFAULT_CHUNKS, part_nodes))
        if given is not None:
            peak = self._predict(g, int(given))
            if peak <= self.budget:
                return int(given)
        m, tried = 1, []
        for _ in range(_MAX_DOUBLINGS):
            peak = self._predict(g, m)
            tried.append((m, peak))
            if peak <= self.budget:
                break
            if m >= part_nodes:
                m = -1
                break
            m = min(2 * m, part_nodes)
        fits = m if m > 0 and tried[-1][1] <= self.budget else None
        if given is None and fits is not None:
            return fits
        b = self.budget
        msg = f"offload.device_budget={b} bytes"
        if given is not None:
            msg += (
                f" cannot hold one chunk with offload.chunks={given} (predicted peak "
                f"{self._predict(g, int(given))} bytes on the fullest rank)"
            )
        else:
            msg += " cannot hold one chunk"
        if fits is not None:
            msg += f"; the smallest number of chunks that fits is offload.chunks={fits}"
        else:
            smallest = min(p for _, p in tried)
            msg += (
                f" even with one node per chunk (peak {smallest} bytes); raise the budget or "
                f"use more ranks"
            )
        raise OffloadBudgetError(msg)

    def _static_bytes(self, plan: RankPlan) -> int:
        """Buffers that live all epoch: transition, gradient and staging buffers."""
        cap = int(plan.capacity[self.rank])
        staging = int(plan.staging_caps()[self.rank].sum())
        return (cap * self._hmax + (cap + staging) * self._gmax) * self.elem

    def _overlap_bytes(self, plan: RankPlan, hops: list[ChunkHop]) -> int:
        """Device bytes of the copies in flight beside a chunk (``overlap_transfers``).

        The next chunk's rows (loaded transition rows, or its own rows for a cached layer, and
        its output gradients) and the previous chunk's write-back (its outputs, or the
        gradients its flush returns to host).
        """
        if not self.overlap or not hops:
            return 0
        r, omax = self.rank, max(self.widths[1:])
        loaded = max(int(np.count_nonzero(plan.load[j][r])) for j in range(len(hops)))
        leave = max(np.asarray(plan.leave[j][r][0]).size for j in range(len(hops) + 1))
        dst = max(h.num_dst for h in hops)
        ahead = max(loaded, dst) * self._hmax + dst * omax
        behind = max(dst * omax, leave * self._gmax)
        return (ahead + behind) * self.elem

    @property
    def _hmax(self) -> int:
        """Width of the transition buffer: the widest layer input."""
        return max(self.widths[:-1])

    @property
    def _gmax(self) -> int:
        """Width of the gradient and staging buffers: the widest input of layers 1..L-1."""
        return max(self.widths[1:-1], default=0)

    def _predict(self, g: Graph, m: int) -> int:
        """Predicted peak live bytes with ``m`` chunks per part (identity order).

        The largest over ranks (collective), so every rank takes the same decision.
        """
        chunks = chunk_partition(g, self.book, m, relabelled=True)
        plan = self._rank_plan(chunks, False)
        hops = [self._hop_of(chunks, c) for c in range(m)]
        static = self._static_bytes(plan) + self._overlap_bytes(plan, hops)
        exact = max(
            (
                self._chunk_bytes(h, self.widths[i], self.widths[i + 1])
                for h in hops
                for i in range(self.num_layers)
            ),
            default=0,
        )
        floor = self._max_over_ranks(static + exact)
        if floor > (self.budget or 0):
            return floor  # over without autograd's share: no probe (it would allocate that much)
        return self._max_over_ranks(static + self._dynamic_bound(hops))

    def _max_over_ranks(self, value: int) -> int:
        if self.world_size == 1:
            return int(value)
        return int(max(self.comm.all_gather_object(int(value))))

    def _dynamic_bound(self, hops: list[ChunkHop]) -> int:
        """Upper bound of the per-chunk live bytes over ``hops`` and layers.

        Exact for the neighbour rows, their gradient, the outputs and the topology; autograd's
        saved tensors are measured on the hops with the most rows, edges and destinations and
        bounded for the others by ``min_p saved_p * max(rows / rows_p, edges / edges_p,
        dst / dst_p)`` (an upper bound when the saved bytes are linear in the three with
        non-negative coefficients).
        """
        live = [h for h in hops if h.num_dst > 0]
        if not live:
            return 0
        probes = {
            id(h): h
            for h in (
                max(live, key=lambda h: h.rows.size),
                max(live, key=lambda h: h.num_edges),
                max(live, key=lambda h: h.num_dst),
            )
        }
        best = 0
        for layer in range(self.num_layers):
            d_in, d_out = self.widths[layer], self.widths[layer + 1]
            saved = [(p, self._probe_saved(p, layer)) for p in probes.values()]
            for h in live:
                bound = min(s * _ratio(h, p) for p, s in saved)
                best = max(best, self._chunk_bytes(h, d_in, d_out) + int(bound))
        return best

    def _chunk_bytes(self, hop: ChunkHop, d_in: int, d_out: int) -> int:
        """Neighbour rows and their gradient, outputs and their gradient, topology."""
        return (2 * hop.rows.size * d_in + 2 * hop.num_dst * d_out) * self.elem + hop.nbytes

    def _probe_saved(self, hop: ChunkHop, layer: int) -> int:
        """Autograd's saved bytes of ``layer`` on ``hop`` (zeros as inputs; shapes decide)."""
        agg: Any = self._aggregator(hop)
        h = torch.zeros(hop.rows.size, self.widths[layer], dtype=self.dtype, device=self.device)
        if self.hybrid[layer]:  # the backward replays the cached aggregates
            rec = _Recording(agg)
            with torch.no_grad():
                self.module.layer_forward(layer, rec, h, step=0)
            agg = _Replay(agg, rec.outputs, layer)
        h.requires_grad_(layer > 0)
        meter = _SavedMeter([*self.module.parameters(), h])
        with torch.enable_grad(), meter():
            out = self.module.layer_forward(layer, agg, h, step=0)
            if layer == self.num_layers - 1:  # the loss, as if every destination trained
                target = torch.zeros(out.shape[0], dtype=torch.int64, device=self.device)
                loss_sum(self.loss, out, target)
        del out
        return meter.bytes
