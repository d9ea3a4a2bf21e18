"""Per-epoch metrics as JSON lines (``RUN_DIR/metrics.jsonl``).

One JSON object per finished epoch, written and flushed as soon as the epoch's training ends,
before its evaluation runs::

    {"epoch": 0, "loss": 1.08, "train_acc": 0.41, "val_acc": 0.52, "test_acc": 0.50,
     "val_loss": 1.01, "eval_train_acc": 0.55, "evaluated": true, "epoch_time_s": 0.8,
     "eval_time_s": 0.1, "times": {"sample": ..., ...}, "traffic": {"local": ..., ...},
     "memory": {...}, "num_steps": 12, "engine": "reference", "world_size": 1, "extra": {...}}

``val_acc``/``test_acc``/``val_loss``/``eval_train_acc`` are ``null`` on epochs that were not
evaluated; non-finite numbers are written as ``null`` (strict JSON). An epoch that is evaluated is
first written with ``"evaluated": false`` (so an evaluation that dies leaves the epoch's training
numbers on record), then its line is replaced by the evaluated record
(:meth:`MetricsWriter.replace_last`: overwritten in place when it is the file's last line, else the
whole file rewritten atomically), so a finished run still has exactly one line per epoch. Lines
are flushed to the OS as they are written, not fsynced (a per-epoch fsync costs more than a small
graph's epoch). A run that ``train.max_steps`` stops mid-epoch ends with a record
of that partial epoch: ``"partial": true``, ``num_steps`` the steps it ran, evaluated.

Event lines record what happened to the run between epochs; they have an ``"event"`` key and no
``"epoch"`` key, e.g. an elastic restart::

    {"event": "restart", "attempt": 1, "failed_ranks": [1], "failures": {"1": "killed by
     SIGKILL ..."}, "at_epoch": 1, "at_step": 4, "time": 1700000000.0}

(``at_epoch``/``at_step``: where the run continued from). :func:`read_metrics` returns only the
epoch lines unless asked for the events too, so readers that expect epochs need no filter.

Resume rule: a run resumed from a checkpoint taken during (or at the start of) epoch ``E`` keeps
the lines of epochs ``< E`` and drops every line with epoch ``>= E`` (those epochs are run again
and rewritten), so each epoch appears exactly once; event lines are kept. A torn last line (a crash
mid-write) is dropped too. The kept lines are rewritten atomically before appending.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from fleetgnn.config.textfile import read_text
from fleetgnn.errors import FleetgnnError
from fleetgnn.graph.dataset import atomic_write_text
from fleetgnn.types import Closing, PathLikeStr


def _clean(obj: Any) -> Any:
    """Make ``obj`` strict-JSON: non-finite floats become ``None``, mappings become dicts."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        return _clean(obj.item())
    return obj


def to_json(obj: Any) -> str:
    """Serialise ``obj`` as one line of strict JSON (NaN/inf become ``null``)."""
    return json.dumps(_clean(obj), allow_nan=False, separators=(", ", ": "))


def is_event(record: Mapping[str, Any]) -> bool:
    """Whether a ``metrics.jsonl`` record is an event line (not an epoch's metrics)."""
    return "event" in record


#: Largest ``metrics.jsonl`` read (a record per epoch and event is a few KiB at most).
MAX_METRICS_BYTES = 64 << 20


def read_metrics_text(path: Path) -> str:
    """The text of a metrics file, bounded (:func:`fleetgnn.config.textfile.read_text`).

    Raises:
        FleetgnnError: Not a regular file, larger than :data:`MAX_METRICS_BYTES`, or not UTF-8
            (one line, with the fix).
    """
    fix = "move it aside (the checkpoints are enough to resume) or start a fresh run directory"
    return read_text(
        path, "metrics file", max_bytes=MAX_METRICS_BYTES, error=FleetgnnError, fix=fix
    )


