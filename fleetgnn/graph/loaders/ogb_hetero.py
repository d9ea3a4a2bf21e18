"""OGB heterogeneous node-property datasets (ogbn-mag's raw layout), streamed to a typed dataset.

Input layout (what OGB's ``read_csv_heterograph_raw``, ``read_node_label_hetero`` and
``read_nodesplitidx_split_hetero`` read; ``root`` is e.g. ``.../ogbn_mag``)::

    raw/num-node-dict.csv.gz            header: the node types; one row: their counts
    raw/triplet-type-list.csv.gz        "src_type,relation,dst_type" per line
    raw/relations/S___R___D/edge.csv.gz          "src,dst" per line (type-local IDs)
    raw/relations/S___R___D/num-edge-list.csv.gz one integer: E of the relation
    raw/node-feat/TYPE/node-feat.csv.gz optional: N_TYPE lines of F_TYPE floats
    raw/node-feat/TYPE/node_year.csv.gz optional: N_TYPE lines, one integer time >= 0 each
                                        (ogbn-mag's paper years): the type's node_time
    raw/nodetype-has-label.csv.gz       optional: header of types; one row True/False
    raw/node-label/TYPE/node-label.csv.gz        labels of a type marked True ("nan": none)
    split/SCHEME/nodetype-has-split.csv.gz       header of types; one row True/False
    split/SCHEME/TYPE/{train,valid,test}.csv.gz  one type-local node ID per line

``node_year.csv.gz`` sits where OGB's ``read_csv_heterograph_raw`` reads a type's additional
node files, beside its features; each type that has one gets node times (``node_time/TYPE``),
in the unit of the file (years). Other files (``edge_reltype.csv.gz``, ``edge-feat.csv.gz``)
are ignored; the relations get no edge times.
Node types and relations are taken in sorted order, as OGB sorts them. Labels and splits belong
to one target type (the one type ``nodetype-has-label`` marks, or ``target``).

Memory: ``O(sum of N_t)`` counters plus one chunk, as :func:`~fleetgnn.graph.loaders.prepare_ogb`:
each relation's edges are parsed in chunks into temporary memory maps, then scattered into its
CSC; reverse relations (``add_reverse``) are scattered from the finished forward CSC.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from fleetgnn.errors import DatasetError, GraphError
from fleetgnn.graph.csc import append_to_segments, index_dtype
from fleetgnn.graph.csc_passes import add_counts
from fleetgnn.graph.dataset import DatasetWriter, relation_key
from fleetgnn.graph.files import create_npy, temp_prefix
from fleetgnn.graph.hetero import REVERSE_PREFIX, HeteroSchema, Relation
from fleetgnn.graph.loaders._io import (
    MemoryBudget,
    iter_line_chunks,
    num_classes_of,
    require_file,
    resolve_max_bytes,
    short,
)
from fleetgnn.graph.loaders.ogb import (
    NODE_BYTES,
    NODE_TIME_FILE,
    _check_edge_count,
    _chunks,
    _edge_chunks,
    _read_count,
    _read_labels,
    _split_dir,
    _write_features,
    _write_splits,
    read_times,
)

#: The file whose presence marks OGB's heterogeneous raw layout.
LAYOUT_MARK = "num-node-dict.csv.gz"


def is_hetero_layout(root: str | os.PathLike[str]) -> bool:
    """Whether ``root/raw`` holds OGB's heterogeneous layout (``num-node-dict.csv.gz``)."""
    return (Path(root) / "raw" / LAYOUT_MARK).is_file()


def _lines(path: Path, most: int) -> list[str]:
    out: list[str] = []
    for _, lines in iter_line_chunks(path, most + 1):
        out += lines
        if len(out) > most:
            break
    return out


def _header_table(path: Path, what: str) -> dict[str, str]:
    """A two-line CSV ``header / one row`` (OGB's per-type tables): ``{column: value}``."""
    lines = [line for line in _lines(path, 2) if line.strip()]
    if len(lines) != 2:
        raise DatasetError(
            f"'{path}' must hold a header of node types and one row of {what} (got "
            f"{len(lines)} lines); node-property datasets consist of one graph"
        )
    head, row = (ln.strip().split(",") for ln in lines)
    if len(head) != len(row):
        raise DatasetError(
            f"'{path}', line 2: {len(row)} columns under a header of {len(head)} node types "
            f"({short(lines[1])})"
        )
    if len(set(head)) != len(head):
        raise DatasetError(f"'{path}': the header names a node type twice ({short(lines[0])})")
    return dict(zip((h.strip() for h in head), (v.strip() for v in row), strict=True))


