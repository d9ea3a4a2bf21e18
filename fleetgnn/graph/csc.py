"""The :class:`Graph`: CSC topology plus node data, validated on construction.

Layout (CSC, "in-neighbours"): the in-neighbours (sources) of destination node ``v`` are
``indices[indptr[v]:indptr[v + 1]]``, and edge ``e`` in that range goes ``indices[e] -> v``.

=============  =========================  ==========================================
array          dtype / shape              meaning
=============  =========================  ==========================================
``indptr``     int64 ``[N + 1]``          segment offsets, ``indptr[0] == 0``
``indices``    int32 (int64 if N >= 2^31) source node of each edge ``[E]``
``x``          float ``[N, F]``           node features (optional)
``y``          int64 ``[N]``              class label in ``[0, C)``, ``-1`` = unlabelled
``*_mask``     bool ``[N]``               train / val / test splits, pairwise disjoint
``node_time``  int64 ``[N]``              optional node times ``>= 0`` (when a label is asked)
``edge_weight`` float ``[E]``             optional, aligned with ``indices``
``edge_attr``  float ``[E, D]``           optional edge features, aligned with ``indices``
``edge_time``  int64 ``[E]``              optional edge times ``>= 0``, aligned with ``indices``,
                                          non-decreasing within each node's segment
=============  =========================  ==========================================

An edge's ID is its position in ``indices``: ``edge_weight[e]``, ``edge_attr[e]`` and
``edge_time[e]`` belong to edge ``e``, and every transformation that moves edges
(:meth:`Graph.permute`, :meth:`Graph.to_undirected`, ...) moves their rows with them.

With ``edge_time`` each destination's in-edges are sorted by time (ties in the order of the edge
list the graph was built from), so the in-edges of ``v`` before time ``t`` are a prefix of its
segment found by binary search (:mod:`fleetgnn.graph.edge_time`). ``node_time`` is node data
like ``y``: every transformation that moves nodes moves it with them.

Arrays may be numpy memory maps (see :func:`fleetgnn.graph.dataset.open_dataset`); methods that
build new graphs read them in bounded chunks where that matters and never modify them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from fleetgnn.errors import GraphError
from fleetgnn.graph.edge_time import (
    TIME_DTYPE,
    as_edge_time,
    as_node_time,
    check_node_time,
    check_time_order,
)
from fleetgnn.graph.files import create_npy
from fleetgnn.graph.row_array import RowArray

SPLITS: tuple[str, ...] = ("train_mask", "val_mask", "test_mask")
_DEGREE_BLOCK = 1 << 23  # indices counted per step by Graph.out_degrees (64 MiB as int64)
_CHUNK_ROWS = 1 << 20  # rows scanned per step when validating large (possibly memory-mapped) arrays
#: In-edges gathered per step by :meth:`Graph.permute` (a few int64 work arrays of this size).
_PERMUTE_BLOCK_EDGES = 1 << 22
_PERMUTE_BLOCK_NODES = 1 << 20  # nodes per step of Graph.permute's degree and inverse passes
#: The files of a topology written by :meth:`Graph.permute` (``out_dir``), by array.
TOPOLOGY_FILES: dict[str, str] = {
    "indptr": "indptr.npy",
    "indices": "indices.npy",
    "edge_weight": "edge_weight.npy",
    "edge_attr": "edge_attr.npy",
    "edge_time": "edge_time.npy",
}
#: The optional per-edge arrays, aligned with ``indices``.
EDGE_ARRAYS: tuple[str, ...] = ("edge_weight", "edge_attr", "edge_time")
_TOPOLOGY_FIX = "free some space there, or write the relabelled topology to another directory"

Validation = Literal["full", "structure", "none"]


def index_dtype(num_nodes: int) -> np.dtype:
    """The dtype for node IDs: int32 when every ID fits, else int64."""
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


def append_to_segments(
    out: np.ndarray,
    cursor: np.ndarray,
    dst: np.ndarray,
    src: np.ndarray,
    also: Sequence[tuple[np.ndarray, np.ndarray]] = (),
) -> None:
    """Append ``src[i]`` to the segment of ``dst[i]`` at ``cursor[dst[i]]``, keeping input order.

    Vectorised, without ``np.add.at``: a stable sort groups the chunk by destination, the rank of
    an edge inside its group is its offset past the cursor, and each cursor then advances by the
    group's size. Each ``(out_k, values_k)`` of ``also`` (per-edge data of the same chunk: times,
    line numbers) is written to the same positions, ``out_k[pos] = values_k``, so one cursor
    serves every array scattered alongside ``src``.
    """
    order = np.argsort(dst, kind="stable")
    d = dst[order].astype(np.int64)
    first = np.searchsorted(d, d, side="left")
    pos = cursor[d] + (np.arange(d.size, dtype=np.int64) - first)
    out[pos] = src[order]
    for other, values in also:
        other[pos] = np.asarray(values)[order]
    uniq, cnt = np.unique(d, return_counts=True)
    cursor[uniq] += cnt


def coo_to_csc(
    src: np.ndarray,
    dst: np.ndarray,
    num_nodes: int,
    edge_weight: np.ndarray | None = None,
    *,
    edge_time: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Build CSC arrays from an edge list ``src[i] -> dst[i]``.

    Edges of one destination keep their input order (stable sort); with ``edge_time`` they are
    sorted by time, equal times in input order (:func:`csc_order`).

    Args:
        src: Source node of each edge, shape ``[E]``.
        dst: Destination node of each edge, shape ``[E]``.
        num_nodes: Number of nodes ``N``; every ID must lie in ``[0, N)``.
        edge_weight: Optional weight per edge, shape ``[E]``.
        edge_time: Optional time per edge (checked int64 ``[E]``, see :func:`csc_order`); it
            orders each segment, and ``edge_time[csc_order(dst, edge_time)]`` is the graph's.

    Returns:
        ``(indptr, indices, edge_weight)`` with ``indptr`` int64 ``[N + 1]``.

    Raises:
        GraphError: If the arrays disagree in length or an ID is out of range.
    """
    src = np.asarray(src)
    dst = np.asarray(dst)
    if src.ndim != 1 or dst.ndim != 1 or src.shape != dst.shape:
        raise GraphError(
            f"edge arrays 'src' and 'dst' must be 1-D of equal length (got shapes {src.shape} and "
            f"{dst.shape}); pass one source and one destination per edge"
        )
    for name, arr in (("src", src), ("dst", dst)):
        check_ids(name, arr, num_nodes)
    order = csc_order(dst, edge_time)
    counts = np.bincount(dst, minlength=num_nodes) if dst.size else np.zeros(num_nodes, np.int64)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = src[order].astype(index_dtype(num_nodes), copy=False)
    weight = None
    if edge_weight is not None:
        edge_weight = np.asarray(edge_weight)
        if edge_weight.shape != src.shape:
            raise GraphError(
                f"'edge_weight' must have one value per edge, shape ({src.shape[0]},) "
                f"(got {edge_weight.shape})"
            )
        weight = edge_weight[order]
    return indptr, indices, weight


