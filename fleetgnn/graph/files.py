"""Files fleetgnn writes: reserved space, one-line disk-full errors, owned temporary names, sweeps.

Space. An array filled through a memory map is reserved on disk before it is mapped
(:func:`create_npy`: ``os.posix_fallocate``; where the file system or platform does not support
it, the file is filled with zeros by ``write()``), so a full disk is an ``ENOSPC`` error at the
reservation instead of a ``SIGBUS`` in the middle of filling the map. Every ``ENOSPC``/``EDQUOT``
becomes a :class:`~fleetgnn.errors.DiskFullError` whose message is one line, ``no space left on
DEVICE: writing 'PATH' (N bytes) failed; M bytes free; ...``.

Owners. Temporary directories and files are named after their owner process::

    .NAME.tmp-<pid>-<tag>-<random>      a directory (a dataset being written, its scratch)
    .NAME.<pid>-<tag>-<random>.tmp      a file (a checkpoint or a text file being written)

where ``tag`` (8 hex digits) identifies the host and PID namespace, so :func:`sweep_stale` can
tell that the owner is gone (no process with that PID here) and remove what a killed process
left behind, without touching what a live process (or a process on another host sharing the file
system) is writing. Names of the older form without an owner (``.NAME.tmp-<random>``,
``.NAME.<random>.tmp``) are removed only once they are :data:`LEGACY_AGE_S` seconds old, and in a
directory that is not fleetgnn's own only for the ``NAME`` being written.

Permissions. Temporary directories and files are created private (``tempfile``'s 0700/0600) and
given the user's umask (:func:`apply_umask`) before they are renamed into place, so a dataset gets
the permissions any other file the user creates gets.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# the durable-write primitives live in a base module (the config layer writes through them too);
# they are re-exported here, where the graph layer's writers and their callers import them
from fleetgnn.durable import (  # noqa: F401
    apply_umask,
    device_of,
    disk_full_as_error,
    disk_full_error,
    free_bytes,
    is_disk_full,
    owner_tag,
    refresh_free,
    temp_file,
)
from fleetgnn.errors import DatasetError

#: ``errno`` values of a ``posix_fallocate`` the file system does not support.
_UNSUPPORTED_ERRNOS: frozenset[int] = frozenset(
    e
    for e in (
        errno.EINVAL,
        getattr(errno, "EOPNOTSUPP", None),
        getattr(errno, "ENOTSUP", None),
        getattr(errno, "ENOSYS", None),
    )
    if e is not None
)
#: Temporary items without an owner in their name are swept only when older than this.
LEGACY_AGE_S = 3600.0
_ZEROS = 1 << 20  # bytes written per call when reserving space without posix_fallocate

#: kinds: ``tmp`` (being written), ``edges`` (scratch), ``old`` (a replaced one, being removed)
_OWNED_DIR = re.compile(
    r"^\.(?P<name>.+)\.(?P<kind>tmp|edges|old)-(?P<pid>\d+)-(?P<tag>[0-9a-f]{8})-\w+$"
)
_OWNED_FILE = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)-(?P<tag>[0-9a-f]{8})-\w+\.tmp$")
_LEGACY_DIR = re.compile(r"^\.(?P<name>.+)\.tmp-[a-z0-9_]{8}$")
_LEGACY_FILE = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")


# ---------------------------------------------------------------------------------- owners


def npy_error(err: BaseException, limit: int = 200) -> str:
    """Why numpy would not load a ``.npy`` file, on one line, without its advice to unpickle.

    ``np.load(allow_pickle=False)`` answers a file that is not a ``.npy`` array (any text file,
    ``/etc/passwd``) by suggesting ``allow_pickle=True``, which would run whatever code a pickle
    holds; that advice is never passed on.
    """
    text = " ".join(str(err).split())
    if "pickle" in text:
        return (
            "it is not a .npy array: numpy could read it only as a Python pickle, which can run "
            "code and is refused"
        )
    return text if len(text) <= limit else text[:limit] + "..."


def temp_prefix(name: str, kind: str = "tmp") -> str:
    """The prefix of a temporary directory for ``name`` owned by this process.

    ``tempfile.mkdtemp(prefix=temp_prefix("cora"), dir=...)`` makes
    ``.cora.tmp-<pid>-<tag>-<random>``.
    """
    return f".{name}.{kind}-{os.getpid()}-{owner_tag()}-"


def swap_in_progress(out: Path) -> Path | None:
    """The previous ``out`` while a live process is replacing it, else ``None``.

    :func:`~fleetgnn.graph.dataset.replace_dir`, where the file system cannot exchange two
    directories in one rename, moves the old directory aside (``.NAME.old-<pid>-<tag>-<random>/
    old``) before the new one takes its place: for that moment ``out`` is missing and the old
    directory, still whole, is here. Only a live owner's is returned (a dead writer's is a
    leftover for :func:`sweep_stale`, not a swap).
    """
    with contextlib.suppress(OSError):
        for entry in os.scandir(out.parent):
            owned = _OWNED_DIR.match(entry.name)
            if (
                owned is not None
                and owned.group("kind") == "old"
                and owned.group("name") == out.name
                and owned.group("tag") == owner_tag()
                and process_alive(int(owned.group("pid")))
                and (Path(entry.path) / "old").is_dir()
            ):
                return Path(entry.path) / "old"
    return None


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def exchange_dirs(a: Path, b: Path) -> bool:
    """Swap the directories ``a`` and ``b`` in one rename (Linux ``renameat2(RENAME_EXCHANGE)``).

    Returns:
        ``False`` where the platform, C library or file system cannot (nothing was changed).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED_ERRNOS:
        return False
    raise OSError(err, os.strerror(err), str(b))


