"""Durable writes of small files, for every layer: atomic, fsynced, a full disk in one line.

:func:`atomic_write_text` writes a text file the way fleetgnn writes every file a later run reads
(``config.yaml``, ``meta.json``, summaries, benchmark results): a temporary sibling owned by this
process (``.NAME.<pid>-<tag>-<random>.tmp``, so a sweep can tell a dead owner's leftovers from a
live writer's; see :mod:`fleetgnn.graph.files`) is written, flushed, fsynced, given the user's
umask and renamed over the target, and the directory entry is fsynced. A reader sees the old file
or the new one, never a part; a failed write leaves the old file as it was. ``ENOSPC``/``EDQUOT``
becomes a :class:`~fleetgnn.errors.DiskFullError` whose message is one line (``no space left on
DEVICE: writing 'PATH' (N bytes) failed; M bytes free; FIX``).

A base module (like :mod:`fleetgnn.errors`): it imports no layer, so the config layer
(``save_config``) and every layer above it write through the same code.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import socket
import stat
import tempfile
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from fleetgnn.errors import DiskFullError

#: ``errno`` values meaning "the file system (or the user's quota) is full".
DISK_FULL_ERRNOS: frozenset[int] = frozenset(
    e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if e is not None
)


@lru_cache(maxsize=1)
def owner_tag() -> str:
    """8 hex digits naming this host and PID namespace (where a PID names one process)."""
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = ""
    return hashlib.sha1(f"{socket.gethostname()}\0{pidns}".encode()).hexdigest()[:8]


def temp_file(target: Path) -> Path:
    """Create an empty temporary sibling of ``target`` owned by this process; returns its path.

    The name is ``.NAME.<pid>-<tag>-<random>.tmp`` in ``target``'s directory (created if needed).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(
        prefix=f".{target.name}.{os.getpid()}-{owner_tag()}-", suffix=".tmp", dir=target.parent
    )
    os.close(fd)
    return Path(name)


def current_umask() -> int:
    """This process's umask (read from ``/proc`` where possible, else set and restored)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(path: str | os.PathLike[str]) -> None:
    """Give ``path`` the mode a plain ``mkdir``/``open`` would have (0777/0666 less the umask)."""
    p = Path(path)
    with contextlib.suppress(OSError):
        base = 0o777 if stat.S_ISDIR(p.lstat().st_mode) else 0o666
        os.chmod(p, base & ~current_umask())


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` is an ``OSError`` saying the file system or the quota is full."""
    return isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes an unprivileged user may still write on the file system holding ``path``."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return 0
    return int(st.f_bavail) * int(st.f_frsize)


def device_of(path: str | os.PathLike[str]) -> str:
    """The file system holding ``path``, for messages: ``"'MOUNT' (SOURCE TYPE)"``."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    mount = p
    with contextlib.suppress(OSError):
        while not os.path.ismount(mount) and mount != mount.parent:
            mount = mount.parent
    source = ""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and _unescape_mount(fields[1]) == str(mount):
                    source = f" ({fields[0]} {fields[2]})"  # the last match is the visible one
    return f"'{mount}'{source}"


def _unescape_mount(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def disk_full_error(
    path: str | os.PathLike[str], need: int, fix: str, checked: bool = False
) -> DiskFullError:
    """A :class:`DiskFullError` for a write of ``need`` bytes at ``path``, ending with ``fix``.

    ``checked``: no write failed; a check before writing found less than ``need`` bytes free.
    """
    return DiskFullError(
        device_of(path), int(need), free_bytes(path), fix, path=str(path), checked=checked
    )


def refresh_free(err: BaseException) -> None:
    """Update a :class:`DiskFullError`'s free bytes (after its partial files were removed)."""
    if isinstance(err, DiskFullError) and err.path:
        err.update_free(free_bytes(err.path))


@contextlib.contextmanager
def disk_full_as_error(path: str | os.PathLike[str], need: int, fix: str) -> Iterator[None]:
    """Turn an ``ENOSPC``/``EDQUOT`` ``OSError`` raised in the block into a DiskFullError."""
    try:
        yield
    except OSError as e:
        if is_disk_full(e):
            raise disk_full_error(path, need, fix) from e
        raise


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a directory entry to disk (best effort; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - file systems that refuse directory fsync
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically.

    A unique temporary file in the same directory is flushed, fsynced and renamed over ``path``;
    on failure it is removed and ``path`` is left as it was.
    """
    p = Path(path)
    data = text.encode()
    fix = f"free some space to write '{p}'"
    with disk_full_as_error(p.parent, len(data), fix):
        tmp = temp_file(p)
    try:
        with disk_full_as_error(p.parent, len(data), fix), open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        apply_umask(tmp)
        os.replace(tmp, p)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        refresh_free(e)
        raise
    fsync_dir(p.parent)
    return p
