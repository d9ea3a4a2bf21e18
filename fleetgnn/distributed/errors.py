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


class WorkerUserError(DistError):
    """A worker's :class:`~fleetgnn.errors.FleetgnnError`, re-raised under this name.

    The launcher recognises the name in the worker's error record and reports the message alone
    (a user error, one line), as the single-process command would, instead of a traceback.
    """


class WorkerFailed(DistError):
    """One or more worker processes failed; the message is one line per distinct error.

    Args:
        failures: Failing rank -> its error text (exception line and traceback, or the signal).
        what: What failed, for the message (``"worker"``).
        messages: Failing rank -> its one-line error where known (a user error's message);
            ranks without one are summarised from ``failures`` (the exception line).

    Attributes:
        failures: Failing rank -> its error text (exception line and traceback, or the signal).
        messages: Failing rank -> its one-line error.
    """

    def __init__(
        self,
        failures: Mapping[int, str],
        what: str = "worker",
        messages: Mapping[int, str] | None = None,
    ) -> None:
        self.failures: dict[int, str] = dict(sorted(failures.items()))
        given = dict(messages or {})
        self.messages: dict[int, str] = {
            r: " ".join(given[r].split()) if r in given else error_summary(t)
            for r, t in self.failures.items()
        }
        by_message: dict[str, list[int]] = {}
        for rank, msg in self.messages.items():
            by_message.setdefault(msg, []).append(rank)
        parts = []
        for msg, ranks in by_message.items():
            label = "rank" if len(ranks) == 1 else "ranks"
            parts.append(f"{label} {', '.join(str(r) for r in ranks)}: {msg}")
        super().__init__(f"{what} failed on " + "; ".join(parts))


def error_summary(text: str, max_lines: int = 3) -> str:
    """One line from an error text: its exception line(s) when it is a traceback.

    Args:
        text: A traceback, or any error text.
        max_lines: Keep at most this many of the last lines, joined with `` | ``.
    """
    lines = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return "(no error text)"
    if lines[0].startswith("Traceback"):
        # keep the exception line(s): those after the last frame's source line
        tail = [ln for ln in lines if not ln.startswith((" ", "Traceback"))]
        lines = tail or lines
    return " | ".join(lines[-max_lines:])
