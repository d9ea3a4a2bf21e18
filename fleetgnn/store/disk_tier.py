"""The store's disk tier: how a feature file's rows are read.

A whole-file memory map larger than :data:`DISK_MAP_FRACTION` of the machine's memory is read
with ``pread`` (:func:`_file_reader`); a smaller one through a mapping advised ``MADV_RANDOM``
(:func:`_advise_random`), so reading a few random rows does not read ahead around them.
"""

from __future__ import annotations

import mmap

import numpy as np

from fleetgnn.graph.loaders._io import memory_total
from fleetgnn.graph.rows import RowReader

#: Feature files larger than this fraction of the machine's memory are read with ``pread``
#: (see the module docstring); smaller ones through a mapping advised ``MADV_RANDOM``.
DISK_MAP_FRACTION = 0.5
#: ``madvise`` advice for the disk tier's feature mapping (``None`` where the platform has none).
_MADV_RANDOM: int | None = getattr(mmap, "MADV_RANDOM", None)


def _map_limit() -> int:
    """Largest feature file (bytes) the disk tier reads through a mapping."""
    return int(DISK_MAP_FRACTION * memory_total())


def _file_reader(x: np.ndarray) -> RowReader | None:
    """A :class:`RowReader` reading ``x``'s rows from its file, or ``None``.

    ``None`` when ``x`` is not a whole-file memory map (see :func:`~fleetgnn.graph.rows.file_rows`)
    or the file can no longer be opened, or no longer holds ``x``'s first and last rows (replaced
    since it was mapped: the caller keeps reading what ``x`` maps).
    """
    reader = RowReader(x)
    if not reader.reads_file:
        reader.close()
        return None
    ends = np.array([0, x.shape[0] - 1], dtype=np.int64)
    try:
        same = reader.take(ends).tobytes() == np.asarray(x[ends]).tobytes()
    except OSError:
        same = False
    if not same:
        reader.close()
        return None
    return reader


def _advise_random(x: np.ndarray) -> np.ndarray:
    """A read-only mapping of the file behind ``x``, advised random access, or ``x`` itself.

    Only a whole-file map as ``np.load(mmap_mode="r")`` returns it (an ``np.memmap`` whose buffer is
    its own ``mmap``, C-contiguous, shared) gets a new mapping: a view or a private
    (copy-on-write) map is returned as is, as is ``x`` when the platform has no
    ``madvise(MADV_RANDOM)`` or the kernel refuses it, or when the file no longer holds ``x``'s
    first and last rows (replaced since it was mapped). The new mapping reads the same pages (the
    page cache is shared); only its readahead differs.
    """
    mm = getattr(x, "_mmap", None)
    if (
        _MADV_RANDOM is None
        or not isinstance(x, np.memmap)
        or not isinstance(mm, mmap.mmap)
        or x.base is not mm
        or not hasattr(mm, "madvise")
        or x.mode not in ("r", "r+")
        or x.filename is None
        or not x.flags.c_contiguous
    ):
        return x
    try:
        disk = np.memmap(x.filename, dtype=x.dtype, mode="r", offset=x.offset, shape=x.shape)
        if x.shape[0] and (
            disk[0].tobytes() != x[0].tobytes() or disk[-1].tobytes() != x[-1].tobytes()
        ):
            return x  # the file was replaced since x was mapped: keep reading what x maps
        advise = getattr(getattr(disk, "_mmap", None), "madvise", None)
        if advise is None:
            return x
        advise(_MADV_RANDOM)
    except (OSError, ValueError, OverflowError):
        return x
    return disk
