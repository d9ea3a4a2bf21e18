"""Streaming passes over a CSC too large to hold twice: degree counts, node ranges, time sorts.

The loaders (``prepare ogb``) and the synthetic generators build a graph's CSC in memory maps
without holding the edges in RAM; these are the passes both share. A pass over the edges
works on destination ranges of about ``chunk_edges`` edges (:func:`node_ranges`), so memory
stays bounded by a range whatever ``E`` is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np


def add_counts(counts: np.ndarray, ids: np.ndarray) -> None:
    """``counts[ids] += 1`` for every occurrence, without a Python loop or an [N] temporary."""
    if ids.size == 0:
        return
    if 4 * ids.size >= counts.size:
        counts += np.bincount(ids, minlength=counts.size)
    else:
        uniq, cnt = np.unique(ids, return_counts=True)
        counts[uniq] += cnt


def node_ranges(
    indptr: np.ndarray, chunk_edges: int
) -> Iterator[tuple[int, int, int, int, np.ndarray]]:
    """Destination ranges of about ``chunk_edges`` edges (one node at least; a hub may exceed it).

    Yields ``(lo, hi, a, b, local)``: nodes ``[lo, hi)``, their edges ``[a, b)`` and each
    edge's destination offset ``local`` (int64, ``dst - lo``).
    """
    n = int(indptr.shape[0]) - 1
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(indptr, indptr[lo] + chunk_edges, side="right")) - 1
        hi = min(n, max(hi, lo + 1))
        a, b = int(indptr[lo]), int(indptr[hi])
        local = np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(indptr[lo : hi + 1]))
        yield lo, hi, a, b, local
        lo = hi


def sort_segments_by_time(
    indptr: np.ndarray,
    time: np.ndarray,
    moved: Sequence[np.ndarray],
    chunk_edges: int,
    *,
    ties: np.ndarray | None = None,
    tick: Callable[[int], None] | None = None,
) -> None:
    """Sort every CSC segment by time in place, permuting each array of ``moved`` alike.

    Equal times keep their order (a stable sort), or are ordered by ``ties`` (one entry per
    edge, e.g. the sources; it may be one of ``moved``). ``moved`` holds arrays aligned with
    ``time`` (sources, edge rows' line numbers). Destination ranges of about ``chunk_edges``
    edges are read, sorted and written back one at a time (:func:`node_ranges`); ``tick``
    gets each range's edge count.
    """
    for _, _, a, b, local in node_ranges(indptr, chunk_edges):
        t = np.asarray(time[a:b])
        keys = (t, local) if ties is None else (np.asarray(ties[a:b]), t, local)
        order = np.lexsort(keys)
        if not np.array_equal(order, np.arange(b - a)):  # else already in order
            time[a:b] = t[order]
            for arr in moved:
                arr[a:b] = np.asarray(arr[a:b])[order]
        if tick is not None:
            tick(b - a)