def _flag(path: Path, ntype: str, value: str) -> bool:
    v = value.lower()
    if v in ("true", "1"):
        return True
    if v in ("false", "0"):
        return False
    raise DatasetError(f"'{path}': {ntype} = {value!r} is not True or False")


def _read_schema(raw: Path) -> tuple[list[str], list[int], list[Relation]]:
    count_file = require_file(raw / LAYOUT_MARK, "OGB node count file")
    counts: dict[str, int] = {}
    for t, v in _header_table(count_file, "counts").items():
        try:
            counts[t] = int(v)
        except ValueError:
            counts[t] = -1
        if counts[t] < 0:
            raise DatasetError(f"'{count_file}': the count of {t!r} is {v!r}, not an integer >= 0")
    types = sorted(counts)
    trip_file = require_file(raw / "triplet-type-list.csv.gz", "OGB relation list")
    rels: list[Relation] = []
    for first, lines in iter_line_chunks(trip_file, 10_000):
        for i, line in enumerate(lines):
            parts = [p.strip() for p in line.strip().split(",")]
            if len(parts) != 3 or not all(parts):
                raise DatasetError(
                    f"'{trip_file}', line {first + i}: expected 'src_type,relation,dst_type' "
                    f"(3 columns), got {short(line)}"
                )
            for end in (parts[0], parts[2]):
                if end not in counts:
                    raise DatasetError(
                        f"'{trip_file}', line {first + i}: node type {end!r} is not one of "
                        f"{types} (the types in {LAYOUT_MARK})"
                    )
            rels.append((parts[0], parts[1], parts[2]))
    rels.sort()
    rel_dir = raw / "relations"
    if rel_dir.is_dir():
        for d in sorted(rel_dir.iterdir()):
            parts = d.name.split("___")
            if len(parts) != 3 or parts[0] not in counts or parts[2] not in counts:
                bad = [p for p in (parts[0], parts[-1]) if p not in counts]
                raise DatasetError(
                    f"'{d}' is not a relation of this dataset: its name must be "
                    f"SRC___RELATION___DST with node types of {LAYOUT_MARK} ({types}); "
                    + (f"unknown type {bad[0]!r}" if bad else "it has no 3 parts")
                )
    return types, [counts[t] for t in types], rels


