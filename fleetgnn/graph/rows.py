"""Scattered rows of a ``.npy`` file read with ``pread``, never through a memory map.

Scattered rows read through a memory map make the touched pages resident in the reading process
(file-backed RSS), and the kernel maps more than the rows asked for (fault-around, large
page-cache folios, readahead: a few hundred scattered rows of a 200 MB file mapped ~110 MB). So
:class:`RowReader` reads rows of a file (an ``np.memmap`` of a whole ``.npy``, as
:func:`~fleetgnn.graph.open_dataset` and the streaming-inference scratch files give) with
``os.preadv`` into the caller's own buffers: the requested IDs are sorted and coalesced into runs
(IDs less than :data:`READ_GAP_BYTES` apart share one read, at most :data:`READ_RUN_BYTES` per
read), so the only memory is the output and one batch of runs; the file's pages stay in the page
cache, never in the process. Other arrays (in memory, or a view of a map) are indexed as they are.

Used by the store's disk tier (:meth:`~fleetgnn.store.UnifiedStore.gather`) and by streaming
inference (:mod:`fleetgnn.engines.inference`) to read its scratch layers and the features.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np

__all__ = ["READ_GAP_BYTES", "READ_RUN_BYTES", "RowReader", "file_rows"]

#: IDs closer than this (in bytes of rows) are read together by :class:`RowReader`.
READ_GAP_BYTES = 64 << 10
#: The most bytes :class:`RowReader` reads with one call.
READ_RUN_BYTES = 4 << 20


def file_rows(array: Any) -> bool:
    """Whether ``array`` maps a whole file's rows, so its rows can be read from the file.

    True for an ``np.memmap`` whose buffer is its own ``mmap`` (not a view or slice of one: a
    view keeps its parent's ``offset`` and would read the wrong rows), C-contiguous, of a native
    dtype, with a file name and non-empty rows (what ``np.load(mmap_mode="r")`` returns).
    """
    mm = getattr(array, "_mmap", None)
    return (
        isinstance(array, np.memmap)
        and isinstance(mm, mmap.mmap)
        and array.base is mm
        and bool(array.filename)
        and array.ndim >= 1
        and array.flags.c_contiguous
        and array.dtype.isnative
        and array.dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64)) > 0
    )


class RowReader:
    """Rows of an ``[N, ...]`` array; from its ``.npy`` file with ``pread`` where it has one.

    See the module docstring. Thread-safe (``pread`` takes its own position); the file stays
    open until :meth:`close` (or until the reader is collected).

    Args:
        array: The rows (``[N, ...]``), or the path of a ``.npy`` file.

    Attributes:
        shape: The array's shape.
        dtype: The array's dtype.
        row_bytes: Bytes of one row.
        offset: Byte offset of row 0 in the file (0 when not reading from a file).
    """

    def __init__(self, array: Any) -> None:
        self._fd: int | None = None
        if isinstance(array, (str, os.PathLike)):
            array = np.load(array, mmap_mode="r")
        self.array = array
        self.shape: tuple[int, ...] = tuple(int(n) for n in array.shape)
        self.dtype = np.dtype(array.dtype)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        self.offset = 0
        if file_rows(array):
            try:
                self._fd = os.open(array.filename, os.O_RDONLY)
            except OSError:
                return
            self.offset = int(array.offset)
            advise = getattr(os, "posix_fadvise", None)
            if advise is not None:  # this open file only: no readahead beyond the runs asked for
                try:
                    advise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)
                except OSError:
                    pass

    @property
    def reads_file(self) -> bool:
        """Whether rows come from the file with ``pread`` (else by indexing the array)."""
        return self._fd is not None

    def take(self, ids: np.ndarray) -> np.ndarray:
        """``array[ids]`` (any order, repeats allowed) as a new array.

        Raises:
            IndexError: An ID outside ``[0, N)``.
        """
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((ids.size, *self.shape[1:]), dtype=self.dtype)
        if ids.size == 0:
            return out
        if self._fd is None:
            out[...] = self.array[ids]
            return out
        order = np.argsort(ids)  # equal IDs read the same row: any order of ties will do
        sid = ids[order]
        if sid[0] < 0 or sid[-1] >= self.shape[0]:
            raise IndexError(f"row IDs must lie in [0, {self.shape[0]})")
        gap = max(1, READ_GAP_BYTES // self.row_bytes)
        cap = max(1, READ_RUN_BYTES // self.row_bytes)
        # pieces: runs of IDs less than `gap` rows apart, cut to at most `cap` rows each
        first = np.ones(sid.size, dtype=bool)
        first[1:] = np.diff(sid) > gap
        run = np.cumsum(first) - 1
        part = (sid - sid[first][run]) // cap
        first[1:] |= part[1:] != part[:-1]
        starts = np.flatnonzero(first)
        ends = np.append(starts[1:], sid.size)
        lo = sid[starts]
        span = sid[ends - 1] + 1 - lo
        piece = np.cumsum(first) - 1  # the piece of each sorted ID
        # batches of pieces read into one buffer of at most ~2 * cap rows
        batch = (np.cumsum(span) - span) // cap
        cut = np.flatnonzero(np.diff(batch)) + 1
        for p0, p1 in zip(
            np.concatenate([[0], cut]).tolist(), np.append(cut, span.size).tolist(), strict=True
        ):
            at = np.zeros(p1 - p0 + 1, dtype=np.int64)
            np.cumsum(span[p0:p1], out=at[1:])
            buf = np.empty((int(at[-1]), *self.shape[1:]), dtype=self.dtype)
            view = memoryview(buf).cast("B")
            rows = zip(at[:-1].tolist(), lo[p0:p1].tolist(), span[p0:p1].tolist(), strict=True)
            for k, row, n in rows:
                self._read(view, k * self.row_bytes, row, n)
            e0, e1 = int(starts[p0]), int(ends[p1 - 1])
            pc = piece[e0:e1]
            out[order[e0:e1]] = buf[sid[e0:e1] - lo[pc] + at[pc - p0]]
        return out

    def _read(self, view: memoryview, at: int, row: int, rows: int) -> None:
        """Read ``rows`` rows from row ``row`` on into ``view[at:]``."""
        assert self._fd is not None
        want = rows * self.row_bytes
        pos, off = 0, self.offset + row * self.row_bytes
        while pos < want:
            n = os.preadv(self._fd, [view[at + pos : at + want]], off + pos)
            if n <= 0:
                raise OSError(f"short read of rows [{row}, {row + rows}) at {off}")
            pos += n

    def slice(self, a: int, b: int) -> np.ndarray:
        """A copy of rows ``[a, b)``."""
        return self.take(np.arange(a, b, dtype=np.int64))

    def close(self) -> None:
        """Close the file (the reader is unusable afterwards; idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        self.array = None

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
