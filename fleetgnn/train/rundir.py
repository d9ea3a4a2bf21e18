"""Run directories: what marks one as holding a run, and the lock held for the life of a run.

A run takes an exclusive ``flock`` on ``RUN_DIR/.fleetgnn.lock`` (rank 0's process, or the
``fleetgnn train`` process that launched the workers) and writes its pid there, so a second run
on the same directory is refused in one line naming the holder instead of interleaving its
checkpoints and metrics with the first. The lock is released when the run ends or its process
dies (the kernel drops it); the lock file stays. Within one process the lock is re-entrant (the
CLI holds it while the Trainer it starts takes it again).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from fleetgnn.errors import ConfigError
from fleetgnn.types import PathLikeStr

#: Files whose presence means a directory holds a run.
RUN_MARKERS: tuple[str, ...] = ("config.yaml", "summary.json", "metrics.jsonl", "checkpoints")
#: The lock file inside a run directory.
LOCK_FILE = ".fleetgnn.lock"

_held: dict[str, list[int]] = {}  # real path -> [fd, count]
_guard = threading.Lock()


def run_markers(run_dir: PathLikeStr) -> list[str]:
    """The :data:`RUN_MARKERS` present in ``run_dir`` (empty: it holds no run)."""
    return [m for m in RUN_MARKERS if (Path(run_dir) / m).exists()]


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def acquire_run_dir(run_dir: PathLikeStr) -> None:
    """Take the run directory's lock (creating the directory); re-entrant in this process.

    Raises:
        ConfigError: Another process holds it: one line naming its pid and the fix.
    """
    p = Path(run_dir)
    created = not p.exists()
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"run directory '{p}' cannot be created ({e.strerror or e}); pick another --run-dir"
        ) from None
    key = os.path.realpath(p)
    with _guard:
        if key in _held:
            _held[key][1] += 1
            return
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(p / LOCK_FILE, flags, 0o644)
        except OSError as e:
            raise ConfigError(
                f"run directory '{p}': its lock file '{LOCK_FILE}' cannot be opened "
                f"({e.strerror or e}); remove it if it is not a regular file"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fd)
            os.close(fd)
            raise ConfigError(
                f"run directory '{p}' is in use by another fleetgnn run (pid {holder}); wait for "
                f"it to finish or stop it, or pick another --run-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held[key] = [fd, 1, int(created)]


def release_run_dir(run_dir: PathLikeStr) -> None:
    """Give back a lock :func:`acquire_run_dir` took (the last release unlocks it).

    A directory the lock created and nothing else filled is removed again.
    """
    p = Path(run_dir)
    key = os.path.realpath(p)
    with _guard:
        entry = _held.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _held[key]
        fd, _, created = entry
        with contextlib.suppress(OSError):
            if created and os.listdir(p) == [LOCK_FILE]:
                os.unlink(p / LOCK_FILE)
                os.rmdir(p)
        os.close(fd)


@contextlib.contextmanager
def run_dir_lock(run_dir: PathLikeStr) -> Iterator[None]:
    """:func:`acquire_run_dir` for the block, then :func:`release_run_dir`."""
    acquire_run_dir(run_dir)
    try:
        yield
    finally:
        release_run_dir(run_dir)
