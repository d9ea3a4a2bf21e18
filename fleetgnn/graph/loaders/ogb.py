"""OGB datasets' raw CSV files (``ogbn-*``, and ``ogbl-*`` graphs), streamed to a dataset folder.

Input layout (as unpacked from the OGB release; ``root`` is e.g. ``.../ogbn_products``)::

    raw/edge.csv.gz              "src,dst" per line, E lines
    raw/num-node-list.csv.gz     one integer: N
    raw/num-edge-list.csv.gz     one integer: E
    raw/node-feat.csv.gz         optional: N lines of F comma-separated floats
    raw/node-label.csv.gz        optional: N lines, one label each ("nan" = unlabelled)
    raw/edge-feat.csv.gz         optional: E lines of D comma-separated floats (edge_attr; read
                                 for a directed prepare, ignored with a warning for undirected)
    raw/edge_year.csv.gz         optional: E lines, one integer time >= 0 each, line i the time
                                 of edge i (ogbl-collab's years): the graph's edge_time
    raw/node_year.csv.gz         optional: N lines, one integer time >= 0 each (ogbn-arxiv's and
                                 ogbn-papers100M's publication years): the graph's node_time
    split/<split_name>/{train,valid,test}.csv.gz   optional: one node ID per line
                                 (an ogbl-* split, train.pt ..., is not read: a warning)

The time files are the ones OGB's own reader takes as ``additional_edge_files`` /
``additional_node_files``. Other files (``edge_weight.csv.gz``, ``node_species.csv.gz``, link
splits in ``.pt`` files) are not read, so an ``ogbl-*`` folder (ogbl-collab) gives its graph with
the edge times and no split masks: a link task splits the edges itself (by time, with times).

Memory stays bounded by ``O(N + chunk_rows * F)`` whatever ``E`` is: edges are parsed in chunks
into temporary ``.npy`` memory maps next to ``out``, then the CSC arrays are built by a two-pass
counting sort straight into the dataset's memory maps (see :func:`prepare_ogb`).

The counts are checked before anything is sized by them: ``N`` against ``max_bytes``
(``prepare --max-memory``; about :data:`NODE_BYTES` bytes per node are held), ``E`` against what
``edge.csv.gz`` can hold at all (a gzip stream expands at most about 1032-fold and an edge line
takes at least 4 bytes), so a count of ``10**12`` is one line naming the file, not a
``MemoryError``.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from fleetgnn.errors import DatasetError
from fleetgnn.graph.csc import append_to_segments, index_dtype
from fleetgnn.graph.csc_passes import add_counts, node_ranges, sort_segments_by_time
from fleetgnn.graph.dataset import DatasetWriter
from fleetgnn.graph.files import create_npy, temp_prefix
from fleetgnn.graph.loaders._io import (
    MemoryBudget,
    Table,
    iter_line_chunks,
    num_classes_of,
    require_file,
    resolve_max_bytes,
    short,
)

SPLIT_FILES: dict[str, str] = {"train_mask": "train", "val_mask": "valid", "test_mask": "test"}
#: OGB's time files under ``raw/``: one integer per edge (``edge_time``) and per node
#: (``node_time``); a typed layout keeps a type's node times in ``raw/node-feat/TYPE/``.
EDGE_TIME_FILE = "edge_year.csv.gz"
NODE_TIME_FILE = "node_year.csv.gz"
#: Bytes held per node at the peak: degree counters and their ``bincount`` (or ``indptr`` and
#: the cursors, or the deduplicated degrees), labels, split owners and masks.
NODE_BYTES = 32
_MAX_GZIP_RATIO = 1100  # deflate expands at most 1032-fold (plus headers); rounded up
_MIN_EDGE_LINE = 4  # "0,0\n"


def _read_count(path: Path) -> int:
    table = Table(path, np.dtype(np.int64), 1, ",", None, "one integer")
    rows = [table.parse(lines, first)[:, 0] for first, lines in iter_line_chunks(path, 16)]
    vals = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    if vals.size != 1 or int(vals[0]) < 0:
        raise DatasetError(
            f"'{path}' must hold exactly one integer >= 0 (got {vals.size} values: "
            f"{vals[:4].tolist()}); node-property datasets consist of one graph"
        )
    return int(vals[0])


def _chunks(n: int, step: int) -> Iterator[tuple[int, int]]:
    for lo in range(0, n, step):
        yield lo, min(n, lo + step)


def _dedup_segments(
    buf: np.ndarray,
    indptr: np.ndarray,
    chunk_edges: int,
    time: np.ndarray | None = None,
    mirror: np.ndarray | None = None,
) -> np.ndarray:
    """Sort every CSC segment of ``buf`` and drop repeated sources, compacting ``buf`` in place.

    Node ranges holding about ``chunk_edges`` edges are processed at a time (a single node may
    exceed that). The write position never passes the read position, so compaction in place is
    safe once a range has been read.

    With ``time`` (each entry's time) and ``mirror`` (``1`` where the entry is an added reverse
    edge, ``0`` where it is an edge of the file), the entry kept of a repeated source is the one
    :meth:`~fleetgnn.graph.csc.Graph.to_undirected` keeps: an edge of the file before a mirror,
    then the earliest; each segment is then sorted by ``(time, source)`` and ``time`` compacted
    alongside ``buf``.

    Returns:
        The new ``indptr`` (int64 ``[N + 1]``); ``buf[:indptr[-1]]`` (and ``time[:indptr[-1]]``)
        holds the result.
    """
    n = indptr.size - 1
    new_deg = np.zeros(n, dtype=np.int64)
    write = 0
    for lo, hi, a, b, local in node_ranges(indptr, chunk_edges):
        seg = np.asarray(buf[a:b], dtype=np.int64)
        # by (node, source[, file edge before mirror, time]): the first of each source is kept
        keys = [seg, local]
        if time is not None and mirror is not None:
            t = np.asarray(time[a:b])
            keys = [t, np.asarray(mirror[a:b]), *keys]
        order = np.lexsort(keys)
        seg, local = seg[order], local[order]
        keep = np.ones(seg.size, dtype=bool)
        keep[1:] = (seg[1:] != seg[:-1]) | (local[1:] != local[:-1])
        kept, kept_local = seg[keep], local[keep]
        if time is not None and mirror is not None:
            kept_time = t[order][keep]
            by_time = np.lexsort((kept, kept_time, kept_local))  # sources are unique now
            kept, kept_time = kept[by_time], kept_time[by_time]
            time[write : write + kept.size] = kept_time
        buf[write : write + kept.size] = kept
        new_deg[lo:hi] = np.bincount(kept_local, minlength=hi - lo)
        write += kept.size
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(new_deg, out=out[1:])
    return out


def _check_edge_count(edge_file: Path, count_file: Path, e: int) -> None:
    """Refuse an edge count ``e`` that ``edge_file`` cannot hold (before allocating for it)."""
    size = edge_file.stat().st_size
    most = _MAX_GZIP_RATIO * size // _MIN_EDGE_LINE + 1
    if e > most:
        raise DatasetError(
            f"'{count_file}' declares {e} edges, but '{edge_file}' ({size} bytes) can hold "
            f"at most {most} lines 'src,dst'; the files are corrupt or do not belong together"
        )


def _edge_chunks(edge_file: Path, e: int, chunk_rows: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(first line, int64 [k, 2] src,dst rows)`` per chunk of ``edge_file``, ``e`` lines in all.

    Raises:
        DatasetError: If the file has more or fewer than ``e`` lines (the count file's).
    """
    table = Table(edge_file, np.dtype(np.int64), 2, ",", None, "'src,dst'")
    seen = 0
    for first, lines in iter_line_chunks(edge_file, chunk_rows):
        if seen + len(lines) > e:
            raise DatasetError(
                f"'{edge_file}' has more than {e} lines, the edge count in "
                f"num-edge-list.csv.gz (line {e + 1}: {short(lines[e - seen])}); the "
                f"files do not belong together"
            )
        arr = table.parse(lines, first)
        yield first, arr
        seen += arr.shape[0]
    if seen != e:
        raise DatasetError(
            f"'{edge_file}' has {seen} lines but num-edge-list.csv.gz says {e} edges; "
            f"the file is truncated or the files do not belong together"
        )