def csc_order(dst: np.ndarray, edge_time: np.ndarray | None = None) -> np.ndarray:
    """The edge order :func:`coo_to_csc` puts an edge list in: by destination, stable.

    With ``edge_time`` (one integer per edge) by ``(destination, time)``, equal pairs in input
    order. ``edge_attr[csc_order(dst, edge_time)]`` is the edge list's ``edge_attr`` aligned with
    the CSC ``indices`` (the order does not depend on ``src``).
    """
    if edge_time is None:
        return np.argsort(np.asarray(dst), kind="stable")
    return np.lexsort((np.asarray(edge_time), np.asarray(dst)))  # lexsort is stable


def check_edge_attr(edge_attr: object, num_edges: int) -> np.ndarray:
    """``edge_attr`` as an array once its shape and dtype are checked (float ``[E, D]``).

    Raises:
        GraphError: Not a 2-D float array with one row per edge.
    """
    if not isinstance(edge_attr, np.ndarray):
        raise GraphError(
            f"'edge_attr' must be a numpy array [num_edges, D] (got {type(edge_attr).__name__})"
        )
    if edge_attr.ndim != 2 or edge_attr.shape[0] != num_edges:
        raise GraphError(
            f"'edge_attr' must have one row per edge, shape ({num_edges}, D) "
            f"(got {edge_attr.shape}); reshape 1-D attributes with attr[:, None]"
        )
    if not np.issubdtype(edge_attr.dtype, np.floating):
        raise GraphError(
            f"'edge_attr' must be a float array (got {edge_attr.dtype}); cast with .astype"
        )
    return edge_attr


def check_ids(
    name: str,
    ids: np.ndarray,
    num_nodes: int,
    hint: str = "make sure IDs are 0-based and num_nodes covers every node",
    unit: str = "",
    offset: int = 0,
) -> None:
    """Raise :class:`GraphError` unless every entry of ``ids`` is an integer in ``[0, N)``.

    Args:
        name: The argument or array, for the message.
        ids: Node IDs (any integer dtype).
        num_nodes: ``N``.
        hint: The suggested fix appended to the message.
        unit: What a position in ``ids`` is (e.g. ``"edge"``); with it, the message names the
            first bad position (plus ``offset``).
        offset: Position of ``ids[0]`` in the whole array.
    """
    if ids.size == 0:
        return
    if not np.issubdtype(ids.dtype, np.integer):
        raise GraphError(f"'{name}' must hold integer node IDs (got dtype {ids.dtype})")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= num_nodes:
        bad = lo if lo < 0 else hi
        where = f" at {unit} {offset + int(np.argmax(ids == bad))}" if unit else ""
        raise GraphError(
            f"'{name}' holds node ID {bad}{where}, outside the valid interval [0, {num_nodes}); "
            f"{hint}"
        )


#: The fix for a node ID found out of range where a structure is built: the array changed on
#: disk after its values were checked (``verified.json`` vouches only for what it saw).
EDITED_HINT = (
    "the file changed after its values were checked; run 'fleetgnn info DATASET --verify' "
    "(or prepare the dataset again)"
)


