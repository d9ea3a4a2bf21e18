"""Edge and node times: input checks and the segment order.

A graph's ``edge_time`` (:attr:`fleetgnn.graph.csc.Graph.edge_time`) is int64 ``[E]``, aligned
with ``indices`` (CSC order), every time ``>= 0``, and **non-decreasing within each destination's
segment** ``indptr[v]:indptr[v + 1]``, so "the in-edges of ``v`` with time ``< t``" is
``indptr[v] + searchsorted(edge_time[segment], t)``. Edges of one destination with equal times
keep the order of the edge list the graph was built from (:func:`fleetgnn.graph.csc.csc_order`
sorts by ``(dst, time)``, stable).

A graph's ``node_time`` (:attr:`fleetgnn.graph.csc.Graph.node_time`) is int64 ``[N]``, one time
per node, every time ``>= 0``: the time at which the node's label is asked (its creation time,
say), in the unit of the edge times. A temporal node task samples each seed's neighbourhood at
its node time, so its blocks hold only edges from before it.

Times are integers in whatever unit the data has (seconds, days, event counters); float input is
accepted only when every value is finite and integral (``3.0``, not ``3.5`` or NaN).
"""

from __future__ import annotations

import numpy as np

from fleetgnn.errors import GraphError

#: The dtype of ``edge_time``.
TIME_DTYPE = np.dtype(np.int64)
_INT64_MAX = np.iinfo(np.int64).max
#: Edges scanned per step when checking the segment order of a (possibly memory-mapped) array.
_ORDER_BLOCK = 1 << 23


def as_edge_time(values: object, num_edges: int, name: str = "edge_time") -> np.ndarray:
    """``values`` as int64 ``[E]`` edge times once checked; the input is not modified.

    Args:
        values: One time per edge: integers, or floats that are all finite and integral.
        num_edges: ``E``.
        name: The argument, for messages.

    Raises:
        GraphError: Wrong shape, a non-numeric dtype, a NaN/inf or non-integral float, a time
            above int64's range, or a negative time; the message names ``name``, the first bad
            edge and its value.
    """
    return _as_times(values, num_edges, name, "edge")


def as_node_time(values: object, num_nodes: int, name: str = "node_time") -> np.ndarray:
    """``values`` as int64 ``[N]`` node times once checked; the input is not modified.

    The checks and messages of :func:`as_edge_time`, naming the first bad node.
    """
    return _as_times(values, num_nodes, name, "node")


def _as_times(values: object, count: int, name: str, unit: str) -> np.ndarray:
    """int64 ``[count]`` times of ``values``, one per ``unit`` (``"edge"``, ``"node"``)."""
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.shape[0] != count:
        raise GraphError(
            f"'{name}' must have one time per {unit}, shape ({count},) (got {arr.shape})"
        )
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
        raise GraphError(
            f"'{name}' must hold integer times (got dtype {arr.dtype}); convert timestamps to "
            f"integers, e.g. seconds since an epoch"
        )
    if arr.size == 0:
        return arr.astype(TIME_DTYPE)
    if arr.dtype.kind == "f":
        finite = np.isfinite(arr)
        if not finite.all():
            e = int(np.flatnonzero(~finite)[0])
            raise GraphError(
                f"'{name}' holds the non-finite time {arr[e].item()} at {unit} {e}; every "
                f"{unit} needs a finite integer time: drop or fill the missing ones"
            )
        frac = arr != np.floor(arr)
        if frac.any():
            e = int(np.flatnonzero(frac)[0])
            raise GraphError(
                f"'{name}' holds the non-integral time {arr[e].item()!r} at {unit} {e}; times "
                f"are integers: round them, or scale them to a finer unit (e.g. milliseconds)"
            )
    if arr.dtype.kind != "i":
        top = arr.max()
        if top > _INT64_MAX:
            e = int(np.argmax(arr))
            raise GraphError(
                f"'{name}' holds the time {arr[e].item()!r} at {unit} {e}, above int64's range "
                f"[0, {_INT64_MAX}]; shift or rescale the times"
            )
    if arr.min() < 0:
        e = int(np.flatnonzero(arr < 0)[0])
        raise GraphError(
            f"'{name}' holds the negative time {arr[e].item()!r} at {unit} {e}; times must be "
            f">= 0: shift them by their minimum"
        )
    return arr.astype(TIME_DTYPE, copy=False)


