"""Step marks: a step's phase times and results, read after the device has run them.

A training step on an accelerator is queued: the host issues kernels and moves on. Reading a
phase time with a synchronising clock, or a step's loss with ``float(loss)``, makes the host wait
for the device at that point, every step, so the device idles while the host issues the next
step's launches. A :class:`Marks` implementation records *marks* in the device's queue instead
(phase boundaries) and *stages* the step's numbers (loss sum, correct count) into host memory
behind them; both are read once the device has passed the step's last mark, which the caller
can ask without waiting (:meth:`Marks.done`).

=========  ==========================================  =====================================
device     a mark                                      staged numbers
=========  ==========================================  =====================================
``cpu``    the host clock (``time.perf_counter``)      the tensors themselves (already done)
``cuda``   a timing ``torch.cuda.Event`` recorded on   a pinned host buffer, copied into
           the current stream                          without blocking before the last mark
other      the host clock after the device's queue     the tensors (read when resolved)
           (a synchronising clock: correct, not
           asynchronous)
=========  ==========================================  =====================================

On CUDA a phase's seconds are the device's time between its two marks (the kernels of the
phase and any wait for the host to issue them), read with ``Event.elapsed_time``. One
implementation per device type, looked up by :func:`marks_for`; the step code is the same on
every device.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch


class Marks(Protocol):
    """Phase marks and staged numbers on one device (see the module docstring)."""

    def mark(self) -> Any:
        """Record a mark at this point of the device's queue."""
        ...

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds between two marks (waits until ``end`` is reached)."""
        ...

    def done(self, mark: Any) -> bool:
        """Whether the device has passed ``mark`` (never waits)."""
        ...

    def wait(self, mark: Any) -> None:
        """Block the host until the device has passed ``mark``."""
        ...

    def stage(self, values: Sequence[torch.Tensor | float]) -> Any:
        """Queue a copy of scalar ``values`` to the host (read after the next mark is done)."""
        ...


def _stack(values: Sequence[torch.Tensor | float], device: torch.device) -> torch.Tensor:
    """The scalars of ``values`` as one float64 vector on ``device`` (no host read)."""
    parts = [
        v.detach().reshape(1).to(torch.float64)
        if isinstance(v, torch.Tensor)
        else torch.tensor([float(v)], dtype=torch.float64, device=device)
        for v in values
    ]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64, device=device)


class HostMarks:
    """Marks on the CPU: the host clock; staged numbers are the step's own tensors."""

    def mark(self) -> float:
        """``time.perf_counter()``."""
        return time.perf_counter()

    def seconds(self, start: float, end: float) -> float:
        """``end - start``."""
        return end - start

    def done(self, mark: Any) -> bool:
        """Always: the CPU ran the step before the host got here."""
        return True

    def wait(self, mark: Any) -> None:
        """Nothing to wait for."""

    def stage(self, values: Sequence[torch.Tensor | float]) -> torch.Tensor:
        """``values`` as one float64 vector (on the CPU)."""
        return _stack(values, torch.device("cpu"))


class ClockMarks(HostMarks):
    """Marks on a device without events here: a clock that waits for the device's queue."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock

    def mark(self) -> float:
        """The synchronising clock."""
        return self._clock()

    def stage(self, values: Sequence[torch.Tensor | float]) -> torch.Tensor:
        """``values`` as one float64 vector where they are (read when resolved)."""
        dev = next((v.device for v in values if isinstance(v, torch.Tensor)), torch.device("cpu"))
        return _stack(values, dev)


class CudaMarks:
    """Marks on a CUDA device: timing events on the current stream, pinned staging buffers."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def mark(self) -> Any:
        """A timing event recorded on the current stream."""
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def seconds(self, start: Any, end: Any) -> float:
        """The device's seconds between two events (waits for ``end``)."""
        end.synchronize()
        return float(start.elapsed_time(end)) / 1000.0

    def done(self, mark: Any) -> bool:
        """``Event.query()``."""
        return bool(mark.query())

    def wait(self, mark: Any) -> None:
        """``Event.synchronize()``: waits for this mark only, not for later queued work."""
        mark.synchronize()

    def stage(self, values: Sequence[torch.Tensor | float]) -> torch.Tensor:
        """A pinned float64 host vector, filled by a copy queued on the current stream."""
        vec = _stack(values, self.device)
        host = torch.empty(vec.shape, dtype=vec.dtype, pin_memory=True)
        host.copy_(vec, non_blocking=True)
        return host


