"""Scratch row files of streaming inference: ``.npy`` rows written range by range.

:class:`RowFile` writes a hidden layer's rows with ``pwrite`` (space reserved first, written pages
dropped from the page cache), :class:`MemoryRows` holds a small layer in memory behind the same
interface, :class:`RowWriter` is the sink that writes ``predict``/``embed`` outputs, and
:class:`ScratchDir` / :func:`make_scratch` give one inference its owner-tagged temporary
directory. Reading the rows back is :class:`~fleetgnn.graph.rows.RowReader`'s.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.engines.collectives import barrier
from fleetgnn.errors import ConfigError
from fleetgnn.graph.files import create_npy, disk_full_error, free_bytes, temp_prefix

_DISK_FIX = (
    "free some space there, or put the scratch files on another disk (they go to the run "
    "directory: fleetgnn train --run-dir; Python: scratch_dir=)"
)


#: Consecutive bytes a :class:`RowFile` writes before it flushes them and drops them from the
#: page cache.
DROP_WRITTEN_BYTES = 64 << 20


class RowFile:
    """A ``.npy`` file of ``[N, ...]`` rows written range by range with ``pwrite``.

    :meth:`create` reserves the file's space first (a full disk is a one-line
    :class:`~fleetgnn.errors.DiskFullError`); :meth:`open` opens an existing one (another rank's).
    Writes go straight to the file, never through a mapping, so nothing becomes resident here.
    Every :data:`DROP_WRITTEN_BYTES` of consecutive rows written are flushed (``fdatasync``) and
    dropped from the page cache (``POSIX_FADV_DONTNEED``): a layer's output would otherwise push
    the layer's input, which every chunk reads at random, out of the cache (at papers-like 0.3 the
    features, the topology and the first scratch layer together are about the machine's memory).
    The next layer reads the file back ahead in one sequential pass (see
    :mod:`fleetgnn.graph.rows`).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._pending: tuple[int, int] | None = None  # written, not yet flushed: [from, to)
        with open(self.path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            self.offset = f.tell()
        self.shape: tuple[int, ...] = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        self._fd: int | None = os.open(self.path, os.O_WRONLY)

    @classmethod
    def create(cls, path: Path, dtype: Any, shape: tuple[int, ...], fix: str = _DISK_FIX) -> Path:
        """Create ``path`` (space reserved) and return it; open it with :class:`RowFile`."""
        arr = create_npy(path, dtype, shape, fix)
        del arr
        return Path(path)

    def write(self, start: int, rows: np.ndarray) -> None:
        """Write ``rows`` (``[R, ...]`` of this file's dtype and row shape) at rows ``start..``."""
        if self._fd is None:
            raise ValueError(f"RowFile '{self.path}' is closed")
        data = np.ascontiguousarray(rows, dtype=self.dtype)
        if data.shape[1:] != self.shape[1:] or start < 0 or start + len(data) > self.shape[0]:
            raise ValueError(
                f"rows {tuple(data.shape)} at {start} do not fit '{self.path}' {self.shape}"
            )
        view = memoryview(data).cast("B")
        pos, off = 0, self.offset + start * self.row_bytes
        while pos < view.nbytes:
            pos += os.pwrite(self._fd, view[pos:], off + pos)
        end = off + view.nbytes
        if self._pending is not None and self._pending[1] != off:
            self._drop()  # not consecutive: flush what was
        self._pending = (off if self._pending is None else self._pending[0], end)
        if end - self._pending[0] >= DROP_WRITTEN_BYTES:
            self._drop()

    def _drop(self, whole: bool = False) -> None:
        """Flush the written rows and drop the file up to the last of them from the page cache.

        From the file's start (not the pending range's): the cache holds a file in folios of up
        to a few MiB, and only whole ones are dropped; clean pages of earlier rows (or other
        ranks' rows) go too, dirty ones stay.
        """
        span, self._pending = self._pending, None
        advise = getattr(os, "posix_fadvise", None)
        if (span is None and not whole) or self._fd is None or advise is None:
            return
        os.fdatasync(self._fd)
        advise(self._fd, 0, 0 if whole or span is None else span[1], os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        """Flush and drop the written rows, and close the file descriptor."""
        if self._fd is not None:
            self._drop(whole=self._pending is not None)
            os.close(self._fd)
            self._fd = None


class MemoryRows:
    """A hidden layer held in memory: the :class:`RowFile` interface over an array."""

    def __init__(self, dtype: Any, shape: tuple[int, ...]) -> None:
        self.array = np.empty(shape, dtype=dtype)

    def write(self, start: int, rows: np.ndarray) -> None:
        """Write ``rows`` at rows ``start..``."""
        self.array[start : start + len(rows)] = rows

    def close(self) -> None:
        """Nothing to release (the next layer reads :attr:`array`)."""


class RowWriter:
    """A :data:`~fleetgnn.engines.inference.Sink` writing the last layer's rows to ``.npy`` files.

    What ``predict``/``embed`` write.

    Args:
        files: ``kind -> RowFile``; kinds: ``"rows"`` (the rows as they are), ``"class"``
            (int64 argmax), ``"prob"`` (float32 softmax).
    """

    def __init__(self, files: dict[str, RowFile]) -> None:
        self.files = files

    def __call__(self, ids: np.ndarray, rows: torch.Tensor) -> None:
        """Write the rows of ``ids`` (ascending; contiguous, since every node is computed)."""
        start = int(ids[0])
        if int(ids[-1]) - start + 1 != ids.size:
            raise ValueError("RowWriter needs contiguous destinations (no select)")
        for kind, f in self.files.items():
            if kind == "rows":
                out = rows
            elif kind == "class":
                out = rows.argmax(dim=1)
            elif kind == "prob":
                out = torch.softmax(rows, dim=1)
            else:
                raise ValueError(f"unknown RowWriter kind {kind!r}")
            f.write(start, out.detach().cpu().numpy().astype(f.dtype, copy=False))

    def close(self) -> None:
        """Close every file."""
        for f in self.files.values():
            f.close()


@dataclasses.dataclass
class ScratchDir:
    """The temporary directory of one inference's scratch files (shared or this rank's)."""

    path: Path
    owner: bool  # this rank created it (and removes it)

    def remove(self) -> None:
        """Remove the directory and its files (its owner only)."""
        if self.owner:
            shutil.rmtree(self.path, ignore_errors=True)

    def release(self, comm: Any, wait: bool) -> None:
        """:meth:`remove` at the end of a pass.

        ``wait`` (a shared directory after a pass that finished) first waits at a barrier, so
        that no rank still reads the last files.
        """
        if wait:
            barrier(comm)
        self.remove()


def make_scratch(base: str | os.PathLike[str] | None, need: int) -> Path:
    """A new owner-tagged directory in ``base`` after checking ``need`` bytes are free there."""
    root = Path(base) if base is not None else Path(tempfile.gettempdir())
    try:
        root.mkdir(parents=True, exist_ok=True)
        free = free_bytes(root)
        if need > free:
            raise disk_full_error(root, need, _DISK_FIX, checked=True)
        return Path(tempfile.mkdtemp(prefix=temp_prefix("inference"), dir=root))
    except OSError as e:  # a read-only or missing place (a full disk is a DiskFullError)
        raise ConfigError(
            f"cannot create the scratch directory of layer-wise inference in '{root}' "
            f"({e.strerror or e}); it needs {need} bytes of writable space there"
        ) from e