def check_node_time(node_time: np.ndarray, num_nodes: int, *, values: bool = True) -> None:
    """Raise unless ``node_time`` is int64 ``[N]`` with every time ``>= 0``.

    With ``values`` the times are read in blocks of :data:`_ORDER_BLOCK` nodes (it may be a
    memory map); without, only the shape and dtype are checked (``O(1)``).

    Raises:
        GraphError: A wrong shape or dtype, or the first negative time (naming the node).
    """
    if not isinstance(node_time, np.ndarray) or node_time.shape != (num_nodes,):
        raise GraphError(
            f"'node_time' must have one time per node, shape ({num_nodes},) "
            f"(got {getattr(node_time, 'shape', None)})"
        )
    if node_time.dtype != TIME_DTYPE:
        raise GraphError(
            f"'node_time' must be int64 (got {node_time.dtype}); pass it through "
            f"as_node_time(t, num_nodes) or from_edges(..., node_data={{'node_time': t}}), "
            f"which check and convert the times"
        )
    for a in range(0, num_nodes if values else 0, _ORDER_BLOCK):
        t = np.asarray(node_time[a : a + _ORDER_BLOCK])
        if t.size and int(t.min()) < 0:
            v = a + int(np.flatnonzero(t < 0)[0])
            raise GraphError(
                f"'node_time' holds the negative time {int(node_time[v])} at node {v}; times "
                f"must be >= 0: shift them by their minimum"
            )


def check_time_order(indptr: np.ndarray, edge_time: np.ndarray) -> None:
    """Raise unless ``edge_time`` is ``>= 0`` and non-decreasing within every CSC segment.

    Reads ``edge_time`` in blocks of :data:`_ORDER_BLOCK` edges (it may be a memory map); a
    decrease is allowed only where a segment starts (a position found in ``indptr``).

    Raises:
        GraphError: The first negative time, or the first decrease inside a segment (naming the
            node and the two edges).
    """
    e = int(edge_time.shape[0])
    for a in range(0, e, _ORDER_BLOCK):
        b = min(e, a + _ORDER_BLOCK)
        lo = max(a - 1, 0)  # one edge of overlap: a decrease across the block boundary
        t = np.asarray(edge_time[lo:b])
        if int(t.min()) < 0:
            i = lo + int(np.argmin(t))
            raise GraphError(
                f"'edge_time' holds the negative time {int(edge_time[i])} at edge {i}; times "
                f"must be >= 0"
            )
        dec = np.flatnonzero(t[1:] < t[:-1]) + lo + 1  # edges earlier than their predecessor
        if not dec.size:
            continue
        at = np.minimum(np.searchsorted(indptr, dec, side="left"), indptr.shape[0] - 1)
        bad = dec[np.asarray(indptr[at]) != dec]
        if bad.size:
            i = int(bad[0])
            v = int(np.searchsorted(indptr, i, side="right")) - 1
            raise GraphError(
                f"'edge_time' must be non-decreasing within each node's in-edges; node {v} has "
                f"edge_time[{i - 1}] = {int(edge_time[i - 1])} > edge_time[{i}] = "
                f"{int(edge_time[i])}; build the graph with from_edges(..., edge_time=...), which "
                f"sorts each node's in-edges by time"
            )


def time_range(times: np.ndarray) -> tuple[int, int] | None:
    """``(min, max)`` of edge or node ``times`` read in blocks, or ``None`` when it is empty."""
    e = int(times.shape[0])
    if e == 0:
        return None
    lo, hi = _INT64_MAX, 0
    for a in range(0, e, _ORDER_BLOCK):
        t = np.asarray(times[a : a + _ORDER_BLOCK])
        lo, hi = min(lo, int(t.min())), max(hi, int(t.max()))
    return lo, hi