def read_times(
    path: Path, out: np.ndarray, chunk_rows: int, counted: str, unit: str = "node"
) -> None:
    """Stream ``path`` (one integer time ``>= 0`` per line, ``len(out)`` lines) into ``out``.

    Args:
        path: An OGB time file (``edge_year.csv.gz``, ``node_year.csv.gz``).
        out: The int64 array to fill (a memory map), one time per ``unit``.
        chunk_rows: Lines read per step.
        counted: The file that declared ``len(out)``, for messages.
        unit: ``"edge"`` or ``"node"``, for messages.

    Raises:
        DatasetError: A line that is not one integer (a fraction, a word, ``nan``), a negative
            time, or more or fewer lines than ``len(out)``: one line naming the file (and the
            line).
    """
    count = int(out.shape[0])
    table = Table(path, np.dtype(np.int64), 1, ",", None, f"one integer time >= 0 per {unit}")
    seen = 0
    for first, lines in iter_line_chunks(path, chunk_rows):
        if seen + len(lines) > count:
            raise DatasetError(
                f"'{path}' has more than {count} lines, the {unit} count in {counted} (line "
                f"{count + 1}: {short(lines[count - seen])}); one time per {unit} is needed"
            )
        t = table.parse(lines, first)[:, 0]
        neg = np.flatnonzero(t < 0)
        if neg.size:
            r = int(neg[0])
            raise DatasetError(
                f"'{path}', line {first + r}: {unit} time {int(t[r])} is negative; times must "
                f"be integers >= 0: shift them by their minimum"
            )
        out[seen : seen + t.size] = t
        seen += t.size
    if seen != count:
        raise DatasetError(
            f"'{path}' has {seen} lines but {counted} says {count} {unit}s; one time per {unit} "
            f"is needed (the file may be truncated)"
        )


