"""Scattered rows of a ``.npy`` file, read by copying out of the page cache, never kept mapped.

Scattered rows read through a memory map make the touched pages resident in the reading process
(file-backed RSS), and the kernel maps more than the rows asked for (fault-around, large
page-cache folios, readahead: a few hundred scattered rows of a 200 MB file mapped ~110 MB). So
:class:`RowReader` reads the rows of a file (an ``np.memmap`` of a whole ``.npy``, as
:func:`~fleetgnn.graph.open_dataset` and the streaming-inference scratch files give) into the
caller's own buffers, one of two ways per call, decided by where the rows are:

- **Dense and cached, in a file of at most** :data:`MAP_FRACTION` **of the machine's memory**
  (at least one requested row per :data:`MAP_PAGES_PER_ROW` pages of the span they cover, and
  most of a sample of them in the page cache, probed with ``preadv(..., RWF_NOWAIT)``, which
  does not wait for the disk): the rows are copied, in sorted blocks, through the reader's own
  mapping advised ``MADV_RANDOM``, and each block's pages are unmapped again (``MADV_DONTNEED``:
  they stay in the page cache, they leave the process). 1M random 512-byte rows of a cached
  5.7 GB file: 0.42 s, against 0.72 s with ``pread`` (this 2-core VM, 24 GiB).
  Inference chunks (62k source rows each) of papers-like 0.02's 1.1 GB features are that dense
  (one row per ~4 pages): ``embed`` took 18 s with the mapping and 50 s with ``pread``. For sparser
  calls the kernel's work per fault (it maps the cached pages around each one, and unmapping
  undoes it) outweighs the system calls saved: the same chunks in 0.1's 5.7 GB file (one row
  per ~22 pages) took 12.1 s through the mapping and 10.4 s with ``pread`` (40 chunks), and
  8 us against 5 us per row in 0.3's 17 GB one.
- **Otherwise**: sorted, coalesced ``os.preadv`` calls (IDs less than :data:`READ_GAP_BYTES`
  apart share one read, at most :data:`READ_RUN_BYTES` per read), with the file advised
  ``POSIX_FADV_RANDOM`` (no readahead beyond the runs asked for).

The first call that finds its rows mostly uncached asks the kernel to read the whole file ahead
(``POSIX_FADV_WILLNEED``) when the file fits in the memory available then (less a reserve,
:func:`fits_in_cache`): one sequential read at disk speed (1.6 GB/s here) instead of one random
read per row (a few thousand per second), after which the calls find their rows cached. Full-
neighbour inference reads every source of every chunk, so a layer touches most of its input file.

Either way the only memory is the output and one block of rows or runs: the file's pages stay
in the page cache, never in the process. Other arrays (in memory, or a view of a map) are indexed
as they are.

Used by the store's disk tier (:meth:`~fleetgnn.store.UnifiedStore.gather`) and by streaming
inference (:mod:`fleetgnn.engines.inference`) to read its scratch layers and the features.
"""

from __future__ import annotations

import mmap
import os
import threading
from typing import Any

import numpy as np

from fleetgnn.graph.loaders._io import memory_available, memory_total
from fleetgnn.graph.row_array import RowArray

__all__ = [
    "CACHED_FRACTION",
    "MAP_FRACTION",
    "MAP_PAGES_PER_ROW",
    "READ_GAP_BYTES",
    "READ_RUN_BYTES",
    "RowReader",
    "file_rows",
    "fits_in_cache",
]

#: IDs closer than this (in bytes of rows) are read together by :class:`RowReader`.
READ_GAP_BYTES = 64 << 10
#: The most bytes :class:`RowReader` reads with one call.
READ_RUN_BYTES = 4 << 20
#: A call whose sampled rows are at least this fraction in the page cache copies them through a
#: mapping (see the module docstring); others ``pread``.
CACHED_FRACTION = 0.5
#: Files larger than this fraction of the machine's memory are always read with ``pread``.
MAP_FRACTION = 0.5
#: A call maps its rows only with at least one row per this many pages of the span they cover
#: (the kernel maps up to 16 cached pages around each fault).
MAP_PAGES_PER_ROW = 16
#: Requested rows probed for residency per call (spread over the sorted IDs).
_PROBES = 64
#: Rows copied through the mapping per block, and the most file bytes a block spans (its pages
#: are unmapped after each block, so the process maps at most one span at a time).
_MAP_BLOCK_ROWS = 1 << 16
_MAP_SPAN_BYTES = 16 << 20
_EXTENT = 2 << 20
#: Memory kept free of a read-ahead file (besides 10% of the machine's memory).
CACHE_RESERVE_BYTES = 1 << 30
_RWF_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None)
_MADV_RANDOM: int | None = getattr(mmap, "MADV_RANDOM", None)
_MADV_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)


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


