"""Value checks of a dataset's ``.npy`` files in bounded memory, and cheap file fingerprints.

:func:`check_values` checks every value of a dataset directory's arrays the way
:class:`~fleetgnn.graph.csc.Graph` checks an in-memory graph (``validate="full"``), but streams the
files: each array is read with ``readinto`` into one reusable buffer of about ``block_bytes / k``
bytes (``k`` arrays read side by side), so memory stays bounded by ``block_bytes`` (64 MB by
default) however large the dataset, and no page of a memory map is left resident in the process.

======================  ======================================================================
array                   checked
======================  ======================================================================
``indptr``              ``indptr[0] == 0``, non-decreasing, ``indptr[N] == E``
``indices``             every node ID in ``[0, N)``
``y``                   every label in ``[-1, C)`` (``-1`` = unlabelled)
``*_mask``              bytes 0 or 1, pairwise disjoint, no unlabelled node in a split
``x``, ``edge_weight``  every value finite (``edge_attr`` too)
``edge_time``           every time ``>= 0``, non-decreasing within each node's in-edges
``node_time``           int64, one per node, every time ``>= 0``
======================  ======================================================================

:func:`fingerprint` summarises one file by its size, modification time and a hash of its header
and a few sampled pages (the whole file when it is small): computed in about a millisecond, it
tells whether a file is still the one that was checked (see
:func:`fleetgnn.graph.dataset.open_dataset`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fleetgnn.errors import GraphError

#: Bumped whenever :func:`check_values` checks more, so that older records are checked again.
CHECK_VERSION = 1
#: Memory the check reads at a time (all arrays' buffers together).
BLOCK_BYTES = 64 << 20
#: Files up to this size are hashed whole by :func:`fingerprint`; larger ones are sampled.
WHOLE_HASH_BYTES = 1 << 20
_PAGE = 4096
_SAMPLES = 16  # pages hashed besides the first and the last one

Progress = Callable[[int, int], None]
_MASKS = ("train_mask", "val_mask", "test_mask")


# ---------------------------------------------------------------------------------- fingerprints
def fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Size, modification time and a content sample hash of one file.

    The hash (BLAKE2b, 128 bits) covers the size and the whole file if it is at most
    :data:`WHOLE_HASH_BYTES`, else its first page (the ``.npy`` header and the first values), its
    last page and :data:`_SAMPLES` pages spread evenly in between: 18 reads of 4 KiB.

    Returns:
        ``{"bytes": int, "mtime_ns": int, "sample": hex str}``.

    Raises:
        OSError: The file cannot be read.
    """
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        size = st.st_size
        h = hashlib.blake2b(str(size).encode(), digest_size=16)
        if size <= WHOLE_HASH_BYTES:
            h.update(f.read())
        else:
            last = max(0, size - _PAGE)
            for i in range(_SAMPLES + 2):
                off = (last * i // (_SAMPLES + 1)) // _PAGE * _PAGE if i <= _SAMPLES else last
                h.update(os.pread(f.fileno(), _PAGE, off))
    return {"bytes": int(size), "mtime_ns": int(st.st_mtime_ns), "sample": h.hexdigest()}


# ---------------------------------------------------------------------------------- reading
class _Rows:
    """Reads row ranges of one ``.npy`` file into a reusable buffer.

    C-ordered files (what fleetgnn writes) are read with ``readinto`` at the row's byte offset;
    anything else falls back to copying slices of a read-only memory map.
    """

    def __init__(self, path: Path, max_rows: int) -> None:
        self.path = path
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by close()
        self._mmap: np.ndarray | None = None
        try:
            shape, fortran, dtype = _read_header(self._file, path)
        except BaseException:
            self._file.close()
            raise
        self.offset = self._file.tell()
        if fortran and len(shape) > 1 or dtype is None:
            self._mmap = np.load(path, mmap_mode="r", allow_pickle=False)
            shape, dtype = self._mmap.shape, self._mmap.dtype
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.row_shape = self.shape[1:]
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))
        self.rows = self.shape[0] if self.shape else 1
        self.nbytes = self.rows * self.row_bytes
        self._buf = np.empty(max(1, min(max_rows, self.rows)) * self.row_bytes, np.uint8)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self._file.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``[lo, hi)`` (a view of the buffer, valid until the next call)."""
        if self._mmap is not None:
            return np.array(self._mmap[lo:hi])
        nbytes = (hi - lo) * self.row_bytes
        view = memoryview(self._buf)[:nbytes]
        got, pos = 0, self.offset + lo * self.row_bytes
        self._file.seek(pos)
        while got < nbytes:
            n = self._file.readinto(view[got:])
            if not n:
                raise GraphError(
                    f"'{self.path}' ended after {pos + got} bytes while reading rows {lo}..{hi}; "
                    f"the file is truncated"
                )
            got += n
        return self._buf[:nbytes].view(self.dtype).reshape((hi - lo, *self.row_shape))

    def close(self) -> None:
        """Close the file."""
        self._file.close()
        self._mmap = None
        self._buf = np.empty(0, np.uint8)


class _Ticks:
    def __init__(self, total: int, progress: Progress | None) -> None:
        self.done, self.total, self.progress = 0, total, progress

    def __call__(self, nbytes: int) -> None:
        self.done += int(nbytes)
        if self.progress is not None:
            self.progress(min(self.done, self.total), self.total)


# ---------------------------------------------------------------------------------- checks
def check_values(
    files: Mapping[str, str | os.PathLike[str]],
    *,
    num_classes: int | None,
    block_bytes: int = BLOCK_BYTES,
    progress: Progress | None = None,
    feature_dtype: str | None = None,
) -> int:
    """Check every value of a dataset's arrays, streaming the files in bounded memory.

    Shapes and dtypes must already agree (``open_dataset`` checks them first); this checks the
    values listed in the module table, with the messages :class:`~fleetgnn.graph.csc.Graph`
    gives, plus where the bad value is.

    Args:
        files: Array name -> ``.npy`` path; ``indptr`` and ``indices`` are required.
        num_classes: ``C``; ``None`` accepts any label ``>= -1`` (``C`` is then ``max(y) + 1``).
        block_bytes: Bytes read at a time over all arrays (memory used: about this much, plus
            a quarter of it for temporaries).
        progress: Called as ``progress(done_bytes, total_bytes)`` after each block.
        feature_dtype: ``x`` holds compact rows of this codec
            (:mod:`~fleetgnn.graph.compact_rows`): its values are checked as they read back.

    Returns:
        The bytes of array data checked.

    Raises:
        GraphError: At the first bad value, naming the array, the position and the valid range.
    """
    paths = {name: Path(p) for name, p in files.items()}
    # node arrays side by side (the masks and y are compared row by row), edges likewise; each
    # pass holds its own buffers only while it runs
    node_names = [k for k in ("x", "y", *_MASKS, "node_time") if k in paths]
    edge_names = [k for k in ("indices", "edge_weight", "edge_attr") if k in paths]
    timed = ("edge_time",) if "edge_time" in paths else ()
    sizes = {k: _header(paths[k]) for k in ("indptr", *node_names, *edge_names, *timed)}
    node_rows = max(1, block_bytes // max(1, sum(sizes[k][1] for k in node_names)))
    edge_rows = max(1, block_bytes // max(1, sum(sizes[k][1] for k in edge_names)))
    ptr_rows = max(1, block_bytes // 8)
    tick = _Ticks(sum(rows * row for rows, row in sizes.values()), progress)
    n = sizes["indptr"][0] - 1
    e = sizes["indices"][0]
    if "node_time" in paths:
        _check_node_time_layout(paths["node_time"], n)
    with _open({"indptr": paths["indptr"]}, ptr_rows) as readers:
        _check_indptr(readers["indptr"], e, ptr_rows, tick)
    with _open({k: paths[k] for k in edge_names}, edge_rows) as readers:
        _check_edges(readers, n, e, edge_rows, tick)
    decode = _decoder(feature_dtype)
    with _open({k: paths[k] for k in node_names}, node_rows) as readers:
        _check_nodes(readers, node_names, n, num_classes, node_rows, tick, decode)
    if "edge_time" in paths:
        time_rows = max(1, block_bytes // 16)  # edge times and indptr entries, side by side
        with _open({"indptr": paths["indptr"], "edge_time": paths["edge_time"]}, time_rows) as r:
            _check_edge_time(r["indptr"], r["edge_time"], time_rows, tick)
    return tick.done


@contextlib.contextmanager
def _open(paths: Mapping[str, Path], rows: int) -> Iterator[dict[str, _Rows]]:
    readers: dict[str, _Rows] = {}
    try:
        for k, p in paths.items():
            readers[k] = _Rows(p, rows)
        yield readers
    finally:
        for r in readers.values():
            r.close()


def _read_header(f: Any, path: Path) -> tuple[tuple[int, ...], bool, np.dtype | None]:
    """``(shape, fortran_order, dtype)`` of an open ``.npy`` file, positioned at its data.

    ``dtype`` is ``None`` for header versions other than 1.0 and 2.0 (read through a map).
    """
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(f)
    except (ValueError, OSError, EOFError) as e:
        raise GraphError(f"'{path}' is not a readable .npy file ({e}); re-create it") from e
    return (), True, None


def _header(path: Path) -> tuple[int, int]:
    """``(rows, bytes per row)`` of a ``.npy`` file."""
    with open(path, "rb") as f:
        shape, _, dtype = _read_header(f, path)
    if dtype is None:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        shape, dtype = arr.shape, arr.dtype
    rows = int(shape[0]) if shape else 1
    return rows, int(np.dtype(dtype).itemsize * int(np.prod(shape[1:], dtype=np.int64)))


def _check_indptr(r: _Rows, num_edges: int, rows: int, tick: _Ticks) -> None:
    prev: int | None = None
    for lo in range(0, r.rows, rows):
        hi = min(r.rows, lo + rows)
        blk = r.read(lo, hi)
        if lo == 0 and int(blk[0]) != 0:
            raise GraphError(f"'indptr[0]' must be 0 (got {int(blk[0])})")
        if prev is not None and prev > int(blk[0]):
            _decreasing(lo - 1, prev, int(blk[0]))
        bad = np.flatnonzero(blk[1:] < blk[:-1])
        if bad.size:
            v = int(bad[0])
            _decreasing(lo + v, int(blk[v]), int(blk[v + 1]))
        prev = int(blk[-1])
        tick(blk.nbytes)
    if prev is not None and prev != num_edges:
        raise GraphError(
            f"'indptr[-1]' must equal len(indices) = {num_edges} (got {prev}); the edge array is "
            f"truncated or indptr is wrong"
        )


def _decreasing(v: int, a: int, b: int) -> None:
    raise GraphError(f"'indptr' must be non-decreasing; indptr[{v}] = {a} > indptr[{v + 1}] = {b}")


def _check_edges(readers: dict[str, _Rows], n: int, e: int, rows: int, tick: _Ticks) -> None:
    idx = readers["indices"]
    for lo in range(0, e, rows):
        hi = min(e, lo + rows)
        blk = idx.read(lo, hi)
        if int(blk.min()) < 0 or int(blk.max()) >= n:
            pos = int(np.flatnonzero((blk < 0) | (blk >= n))[0])
            raise GraphError(
                f"'indices' holds node ID {int(blk[pos])} at edge {lo + pos}, outside the valid "
                f"interval [0, {n}); make sure IDs are 0-based and num_nodes covers every node"
            )
        tick(blk.nbytes)
        for name in ("edge_weight", "edge_attr"):
            if name in readers:
                wb = readers[name].read(lo, hi)
                _check_finite(name, wb, lo, "edge")
                tick(wb.nbytes)


def _check_edge_time(ptr: _Rows, times: _Rows, rows: int, tick: _Ticks) -> None:
    """``edge_time``: ``>= 0`` and non-decreasing within each segment (``indptr`` checked).

    Edge blocks of ``rows`` times; a decrease is allowed only at a segment start, found by
    reading ``indptr`` alongside (a cursor that only moves forward, ``rows`` entries at a time).
    """
    e = int(ptr.read(ptr.rows - 1, ptr.rows)[0])
    if times.dtype != np.int64 or times.shape != (e,):
        raise GraphError(
            f"'edge_time' must be int64 with one time per edge (got {times.dtype} {times.shape})"
        )
    node, prev = 0, None
    for lo in range(0, e, rows):
        hi = min(e, lo + rows)
        t = times.read(lo, hi)
        if int(t.min()) < 0:
            pos = lo + int(np.argmin(t))
            raise GraphError(
                f"'edge_time' holds the negative time {int(t.min())} at edge {pos}; times must "
                f"be >= 0"
            )
        dec = np.flatnonzero(t[1:] < t[:-1]) + 1  # offsets in the block
        if prev is not None and int(t[0]) < prev:
            dec = np.concatenate([[0], dec])
        prev_last, first_bad = int(t[-1]), None
        if dec.size:
            values = t[np.maximum(dec - 1, 0)].copy(), t[dec].copy()
            start = np.zeros(hi - lo, dtype=bool)
            while node < ptr.rows:  # mark the segment starts inside [lo, hi)
                p = ptr.read(node, min(ptr.rows, node + rows))
                inside = p[(p >= lo) & (p < hi)]
                start[inside - lo] = True
                if int(p[-1]) >= hi:
                    node += int(np.searchsorted(p, hi, side="left"))
                    break
                node += p.shape[0]
            bad = np.flatnonzero(~start[dec])
            if bad.size:
                k = int(bad[0])
                first_bad = (lo + int(dec[k]), int(values[0][k]), int(values[1][k]))
                if dec[k] == 0:
                    first_bad = (lo, prev, first_bad[2])
        if first_bad is not None:
            i, a, b = first_bad
            raise GraphError(
                f"'edge_time' must be non-decreasing within each node's in-edges; "
                f"edge_time[{i - 1}] = {a} > edge_time[{i}] = {b} in one node's in-edges; "
                f"prepare the dataset again (fleetgnn sorts each node's in-edges by time)"
            )
        prev = prev_last
        tick(8 * (hi - lo))


def _check_node_time_layout(path: Path, n: int) -> None:
    """``node_time``: int64 with one time per node (its values are checked with the node rows)."""
    with open(path, "rb") as f:
        shape, _, dtype = _read_header(f, path)
    if dtype is None:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        shape, dtype = arr.shape, arr.dtype
    if np.dtype(dtype) != np.int64 or tuple(shape) != (n,):
        raise GraphError(
            f"'node_time' must be int64 with one time per node, shape ({n},) (got "
            f"{np.dtype(dtype)} {tuple(shape)})"
        )


def _check_finite(name: str, blk: np.ndarray, lo: int, unit: str) -> None:
    finite = np.isfinite(blk)
    if finite.all():
        return
    where = np.argwhere(~finite)[0]
    value = blk[tuple(where)]
    at = f"{unit} {lo + int(where[0])}" + (f", feature {int(where[1])}" if blk.ndim > 1 else "")
    raise GraphError(f"'{name}' holds a non-finite value {value} at {at}; clean the values")


def _check_nodes(
    readers: dict[str, _Rows],
    names: list[str],
    n: int,
    num_classes: int | None,
    rows: int,
    tick: _Ticks,
    decode: Callable[[np.ndarray], np.ndarray] | None = None,
) -> None:
    """The node arrays' checks; ``decode``: how ``x``'s stored rows read back (compact rows)."""
    masks = [k for k in _MASKS if k in names]
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)
        blocks = {k: readers[k].read(lo, hi) for k in names}
        y = blocks.get("y")
        if y is not None and y.size:
            low, high = int(y.min()), int(y.max())
            top = num_classes if num_classes is not None else max(high + 1, 0)
            if low < -1 or high >= top:
                pos = int(np.flatnonzero((y < -1) | (y >= top))[0])
                raise GraphError(
                    f"'y' holds label {int(y[pos])} at node {lo + pos}, outside the valid "
                    f"interval [0, {top}) (-1 marks an unlabelled node); relabel classes to "
                    f"0..C-1 or raise num_classes"
                )
        for k in masks:
            raw = blocks[k].view(np.uint8)
            if raw.size and int(raw.max()) > 1:
                pos = int(np.flatnonzero(raw > 1)[0])
                raise GraphError(
                    f"'{k}' holds the byte {int(raw[pos])} at node {lo + pos}, not a bool (0 or "
                    f"1); the file is corrupt, re-create it"
                )
        unlabelled = (y < 0) if y is not None else None
        for i, a_name in enumerate(masks):
            a = blocks[a_name]
            for b_name in masks[i + 1 :]:
                both = np.flatnonzero(a & blocks[b_name])
                if both.size:
                    raise GraphError(
                        f"split masks '{a_name}' and '{b_name}' overlap (first: node "
                        f"{lo + int(both[0])}); each node may belong to at most one split"
                    )
            if unlabelled is not None:
                unl = np.flatnonzero(a & unlabelled)
                if unl.size:
                    raise GraphError(
                        f"'{a_name}' contains unlabelled nodes (y == -1, first: node "
                        f"{lo + int(unl[0])}); drop them from the split or give them labels"
                    )
        if "x" in blocks:
            x = blocks["x"] if decode is None else decode(blocks["x"])
            _check_finite("x", x, lo, "node")
        t = blocks.get("node_time")
        if t is not None and t.size and int(t.min()) < 0:
            pos = int(np.flatnonzero(t < 0)[0])
            raise GraphError(
                f"'node_time' holds the negative time {int(t[pos])} at node {lo + pos}; times "
                f"must be >= 0: shift them by their minimum"
            )
        tick(sum(b.nbytes for b in blocks.values()))


def _decoder(feature_dtype: str | None) -> Callable[[np.ndarray], np.ndarray] | None:
    """How stored rows of compact codec ``feature_dtype`` read back (``None``: plain rows)."""
    if feature_dtype is None:
        return None
    from fleetgnn.graph.compact import feature_codec
    from fleetgnn.graph.compact_rows import bits_tensor

    codec = feature_codec(feature_dtype)
    assert codec is not None

    def decode(raw: np.ndarray) -> np.ndarray:
        return codec.decode(bits_tensor(raw, codec)).numpy()

    return decode


def iter_rows(
    path: str | os.PathLike[str], block_bytes: int = BLOCK_BYTES
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(first_row, rows)`` blocks of a ``.npy`` file read into one reusable buffer.

    Each block is about ``block_bytes`` bytes and valid until the next one is read; memory stays
    bounded and no page of the file stays mapped in the process.
    """
    p = Path(path)
    rows, row_bytes = _header(p)
    step = max(1, int(block_bytes) // max(1, row_bytes))
    with _open({"a": p}, step) as readers:
        r = readers["a"]
        for lo in range(0, rows, step):
            yield lo, r.read(lo, min(rows, lo + step))


def check_typed_values(
    relations: Mapping[str, tuple[str | os.PathLike[str], str | os.PathLike[str], int]],
    features: Mapping[str, str | os.PathLike[str]],
    target: Mapping[str, str | os.PathLike[str]],
    *,
    num_classes: int | None,
    block_bytes: int = BLOCK_BYTES,
    progress: Progress | None = None,
    edge_times: Mapping[str, str | os.PathLike[str]] | None = None,
    node_times: Mapping[str, str | os.PathLike[str]] | None = None,
    feature_dtypes: Mapping[str, str] | None = None,
) -> int:
    """Check every value of a typed dataset's arrays (what :func:`check_values` checks, per part).

    Each relation's ``indptr`` and ``indices`` are checked like a graph's, with source IDs
    against the *source* type's count; each type's features are checked finite; the target
    type's labels and split masks as a graph's node arrays. Memory stays bounded by
    ``block_bytes`` as in :func:`check_values`.

    Args:
        relations: Relation label (for messages) -> ``(indptr path, indices path, N_src)``.
        features: Node type -> its features' ``.npy`` path.
        target: Any of ``y``, ``train_mask``, ``val_mask``, ``test_mask`` -> path (arrays of the
            target type).
        num_classes: ``C``; ``None`` accepts any label ``>= -1``.
        block_bytes: Bytes read at a time.
        progress: Called as ``progress(done_bytes, total_bytes)`` after each block.
        edge_times: Relation label -> its ``edge_time`` path (int64 ``[E_r]``, ``>= 0``,
            non-decreasing within each destination's segment of that relation's ``indptr``).
        node_times: Node type -> its ``node_time`` path (int64 ``[N_t]``, ``>= 0``).
        feature_dtypes: Node type -> the compact codec its features are stored in
            (:mod:`~fleetgnn.graph.compact_rows`): their values are checked as they read back.

    Returns:
        The bytes of array data checked.

    Raises:
        GraphError: At the first bad value, naming the part (relation or node type), the array,
            the position and the valid range.
    """
    sizes: dict[str, tuple[int, int]] = {}
    for label, (ptr, idx, _) in relations.items():
        sizes[f"{label}/indptr"] = _header(Path(ptr))
        sizes[f"{label}/indices"] = _header(Path(idx))
    for t, p in features.items():
        sizes[f"x/{t}"] = _header(Path(p))
    for k, p in target.items():
        sizes[k] = _header(Path(p))
    edge_times, node_times = dict(edge_times or {}), dict(node_times or {})
    for label, p in edge_times.items():
        sizes[f"{label}/edge_time"] = _header(Path(p))
    for t, p in node_times.items():
        sizes[f"node_time/{t}"] = _header(Path(p))
    tick = _Ticks(sum(rows * row for rows, row in sizes.values()), progress)
    ptr_rows = max(1, block_bytes // 8)
    for label, (ptr, idx, n_src) in relations.items():
        try:
            e = sizes[f"{label}/indices"][0]
            with _open({"indptr": Path(ptr)}, ptr_rows) as readers:
                _check_indptr(readers["indptr"], e, ptr_rows, tick)
            rows = max(1, block_bytes // max(1, sizes[f"{label}/indices"][1]))
            with _open({"indices": Path(idx)}, rows) as readers:
                _check_edges(readers, int(n_src), e, rows, tick)
        except GraphError as err:
            raise GraphError(f"relation {label}: {err}") from err
    for t, p in features.items():
        n, row = sizes[f"x/{t}"]
        rows = max(1, block_bytes // max(1, row))
        try:
            decode = _decoder((feature_dtypes or {}).get(t))
            with _open({"x": Path(p)}, rows) as readers:
                _check_nodes(readers, ["x"], n, None, rows, tick, decode)
        except GraphError as err:
            raise GraphError(f"features of node type {t!r}: {err}") from err
    if target:
        names = [k for k in ("y", *_MASKS) if k in target]
        n = sizes[names[0]][0]
        rows = max(1, block_bytes // max(1, sum(sizes[k][1] for k in names)))
        with _open({k: Path(target[k]) for k in names}, rows) as readers:
            _check_nodes(readers, names, n, num_classes, rows, tick)
    time_rows = max(1, block_bytes // 16)  # edge times and indptr entries, side by side
    for label, p in edge_times.items():
        try:
            with _open({"indptr": Path(relations[label][0]), "edge_time": Path(p)}, time_rows) as r:
                _check_edge_time(r["indptr"], r["edge_time"], time_rows, tick)
        except GraphError as err:
            raise GraphError(f"relation {label}: {err}") from err
    for t, p in node_times.items():
        try:
            n = sizes[f"node_time/{t}"][0]
            _check_node_time_layout(Path(p), n)
            with _open({"node_time": Path(p)}, time_rows) as readers:
                _check_nodes(readers, ["node_time"], n, None, time_rows, tick)
        except GraphError as err:
            raise GraphError(f"node times of node type {t!r}: {err}") from err
    return tick.done