def _is_link_split(split_dir: Path) -> bool:
    """Whether ``split_dir`` is an ``ogbl-*`` split (``train.pt``), not a node split."""
    return not (split_dir / "train.csv.gz").exists() and (split_dir / "train.pt").is_file()


def _split_dir(root: Path, name: str | None) -> Path | None:
    split_root = root / "split"
    if name is not None:
        d = split_root / name
        if not d.is_dir():
            have = (
                sorted(p.name for p in split_root.iterdir() if p.is_dir())
                if (split_root.is_dir())
                else []
            )
            raise DatasetError(
                f"split {name!r} not found: '{d}' is not a directory (available: {have or 'none'})"
            )
        return d
    if not split_root.is_dir():
        return None
    subdirs = sorted(p for p in split_root.iterdir() if p.is_dir())
    if len(subdirs) == 1:
        return subdirs[0]
    if not subdirs:
        return None
    raise DatasetError(
        f"'{split_root}' holds several splits ({', '.join(p.name for p in subdirs)}); choose one "
        f"with name=..."
    )


def prepare_ogb(
    root: str | os.PathLike[str],
    out: str | os.PathLike[str],
    name: str | None = None,
    overwrite: bool = False,
    chunk_rows: int = 1_000_000,
    *,
    undirected: bool = False,
    dataset_name: str | None = None,
    max_bytes: int | None = None,
    feature_dtype: str | None = None,
) -> Path:
    """Convert an OGB node-property dataset's raw files into a fleetgnn dataset directory.

    The graph is taken as given: line ``i`` of ``edge.csv.gz`` is the directed edge
    ``src -> dst``, kept in file order within each destination, duplicates kept. OGB stores some
    undirected graphs one way only (``ogbn-products``, ``ogbn-proteins``; ``ogbn-arxiv`` and
    ``ogbn-papers100M`` are citation graphs, directed): pass ``undirected=True`` to also store
    every reverse edge, which makes the result equal to ``Graph.to_undirected()`` of the directed
    graph (each node's in-neighbours sorted by ID, duplicate edges merged).

    Steps, all in bounded memory (``O(N)`` counters plus one chunk):

    1. parse ``edge.csv.gz`` in chunks of ``chunk_rows`` lines, check every ID against
       ``num-node-list``, write ``src`` / ``dst`` to temporary memory maps and count in-degrees;
    2. ``indptr`` = cumulative in-degrees; a second pass over the temporary edges scatters each
       chunk's sources into their destinations' segments (stable sort of the chunk by
       destination, running cursor per destination);
    3. with ``undirected``, pass 2 also scatters the reverse edges, and a third pass sorts and
       deduplicates each segment in place;
    4. features, labels and split masks are streamed in the same chunks;
    5. edge features (``edge-feat.csv.gz``, line ``i`` for edge ``i``) are streamed into a
       temporary map in file order, and pass 2 scatters each edge's line number beside its
       source, so ``edge_attr`` is then gathered into CSC order chunk by chunk. An undirected
       prepare merges edges, whose features would have to be merged too: it ignores them with a
       warning;
    6. edge times (``edge_year.csv.gz``, line ``i`` for edge ``i``) are streamed into a
       temporary map in file order and scattered by pass 2 beside their sources; each node's
       segment is then sorted by time, stably (equal times keep the file's order), over node
       ranges of about ``chunk_rows`` edges, moving the sources and line numbers (so
       ``edge_attr``) with it. The result equals
       ``from_edges(src, dst, edge_attr=..., edge_time=...)`` of the file's edges, bit for bit;
    7. node times (``node_year.csv.gz``) are streamed into ``node_time``.

    With ``undirected`` and edge times, a reverse edge gets the time of the edge it mirrors, and
    merging follows :meth:`~fleetgnn.graph.csc.Graph.to_undirected`: an edge of the file keeps
    its own time, the earliest of its duplicates (an edge written once per year, as ogbl-collab
    writes a collaboration, exists from its first year), and an edge only added as a reverse the
    earliest of the edges it mirrors; each node's in-neighbours are then sorted by time, then ID.
    The result equals ``from_edges(..., edge_time=...).to_undirected()``.

    Labels: ``nan`` marks an unlabelled node (``y = -1``); other values must be integers >= 0.
    Times must be integers >= 0, one per line. A malformed line raises :class:`DatasetError`
    with the file name and line number; counts that disagree with ``num-node-list`` /
    ``num-edge-list`` are refused too. ``meta.json`` records ``has_edge_time`` /
    ``edge_time_range`` and ``has_node_time`` / ``node_time_range`` when the times were read.

    Args:
        root: The dataset folder holding ``raw/`` and ``split/``.
        out: The dataset directory to write (must not exist unless ``overwrite``).
        name: Name of the split subdirectory of ``split/``; needed only when there are several.
        overwrite: Replace an existing ``out`` once the new dataset is complete.
        chunk_rows: Lines (and edges) handled per step.
        undirected: Store every reverse edge too (and merge duplicates, their times as above).
        dataset_name: Name stored in ``meta.json`` (default: the name of ``root``).
        max_bytes: The memory the conversion may use (``prepare --max-memory``; default: half
            of this machine's memory): a node count needing more (:data:`NODE_BYTES` per node)
            is refused with one line naming ``--max-memory``, before anything is allocated.
        feature_dtype: Store the features compact (``prepare --feature-dtype``,
            :class:`~fleetgnn.graph.dataset.DatasetWriter`'s ``feature_dtype``).

    Returns:
        The dataset directory, to open with :func:`fleetgnn.graph.dataset.open_dataset`.

    Raises:
        DatasetError: Missing, malformed or inconsistent input files, counts over
            ``max_bytes`` or over what the edge file can hold, or an existing ``out``.
    """
    budget = MemoryBudget(resolve_max_bytes(max_bytes))
    root = Path(root)
    out = Path(out)
    if (
        isinstance(chunk_rows, bool)
        or not isinstance(chunk_rows, (int, np.integer))
        or (chunk_rows < 1)
    ):
        raise DatasetError(f"'chunk_rows' must be an integer >= 1 (got {chunk_rows!r})")
    chunk_rows = int(chunk_rows)
    if not root.is_dir():
        raise DatasetError(f"OGB dataset folder '{root}' does not exist; check 'root'")
    raw = root / "raw"
    edge_file = require_file(raw / "edge.csv.gz", "OGB edge file")
    node_file = require_file(raw / "num-node-list.csv.gz", "OGB node count file")
    edge_count_file = require_file(raw / "num-edge-list.csv.gz", "OGB edge count file")
    n = _read_count(node_file)
    e = _read_count(edge_count_file)
    budget.take(f"'{node_file}' declares {n} nodes", n * NODE_BYTES)
    _check_edge_count(edge_file, edge_count_file, e)
    split_dir = _split_dir(root, name)
    if split_dir is not None and _is_link_split(split_dir):
        warnings.warn(
            f"'{split_dir}' holds OGB link-prediction splits (train.pt, ...), which are not "
            f"read: the dataset gets no split masks, and 'fleetgnn train --task link' splits "
            f"its edges itself (by time when they have times)",
            stacklevel=2,
        )
        split_dir = None
    idt = index_dtype(n)
    total = 2 * e if undirected else e
    edge_feat = raw / "edge-feat.csv.gz"
    with_attr = edge_feat.is_file() and not undirected
    if edge_feat.is_file() and undirected:
        warnings.warn(
            f"'{edge_feat}' is ignored: an undirected prepare merges edges and keeps no edge "
            f"features; prepare without --undirected to keep them as edge_attr",
            stacklevel=2,
        )
    time_file = raw / EDGE_TIME_FILE
    timed = time_file.is_file()

    name_ = dataset_name or root.name
    with DatasetWriter(out, name=name_, overwrite=overwrite, feature_dtype=feature_dtype) as w:
        # scratch next to the output, named after this process (swept once it is gone), with
        # its space reserved (a full disk is a DiskFullError, not a SIGBUS)
        fix = w.DISK_FULL_FIX
        with tempfile.TemporaryDirectory(
            prefix=temp_prefix(out.name, "edges"), dir=out.parent
        ) as tmp:
            t_src = create_npy(Path(tmp) / "src.npy", idt, (e,), fix)
            t_dst = create_npy(Path(tmp) / "dst.npy", idt, (e,), fix)
            counts = np.zeros(n, dtype=np.int64)
            seen = 0
            for first, arr in _edge_chunks(edge_file, e, chunk_rows):
                bad = np.flatnonzero((arr < 0) | (arr >= n))
                if bad.size:
                    r, c = divmod(int(bad[0]), 2)
                    raise DatasetError(
                        f"'{edge_file}', line {first + r}: {'src' if c == 0 else 'dst'} node ID "
                        f"{int(arr[r, c])} is outside [0, {n}) ({n} nodes in num-node-list); "
                        f"the files are inconsistent"
                    )
                t_src[seen : seen + arr.shape[0]] = arr[:, 0]
                t_dst[seen : seen + arr.shape[0]] = arr[:, 1]
                add_counts(counts, arr[:, 1])
                if undirected:
                    add_counts(counts, arr[:, 0])
                seen += arr.shape[0]
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts, out=indptr[1:])
            del counts
            t_time = ctime = mirror = t_eid = None
            if timed:  # file order, then scattered beside the sources
                t_time = create_npy(Path(tmp) / "time.npy", np.int64, (e,), fix)
                read_times(time_file, t_time, chunk_rows, "num-edge-list.csv.gz", "edge")
                if undirected:
                    ctime = create_npy(Path(tmp) / "ctime.npy", np.int64, (total,), fix)
                    mirror = create_npy(Path(tmp) / "mirror.npy", np.int8, (total,), fix)
                else:
                    ctime = w.create("edge_time", np.int64, (e,))
            if undirected:
                target = create_npy(Path(tmp) / "csc.npy", idt, (total,), fix)
            else:
                target = w.create("indices", idt, (total,))
            if with_attr:  # the line number (edge ID in the file) of every CSC position
                t_eid = create_npy(Path(tmp) / "eid.npy", np.int64, (e,), fix)
            cursor = indptr[:-1].copy()
            for rev in (False, True) if undirected else (False,):
                ends = (t_src, t_dst) if rev else (t_dst, t_src)
                for lo, hi in _chunks(e, chunk_rows):
                    also: list[tuple[np.ndarray, np.ndarray]] = []
                    if ctime is not None and t_time is not None:
                        also.append((ctime, t_time[lo:hi]))
                    if mirror is not None:
                        also.append((mirror, np.full(hi - lo, int(rev), np.int8)))
                    if t_eid is not None:
                        also.append((t_eid, np.arange(lo, hi)))
                    append_to_segments(
                        target, cursor, np.asarray(ends[0][lo:hi]), np.asarray(ends[1][lo:hi]), also
                    )
            del cursor, t_time
            if ctime is not None and not undirected:
                moved = [target] if t_eid is None else [target, t_eid]
                sort_segments_by_time(indptr, ctime, moved, chunk_rows)
            if t_eid is not None:
                feat = _write_features(
                    w,
                    edge_feat,
                    e,
                    chunk_rows,
                    counted="num-edge-list.csv.gz",
                    create=lambda shape: create_npy(Path(tmp) / "feat.npy", np.float32, shape, fix),
                    unit="edge",
                )
                attr = w.create("edge_attr", np.float32, feat.shape)
                for lo, hi in _chunks(e, chunk_rows):
                    attr[lo:hi] = feat[np.asarray(t_eid[lo:hi])]
                del t_eid, feat, attr
            if undirected:
                indptr = _dedup_segments(target, indptr, chunk_rows, ctime, mirror)
                m = int(indptr[-1])
                final = w.create("indices", idt, (m,))
                final_time = None if ctime is None else w.create("edge_time", np.int64, (m,))
                for lo, hi in _chunks(m, chunk_rows):
                    final[lo:hi] = target[lo:hi]
                    if final_time is not None and ctime is not None:
                        final_time[lo:hi] = ctime[lo:hi]
                del final, final_time
            del target, t_src, t_dst, ctime, mirror
        w.put("indptr", indptr)

        feat_file = raw / "node-feat.csv.gz"
        if feat_file.is_file():
            _write_features(w, feat_file, n, chunk_rows)
        node_time_file = raw / NODE_TIME_FILE
        if node_time_file.is_file():
            node_time = w.create("node_time", np.int64, (n,))
            read_times(node_time_file, node_time, chunk_rows, "num-node-list.csv.gz")
            del node_time
        label_file = raw / "node-label.csv.gz"
        y = _read_labels(label_file, n, chunk_rows) if label_file.is_file() else None
        num_classes = None
        if y is not None:
            w.put("y", y)
            num_classes = num_classes_of(y)
        split_name = None
        if split_dir is not None:
            split_name = split_dir.name
            _write_splits(w, split_dir, n, y, chunk_rows)
        return w.commit(
            num_classes=num_classes,
            source="ogb",
            split=split_name,
            undirected=bool(undirected),
        )


