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

from fleetgnn.config.textfile import path_kind
from fleetgnn.errors import ConfigError
from fleetgnn.types import PathLikeStr

#: Files whose presence means a directory holds a run.
RUN_MARKERS: tuple[str, ...] = ("config.yaml", "summary.json", "metrics.jsonl", "checkpoints")
#: The lock file inside a run directory.
LOCK_FILE = ".fleetgnn.lock"

_held: dict[str, list[int]] = {}  # real path -> [fd, count]
_guard = threading.Lock()


#: Bytes the longest path inside a run directory adds to its own (a checkpoint's temporary file:
#: ``/checkpoints/.best.pt.<pid>-<tag>-<random>.tmp``, with room to spare).
INSIDE_BYTES = 96


def _limits(path: bytes) -> tuple[int, int]:
    """``(NAME_MAX, PATH_MAX)`` of the file system holding ``path`` (or its nearest ancestor)."""
    probe = path  # absolute (check_run_dir_path): its ancestors end at b"/"
    while not os.path.isdir(probe) and (up := os.path.dirname(probe)) != probe:
        probe = up
    try:
        return os.pathconf(probe, "PC_NAME_MAX"), os.pathconf(probe, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 255, 4096


def check_run_dir_path(run_dir: PathLikeStr) -> None:
    """Refuse, in one line, a run directory path longer than its file system allows.

    A name over ``NAME_MAX`` bytes (255 on most file systems), or a path whose files would be
    over ``PATH_MAX`` (4096), fails every file operation with ``ENAMETOOLONG``; this says so
    before any is tried. Lengths are counted in bytes of the path as the OS sees it.

    Raises:
        ConfigError: The name or the whole path is too long, naming its length and the limit.
    """
    path = os.fsencode(os.path.abspath(run_dir))
    name_max, path_max = _limits(path)
    for part in path.split(b"/"):
        if len(part) > name_max:
            shown = os.fsdecode(part[:32])
            raise ConfigError(
                f"run directory '{shown}...' has a name of {len(part)} bytes, more than the "
                f"{name_max} a file name may have here; pick a shorter --run-dir"
            )
    if len(path) + INSIDE_BYTES > path_max:
        raise ConfigError(
            f"run directory path is {len(path)} bytes long, and the files inside it would pass "
            f"the {path_max} bytes a path may have here (at most {path_max - INSIDE_BYTES} for "
            f"the directory); pick a shorter --run-dir"
        )


def run_markers(run_dir: PathLikeStr) -> list[str]:
    """The :data:`RUN_MARKERS` present in ``run_dir`` (empty: it holds no run).

    Raises:
        ConfigError: The path is too long for its file system (:func:`check_run_dir_path`).
    """
    check_run_dir_path(run_dir)
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
        ConfigError: Another process holds it: one line naming its pid and the fix; or the path
            is too long for its file system (:func:`check_run_dir_path`).
    """
    check_run_dir_path(run_dir)
    p = Path(run_dir)
    created = not p.exists()
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        kind = path_kind(p)
        why = f"it is {kind}, not a directory" if kind != "missing" else e.strerror or str(e)
        raise ConfigError(
            f"run directory '{p}' cannot be created ({why}); pick another --run-dir"
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