def _relation_edges(
    rel: Relation,
    raw: Path,
    n_src: int,
    n_dst: int,
    tmp: Path,
    fix: str,
    chunk_rows: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parse one relation's edge file into temporary maps; ``(src, dst, in-degree counts)``."""
    d = raw / "relations" / "___".join(rel)
    edge_file = require_file(d / "edge.csv.gz", f"OGB edge file of relation {rel}")
    count_file = require_file(d / "num-edge-list.csv.gz", f"OGB edge count file of {rel}")
    e = _read_count(count_file)
    _check_edge_count(edge_file, count_file, e)
    key = relation_key(rel)
    t_src = create_npy(tmp / f"{key}.src.npy", index_dtype(max(n_src, 1)), (e,), fix)
    t_dst = create_npy(tmp / f"{key}.dst.npy", index_dtype(max(n_dst, 1)), (e,), fix)
    counts = np.zeros(n_dst, dtype=np.int64)
    seen = 0
    for first, arr in _edge_chunks(edge_file, e, chunk_rows):
        for c, (end, n) in enumerate(((rel[0], n_src), (rel[2], n_dst))):
            bad = np.flatnonzero((arr[:, c] < 0) | (arr[:, c] >= n))
            if bad.size:
                r = int(bad[0])
                raise DatasetError(
                    f"'{edge_file}', line {first + r}: {'src' if c == 0 else 'dst'} ID "
                    f"{int(arr[r, c])} is outside [0, {n}) ({n} nodes of type {end!r} in "
                    f"{LAYOUT_MARK}); the files are inconsistent"
                )
        t_src[seen : seen + arr.shape[0]] = arr[:, 0]
        t_dst[seen : seen + arr.shape[0]] = arr[:, 1]
        add_counts(counts, arr[:, 1])
        seen += arr.shape[0]
    return t_src, t_dst, counts


def _reverse_of(rels: list[Relation]) -> list[Relation]:
    """The reverse relations :func:`~fleetgnn.graph.hetero.add_reverse_relations` adds."""
    have = set(rels)
    out = []
    for s, r, d in rels:
        rev = (d, REVERSE_PREFIX + r, s)
        if not r.startswith(REVERSE_PREFIX) and rev not in have:
            out.append(rev)
    return out


def prepare_ogb_hetero(
    root: str | os.PathLike[str],
    out: str | os.PathLike[str],
    name: str | None = None,
    overwrite: bool = False,
    chunk_rows: int = 1_000_000,
    *,
    add_reverse: bool = False,
    target: str | None = None,
    dataset_name: str | None = None,
    max_bytes: int | None = None,
    feature_dtype: str | dict[str, str] | None = None,
) -> Path:
    """Convert an OGB heterogeneous node-property dataset's raw files into a typed dataset.

    Each relation's ``edge.csv.gz`` line ``i`` is the edge ``src -> dst`` (type-local IDs),
    kept in file order within each destination, duplicates kept. With ``add_reverse``, every
    relation ``(s, r, d)`` whose reverse is absent also gets ``(d, rev_r, s)``, equal to
    :func:`~fleetgnn.graph.hetero.add_reverse_relations` of the result without it. A type's
    ``raw/node-feat/TYPE/node_year.csv.gz`` (one integer time ``>= 0`` per node, as ogbn-mag
    gives its papers' years) becomes its node times (``node_time/TYPE``; ``meta.json`` then
    records ``has_node_time`` and ``node_time_range``).

    Args:
        root: The dataset folder holding ``raw/`` and ``split/``.
        out: The dataset directory to write (must not exist unless ``overwrite``).
        name: The split scheme under ``split/``; needed only when there are several.
        overwrite: Replace an existing ``out`` once the new dataset is complete.
        chunk_rows: Lines (and edges) handled per step.
        add_reverse: Add reverse relations (``rev_`` + name).
        target: The labelled type; needed only when several types carry labels.
        dataset_name: Name stored in ``meta.json`` (default: the name of ``root``).
        max_bytes: The memory the conversion may use (``prepare --max-memory``).
        feature_dtype: Store the feature tables compact (:class:`.DatasetWriter`'s
            ``feature_dtype``: one dtype, or per type; ``prepare --feature-dtype``).

    Returns:
        The dataset directory, to open with :func:`~fleetgnn.graph.open_dataset`.

    Raises:
        DatasetError: Missing, malformed or inconsistent input files (one line naming the file,
            and the line for text), an unknown node type, or an existing ``out``.
    """
    budget = MemoryBudget(resolve_max_bytes(max_bytes))
    root, out = Path(root), Path(out)
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)):
        raise DatasetError(f"'chunk_rows' must be an integer >= 1 (got {chunk_rows!r})")
    if chunk_rows < 1:
        raise DatasetError(f"'chunk_rows' must be an integer >= 1 (got {chunk_rows!r})")
    if not root.is_dir():
        raise DatasetError(f"OGB dataset folder '{root}' does not exist; check 'root'")
    raw = root / "raw"
    types, counts, rels = _read_schema(raw)
    n_of = dict(zip(types, counts, strict=True))
    budget.take(f"'{raw / LAYOUT_MARK}' declares {sum(counts)} nodes", sum(counts) * NODE_BYTES)
    labelled = _labelled_types(raw, types)
    if target is not None and target not in n_of:
        raise DatasetError(f"target type {target!r} is not one of {types}")
    if target is None and len(labelled) > 1:
        raise DatasetError(
            f"several node types carry labels ({', '.join(labelled)}); a typed dataset holds "
            f"the labels of one target type: choose one (target=..., --target)"
        )
    if target is None and labelled:
        target = labelled[0]
    if target is not None and labelled and target not in labelled:
        raise DatasetError(
            f"target type {target!r} has no labels ('{raw / 'nodetype-has-label.csv.gz'}' "
            f"marks {', '.join(labelled)})"
        )
    reverse = _reverse_of(rels) if add_reverse else []
    try:
        schema = HeteroSchema(tuple(types), tuple(counts), tuple(rels + reverse), target=target)
    except GraphError as err:
        raise DatasetError(f"'{raw}': {err}") from err
    split_dir = _split_dir(root, name)

    with DatasetWriter(
        out,
        schema=schema,
        name=dataset_name or root.name,
        overwrite=overwrite,
        feature_dtype=feature_dtype,
    ) as w:
        fix = w.DISK_FULL_FIX
        for rel in rels:
            with tempfile.TemporaryDirectory(
                prefix=temp_prefix(out.name, "edges"), dir=out.parent
            ) as tmp:
                n_src, n_dst = n_of[rel[0]], n_of[rel[2]]
                t_src, t_dst, deg = _relation_edges(
                    rel, raw, n_src, n_dst, Path(tmp), fix, chunk_rows
                )
                indptr = np.zeros(n_dst + 1, dtype=np.int64)
                np.cumsum(deg, out=indptr[1:])
                del deg
                key = relation_key(rel)
                w.put(f"rel/{key}/indptr", indptr)
                indices = w.create(f"rel/{key}/indices", t_src.dtype, (t_src.shape[0],))
                cursor = indptr[:-1].copy()
                for lo, hi in _chunks(t_src.shape[0], chunk_rows):
                    append_to_segments(
                        indices, cursor, np.asarray(t_dst[lo:hi]), np.asarray(t_src[lo:hi])
                    )
                del cursor, t_src, t_dst
                rev = (rel[2], REVERSE_PREFIX + rel[1], rel[0])
                if rev in reverse:
                    _write_reverse(w, rev, indptr, indices, n_src, chunk_rows)
        for t in types:
            feat = raw / "node-feat" / t / "node-feat.csv.gz"
            if feat.is_file():
                _write_features(w, feat, n_of[t], chunk_rows, name=f"x/{t}", counted=LAYOUT_MARK)
            time_file = raw / "node-feat" / t / NODE_TIME_FILE
            if time_file.is_file():
                times = w.create(f"node_time/{t}", np.int64, (n_of[t],))
                read_times(time_file, times, chunk_rows, f"{LAYOUT_MARK} ({t!r})")
                del times
        y = None
        num_classes = None
        if target is not None and labelled:
            label_file = require_file(
                raw / "node-label" / target / "node-label.csv.gz", f"OGB labels of {target!r}"
            )
            y = _read_labels(label_file, n_of[target], chunk_rows, counted=LAYOUT_MARK)
            w.put("y", y)
            num_classes = num_classes_of(y)
        split_name = None
        if split_dir is not None and target is not None:
            split_name = split_dir.name
            has = _header_table(
                require_file(split_dir / "nodetype-has-split.csv.gz", "OGB split type list"),
                "True/False",
            )
            marked = [t for t, v in has.items() if _flag(split_dir, t, v)]
            if target not in marked:
                raise DatasetError(
                    f"'{split_dir}' has no split of the target type {target!r} (its "
                    f"nodetype-has-split.csv.gz marks {marked or 'none'})"
                )
            _write_splits(w, split_dir / target, n_of[target], y, chunk_rows)
        return w.commit(
            num_classes=num_classes,
            source="ogb",
            split=split_name,
            reverse_relations=[list(r) for r in reverse],
        )