def _write_features(
    w: DatasetWriter,
    path: Path,
    n: int,
    chunk_rows: int,
    name: str = "x",
    counted: str = "num-node-list.csv.gz",
    create: Callable[[tuple[int, int]], np.ndarray] | None = None,
    unit: str = "node",
) -> np.ndarray:
    """Stream ``path`` (``n`` lines of ``F`` floats) into a new ``[n, F]`` float32 array.

    The array is the dataset's ``name`` unless ``create(shape)`` makes it (a scratch map).
    """
    x: np.ndarray | None = None
    table = Table(path, np.dtype(np.float32), 1, ",", None, "comma-separated floats")
    seen = 0
    for first, lines in iter_line_chunks(path, chunk_rows):
        if x is None:  # the first line fixes the feature width F
            f = len(lines[0].split(","))
            table = Table(path, np.dtype(np.float32), f, ",", None, f"{f} comma-separated floats")
            x = w.create(name, np.float32, (n, f)) if create is None else create((n, f))
        if seen + len(lines) > n:
            raise DatasetError(f"'{path}' has more than {n} lines, the node count in {counted}")
        arr = table.parse(lines, first)
        finite = np.isfinite(arr)
        if not finite.all():
            r, c = np.argwhere(~finite)[0]
            raise DatasetError(
                f"'{path}', line {first + int(r)}, column {int(c) + 1}: feature value "
                f"{arr[r, c]} is not finite; clean the features"
            )
        x[seen : seen + arr.shape[0]] = arr
        seen += arr.shape[0]
    if seen != n:
        raise DatasetError(
            f"'{path}' has {seen} lines but {counted} says {n} {unit}s; one line of features per "
            f"{unit} is needed (the file may be truncated)"
        )
    return np.zeros((0, 0), np.float32) if x is None else x  # None: no lines and n == 0