def fits_in_cache(nbytes: int) -> bool:
    """Whether a file of ``nbytes`` fits in the memory available now, less a reserve.

    The reserve is :data:`CACHE_RESERVE_BYTES` plus 10% of the machine's memory; ``False`` where
    the available memory is unknown.
    """
    avail = memory_available()
    if avail is None:
        return False
    return nbytes <= avail - CACHE_RESERVE_BYTES - memory_total() // 10


class RowReader:
    """Rows of an ``[N, ...]`` array; from its ``.npy`` file where it has one.

    See the module docstring. Thread-safe (``pread`` takes its own position; the mapping is
    only read); the file stays open until :meth:`close` (or until the reader is collected).

    A :class:`~fleetgnn.graph.row_array.RowArray` (a dataset's compact feature rows) is read
    from its stored rows' file and decoded: :meth:`take` returns the rows it reads as, while
    :attr:`shape`, :attr:`dtype` and :attr:`row_bytes` describe the stored rows.

    Args:
        array: The rows (``[N, ...]``), or the path of a ``.npy`` file.
        cached: How a call reads a file's rows: ``"auto"`` (by the page-cache probe),
            ``"map"`` (always through the mapping) or ``"pread"`` (always ``pread``).

    Attributes:
        shape: The array's shape.
        dtype: The array's dtype.
        row_bytes: Bytes of one row.
        offset: Byte offset of row 0 in the file (0 when not reading from a file).
    """

    def __init__(self, array: Any, cached: str = "auto") -> None:
        if cached not in ("auto", "map", "pread"):
            raise ValueError(f"cached={cached!r}: expected 'auto', 'map' or 'pread'")
        self._fd: int | None = None
        self._cached = cached
        self._map: mmap.mmap | None = None
        self._rows: np.ndarray | None = None
        self._lock = threading.Lock()
        #: Calls served through the mapping / with ``pread`` (what the probe decided).
        self.mapped_calls = 0
        self.pread_calls = 0
        #: Whether this reader asked the kernel to read its file ahead (see the module docstring).
        self.read_ahead = False
        if isinstance(array, (str, os.PathLike)):
            array = np.load(array, mmap_mode="r")
        self._decode = None
        if isinstance(array, RowArray):  # read as stored, decoded by take
            self._decode, array = array.decode, array.stored
        self.array = array
        self.shape: tuple[int, ...] = tuple(int(n) for n in array.shape)
        self.dtype = np.dtype(array.dtype)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        self.offset = 0
        self._file_bytes = 0  # the header and every row: the bytes a file of the rows holds
        if file_rows(array):
            try:
                self._fd = os.open(array.filename, os.O_RDONLY)
            except OSError:
                return
            self.offset = int(array.offset)
            self._file_bytes = self.offset + self.shape[0] * self.row_bytes
            advise = getattr(os, "posix_fadvise", None)
            if advise is not None:  # this open file only: no readahead beyond the runs asked for
                try:
                    advise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)
                except OSError:
                    pass

    @property
    def reads_file(self) -> bool:
        """Whether rows come from the file (else by indexing the array)."""
        return self._fd is not None

    def take(self, ids: np.ndarray) -> np.ndarray:
        """``array[ids]`` (any order, repeats allowed) as a new array.

        Raises:
            IndexError: An ID outside ``[0, N)``.
        """
        out = self._take(ids)
        return out if self._decode is None else self._decode(out)

    def _take(self, ids: np.ndarray) -> np.ndarray:
        """The stored rows ``ids`` (see :meth:`take`)."""
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
        if self._use_map(sid):
            self.mapped_calls += 1
            self._take_mapped(sid, order, out)
            return out
        self.pread_calls += 1
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

    def cached_fraction(self, sid: np.ndarray) -> float:
        """Fraction of a sample of the sorted rows ``sid`` found in the page cache (reads none).

        Probes up to :data:`_PROBES` rows spread over ``sid`` with ``preadv(..., RWF_NOWAIT)``,
        which fails instead of waiting for the disk (the kernel still starts reading a missed
        page: the probe reads ahead the rows it sampled); 0.0 where the platform has no
        ``RWF_NOWAIT``.
        """
        if self._fd is None or _RWF_NOWAIT is None or sid.size == 0:
            return 0.0
        probe = sid[np.linspace(0, sid.size - 1, min(_PROBES, sid.size)).astype(np.int64)]
        buf = bytearray(self.row_bytes)
        hits = 0
        for row in probe.tolist():
            try:
                n = os.preadv(self._fd, [buf], self.offset + row * self.row_bytes, _RWF_NOWAIT)
            except OSError:  # EAGAIN: not cached (or the flag unsupported here)
                continue
            hits += n == self.row_bytes
        return hits / probe.size

    def _use_map(self, sid: np.ndarray) -> bool:
        if self._cached == "pread" or _MADV_DONTNEED is None:
            return False
        if self._cached == "auto":
            pages = (int(sid[-1]) - int(sid[0]) + 1) * self.row_bytes / mmap.PAGESIZE
            sparse = sid.size * MAP_PAGES_PER_ROW < pages  # pread (see the module docstring)
            if sparse and self.read_ahead:
                return False
            cached = self.cached_fraction(sid) >= CACHED_FRACTION
            if not cached and self._read_ahead() and not sparse:
                cached = self.cached_fraction(sid) >= CACHED_FRACTION
            if sparse or not cached or self._file_bytes > MAP_FRACTION * memory_total():
                return False
        return self._mapping() is not None

    def _read_ahead(self) -> bool:
        """Ask the kernel once to read the whole file ahead, if it fits in memory; whether asked."""
        advise = getattr(os, "posix_fadvise", None)
        with self._lock:
            if self.read_ahead or self._fd is None or advise is None:
                return False
            if not fits_in_cache(self._file_bytes):
                return False
            self.read_ahead = True
            try:
                advise(self._fd, 0, self._file_bytes, os.POSIX_FADV_WILLNEED)
            except OSError:
                return False
            return True

    def _mapping(self) -> np.ndarray | None:
        """The file's rows through this reader's own mapping (made on first use)."""
        with self._lock:
            if self._rows is None and self._fd is not None:
                try:
                    mm = mmap.mmap(self._fd, 0, prot=mmap.PROT_READ)
                except (OSError, ValueError):
                    return None
                if _MADV_RANDOM is not None:
                    mm.madvise(_MADV_RANDOM)  # no readahead around the rows asked for
                if len(mm) < self._file_bytes:
                    mm.close()  # the file no longer holds the rows: pread reports it
                    return None
                self._map = mm
                self._rows = np.ndarray(self.shape, self.dtype, buffer=mm, offset=self.offset)
            return self._rows

    def _take_mapped(self, sid: np.ndarray, order: np.ndarray, out: np.ndarray) -> None:
        """``out[order] = rows[sid]`` in sorted blocks, unmapping each block's pages after it."""
        rows, mm = self._rows, self._map
        assert rows is not None and mm is not None and _MADV_DONTNEED is not None
        span = (self.offset + sid * self.row_bytes) // _MAP_SPAN_BYTES
        cut = np.flatnonzero(np.diff(span)) + 1
        starts = np.concatenate([[0], cut]).tolist()
        for a0, b0 in zip(starts, [*starts[1:], sid.size], strict=True):
            for a in range(a0, b0, _MAP_BLOCK_ROWS):
                b = min(b0, a + _MAP_BLOCK_ROWS)
                out[order[a:b]] = rows[sid[a:b]]
                # whole 2 MiB extents: a fault may map a large page-cache folio around the row
                first = (self.offset + int(sid[a]) * self.row_bytes) // _EXTENT * _EXTENT
                last = -(-(self.offset + (int(sid[b - 1]) + 1) * self.row_bytes) // _EXTENT)
                mm.madvise(_MADV_DONTNEED, first, min(len(mm), last * _EXTENT) - first)

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
        with self._lock:
            mm, self._map, self._rows = self._map, None, None
        if mm is not None:
            mm.close()
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
