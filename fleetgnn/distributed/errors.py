"""Errors of the distributed runtime.

All derive from :class:`~fleetgnn.errors.FleetgnnError` (a :class:`ValueError`), so the CLI prints
them as one line: a bad argument to a collective, ranks that disagree about a collective
(:class:`CollectiveMismatch`), and worker processes that failed (:class:`WorkerFailed`).
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetgnn.errors import FleetgnnError


class DistError(FleetgnnError):
    """A distributed-runtime request is invalid (bad counts, ranks, shapes, names or backend)."""


class CollectiveMismatch(DistError):
    """Ranks called a collective with views that cannot match (raised on every rank).

    Attributes:
        views: Every rank's view of the call (index = rank), as gathered before the collective.
    """

    def __init__(self, message: str, views: list[dict] | None = None) -> None:
        super().__init__(message)
        self.views: list[dict] = list(views or [])


class WorkerFailed(DistError):
    """One or more worker processes failed.

    Attributes:
        failures: Failing rank -> its error text (exception line and traceback, or the signal).
    """

    def __init__(self, failures: Mapping[int, str], what: str = "worker") -> None:
        self.failures: dict[int, str] = dict(sorted(failures.items()))
        ranks = ", ".join(str(r) for r in self.failures)
        lines = [f"{what} failed on rank(s) {ranks}:"]
        for rank, text in self.failures.items():
            lines.append(f"  rank {rank}: {_summary(text)}")
        lines.append(
            "Fix the error above (the full traceback is in .failures[rank]); "
            "collectives on the other ranks were aborted."
        )
        super().__init__("\n".join(lines))


def _summary(text: str, max_lines: int = 3) -> str:
    """The last non-empty lines of an error text (the exception line of a traceback)."""
    lines = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return "(no error text)"
    if lines[0].startswith("Traceback"):
        # keep the exception line(s): those after the last frame's source line
        tail = [ln for ln in lines if not ln.startswith((" ", "Traceback"))]
        lines = tail or lines
    return " | ".join(lines[-max_lines:])