def _read_labels(
    path: Path, n: int, chunk_rows: int, counted: str = "num-node-list.csv.gz"
) -> np.ndarray:
    table = Table(path, np.dtype(np.float64), 1, ",", None, "one label (or nan)")
    y = np.full(n, -1, dtype=np.int64)
    seen = 0
    for first, lines in iter_line_chunks(path, chunk_rows):
        if seen + len(lines) > n:
            raise DatasetError(f"'{path}' has more than {n} lines, the node count in {counted}")
        v = table.parse(lines, first)[:, 0]
        labelled = ~np.isnan(v)
        bad = np.flatnonzero(labelled & ~((v >= 0) & (v < 2**31) & (np.floor(v) == v)))
        if bad.size:
            r = int(bad[0])
            raise DatasetError(
                f"'{path}', line {first + r}: label {short(lines[r])} is not an integer class "
                f"ID >= 0 (or 'nan' for an unlabelled node)"
            )
        y[seen : seen + v.size][labelled] = v[labelled].astype(np.int64)
        seen += v.size
    if seen != n:
        raise DatasetError(
            f"'{path}' has {seen} lines but {counted} says {n} nodes; one label per node is "
            f"needed (the file may be truncated)"
        )
    return y


def _write_splits(
    w: DatasetWriter, split_dir: Path, n: int, y: np.ndarray | None, chunk_rows: int
) -> None:
    owner = np.full(n, -1, dtype=np.int8)
    for k, (mask_name, stem) in enumerate(SPLIT_FILES.items()):
        path = require_file(split_dir / f"{stem}.csv.gz", f"OGB split file ({stem})")
        table = Table(path, np.dtype(np.int64), 1, ",", None, "one node ID")
        mask = np.zeros(n, dtype=bool)
        for first, lines in iter_line_chunks(path, chunk_rows):
            ids = table.parse(lines, first)[:, 0]
            bad = np.flatnonzero((ids < 0) | (ids >= n))
            if bad.size:
                r = int(bad[0])
                raise DatasetError(
                    f"'{path}', line {first + r}: node ID {int(ids[r])} is outside [0, {n})"
                )
            clash = np.flatnonzero((owner[ids] >= 0) & (owner[ids] != k))
            if clash.size:
                r = int(clash[0])
                other = list(SPLIT_FILES.values())[int(owner[ids[r]])]
                raise DatasetError(
                    f"'{path}', line {first + r}: node {int(ids[r])} is also in the {other!r} "
                    f"split; splits must be disjoint"
                )
            if y is not None:
                unl = np.flatnonzero(y[ids] < 0)
                if unl.size:
                    r = int(unl[0])
                    raise DatasetError(
                        f"'{path}', line {first + r}: node {int(ids[r])} has no label ('nan' in "
                        f"node-label.csv.gz) but is in the {stem!r} split"
                    )
            owner[ids] = k
            mask[ids] = True
        w.put(mask_name, mask)
