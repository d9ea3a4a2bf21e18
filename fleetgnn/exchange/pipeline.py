"""The chunk scheduler: ``K`` asynchronous all-to-alls, at most ``depth`` in flight, overlapped.

One :class:`ChunkPipeline` runs the chunks of a :class:`~fleetgnn.exchange.plan.HaloPlan` in both
directions with the same loop (:meth:`ChunkPipeline.run`):

1. issue the first ``depth`` chunks' all-to-alls asynchronously (``depth = 0``: every chunk, and
   wait for all of them before any local work: the unpipelined baseline);
2. run the local work while they travel;
3. per chunk ``k`` in order: poll every exchange in flight (to timestamp completions), wait for
   chunk ``k``, issue chunk ``k + depth``, consume chunk ``k``'s rows.

Forward (:meth:`ChunkPipeline.forward`): chunk ``k`` sends ``x[send_rows[k]]`` and receives its
halo rows. Backward (``transpose=True``): chunk ``k`` sends the gradients of the halo rows it
received back to their owners (``recv_counts``/``send_counts`` swapped) and the owner adds them
into its rows ``send_rows[k]``. Every rank issues the chunks in order, so the collectives match.

Timing and volume accounting (:class:`ExchangeTimes`, :class:`HaloVolume`) live here. On CUDA the
exchanges run on a separate comm stream that waits for the compute stream before each issue; the
compute stream waits for the comm stream before using received rows.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fleetgnn.distributed import Communicator
from fleetgnn.distributed.transfer import hidden_fraction_of, zero_counters
from fleetgnn.errors import ConfigError
from fleetgnn.exchange.plan import ExchangeLayout, HaloPlan


# ---------------------------------------------------------------------------------- volumes
@dataclasses.dataclass(frozen=True)
class HaloVolume:
    """Rows moved by one exchange of ``[R, D]`` rows, per rank (multiply by ``D * itemsize``).

    Attributes:
        remote_edges: MGG-style rows: one fetch per remote edge, no deduplication.
        halo_rows: Deduplicated rows received (unique remote sources).
        send_rows: Deduplicated rows sent to other ranks.
    """

    remote_edges: int
    halo_rows: int
    send_rows: int

    @classmethod
    def of(cls, layout: ExchangeLayout, plan: HaloPlan) -> HaloVolume:
        """The volume of one exchange of ``plan`` over ``layout``."""
        return cls(
            remote_edges=layout.num_remote_edges,
            halo_rows=layout.num_halo,
            send_rows=int(sum(sum(c) for c in plan.send_counts)),
        )

    def bytes(self, row_bytes: int) -> dict[str, int]:
        """Closed-form bytes of one exchange: ``mgg`` (no dedup), ``dedup`` (received), ``sent``."""
        return {
            "mgg": self.remote_edges * row_bytes,
            "dedup": self.halo_rows * row_bytes,
            "sent": self.send_rows * row_bytes,
        }


# ---------------------------------------------------------------------------------- timing
@dataclasses.dataclass
class ExchangeTimes:
    """Seconds and counts accumulated by a :class:`ChunkPipeline` (mutable, reset per epoch).

    Both directions are covered: the forward chunk exchanges and the transposed chunk exchanges of
    a pipelined backward (``transpose=True``) that return the halo rows' gradients, so
    :attr:`hidden_fraction` is the share of all exchange time (forward and backward) hidden behind
    local work. Backward exchanges that run inside autograd (backpropagating through the
    differentiable all-to-all of :meth:`ChunkPipeline.gather`) are not timed.

    Attributes:
        comm_s: Sum over exchanges of the time from issue until completion was observed (polled
            after each piece of computation and at ``wait``): an upper bound on transfer time.
        wait_s: Time the computation was blocked waiting for an exchange (exposed communication).
        compute_s: Time in the aggregation kernels (local and remote parts, forward and the
            pipelined backward), as the callers account it (:meth:`ChunkPipeline.timed`).
        exchanges: Number of forward chunk all-to-alls issued.
        backward_exchanges: Number of transposed chunk all-to-alls issued by the pipelined
            backward.
        mgg_bytes: MGG-style volume of the forward exchanges (remote edges x row bytes).
        dedup_bytes: Deduplicated volume received by the forward exchanges (halo x row bytes).
    """

    comm_s: float = 0.0
    wait_s: float = 0.0
    compute_s: float = 0.0
    exchanges: int = 0
    backward_exchanges: int = 0
    mgg_bytes: int = 0
    dedup_bytes: int = 0

    @property
    def hidden_fraction(self) -> float:
        """``1 - wait_s / comm_s``: share of communication time overlapped with computation.

        0 for synchronous exchanges (the computation waits for all of it), 1 when every exchange
        had completed before its rows were needed; 0 when nothing was exchanged.
        """
        return hidden_fraction_of(self.comm_s, self.wait_s)

    def reset(self) -> None:
        """Zero every counter."""
        zero_counters(self)


class _InFlight:
    """One issued chunk exchange and when it was issued / seen complete."""

    __slots__ = ("done_at", "dtype", "handle", "issued_at")

    def __init__(self, handle: Any, issued_at: float, dtype: torch.dtype) -> None:
        self.handle, self.issued_at, self.dtype = handle, issued_at, dtype
        self.done_at: float | None = None

    def poll(self) -> None:
        if self.done_at is None and self.handle.is_completed():
            self.done_at = time.perf_counter()


def _poll(flights: list[_InFlight | None]) -> None:
    """Note the completion time of every finished exchange (non-blocking)."""
    for f in flights:
        if f is not None:
            f.poll()


# ---------------------------------------------------------------------------------- scheduler
class ChunkPipeline:
    """Runs a plan's ``K`` chunk all-to-alls, at most ``depth`` in flight, around local work.

    Collective: every :meth:`run` (hence :meth:`forward`, :meth:`gather`) issues one all-to-all
    per active chunk through the metered communicator; all ranks must make the same calls in the
    same order. Memory: per chunk in flight, its send buffer and its receive buffer.

    Args:
        plan: The chunked schedule.
        comm: The communicator (``None``: a single rank, nothing is exchanged).
        depth: Chunks in flight during local work (``>= 0``; 0: exchange every chunk first).
        volume: Rows one exchange moves (for :attr:`ExchangeTimes.mgg_bytes` /
            ``dedup_bytes``; ``None``: not accounted).
        device: Device of the send-row indices (that of the exchanged rows).
        comm_stream: On CUDA, a separate stream for the exchanges (``None``: the current one).
        times: Counters to accumulate into (``None``: fresh ones; share one to sum several).
        wire_dtype: The float dtype rows travel in (mixed precision: ``torch.bfloat16``, half
            the bytes of float32 rows, metered as such), cast back to their own dtype on
            arrival; forward rows and the backward's gradient rows alike. ``None``: rows travel
            as they are.

    Raises:
        ConfigError: If ``depth`` is not an int ``>= 0``.
    """

    def __init__(
        self,
        plan: HaloPlan,
        comm: Communicator | None,
        *,
        depth: int = 1,
        volume: HaloVolume | None = None,
        device: torch.device | str = "cpu",
        comm_stream: Any = None,
        times: ExchangeTimes | None = None,
        wire_dtype: torch.dtype | None = None,
    ) -> None:
        self.depth = _check_depth(depth)
        self.wire_dtype = wire_dtype
        self.plan, self.comm, self.volume = plan, comm, volume
        self.comm_stream = comm_stream
        self.times = times if times is not None else ExchangeTimes()
        to = torch.device(device)
        self.send_rows = [r.to(to) for r in plan.send_rows]

    def exchanges(self, k: int) -> bool:
        """Whether chunk ``k`` issues an all-to-all (a communicator and an active chunk)."""
        return self.comm is not None and self.plan.active[k]

    # ------------------------------------------------------------------ the loop
    def run(
        self,
        produce: Callable[[int], Tensor | None],
        consume: Callable[[int, Tensor | None], None],
        local: Callable[[], None] | None = None,
        *,
        transpose: bool = False,
        depth: int | None = None,
    ) -> None:
        """The pipeline: issue ``depth`` chunks, ``local()``, then per chunk wait/issue/consume.

        Collective: one all-to-all per active chunk whose ``produce`` returned rows (every rank
        must produce rows for the same chunks).

        Args:
            produce: ``produce(k)`` returns chunk ``k``'s send buffer (forward: ``send_counts[k]``
                rows; transposed: ``recv_counts[k]`` rows), or ``None`` to exchange nothing. It
                is called for every chunk, in order, before chunk ``k - depth`` is consumed.
            consume: ``consume(k, rows)`` with the received rows (forward: chunk ``k``'s halo
                rows; transposed: gradients of ``send_rows[k]``), or ``None`` when chunk ``k``
                exchanged nothing. Called for every chunk, in order.
            local: Local work overlapped with the first ``depth`` chunks.
            transpose: Run the transposed exchange (counts swapped) of a backward pass.
            depth: Overrides :attr:`depth` for this call.
        """
        d = self.depth if depth is None else _check_depth(depth)
        plan, k_all = self.plan, self.plan.num_chunks
        flights: list[_InFlight | None] = [None] * k_all

        def start(k: int) -> None:
            buf = produce(k)
            if buf is not None and self.exchanges(k):
                if transpose:
                    self.times.backward_exchanges += 1
                    flights[k] = self._launch(buf, plan.recv_counts[k], plan.send_counts[k])
                else:
                    self.times.exchanges += 1
                    flights[k] = self._launch(buf, plan.send_counts[k], plan.recv_counts[k])
            _poll(flights)

        pre = k_all if d == 0 else min(d, k_all)
        for k in range(pre):
            start(k)
        done: list[Tensor | None] = [None] * k_all
        if d == 0:  # unpipelined: every chunk arrives before any local work
            for k, f in enumerate(flights):
                done[k] = None if f is None else self._finish(f)
        if local is not None:
            local()
        for k in range(k_all):
            _poll(flights)
            f = flights[k]
            got = done[k] if done[k] is not None or f is None else self._finish(f)
            nxt = k + pre
            if d > 0 and nxt < k_all:
                start(nxt)
            consume(k, got)

    # ------------------------------------------------------------------ directions
    def forward(
        self,
        x: Tensor,
        consume: Callable[[int, Tensor], None],
        local: Callable[[], None] | None = None,
        *,
        depth: int | None = None,
    ) -> None:
        """The forward exchange of ``x``'s rows: ``consume(k, halo rows of chunk k)``.

        Collective. Records the exchange's volume. A chunk that exchanges nothing is consumed as
        ``[rows_k, *F]`` zeros (0 rows, since an inactive chunk holds no halo rows). The received
        rows are autograd-connected to ``x`` (a synchronous transposed exchange in backward).

        Shapes:
            - x: ``[R, *F]`` this rank's rows.
            - rows of chunk ``k``: ``[rows_k, *F]``, halo rows in chunk-major order.
        """
        self.record_volume(x)

        def produce(k: int) -> Tensor | None:
            return x.index_select(0, self.send_rows[k]) if self.exchanges(k) else None

        def take(k: int, rows: Tensor | None) -> None:
            if rows is None:
                rows = x.new_zeros((self.plan.chunk_rows(k), *x.shape[1:]))
            consume(k, rows)

        self.run(produce, take, local, depth=depth)

    def gather(self, x: Tensor) -> Tensor:
        """``[R, *F] -> [H, *F]``: every halo row, chunk-major (every chunk issued, then waited).

        Collective; differentiable (the backward returns each halo row's gradient to its owner,
        one synchronous transposed all-to-all per chunk, inside autograd).
        """
        parts: list[Tensor] = []
        self.forward(x, lambda _k, rows: parts.append(rows), depth=0)
        return torch.cat(parts) if parts else x[:0]

    def backward(
        self,
        produce: Callable[[int], Tensor | None],
        local: Callable[[], Tensor | None],
    ) -> Tensor | None:
        """The transposed exchange: return halo-row gradients to their owners and add them up.

        Collective. ``produce(k)`` computes chunk ``k``'s halo-row gradients ``[rows_k, *F]``
        (``None``: nothing to return); ``local()`` computes the local part of the gradient of
        this rank's rows, ``[R, *F]`` (or ``None``), while the first chunks travel; the rows
        coming back are added into it (``index_add_`` on ``send_rows[k]``, timed as compute) as
        they arrive.

        Returns:
            The gradient of this rank's rows (what ``local()`` returned, plus the returned rows).
        """
        box: list[Tensor | None] = [None]

        def run_local() -> None:
            box[0] = local()

        def add(k: int, rows: Tensor | None) -> None:
            acc = box[0]
            if rows is not None and acc is not None:
                with self.timed():
                    acc.index_add_(0, self.send_rows[k], rows)

        self.run(produce, add, run_local, transpose=True)
        return box[0]

    # ------------------------------------------------------------------ accounting
    def record_volume(self, x: Tensor) -> None:
        """Add one exchange of ``x``'s rows to :attr:`ExchangeTimes.mgg_bytes` / ``dedup_bytes``."""
        if self.volume is None:
            return
        wire = self.wire_dtype
        elem = wire.itemsize if wire is not None and x.is_floating_point() else x.element_size()
        row_bytes = elem * int(np.prod(x.shape[1:], dtype=np.int64))
        self.times.mgg_bytes += self.volume.remote_edges * row_bytes
        self.times.dedup_bytes += self.volume.halo_rows * row_bytes

    def timed(self) -> _Timed:
        """Context manager adding its wall time to :attr:`ExchangeTimes.compute_s`."""
        return _Timed(self.times)

    # ------------------------------------------------------------------ transport
    def on_wire(self, buf: Tensor) -> Tensor:
        """``buf`` as it travels: cast to :attr:`wire_dtype` (a float buffer), else itself.

        Differentiable: rows exchanged through autograd send their gradients back in the wire
        dtype too.
        """
        wire = self.wire_dtype
        if wire is None or not buf.is_floating_point() or buf.dtype == wire:
            return buf
        return buf.to(wire)

    def _launch(self, buf: Tensor, send: list[int], recv: list[int]) -> _InFlight:
        """Issue one asynchronous all-to-all of ``buf`` (on the comm stream on CUDA)."""
        dtype = buf.dtype
        buf = self.on_wire(buf)
        comm = self.comm
        if comm is None:  # pragma: no cover - run() only launches with a communicator
            raise ConfigError("a single-rank ChunkPipeline (comm=None) exchanges nothing")
        stream = self.comm_stream
        if stream is not None and buf.is_cuda:  # pragma: no cover - needs CUDA
            stream.wait_stream(torch.cuda.current_stream(buf.device))
            buf.record_stream(stream)
            with torch.cuda.stream(stream):
                h = comm.all_to_all(buf, send, recv_counts=recv, async_op=True)
        else:
            h = comm.all_to_all(buf, send, recv_counts=recv, async_op=True)
        return _InFlight(h, time.perf_counter(), dtype)

    def _finish(self, f: _InFlight) -> Tensor:
        """Wait for ``f``, account its time, return the received rows."""
        t0 = time.perf_counter()
        out = f.handle.wait()
        t1 = time.perf_counter()
        if self.comm_stream is not None and out.is_cuda:  # pragma: no cover - needs CUDA
            torch.cuda.current_stream(out.device).wait_stream(self.comm_stream)
            out.record_stream(torch.cuda.current_stream(out.device))
        self.times.wait_s += t1 - t0
        self.times.comm_s += (f.done_at if f.done_at is not None else t1) - f.issued_at
        return out if out.dtype == f.dtype else out.to(f.dtype)

    def __repr__(self) -> str:
        return (
            f"ChunkPipeline(num_chunks={self.plan.num_chunks}, depth={self.depth}, "
            f"active={sum(self.plan.active)}, comm={'yes' if self.comm is not None else 'none'})"
        )


class _Timed:
    """Adds the wall time of its ``with`` block to ``times.compute_s``."""

    __slots__ = ("_t0", "_times")

    def __init__(self, times: ExchangeTimes) -> None:
        self._times, self._t0 = times, 0.0

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self._times.compute_s += time.perf_counter() - self._t0


def _check_depth(depth: Any) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ConfigError(f"'depth' (chunks in flight) must be an int >= 0 (got {depth!r})")
    return depth