def read_metrics(path: PathLikeStr, *, events: bool = False) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` file, skipping a torn (unparsable) last line.

    Args:
        path: The file (a missing file has no records).
        events: Also return the event lines (e.g. restarts), in file order; by default only the
            per-epoch records are returned.

    Raises:
        FleetgnnError: A line other than the last one is not valid JSON.
    """
    p = Path(path)
    if not os.path.lexists(p):
        return []
    lines = read_metrics_text(p).splitlines()
    out: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                break  # torn last line from an interrupted write
            raise FleetgnnError(
                f"metrics file '{p}' line {i + 1} is not valid JSON ({e.msg}); the file is "
                f"corrupt there: remove or fix that line (the only one known bad), or start a "
                f"fresh run directory"
            ) from e
        if isinstance(rec, dict) and (events or not is_event(rec)):
            out.append(rec)
    return out


class MetricsWriter(Closing):
    """Appends one JSON object per epoch (or event) to a JSONL file, flushing every line.

    The last epoch record written can be replaced (:meth:`replace_last`), e.g. by the same
    epoch's record once it is evaluated.

    Args:
        path: The JSONL file (usually ``RUN_DIR/metrics.jsonl``).
        resume_epoch: ``None`` starts a new file (an existing one is replaced). An integer ``E``
            keeps the existing lines with ``epoch < E`` and the event lines and drops the others
            (see the module docstring), then appends.
    """

    def __init__(self, path: PathLikeStr, resume_epoch: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_epoch is None:
            atomic_write_text(self.path, "")
        else:
            kept = [
                r
                for r in read_metrics(self.path, events=True)
                if is_event(r) or int(r.get("epoch", -1)) < resume_epoch
            ]
            atomic_write_text(self.path, "".join(to_json(r) + "\n" for r in kept))
        self._f: IO[str] | None = open(self.path, "a")  # closed in close()
        self._size = self.path.stat().st_size  # bytes in the file
        self._last: tuple[int, bytes] | None = None  # offset and line of the last epoch record

    def __repr__(self) -> str:
        return f"MetricsWriter({str(self.path)!r})"

    def write(self, record: Mapping[str, Any]) -> None:
        """Append ``record`` as one line and flush it to the OS."""
        if self._f is None:
            raise RuntimeError(f"{self!r} is closed")
        line = to_json(record) + "\n"
        self._f.write(line)
        self._f.flush()
        if not is_event(record):
            self._last = (self._size, line.encode())
        self._size += len(line.encode())

    def replace_last(self, record: Mapping[str, Any]) -> None:
        """Replace the last epoch record written with ``record`` (the same epoch's).

        When the record is the file's last line (the usual case: an epoch's record, then its
        evaluation), the new line overwrites it in place with one positional write, so a crashed
        process leaves the old line or the new one, never neither (when the new line is shorter
        the file is then cut after it: a crash in between leaves a torn last line, which
        :func:`read_metrics` skips). Otherwise (event lines written after the record) the file is
        rewritten atomically and the events stay where they are.

        Raises:
            RuntimeError: The writer is closed, it has written no epoch record, or ``record`` is
                for another epoch than the last one written.
        """
        if self._f is None:
            raise RuntimeError(f"{self!r} is closed")
        if self._last is None:
            raise RuntimeError(f"{self!r} has written no epoch record to replace")
        offset, old = self._last
        epoch = json.loads(old).get("epoch")
        if record.get("epoch") != epoch:
            raise RuntimeError(
                f"{self!r} can replace only the record of epoch {epoch}, the last one written "
                f"(got epoch {record.get('epoch')!r})"
            )
        line = (to_json(record) + "\n").encode()
        if offset + len(old) == self._size:
            self._replace_in_place(offset, old, line)
            return
        data = self.path.read_bytes()
        if data[offset : offset + len(old)] != old:
            raise RuntimeError(f"'{self.path}' was changed by another writer; cannot replace")
        data = data[:offset] + line + data[offset + len(old) :]
        atomic_write_text(self.path, data.decode("utf-8"))
        # the old handle still writes to the replaced file: append to the new one from now on
        self._f.close()
        self._f = open(self.path, "a")
        self._last = (offset, line)
        self._size = len(data)

    def _replace_in_place(self, offset: int, old: bytes, line: bytes) -> None:
        """Overwrite the file's last line ``old`` (at ``offset``) with ``line``: no rewrite."""
        fd = os.open(self.path, os.O_RDWR)  # not O_APPEND: pwrite must honour the offset
        try:
            if os.pread(fd, len(old) + 1, offset) != old:
                raise RuntimeError(f"'{self.path}' was changed by another writer; cannot replace")
            done = 0
            while done < len(line):  # one call for a regular file, short writes aside
                done += os.pwrite(fd, line[done:], offset + done)
            if len(line) < len(old):
                os.ftruncate(fd, offset + len(line))
        finally:
            os.close(fd)
        self._last = (offset, line)
        self._size = offset + len(line)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._f is not None:
            self._f.close()
            self._f = None
