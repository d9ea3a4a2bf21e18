"""Host <-> device copies that can overlap with computation (HongTu Sec. 5-6).

:class:`Transfers` moves rows between host tensors and one device. Every copy is issued and
later waited for, so a caller can issue the next chunk's loads before it computes the current
chunk (double buffering) and collect the current chunk's results while the next one computes.

========================  =========================================  ==============================
path                      load (host -> device)                      save (device -> host)
========================  =========================================  ==============================
``overlap`` on CUDA       host gather into a pinned staging buffer,  the copy stream waits for the
                          ``copy_(non_blocking=True)`` on a side     compute stream, copies into a
                          copy stream, an event; ``wait`` makes the  pinned buffer (or a pinned
                          compute stream wait for the event          destination) and records an
                                                                     event; ``wait`` blocks on it
``overlap`` on the CPU    the copy at issue (a fresh tensor)         the copy at ``wait`` (the
                                                                     latest an async copy could
                                                                     land: a hazard shows)
blocking (``overlap``     ``index_select(...).to(device)``           ``.cpu()`` / ``copy_`` at issue
off, any device)          from pageable memory at issue
========================  =========================================  ==============================

The values are the same on every path (copies are exact), so an engine's results do not depend
on ``overlap``. Pinned buffers are kept per ``key`` and grown as needed; a key's buffer is reused
only after its last copy completed, so keys alternating between two values give double buffers.

Timing (:class:`TransferTimes`): ``transfer_s`` is the time of the copies themselves (CUDA:
the copy stream's events, plus the host's staging gather; elsewhere the wall time of the copy),
``wait_s`` the time the caller was blocked waiting for them (on the blocking paths the whole
copy), ``hidden_fraction = 1 - wait_s / transfer_s`` the share hidden behind computation, as the
``fullgraph`` engine reports its halo exchanges.

Memory: the device tensors of copies in flight (:attr:`Transfers.inflight_bytes`), and pinned
host staging of at most the largest copy per key.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Hashable
from typing import Any

import torch


def hidden_fraction_of(busy_s: float, wait_s: float) -> float:
    """``1 - wait_s / busy_s`` in [0, 1]: the share of copy or exchange time hidden.

    ``busy_s``: time of the copies or exchanges; ``wait_s``: time the computation was blocked
    waiting for them. 0 when nothing ran (or all blocked).
    """
    if busy_s <= 0:
        return 0.0
    return float(min(1.0, max(0.0, 1.0 - wait_s / busy_s)))


def zero_counters(counters: Any) -> None:
    """Zero every field of a dataclass of counters (ints and floats)."""
    for f in dataclasses.fields(counters):
        setattr(counters, f.name, type(getattr(counters, f.name))(0))


@dataclasses.dataclass
class TransferTimes:
    """Seconds, counts and bytes of :class:`Transfers`' copies (reset per epoch).

    Attributes:
        transfer_s: Time of the copies (see the module docstring).
        wait_s: Time the caller was blocked waiting for copies.
        loads: Host-to-device copies issued.
        saves: Device-to-host copies issued.
        h2d_bytes: Bytes copied host to device.
        d2h_bytes: Bytes copied device to host.
    """

    transfer_s: float = 0.0
    wait_s: float = 0.0
    loads: int = 0
    saves: int = 0
    h2d_bytes: int = 0
    d2h_bytes: int = 0

    @property
    def hidden_fraction(self) -> float:
        """``1 - wait_s / transfer_s`` in [0, 1]; 0 when nothing was copied or all blocked."""
        return hidden_fraction_of(self.transfer_s, self.wait_s)

    def reset(self) -> None:
        """Zero every counter."""
        zero_counters(self)

    def to_dict(self) -> dict[str, float | int]:
        """The counters and ``hidden_fraction``, for an epoch report."""
        out: dict[str, float | int] = dataclasses.asdict(self)
        out["hidden_fraction"] = self.hidden_fraction
        return out


class Pending:
    """One issued copy; :meth:`wait` returns its result (a device or a host tensor), once."""

    __slots__ = ("_finish", "_owner", "_result", "nbytes")

    def __init__(self, owner: Transfers, finish: Any, nbytes: int) -> None:
        self._owner, self._finish, self.nbytes = owner, finish, nbytes
        self._result: torch.Tensor | None = None

    @property
    def done(self) -> bool:
        """Whether :meth:`wait` has returned."""
        return self._finish is None

    def wait(self) -> torch.Tensor:
        """Block until the copy landed (a load: the compute stream waits) and return it."""
        if self._finish is not None:
            finish, self._finish = self._finish, None
            self._result = finish()
            self._owner._settled(self)
        assert self._result is not None
        return self._result


class Transfers:
    """Issue host <-> device copies now, use their results later (see the module docstring).

    Args:
        device: The device (``"cpu"`` or ``"cuda[:i]"``).
        overlap: Copy on a side stream from pinned memory (CUDA), or emulate the asynchrony
            window (CPU); ``False``: blocking copies, as from pageable memory.
    """

    def __init__(self, device: torch.device | str, overlap: bool) -> None:
        self.device = torch.device(device)
        self.overlap = bool(overlap)
        self.cuda = self.device.type == "cuda"
        self.stream: Any = torch.cuda.Stream(self.device) if self.overlap and self.cuda else None
        self.times = TransferTimes()
        self._pinned: dict[Hashable, torch.Tensor] = {}
        self._busy: dict[Hashable, Pending] = {}  # a key's last copy, until it settled
        self._inflight: dict[int, Pending] = {}

    # ------------------------------------------------------------------ host memory
    @property
    def pins(self) -> bool:
        """Whether host buffers are page-locked (overlapped copies to a CUDA device)."""
        return self.stream is not None

    def host_zeros(self, *shape: int, dtype: torch.dtype) -> torch.Tensor:
        """A zero host tensor, page-locked when :attr:`pins` (a copy from it can be async)."""
        return torch.zeros(*shape, dtype=dtype, pin_memory=self.pins)

    def _staging(self, key: Hashable, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """``key``'s pinned buffer viewed as ``shape`` (its previous copy waited for first)."""
        prev = self._busy.pop(key, None)
        if prev is not None:
            prev.wait()
        numel = _numel(shape)
        buf = self._pinned.get(key)
        if buf is None or buf.dtype != dtype or buf.numel() < numel:
            buf = torch.empty(max(numel, 1), dtype=dtype, pin_memory=True)
            self._pinned[key] = buf
        return buf[:numel].view(shape)

    # ------------------------------------------------------------------ copies
    @property
    def inflight_bytes(self) -> int:
        """Device bytes held by copies issued and not yet waited for."""
        return sum(p.nbytes for p in self._inflight.values())

    def load(
        self, src: torch.Tensor, index: torch.Tensor | None = None, *, key: Hashable = None
    ) -> Pending:
        """Issue the copy of ``src[index]`` (``index``: host int64; ``None``: all of ``src``).

        ``key`` names the pinned staging buffer a gather goes through (CUDA, overlapped).
        """
        shape = (int(index.numel()), *src.shape[1:]) if index is not None else tuple(src.shape)
        nbytes = src.element_size() * _numel(shape)
        self.times.loads += 1
        self.times.h2d_bytes += nbytes
        if self.stream is None:
            t0 = time.perf_counter()
            if index is not None:
                out = src.index_select(0, index).to(self.device)
            elif self.overlap or self.cuda:
                out = src.to(self.device, copy=True)  # a fresh tensor, as an async copy gives
            else:
                out = src  # the blocking path on the CPU: the view, as before
            dt = time.perf_counter() - t0
            self.times.transfer_s += dt
            self.times.wait_s += dt
            return self._track(Pending(self, lambda: out, nbytes), key)
        return self._track(self._load_async(src, index, shape, nbytes, key), key)

    def save(
        self, src: torch.Tensor, dst: torch.Tensor | None = None, *, key: Hashable = None
    ) -> Pending:
        """Issue the copy of the device tensor ``src`` into ``dst`` (a host tensor or view).

        ``dst=None``: into ``key``'s pinned buffer when overlapped on CUDA, else a new host
        tensor; :meth:`Pending.wait` returns the host tensor, valid until ``key`` is reused.
        """
        nbytes = src.numel() * src.element_size()
        self.times.saves += 1
        self.times.d2h_bytes += nbytes
        if self.stream is None:
            if self.overlap:  # the CPU: copy as late as an async copy could land

                def late() -> torch.Tensor:
                    t0 = time.perf_counter()
                    out = src.cpu() if dst is None else dst.copy_(src)
                    dt = time.perf_counter() - t0
                    self.times.transfer_s += dt
                    self.times.wait_s += dt
                    return out

                return self._track(Pending(self, late, nbytes), key)
            t0 = time.perf_counter()
            out = src.cpu() if dst is None else dst.copy_(src)
            dt = time.perf_counter() - t0
            self.times.transfer_s += dt
            self.times.wait_s += dt
            return Pending(self, lambda: out, 0)
        return self._track(self._save_async(src, dst, nbytes, key), key)

    def drain(self) -> None:
        """Wait for every copy in flight (in issue order)."""
        for p in list(self._inflight.values()):
            p.wait()

    # ------------------------------------------------------------------ CUDA
    def _load_async(
        self,
        src: torch.Tensor,
        index: torch.Tensor | None,
        shape: tuple[int, ...],
        nbytes: int,
        key: Hashable,
    ) -> Pending:
        t0 = time.perf_counter()
        if index is not None or not src.is_pinned():
            host = self._staging(key, shape, src.dtype)
            if index is not None:
                torch.index_select(src, 0, index, out=host)
            else:
                host.copy_(src)
        else:
            host = src
        staged_s = time.perf_counter() - t0
        start, end = _timed_events()
        stream, current = self.stream, torch.cuda.current_stream(self.device)
        with torch.cuda.stream(stream):
            start.record(stream)
            out = torch.empty(shape, dtype=src.dtype, device=self.device)
            out.copy_(host, non_blocking=True)
            end.record(stream)

        def finish() -> torch.Tensor:
            self._block(end, start, staged_s, keep=host)
            current.wait_event(end)
            out.record_stream(current)
            return out

        return Pending(self, finish, nbytes)

    def _save_async(
        self, src: torch.Tensor, dst: torch.Tensor | None, nbytes: int, key: Hashable
    ) -> Pending:
        stream, current = self.stream, torch.cuda.current_stream(self.device)
        direct = dst is not None and dst.is_pinned() and dst.is_contiguous()
        host = dst if direct else self._staging(key, tuple(src.shape), src.dtype)
        assert host is not None
        start, end = _timed_events()
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            start.record(stream)
            host.copy_(src, non_blocking=True)
            end.record(stream)
        src.record_stream(stream)

        def finish() -> torch.Tensor:
            self._block(end, start, 0.0, keep=src)
            if dst is not None and not direct:
                t0 = time.perf_counter()
                dst.copy_(host)
                dt = time.perf_counter() - t0
                self.times.transfer_s += dt
                self.times.wait_s += dt
                return dst
            return host

        return Pending(self, finish, nbytes)

    def _block(self, end: Any, start: Any, staged_s: float, keep: torch.Tensor) -> None:
        """Wait for ``end`` on the host; account the copy's time and the wait."""
        del keep  # referenced until here: the copy read or wrote it
        t0 = time.perf_counter()
        end.synchronize()
        self.times.wait_s += time.perf_counter() - t0
        self.times.transfer_s += staged_s + start.elapsed_time(end) / 1e3

    # ------------------------------------------------------------------ bookkeeping
    def _track(self, p: Pending, key: Hashable) -> Pending:
        if not p.done:
            self._inflight[id(p)] = p
            if key is not None:
                self._busy[key] = p
        return p

    def _settled(self, p: Pending) -> None:
        self._inflight.pop(id(p), None)

    def __repr__(self) -> str:
        mode = "async" if self.stream is not None else "emulated" if self.overlap else "blocking"
        return f"Transfers(device={self.device}, {mode}, pinned_buffers={len(self._pinned)})"


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _timed_events() -> tuple[Any, Any]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