def _labelled_types(raw: Path, types: list[str]) -> list[str]:
    path = raw / "nodetype-has-label.csv.gz"
    if not path.is_file():
        if (raw / "node-label").is_dir():
            require_file(path, "OGB labelled-type list")
        return []
    marked = []
    for t, v in _header_table(path, "True/False").items():
        if t not in types:
            raise DatasetError(f"'{path}' names node type {t!r}, which is not one of {types}")
        if _flag(path, t, v):
            marked.append(t)
    return marked


def _write_reverse(
    w: DatasetWriter,
    rev: Relation,
    indptr: np.ndarray,
    indices: np.ndarray,
    n_src: int,
    chunk_rows: int,
) -> None:
    """The reverse relation's CSC from the forward one, read in chunks of edges.

    Edges are taken in the forward CSC's order (by destination, then file order), which is the
    order :func:`~fleetgnn.graph.hetero.add_reverse_relations` gives them.
    """
    e = indices.shape[0]
    counts = np.zeros(n_src, dtype=np.int64)
    for lo, hi in _chunks(e, chunk_rows):
        add_counts(counts, np.asarray(indices[lo:hi], dtype=np.int64))
    rptr = np.zeros(n_src + 1, dtype=np.int64)
    np.cumsum(counts, out=rptr[1:])
    del counts
    key = relation_key(rev)
    w.put(f"rel/{key}/indptr", rptr)
    n_dst = indptr.shape[0] - 1
    out = w.create(f"rel/{key}/indices", index_dtype(max(n_dst, 1)), (e,))
    cursor = rptr[:-1].copy()
    for lo, hi in _chunks(e, chunk_rows):
        # the forward destinations of edges lo..hi: the node whose segment holds each edge
        dst = np.searchsorted(indptr, np.arange(lo, hi, dtype=np.int64), side="right") - 1
        append_to_segments(out, cursor, np.asarray(indices[lo:hi], dtype=np.int64), dst)