def check_edge_ids(graph: Graph, lo: int = 0, hi: int | None = None) -> None:
    """Check ``graph.indices[lo:hi]`` against ``[0, N)`` where a structure is built from it.

    One vectorised min/max (reads the range once, no copy); the message names the first bad
    edge. Cheap insurance for memory-mapped datasets opened without a full value check.

    Each range is read once per :class:`Graph`: the graph remembers the ranges found good (all
    of them when it was built with ``validate="full"``), so the store, the sampler and the
    partitioner building from the same graph do not scan its edges again.

    Raises:
        GraphError: An index lies outside ``[0, N)``.
    """
    stop = graph.num_edges if hi is None else hi
    checked: tuple[tuple[int, int], ...] = graph.__dict__.get("_checked_edges", ())
    if any(a <= lo and stop <= b for a, b in checked):
        return
    for start in range(lo, stop, _CHUNK_ROWS * 8):
        end = min(stop, start + _CHUNK_ROWS * 8)
        check_ids("indices", graph.indices[start:end], graph.num_nodes, EDITED_HINT, "edge", start)
    object.__setattr__(graph, "_checked_edges", (*checked, (lo, stop)))


def topology_nbytes(graph: Graph) -> int:
    """Bytes of ``graph``'s topology files (:meth:`Graph.permute` with ``out_dir``), headers too."""
    n, e = graph.num_nodes, graph.num_edges
    total = 8 * (n + 1) + e * graph.indices.dtype.itemsize
    for arr in graph.edge_data().values():
        total += int(arr.nbytes)
    return total + 4 * 4096  # a .npy header is at most a few hundred bytes; one block each


def open_topology(
    directory: str | os.PathLike[str], *, num_classes: int | None = None, name: str = "graph"
) -> Graph:
    """A topology-only :class:`Graph` over read-only memory maps of :meth:`Graph.permute`'s files.

    Args:
        directory: Where ``indptr.npy`` and ``indices.npy`` (and ``edge_weight.npy``,
            ``edge_attr.npy``, ``edge_time.npy``) are.
        num_classes: The class count to carry (the graph has no labels).
        name: The graph's name.

    Raises:
        GraphError: A file is missing or the arrays disagree (structure checks).
    """
    root = Path(directory)
    arrays: dict[str, np.ndarray] = {}
    for key, file in TOPOLOGY_FILES.items():
        path = root / file
        if key in EDGE_ARRAYS and not path.exists():
            continue
        try:
            arrays[key] = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise GraphError(f"cannot open the topology file '{path}' ({e})") from e
    return Graph(num_classes=num_classes, name=name, validate="structure", **arrays)  # type: ignore[arg-type]