def process_alive(pid: int) -> bool:
    """Whether a process with this PID exists here (one we may not signal counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


@dataclass(frozen=True)
class Removed:
    """One leftover :func:`sweep_stale` removed.

    Attributes:
        path: What was removed.
        size: Its size in bytes (a directory: the files in it).
        why: Why it was stale, e.g. ``"owner process 1234 is gone"``.
        is_dir: Whether it was a directory.
    """

    path: Path
    size: int
    why: str
    is_dir: bool = False

    def __str__(self) -> str:
        kind = "directory" if self.is_dir else "file"
        return f"removed stale temporary {kind} '{self.path}' ({_human(self.size)}; {self.why})"


def _size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(OSError):
            return path.lstat().st_size
        return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def _stale_reason(
    entry: os.DirEntry[str],
    now: float,
    legacy_names: Collection[str] | None,
    names: Collection[str] | None = None,
) -> str | None:
    """Why ``entry`` is a stale fleetgnn temporary item, or ``None`` if it is not one."""
    try:
        is_dir = entry.is_dir(follow_symlinks=False)
        is_file = entry.is_file(follow_symlinks=False)
    except OSError:
        return None
    owned = (_OWNED_DIR if is_dir else _OWNED_FILE).match(entry.name) if is_dir or is_file else None
    if owned is not None:
        if names is not None and owned.group("name") not in names:
            return None
        if owned.group("tag") != owner_tag():
            return None  # another host or PID namespace: its PIDs mean nothing here
        pid = int(owned.group("pid"))
        return None if process_alive(pid) else f"owner process {pid} is gone"
    legacy = (
        (_LEGACY_DIR if is_dir else _LEGACY_FILE).match(entry.name) if is_dir or is_file else None
    )
    if legacy is None or (legacy_names is not None and legacy.group("name") not in legacy_names):
        return None
    with contextlib.suppress(OSError):
        age = now - entry.stat(follow_symlinks=False).st_mtime
        if age > LEGACY_AGE_S:
            return f"no owner recorded, untouched for {age / 3600:.1f} h"
    return None


def sweep_stale(
    directory: str | os.PathLike[str],
    *,
    files: bool = True,
    legacy_names: Collection[str] | None = None,
    names: Collection[str] | None = None,
) -> list[Removed]:
    """Remove the temporary items of dead owners in ``directory`` (not recursive).

    Args:
        directory: Where to look; a missing directory has nothing to sweep.
        files: Also remove temporary files (``.NAME.<pid>-<tag>-<random>.tmp``); directories
            (``.NAME.tmp-<pid>-<tag>-<random>``) are always considered.
        legacy_names: Remove items named without an owner (older than :data:`LEGACY_AGE_S`)
            only for these names (``NAME``); ``None``: for any name (a directory only fleetgnn
            writes to, such as a run directory).
        names: Consider owned items of these names only (``None``: any), e.g. one engine's own
            directories in a shared temporary directory.

    Returns:
        What was removed (see :class:`Removed`), in name order.
    """
    root = Path(directory)
    if not root.is_dir():
        return []
    now = time.time()
    removed: list[Removed] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith("."):
            continue
        with contextlib.suppress(OSError):
            if not files and not entry.is_dir(follow_symlinks=False):
                continue
        why = _stale_reason(entry, now, legacy_names, names)
        if why is None:
            continue
        path = root / entry.name
        size = _size(path)
        is_dir = entry.is_dir(follow_symlinks=False)
        try:
            if is_dir:
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            continue  # someone else swept it first
        except OSError:
            continue  # not ours to remove (permissions): leave it
        removed.append(Removed(path, size, why, is_dir))
    return removed


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"  # pragma: no cover


# ---------------------------------------------------------------------------------- reserved space


def reserve(fd: int, size: int, path: str | os.PathLike[str], fix: str) -> None:
    """Allocate the first ``size`` bytes of the open file ``fd`` on disk.

    ``os.posix_fallocate`` where available; where the platform lacks it or the file system
    refuses it, the bytes past the current end of the file are written as zeros with
    ``write()``. Either way a full disk surfaces here, as a :class:`DiskFullError`.

    Raises:
        DiskFullError: Not enough space for ``size`` bytes.
        DatasetError: ``size`` is past the largest file the file system holds (``EFBIG``).
    """
    if size <= 0:
        return
    fallocate = getattr(os, "posix_fallocate", None)
    try:
        if fallocate is not None:
            try:
                fallocate(fd, 0, size)
                return
            except OSError as e:
                if is_disk_full(e):
                    raise disk_full_error(path, size, fix) from e
                if e.errno not in _UNSUPPORTED_ERRNOS:
                    raise
        with disk_full_as_error(path, size, fix):
            _write_zeros(fd, os.fstat(fd).st_size, size)
    except OSError as e:
        if e.errno != errno.EFBIG:
            raise
        raise DatasetError(
            f"'{path}' would hold {_human(size)}, more than the file system "
            f"{device_of(path)} allows in one file ({e.strerror}); write less (a smaller size or "
            f"scale), or to a file system that holds larger files"
        ) from None


def _write_zeros(fd: int, start: int, end: int) -> None:
    """Write zero bytes over ``[start, end)`` of ``fd`` (the fallback of :func:`reserve`)."""
    zeros = bytes(min(_ZEROS, max(0, end - start)))
    pos = start
    while pos < end:
        n = os.pwrite(fd, zeros[: min(len(zeros), end - pos)], pos)
        if n <= 0:  # pragma: no cover - a write of 0 bytes means no progress is possible
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        pos += n


def write_reserved(path: Path, data: Any, fix: str) -> None:
    """Write the bytes-like ``data`` to the existing file ``path``: reserve, write, fsync.

    Raises:
        DiskFullError: The disk is full (the caller removes ``path``).
    """
    view = memoryview(data).cast("B")
    with disk_full_as_error(path, view.nbytes, fix):
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            reserve(fd, view.nbytes, path, fix)
            pos = 0
            while pos < view.nbytes:
                pos += os.write(fd, view[pos : pos + (64 << 20)])
            os.fsync(fd)
        finally:
            os.close(fd)


def create_npy(path: str | os.PathLike[str], dtype: Any, shape: tuple[int, ...], fix: str) -> Any:
    """Create a ``.npy`` file with its space reserved and map it for writing.

    Like ``np.lib.format.open_memmap(path, mode="w+", ...)``, whose file is sparse (a full disk
    then kills the process with SIGBUS when the map is filled), but the data blocks are allocated
    first (:func:`reserve`), so a full disk is a :class:`DiskFullError` here. The array is native
    byte order and C-ordered.

    Raises:
        DiskFullError: Not enough space for the file.
    """
    p = Path(path)
    dt = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    header = {
        "descr": np.lib.format.dtype_to_descr(dt),
        "fortran_order": False,
        "shape": shape,
    }
    nbytes = dt.itemsize * int(np.prod(shape, dtype=np.int64)) if shape else dt.itemsize
    with disk_full_as_error(p, nbytes, fix), open(p, "wb") as f:
        try:
            np.lib.format.write_array_header_1_0(f, header)
        except ValueError:  # a header too long for format 1.0
            f.seek(0)
            f.truncate()
            np.lib.format.write_array_header_2_0(f, header)
        f.flush()
        reserve(f.fileno(), f.tell() + nbytes, p, fix)
    return np.lib.format.open_memmap(p, mode="r+")