_MARKS: dict[str, Callable[[torch.device], Marks]] = {
    "cpu": lambda dev: HostMarks(),
    "cuda": CudaMarks,
}


def marks_for(device: torch.device | str, clock: Callable[[], float] | None = None) -> Marks:
    """The :class:`Marks` implementation of ``device``'s type.

    ``clock``: a synchronising clock for device types without an implementation of their own
    (:func:`~fleetgnn.engines.common.device_clock`); ``None``: the host clock.
    """
    dev = torch.device(device)
    make = _MARKS.get(dev.type)
    if make is None:
        return ClockMarks(clock if clock is not None else time.perf_counter)
    return make(dev)


class PendingStepStats:
    """A step's :class:`~fleetgnn.engines.base.StepStats` while its device work may be queued.

    It reads like ``StepStats``: ``count`` and ``traffic`` are host numbers already; ``loss_sum``,
    ``correct`` and ``times`` resolve the step on first access (waiting for its last mark). A
    caller that must not wait asks :meth:`ready` first; :meth:`resolve` returns the plain
    ``StepStats``.

    Args:
        marks: The device's :class:`Marks`.
        staged: ``marks.stage([loss_sum, correct])``, queued before ``last``.
        count: Training items of the step on this rank.
        spans: Phase name -> the marks that bound it (summed when a phase has several).
        offsets: Phase name -> host seconds added to it (preparation, waits).
        traffic: Bytes per link kind.
        last: The step's last mark (after the staging copy).
    """

    def __init__(
        self,
        marks: Marks,
        staged: Any,
        count: int,
        spans: dict[str, list[tuple[Any, Any]]],
        offsets: dict[str, float],
        traffic: dict[str, int],
        last: Any,
    ) -> None:
        self._marks = marks
        self._staged = staged
        self.count = int(count)
        self._spans = spans
        self._offsets = offsets
        self.traffic = traffic
        self._last = last
        self._resolved: Any = None

    def ready(self) -> bool:
        """Whether the device has run the step, so resolving it does not wait (never waits)."""
        return self._resolved is not None or self._marks.done(self._last)

    def resolve(self) -> Any:
        """The step's :class:`~fleetgnn.engines.base.StepStats` (waits for its last mark)."""
        if self._resolved is None:
            from fleetgnn.engines.base import StepStats

            self._marks.wait(self._last)
            loss_sum, correct = self._staged.tolist()
            times = dict(self._offsets)
            for name, spans in self._spans.items():
                times[name] = times.get(name, 0.0) + sum(
                    self._marks.seconds(a, b) for a, b in spans
                )
            self._resolved = StepStats(
                float(loss_sum), int(correct), self.count, times, self.traffic
            )
            self._staged = self._spans = None  # the events and buffers can go
        return self._resolved

    @property
    def loss_sum(self) -> float:
        """See :attr:`StepStats.loss_sum` (resolves the step)."""
        return self.resolve().loss_sum

    @property
    def correct(self) -> int:
        """See :attr:`StepStats.correct` (resolves the step)."""
        return self.resolve().correct

    @property
    def times(self) -> Any:
        """See :attr:`StepStats.times` (resolves the step)."""
        return self.resolve().times

    def __repr__(self) -> str:
        state = repr(self._resolved) if self._resolved is not None else "in flight"
        return f"PendingStepStats(count={self.count}, {state})"
