"""Traffic meter: bytes and messages moved, per link kind.

Every store read and every collective of :class:`~fleetgnn.distributed.comm.Communicator` records
what it moved, so engines can report traffic per link and cost models can be checked against closed
forms.
Link kinds:

========  ==========================================================================
kind      meaning
========  ==========================================================================
local     reads/copies within this rank's own memory (own shard, self-block of an
          all-to-all)
peer      between ranks on one host (device-device over NVLink/PCIe, or shared
          memory between processes on CPU)
h2d       host memory -> device
d2h       device -> host memory
net       between hosts
disk      reads from a memory-mapped file on disk
========  ==========================================================================
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from fleetgnn.distributed.errors import DistError

#: Link kinds the meter records, in report order.
LINK_KINDS: tuple[str, ...] = ("local", "peer", "h2d", "d2h", "net", "disk")

#: A snapshot: link kind -> {"bytes": int, "messages": int}.
TrafficSnapshot = dict[str, dict[str, int]]


def _check_kind(kind: str) -> None:
    if kind not in LINK_KINDS:
        raise DistError(
            f"unknown link kind {kind!r}; valid kinds are {', '.join(LINK_KINDS)}. "
            "Use 'peer' for ranks on one host and 'net' for ranks on different hosts."
        )


class TrafficMeter:
    """Thread-safe counters of (bytes, messages) per link kind.

    Example:
        >>> m = TrafficMeter()
        >>> m.record("peer", 4096, messages=2)
        >>> m.snapshot()["peer"]
        {'bytes': 4096, 'messages': 2}
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes = dict.fromkeys(LINK_KINDS, 0)
        self._messages = dict.fromkeys(LINK_KINDS, 0)

    def record(self, kind: str, nbytes: int, messages: int = 1) -> None:
        """Add ``nbytes`` bytes in ``messages`` messages to link kind ``kind``.

        Args:
            kind: One of :data:`LINK_KINDS`.
            nbytes: Bytes moved (>= 0).
            messages: Messages (transfers, requests) they took (>= 0).

        Raises:
            DistError: Unknown kind (a ValueError naming the valid kinds) or negative counts.
        """
        _check_kind(kind)
        nbytes, messages = int(nbytes), int(messages)
        if nbytes < 0 or messages < 0:
            raise DistError(
                f"TrafficMeter.record({kind!r}, nbytes={nbytes}, messages={messages}): counts "
                "must be >= 0; pass the size of the transfer, not a difference."
            )
        with self._lock:
            self._bytes[kind] += nbytes
            self._messages[kind] += messages

    def snapshot(self) -> TrafficSnapshot:
        """A copy of the counters: ``{kind: {"bytes": b, "messages": m}}`` for every kind."""
        with self._lock:
            return {k: {"bytes": self._bytes[k], "messages": self._messages[k]} for k in LINK_KINDS}

    def reset(self) -> None:
        """Set every counter to zero."""
        with self._lock:
            for k in LINK_KINDS:
                self._bytes[k] = 0
                self._messages[k] = 0

    def delta(self, since: Mapping[str, Mapping[str, int]]) -> TrafficSnapshot:
        """Counters accumulated since ``since`` (an earlier :meth:`snapshot`).

        Args:
            since: A snapshot of this meter; missing kinds count as zero.

        Raises:
            DistError: ``since`` names an unknown link kind.
        """
        for k in since:
            _check_kind(k)
        now = self.snapshot()
        out: TrafficSnapshot = {}
        for k in LINK_KINDS:
            old = since.get(k, {})
            out[k] = {
                "bytes": now[k]["bytes"] - int(old.get("bytes", 0)),
                "messages": now[k]["messages"] - int(old.get("messages", 0)),
            }
        return out

    def bytes_by_kind(self) -> dict[str, int]:
        """Bytes per link kind (the shape engines report in ``EpochStats.traffic``)."""
        with self._lock:
            return dict(self._bytes)

    def __repr__(self) -> str:
        snap = self.snapshot()
        parts = [
            f"{k}={v['bytes']}B/{v['messages']}msg"
            for k, v in snap.items()
            if v["bytes"] or v["messages"]
        ]
        return f"TrafficMeter({', '.join(parts) or 'empty'})"