def _sync(arr: np.memmap) -> None:
    """Write a memory map's dirty pages to its file and fsync the file."""
    arr.flush()
    fd = os.open(arr.filename, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _blocks(lo: int, hi: int, step: int) -> list[tuple[int, int]]:
    return [(a, min(hi, a + step)) for a in range(lo, hi, step)]


def _inverse_permutation(perm: np.ndarray, n: int) -> np.ndarray:
    """``inv`` with ``inv[perm[i]] == i`` (int32 when ``N < 2^31``); raises unless a permutation."""
    dt = index_dtype(n)
    inv = np.full(n, -1, dtype=dt)
    for a, b in _blocks(0, n, _PERMUTE_BLOCK_NODES):
        inv[perm[a:b]] = np.arange(a, b, dtype=dt)
    if n and (inv < 0).any():
        missing = int(np.flatnonzero(inv < 0)[0])
        raise GraphError(
            f"'perm' is not a permutation of 0..{n - 1}: node {missing} is missing "
            f"(some other node appears twice)"
        )
    return inv


def _checked_inverse(perm: np.ndarray, inv: np.ndarray, n: int) -> np.ndarray:
    """``inv`` itself, once checked to be the inverse of the permutation ``perm``."""
    inv = np.asarray(inv)
    if inv.shape != (n,) or not np.issubdtype(inv.dtype, np.integer):
        raise GraphError(
            f"'inv' must be an integer array of shape ({n},) (got {inv.dtype}, {inv.shape})"
        )
    check_ids("inv", inv, n)
    for a, b in _blocks(0, n, _PERMUTE_BLOCK_NODES):
        wrong = inv[perm[a:b]] != np.arange(a, b)
        if wrong.any():
            i = a + int(np.flatnonzero(wrong)[0])
            raise GraphError(
                f"'inv' is not the inverse of 'perm': inv[perm[{i}]] = {int(inv[perm[i]])} != {i}"
            )
    return inv


@dataclasses.dataclass(frozen=True, eq=False)
class Graph:
    """A directed graph in CSC form with node data.

    Construction validates the arrays (see ``validate``); a failure raises :class:`GraphError`
    naming the array, the bad value, the valid range and a fix.

    Args:
        indptr: int64 ``[N + 1]`` CSC offsets.
        indices: int ``[E]`` source of each edge, grouped by destination.
        x: Optional node features ``[N, F]``: a float array, or a
            :class:`~fleetgnn.graph.row_array.RowArray` (rows a dataset stores compact, read
            as floats: :mod:`fleetgnn.graph.compact_rows`).
        y: Optional labels ``[N]``: ``0 <= y < num_classes`` or ``-1`` for unlabelled nodes.
        train_mask: Optional bool ``[N]``.
        val_mask: Optional bool ``[N]``.
        test_mask: Optional bool ``[N]``.
        edge_weight: Optional float ``[E]``.
        edge_attr: Optional float ``[E, D]``: edge features, row ``e`` for edge ``e``.
        edge_time: Optional int64 ``[E]``: edge times ``>= 0``, non-decreasing within each
            destination's segment ``indptr[v]:indptr[v + 1]`` (build with :func:`from_edges`'s
            ``edge_time`` to get that order; see :mod:`fleetgnn.graph.edge_time`).
        node_time: Optional int64 ``[N]``: node times ``>= 0``, the time at which each node's
            label is asked (a temporal node task samples a seed's in-edges before it).
        num_classes: Number of classes ``C``; inferred as ``max(y) + 1`` when omitted.
        name: A short name for reports.
        validate: ``"full"`` checks every value (default); ``"structure"`` checks shapes, dtypes
            and the ends of ``indptr`` only (O(1) reads, for memory-mapped data already validated
            when it was written); ``"none"`` skips checks (internal use).
        allow_nonfinite: Accept NaN/Inf in ``x`` instead of raising.
    """

    indptr: np.ndarray
    indices: np.ndarray
    x: np.ndarray | RowArray | None = None
    y: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    edge_weight: np.ndarray | None = None
    edge_attr: np.ndarray | None = None
    edge_time: np.ndarray | None = None
    node_time: np.ndarray | None = None
    num_classes: int | None = None
    name: str = "graph"
    validate: dataclasses.InitVar[Validation] = "full"
    allow_nonfinite: dataclasses.InitVar[bool] = False

    def __post_init__(self, validate: Validation, allow_nonfinite: bool) -> None:
        if validate not in ("full", "structure", "none"):
            raise GraphError(
                f"'validate' must be one of 'full', 'structure', 'none' (got {validate!r})"
            )
        if validate != "none":
            self._validate_structure()
        if self.num_classes is None and self.y is not None and self.y.size:
            object.__setattr__(self, "num_classes", int(np.max(self.y)) + 1)
        if validate == "full":
            self._validate_values(allow_nonfinite)
            object.__setattr__(self, "_checked_edges", ((0, self.num_edges),))  # all of them

    # ------------------------------------------------------------------ validation
    def _validate_structure(self) -> None:
        indptr, indices = self.indptr, self.indices
        if not isinstance(indptr, np.ndarray) or indptr.ndim != 1 or indptr.size < 1:
            raise GraphError(
                f"'indptr' must be a 1-D numpy array of length num_nodes + 1 >= 1 "
                f"(got {type(indptr).__name__} with shape {getattr(indptr, 'shape', None)})"
            )
        if indptr.dtype != np.int64:
            raise GraphError(f"'indptr' must be int64 (got {indptr.dtype}); cast with .astype")
        if not isinstance(indices, np.ndarray) or indices.ndim != 1:
            raise GraphError(
                f"'indices' must be a 1-D numpy array (got shape {getattr(indices, 'shape', None)})"
            )
        n = indptr.size - 1
        if indices.dtype not in (np.int32, np.int64):
            raise GraphError(f"'indices' must be int32 or int64 (got {indices.dtype})")
        if n >= 2**31 and indices.dtype != np.int64:
            raise GraphError(f"'indices' must be int64 for {n} >= 2^31 nodes (got int32)")
        if int(indptr[0]) != 0:
            raise GraphError(f"'indptr[0]' must be 0 (got {int(indptr[0])})")
        if int(indptr[-1]) != indices.size:
            raise GraphError(
                f"'indptr[-1]' must equal len(indices) = {indices.size} (got {int(indptr[-1])}); "
                f"the edge array is truncated or indptr is wrong"
            )
        for name in ("x", "y", *SPLITS):
            arr = getattr(self, name)
            if arr is None:
                continue
            if not isinstance(arr, np.ndarray) and not (name == "x" and isinstance(arr, RowArray)):
                raise GraphError(f"'{name}' must be a numpy array (got {type(arr).__name__})")
            if arr.shape[:1] != (n,):
                raise GraphError(
                    f"'{name}' must have one row per node, {n} rows (got shape {arr.shape}); "
                    f"check that features, labels and masks match the edge list's node count"
                )
        if self.x is not None:
            if self.x.ndim != 2:
                raise GraphError(f"'x' must be 2-D [num_nodes, num_features] (got {self.x.shape})")
            if not np.issubdtype(self.x.dtype, np.floating):
                raise GraphError(f"'x' must be a float array (got {self.x.dtype})")
        if self.y is not None and (self.y.ndim != 1 or not np.issubdtype(self.y.dtype, np.integer)):
            raise GraphError(
                f"'y' must be a 1-D integer array of class IDs (got {self.y.dtype}, {self.y.shape})"
            )
        for name in SPLITS:
            arr = getattr(self, name)
            if arr is not None and (arr.ndim != 1 or arr.dtype != np.bool_):
                raise GraphError(
                    f"'{name}' must be a 1-D bool array (got {arr.dtype}, {arr.shape})"
                )
        if self.edge_weight is not None:
            w = self.edge_weight
            if not isinstance(w, np.ndarray) or w.shape != (indices.size,):
                raise GraphError(
                    f"'edge_weight' must have one value per edge, shape ({indices.size},) "
                    f"(got {getattr(w, 'shape', None)})"
                )
            if not np.issubdtype(w.dtype, np.floating):
                raise GraphError(f"'edge_weight' must be a float array (got {w.dtype})")
        if self.edge_attr is not None:
            check_edge_attr(self.edge_attr, indices.size)
        t = self.edge_time
        if t is not None and (not isinstance(t, np.ndarray) or t.shape != (indices.size,)):
            raise GraphError(
                f"'edge_time' must have one time per edge, shape ({indices.size},) "
                f"(got {getattr(t, 'shape', None)})"
            )
        if t is not None and t.dtype != TIME_DTYPE:
            raise GraphError(
                f"'edge_time' must be int64 (got {t.dtype}); build the graph with "
                f"from_edges(..., edge_time=...), which checks and converts the times"
            )
        if self.node_time is not None:
            check_node_time(self.node_time, n, values=False)
        if self.num_classes is not None and int(self.num_classes) < 1:
            raise GraphError(f"'num_classes' must be >= 1 (got {self.num_classes})")

    def _validate_values(self, allow_nonfinite: bool) -> None:
        n = self.num_nodes
        indptr = self.indptr
        if indptr.size > 1:
            bad = np.flatnonzero(np.diff(indptr) < 0)
            if bad.size:
                v = int(bad[0])
                raise GraphError(
                    f"'indptr' must be non-decreasing; indptr[{v}] = {int(indptr[v])} > "
                    f"indptr[{v + 1}] = {int(indptr[v + 1])}"
                )
        for start in range(0, self.indices.size, _CHUNK_ROWS * 8):
            check_ids("indices", self.indices[start : start + _CHUNK_ROWS * 8], n)
        if self.y is not None and self.y.size:
            lo, hi = int(self.y.min()), int(self.y.max())
            c = int(self.num_classes)  # set in __post_init__ when y is given
            if lo < -1 or hi >= c:
                bad = lo if lo < -1 else hi
                raise GraphError(
                    f"'y' holds label {bad}, outside the valid interval [0, {c}) "
                    f"(-1 marks an unlabelled node); relabel classes to 0..C-1 or raise num_classes"
                )
        masks = [(name, getattr(self, name)) for name in SPLITS if getattr(self, name) is not None]
        for i, (a_name, a) in enumerate(masks):
            for b_name, b in masks[i + 1 :]:
                both = np.flatnonzero(a & b)
                if both.size:
                    raise GraphError(
                        f"split masks '{a_name}' and '{b_name}' overlap on {both.size} nodes "
                        f"(first: node {int(both[0])}); each node may belong to at most one split"
                    )
            if self.y is not None:
                unl = np.flatnonzero(a & (self.y < 0))
                if unl.size:
                    raise GraphError(
                        f"'{a_name}' contains {unl.size} unlabelled nodes (y == -1, first: node "
                        f"{int(unl[0])}); drop them from the split or give them labels"
                    )
        if self.x is not None and not allow_nonfinite:
            for start in range(0, n, _CHUNK_ROWS):
                block = np.asarray(self.x[start : start + _CHUNK_ROWS])
                finite = np.isfinite(block)
                if not finite.all():
                    r, c = np.argwhere(~finite)[0]
                    raise GraphError(
                        f"'x' holds a non-finite value {block[r, c]} at node {start + int(r)}, "
                        f"feature {int(c)}; clean the features or pass allow_nonfinite=True"
                    )
        if self.edge_weight is not None and self.edge_weight.size:
            if not np.isfinite(self.edge_weight).all():
                e = int(np.flatnonzero(~np.isfinite(self.edge_weight))[0])
                raise GraphError(
                    f"'edge_weight' holds a non-finite value {self.edge_weight[e]} at edge {e}"
                )
        attr = self.edge_attr
        for start in range(0, 0 if attr is None else attr.shape[0], _CHUNK_ROWS):
            block = np.asarray(attr[start : start + _CHUNK_ROWS])  # type: ignore[index]
            finite = np.isfinite(block)
            if not finite.all():
                r, c = np.argwhere(~finite)[0]
                raise GraphError(
                    f"'edge_attr' holds a non-finite value {block[r, c]} at edge {start + int(r)}, "
                    f"feature {int(c)}; clean the edge features"
                )
        if self.edge_time is not None:
            check_time_order(self.indptr, self.edge_time)
        if self.node_time is not None:
            check_node_time(self.node_time, n)

    # ------------------------------------------------------------------ properties
    @property
    def num_nodes(self) -> int:
        """Number of nodes ``N``."""
        return int(self.indptr.size - 1)

    @property
    def num_edges(self) -> int:
        """Number of directed edges ``E``."""
        return int(self.indices.size)

    @property
    def num_features(self) -> int:
        """Feature dimension ``F`` (0 without features)."""
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def num_edge_features(self) -> int:
        """Edge feature dimension ``D`` (0 without ``edge_attr``)."""
        return 0 if self.edge_attr is None else int(self.edge_attr.shape[1])

    def edge_data(self) -> dict[str, np.ndarray]:
        """The present per-edge arrays by name (``edge_weight``, ``edge_attr``, ``edge_time``)."""
        return {k: getattr(self, k) for k in EDGE_ARRAYS if getattr(self, k) is not None}

    def in_degrees(self) -> np.ndarray:
        """In-degree of every node, int64 ``[N]`` (segment lengths of ``indptr``)."""
        return np.diff(self.indptr)

    def out_degrees(self) -> np.ndarray:
        """Out-degree of every node, int64 ``[N]``.

        Counted over ``indices`` in blocks with ``np.add.at`` (as fast as ``np.bincount`` on
        NumPy 2): ``np.bincount`` of the whole array casts it to int64, an 8E-byte copy of a
        memory-mapped int32 ``indices``, and of a block it returns another ``[N]`` array; here
        the only ``[N]`` array is the result.
        """
        out = np.zeros(self.num_nodes, dtype=np.int64)
        for a in range(0, int(self.indices.shape[0]), _DEGREE_BLOCK):
            np.add.at(out, self.indices[a : a + _DEGREE_BLOCK], 1)
        return out

    def dst_of_edges(self) -> np.ndarray:
        """Destination node of each edge, aligned with ``indices`` (``[E]``)."""
        return np.repeat(np.arange(self.num_nodes, dtype=self.indices.dtype), self.in_degrees())

    def node_data(self) -> dict[str, np.ndarray]:
        """The present node arrays by name (``x``, ``y``, the split masks, ``node_time``)."""
        names = ("x", "y", *SPLITS, "node_time")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}

    def __repr__(self) -> str:
        parts = [
            f"name={self.name!r}",
            f"num_nodes={self.num_nodes}",
            f"num_edges={self.num_edges}",
        ]
        if self.x is not None:
            parts.append(f"x={tuple(self.x.shape)}:{self.x.dtype}")
        if self.y is not None:
            parts.append(f"num_classes={self.num_classes}")
        for name in SPLITS:
            m = getattr(self, name)
            if m is not None:
                parts.append(f"{name.split('_')[0]}={int(np.count_nonzero(m))}")
        if self.edge_weight is not None:
            parts.append("weighted")
        if self.edge_attr is not None:
            parts.append(f"edge_attr={tuple(self.edge_attr.shape)}:{self.edge_attr.dtype}")
        if self.edge_time is not None:
            parts.append("timed")
        if self.node_time is not None:
            parts.append("node_time")
        return f"Graph({', '.join(parts)})"

    # ------------------------------------------------------------------ transforms
    def replace(self, **changes: object) -> Graph:
        """A copy with some fields replaced, validated again."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def permute(
        self,
        perm: np.ndarray,
        *,
        inv: np.ndarray | None = None,
        node_data: bool = True,
        dst_range: tuple[int, int] | None = None,
        out_dir: str | os.PathLike[str] | None = None,
    ) -> Graph:
        """Relabel nodes: new node ``i`` is old node ``perm[i]``.

        Topology, features, labels, masks, node times, edge weights, edge features and edge
        times are permuted consistently, so the result is isomorphic to this graph. Each node's
        neighbour order is kept (so each segment stays sorted by time). The edges are gathered
        in blocks of about :data:`_PERMUTE_BLOCK_EDGES` edges (and at most
        :data:`_PERMUTE_BLOCK_NODES` destinations), so besides the result and the inverse
        permutation the work arrays are bounded (the old arrays may be memory maps).

        With ``out_dir`` the topology is written there instead of into memory, block by block:
        ``indptr.npy``, ``indices.npy`` (and the per-edge arrays' files), their space
        reserved first and fsynced at the end; the result is a topology-only graph over read-only
        memory maps of them (:func:`open_topology`), so the process holds no ``N``- or
        ``E``-sized array of it.

        Args:
            perm: int ``[N]``, a permutation of ``0..N-1``.
            inv: Its inverse (``inv[perm[i]] == i``), when the caller already holds it (a
                partition book does); checked, not rebuilt. ``None``: built here (int32 when
                ``N < 2^31``).
            node_data: Permute ``x``, ``y``, the masks and ``node_time`` too; ``False`` leaves
                them out (a topology-only graph, for callers that read their own rows of the
                node data).
            dst_range: ``(lo, hi)``: keep only the in-edges of the NEW destinations
                ``[lo, hi)`` (every other node gets no in-edges), e.g. the nodes one rank owns;
                ``None``: every node's.
            out_dir: An existing directory to write the relabelled topology into (needs
                ``node_data=False``); ``None``: in memory.

        Returns:
            The relabelled graph.

        Raises:
            GraphError: If ``perm`` is not a permutation of ``0..N-1``, ``inv`` is not its
                inverse, ``dst_range`` is not a range of ``[0, N]``, or ``out_dir`` is given
                with ``node_data=True``.
            DiskFullError: ``out_dir`` has too little space for the files.
        """
        n = self.num_nodes
        perm = np.asarray(perm)
        if perm.shape != (n,) or not np.issubdtype(perm.dtype, np.integer):
            raise GraphError(
                f"'perm' must be an integer array of shape ({n},) (got {perm.dtype}, {perm.shape})"
            )
        if out_dir is not None and node_data:
            raise GraphError(
                "permute(out_dir=...) writes the topology only; pass node_data=False and read "
                "the node data's rows where they are needed"
            )
        check_ids("perm", perm, n)
        inv = _inverse_permutation(perm, n) if inv is None else _checked_inverse(perm, inv, n)
        lo, hi = (0, n) if dst_range is None else (int(dst_range[0]), int(dst_range[1]))
        if not 0 <= lo <= hi <= n:
            raise GraphError(f"'dst_range' must satisfy 0 <= lo <= hi <= {n} (got {dst_range})")
        edge_arrays = self.edge_data()
        if out_dir is None:
            indptr = np.zeros(n + 1, dtype=np.int64)
            num_edges = self._permuted_indptr(perm, lo, hi, indptr)
            indices = np.empty(num_edges, dtype=self.indices.dtype)
            new_edges = {
                k: np.empty((num_edges, *v.shape[1:]), dtype=v.dtype)
                for k, v in edge_arrays.items()
            }
            self._permuted_edges(perm, inv, lo, hi, indptr, indices, new_edges)
            data: dict[str, object] = {}
            if node_data:
                data = {  # compact rows stay compact
                    k: v.take(perm) if isinstance(v, RowArray) else np.asarray(v)[perm]
                    for k, v in self.node_data().items()
                }
            data.update(new_edges)
            return Graph(
                indptr=indptr,
                indices=indices,
                num_classes=self.num_classes,
                name=self.name,
                validate="structure",
                **data,  # type: ignore[arg-type]
            )
        root = Path(out_dir)

        def create(key: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
            return create_npy(root / TOPOLOGY_FILES[key], dtype, shape, _TOPOLOGY_FIX)

        ptr_file = create("indptr", np.dtype(np.int64), (n + 1,))
        num_edges = self._permuted_indptr(perm, lo, hi, ptr_file)
        idx_file = create("indices", self.indices.dtype, (num_edges,))
        edge_files = {
            k: create(k, v.dtype, (num_edges, *v.shape[1:])) for k, v in edge_arrays.items()
        }
        self._permuted_edges(perm, inv, lo, hi, ptr_file, idx_file, edge_files)
        for arr in (ptr_file, idx_file, *edge_files.values()):
            _sync(arr)
        del ptr_file, idx_file, edge_files  # unmapped: the result maps the files read-only
        return open_topology(root, num_classes=self.num_classes, name=self.name)

    def _permuted_indptr(self, perm: np.ndarray, lo: int, hi: int, indptr: np.ndarray) -> int:
        """Fill the zeroed ``indptr`` of :meth:`permute` in node blocks; returns its edges.

        The cumulative sum runs block by block with a carry (no ``[N]`` temporary).
        """
        old_ptr = self.indptr
        indptr[: lo + 1] = 0
        total = 0
        for a, b in _blocks(lo, hi, _PERMUTE_BLOCK_NODES):
            old = perm[a:b]
            deg = np.asarray(old_ptr[old + 1]) - np.asarray(old_ptr[old])
            np.cumsum(deg, out=deg)
            indptr[a + 1 : b + 1] = deg + total
            total += int(deg[-1])
        indptr[hi + 1 :] = total
        return total

    def _permuted_edges(
        self,
        perm: np.ndarray,
        inv: np.ndarray,
        lo: int,
        hi: int,
        indptr: np.ndarray,
        indices: np.ndarray,
        new_edges: dict[str, np.ndarray],
    ) -> None:
        """Fill ``indices`` (and the per-edge arrays ``new_edges``, by name) of :meth:`permute`.

        Destination blocks of about :data:`_PERMUTE_BLOCK_EDGES` in-edges and at most
        :data:`_PERMUTE_BLOCK_NODES` nodes (at least one node each); every output array may be
        a memory map being written.
        """
        old_ptr = self.indptr
        num_edges = int(indptr[hi])
        cuts = np.searchsorted(
            indptr[lo : hi + 1], np.arange(0, num_edges, _PERMUTE_BLOCK_EDGES), side="right"
        )
        cuts = np.unique(
            np.concatenate(
                [[lo], lo + np.maximum(cuts - 1, 0), np.arange(lo, hi, _PERMUTE_BLOCK_NODES), [hi]]
            )
        )
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            ptr = np.asarray(indptr[a : b + 1])
            e0, e1 = int(ptr[0]), int(ptr[-1])
            if e0 == e1:
                continue
            deg = np.diff(ptr)
            # position of every new edge in the old arrays: old segment start + offset in it
            old_pos = np.repeat(np.asarray(old_ptr[perm[a:b]]) - (ptr[:-1] - e0), deg)
            old_pos += np.arange(e1 - e0, dtype=np.int64)
            indices[e0:e1] = inv[np.asarray(self.indices[old_pos])]
            for k, out in new_edges.items():
                out[e0:e1] = np.asarray(getattr(self, k)[old_pos])

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The edge list ``(src, dst)`` in CSC order."""
        return np.asarray(self.indices), self.dst_of_edges()

    def _with_edges(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        weight: np.ndarray | None,
        attr: np.ndarray | None = None,
        time: np.ndarray | None = None,
    ) -> Graph:
        indptr, indices, weight = coo_to_csc(src, dst, self.num_nodes, weight, edge_time=time)
        order = None if attr is None and time is None else csc_order(dst, time)
        return Graph(
            indptr=indptr,
            indices=indices,
            edge_weight=weight,
            edge_attr=None if attr is None else attr[order],
            edge_time=None if time is None else time[order],
            num_classes=self.num_classes,
            name=self.name,
            validate="structure",
            **self.node_data(),  # type: ignore[arg-type]
        )

    def to_undirected(self) -> Graph:
        """Add every missing reverse edge and drop duplicate edges.

        Each node's in-neighbours come out sorted by ID (by time, then ID, with ``edge_time``).
        Where an edge exists in the input, its own weight, features and time are kept (of
        duplicates, the earliest); an added reverse edge takes those of the edge it mirrors.
        """
        src, dst = self.edges()
        n = self.num_nodes
        all_src = np.concatenate([src, dst]).astype(np.int64)
        all_dst = np.concatenate([dst, src]).astype(np.int64)
        prio = np.concatenate([np.zeros(src.size, np.int8), np.ones(src.size, np.int8)])
        time = None
        if self.edge_time is not None:
            t = np.asarray(self.edge_time)
            time = np.concatenate([t, t])
        # sort by (dst, src, original-before-mirror[, time]); keep the first of each (dst, src)
        keys = (prio, all_src, all_dst) if time is None else (time, prio, all_src, all_dst)
        order = np.lexsort(keys)
        key = all_dst[order] * n + all_src[order]
        keep = np.ones(order.size, dtype=bool)
        keep[1:] = key[1:] != key[:-1]
        order = order[keep]
        weight = None
        if self.edge_weight is not None:
            w = np.asarray(self.edge_weight)
            weight = np.concatenate([w, w])[order]
        attr = None
        if self.edge_attr is not None:
            a = np.asarray(self.edge_attr)
            attr = np.concatenate([a, a])[order]
        return self._with_edges(
            all_src[order], all_dst[order], weight, attr, None if time is None else time[order]
        )

    def add_self_loops(
        self, fill_weight: float = 1.0, fill_attr: float = 0.0, fill_time: int = 0
    ) -> Graph:
        """Add a self loop ``v -> v`` to every node that has none (existing loops are kept).

        Args:
            fill_weight: Weight of each added loop when the graph is weighted.
            fill_attr: Every feature of each added loop when the graph has ``edge_attr``.
            fill_time: Time of each added loop when the graph has ``edge_time`` (``0``: the
                loop precedes every edge, so a node always sees itself).
        """
        src, dst = self.edges()
        n = self.num_nodes
        has_loop = np.zeros(n, dtype=bool)
        has_loop[dst[src == dst]] = True
        new = np.flatnonzero(~has_loop)
        weight = None
        if self.edge_weight is not None:
            w = np.asarray(self.edge_weight)
            weight = np.concatenate([w, np.full(new.size, fill_weight, dtype=w.dtype)])
        attr = None
        if self.edge_attr is not None:
            a = np.asarray(self.edge_attr)
            attr = np.concatenate([a, np.full((new.size, a.shape[1]), fill_attr, dtype=a.dtype)])
        time = None
        if self.edge_time is not None:
            loops = as_edge_time(np.full(new.size, fill_time), new.size, "fill_time")
            time = np.concatenate([np.asarray(self.edge_time), loops])
        # appended after the existing edges; the stable sort in coo_to_csc keeps loops last
        # (among the edges of their time, with edge_time)
        return self._with_edges(
            np.concatenate([src.astype(np.int64), new]),
            np.concatenate([dst.astype(np.int64), new]),
            weight,
            attr,
            time,
        )


def from_edges(
    src: np.ndarray,
    dst: np.ndarray,
    num_nodes: int | None = None,
    *,
    edge_weight: np.ndarray | None = None,
    edge_attr: np.ndarray | None = None,
    edge_time: np.ndarray | None = None,
    node_data: Mapping[str, np.ndarray] | None = None,
    num_classes: int | None = None,
    name: str = "graph",
    allow_nonfinite: bool = False,
) -> Graph:
    """Build a validated :class:`Graph` from an edge list ``src[i] -> dst[i]``.

    Each destination's in-edges keep the edge list's order, or, with ``edge_time``, are sorted
    by time (equal times in the edge list's order); ``edge_weight``, ``edge_attr`` and
    ``edge_time`` move with their edges, so ``graph.edge_time[e]`` is the time of the input edge
    that became CSC edge ``e``.

    Args:
        src: Source IDs ``[E]``.
        dst: Destination IDs ``[E]``.
        num_nodes: Node count; defaults to ``max ID + 1`` (or the rows of ``node_data['x']``).
        edge_weight: Optional ``[E]``.
        edge_attr: Optional float ``[E, D]``, row ``i`` for edge ``src[i] -> dst[i]``.
        edge_time: Optional time of each edge ``[E]``: integers ``>= 0``, or floats that are all
            finite and integral; stored as int64.
        node_data: Optional ``x``, ``y``, split masks and ``node_time`` (one time per node,
            integers ``>= 0`` or integral floats, stored as int64).
        num_classes: Class count (inferred from ``y`` when omitted).
        name: Graph name.
        allow_nonfinite: Accept NaN/Inf features.

    Raises:
        GraphError: An invalid array, e.g. a NaN, negative or non-integral time in
            ``edge_time`` or ``node_time``, or one of the wrong length.
    """
    src, dst = np.asarray(src), np.asarray(dst)
    data = dict(node_data or {})
    if num_nodes is None:
        sizes = [int(v.shape[0]) for v in data.values()]
        hi = max(int(src.max()) if src.size else -1, int(dst.max()) if dst.size else -1)
        num_nodes = max([hi + 1, *sizes])
    time = None if edge_time is None else as_edge_time(edge_time, src.size)
    if data.get("node_time") is not None:  # checked and converted like edge_time
        data["node_time"] = as_node_time(data["node_time"], int(num_nodes))
    indptr, indices, weight = coo_to_csc(src, dst, int(num_nodes), edge_weight, edge_time=time)
    attr = None
    order = None if edge_attr is None and time is None else csc_order(dst, time)
    if edge_attr is not None:
        attr = check_edge_attr(np.asarray(edge_attr), src.size)[order]
    return Graph(
        indptr=indptr,
        indices=indices,
        edge_weight=weight,
        edge_attr=attr,
        edge_time=None if time is None else time[order],
        num_classes=num_classes,
        name=name,
        allow_nonfinite=allow_nonfinite,
        **data,  # type: ignore[arg-type]
    )
