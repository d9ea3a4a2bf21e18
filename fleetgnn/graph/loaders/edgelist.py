"""Edge lists in text form, with optional ``.npy`` node data.

A line is ``src dst [weight]``, or ``src dst a_1 .. a_D`` with edge features (``edge_attr``);
with ``time_column`` one more column (any after ``src dst``) is the edge's integer time, and a
``.npy`` of one integer per node gives the node times.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fleetgnn.errors import DatasetError, FleetgnnError
from fleetgnn.graph.csc import Graph, from_edges
from fleetgnn.graph.edge_time import as_node_time
from fleetgnn.graph.loaders._io import (
    Table,
    class_ids,
    iter_line_chunks,
    load_npy,
    num_classes_of,
    require_file,
    short,
)
from fleetgnn.graph.loaders.splits import check_split_args, split_masks

_CHUNK_LINES = 1 << 20
_WEIGHTED = np.dtype([("src", np.int64), ("dst", np.int64), ("weight", np.float64)])
_SPARSE_FACTOR = 64  # inferred N may exceed the number of ID occurrences by this factor ...
_SPARSE_SLACK = 1 << 24  # ... plus this many nodes before IDs count as unreasonably sparse


def _layout(path: Path, comments: str | None) -> tuple[str | None, int, int]:
    """``(delimiter, columns, line number)`` of the first data line (``(None, 2, 0)`` if none)."""
    for first, lines in iter_line_chunks(path, 4096):
        for i, line in enumerate(lines):
            data = line.split(comments, 1)[0] if comments else line
            if data.strip():
                delim = "," if "," in data else None
                return delim, len(data.split(delim) if delim else data.split()), first + i
    return None, 2, 0


def load_edgelist(
    edges: str | os.PathLike[str],
    features: str | os.PathLike[str] | None = None,
    labels: str | os.PathLike[str] | None = None,
    undirected: bool = False,
    num_nodes: int | None = None,
    comments: str | None = "#",
    *,
    num_train_per_class: int | None = None,
    num_val: int | None = None,
    num_test: int | None = None,
    split_seed: int | None = None,
    train_mask: str | os.PathLike[str] | None = None,
    val_mask: str | os.PathLike[str] | None = None,
    test_mask: str | os.PathLike[str] | None = None,
    split: str | os.PathLike[str] | None = None,
    name: str | None = None,
    edge_attr: bool = False,
    time_column: int | None = None,
    node_time: str | os.PathLike[str] | None = None,
) -> Graph:
    """Load a text edge list and optional ``.npy`` features and labels.

    Each data line holds ``src dst`` (0-based integer node IDs) separated by whitespace or by one
    comma (the first data line decides; every line must then use the same separator), and
    optionally a third column, the edge weight, which must then be on every line. Text after
    ``comments`` and blank lines are ignored. A ``.gz`` file is decompressed on the fly. Edges
    keep the file's order per destination and are not deduplicated unless ``undirected``.
    With ``edge_attr`` every column after ``src dst`` is an edge feature instead (``src dst a_1
    .. a_D``, ``D >= 1`` the same on every line): the graph's ``edge_attr`` ``[E, D]`` (float32).
    With ``time_column`` (1-based, ``>= 3``) that column of every line is the edge's time, an
    integer ``>= 0`` (the graph's ``edge_time``; each node's in-edges are then sorted by time,
    equal times in file order) and the other columns after ``src dst`` are read as above: e.g.
    ``src dst time`` with ``time_column=3``, ``src dst weight time`` with ``time_column=4``.
    With ``node_time`` (a ``.npy`` of ``N`` integers ``>= 0``, or ``[N, 1]``) each node gets the
    time at which its label is asked (the graph's ``node_time``), in the unit of the edge times.

    Edge lists carry no split: without ``labels`` no masks are set. With ``labels`` either the
    split comes from your own mask files (``train_mask`` and optionally ``val_mask`` /
    ``test_mask``: ``.npy`` arrays of ``N`` bools or 0/1 integers, pairwise disjoint, selecting
    labelled nodes only; a mask not given is empty) or from one ``split`` file holding all three
    (:func:`~fleetgnn.graph.loaders.splits.load_split_file`), or a deterministic split is drawn by
    :func:`~fleetgnn.graph.loaders.splits.random_split` (``split_seed`` shuffles the labelled
    nodes; the first ``num_train_per_class`` per class train, then ``num_val`` validate,
    ``num_test`` test; defaults 20 / 500 / 1000, seed 0). The two ways do not mix.

    Args:
        edges: The edge-list file.
        features: Optional ``.npy`` float ``[N, F]`` (integer / bool values are cast to float32).
        labels: Optional ``.npy`` integer ``[N]``, ``-1`` = unlabelled.
        undirected: Add every missing reverse edge and merge duplicates
            (:meth:`Graph.to_undirected`).
        num_nodes: Node count; default ``max(max ID + 1, rows of features, rows of labels)``.
        comments: Comment marker (``None``: no comments).
        num_train_per_class: Training nodes per class of the random split (only with
            ``labels``; default 20).
        num_val: Validation nodes of the random split (default 500).
        num_test: Test nodes of the random split (default 1000).
        split_seed: Seed of the random split (default 0).
        train_mask: ``.npy`` bool or 0/1 ``[N]``: the training nodes (your own split; needs
            ``labels``).
        val_mask: ``.npy`` bool or 0/1 ``[N]``: the validation nodes (with ``train_mask``).
        test_mask: ``.npy`` bool or 0/1 ``[N]``: the test nodes (with ``train_mask``).
        split: One ``.npz`` / ``.json`` file holding the train, val and test sets (instead of
            the mask files; needs ``labels``).
        name: Graph name (default: the file name up to its first dot).
        edge_attr: Read the columns after ``src dst`` as edge features (no weight column).
        time_column: The 1-based column holding each edge's integer time (``edge_time``);
            ``None``: the edges have no times.
        node_time: Optional ``.npy`` of one integer time ``>= 0`` per node (``node_time``).

    Returns:
        The validated graph.

    Raises:
        DatasetError: A malformed line (with the file name and line number), negative or
            out-of-range IDs, a time that is not an integer ``>= 0`` (with the line number), a
            ``time_column`` that is not a column of the file, features / labels / node times of
            the wrong shape or type (a negative node time named by its node), or IDs so sparse
            that the inferred node count exceeds ``64 * (2 E + feature and label rows) + 2^24``
            (relabel the IDs, or pass ``num_nodes`` to accept the size); mask files that are
            not ``[N]`` bool/0-1 arrays, overlap, select unlabelled nodes, come without
            ``labels`` or ``train_mask``, or are combined with the random split's arguments or
            a split file; an invalid split file.
    """
    path = require_file(Path(edges), "edge list")
    if comments is not None and (not isinstance(comments, str) or not comments.strip()):
        raise DatasetError(f"'comments' must be a non-blank string or None (got {comments!r})")
    if num_nodes is not None and (
        isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)) or num_nodes < 0
    ):
        raise DatasetError(f"'num_nodes' must be an integer >= 0 (got {num_nodes!r})")
    delim, ncols, first_data = _layout(path, comments)
    timed = time_column is not None
    if timed:
        _check_time_column(time_column, ncols, path, first_data)
    rest = ncols - 2 - int(timed)  # weight or edge-feature columns
    with_time = " and a time column" if timed else ""
    if edge_attr and rest < 1:
        raise DatasetError(
            f"'{path}', line {first_data}: expected 'src dst a_1 .. a_D'{with_time} with at least "
            f"one edge feature column (found {ncols} columns); drop edge_attr for a plain edge list"
        )
    if not edge_attr and rest not in (0, 1):
        raise DatasetError(
            f"'{path}', line {first_data}: expected 2 columns 'src dst' or 3 'src dst weight'"
            f"{' plus the time column' if timed else ''} (found {ncols}); fix the file or pass "
            f"the right 'comments' marker"
            + (
                "; edge features after 'src dst' need edge_attr (prepare --edge-attr)"
                if rest > 1
                else ""
            )
        )
    weighted = rest == 1 and not edge_attr
    if timed:
        dtype, what = _timed_layout(ncols, int(time_column), edge_attr)  # type: ignore[arg-type]
    elif edge_attr:
        what = f"'src dst' and {ncols - 2} edge features"
        dtype = np.dtype([("src", np.int64), ("dst", np.int64), ("attr", np.float64, (ncols - 2,))])
    else:
        what = "'src dst weight'" if weighted else "'src dst'"
        dtype = _WEIGHTED if weighted else np.dtype(np.int64)
    table = Table(path, dtype, ncols, delim, comments, what, True)
    srcs, dsts, weights, times = [], [], [], []
    max_id = -1
    for first, lines in iter_line_chunks(path, _CHUNK_LINES):
        arr = table.parse(lines, first)
        if timed:
            times.append(_times(arr["time"], table, lines, first))
        if weighted or edge_attr:
            s, d = arr["src"], arr["dst"]
            if timed:
                values = [arr[f] for f in dtype.names if f.startswith("v")]
                w = np.stack(values, axis=1) if edge_attr else values[0]
            else:
                w = arr["attr"] if edge_attr else arr["weight"]
            if w.size and not np.isfinite(w).all():
                r = int(np.argwhere(~np.isfinite(w))[0][0])
                line = table.line_of_row(lines, first, r)
                bad = w[r] if w.ndim == 1 else w[r][~np.isfinite(w[r])][0]
                kind = "feature" if edge_attr else "weight"
                raise DatasetError(
                    f"'{path}', line {line}: edge {kind} {bad} is not finite "
                    f"({short(lines[line - first])})"
                )
            weights.append(w.astype(np.float32) if edge_attr else w)
        elif timed:
            s, d = arr["src"], arr["dst"]
        else:
            s, d = arr[:, 0], arr[:, 1]
        for col, ids in (("source", s), ("destination", d)):
            bad = (
                np.flatnonzero(ids < 0)
                if num_nodes is None
                else np.flatnonzero((ids < 0) | (ids >= num_nodes))
            )
            if bad.size:
                r = int(bad[0])
                line = table.line_of_row(lines, first, r)
                valid = "[0, 2^63)" if num_nodes is None else f"[0, {num_nodes})"
                raise DatasetError(
                    f"'{path}', line {line}: {col} node ID {int(ids[r])} is outside {valid} "
                    f"({short(lines[line - first])}); IDs must be 0-based"
                    + ("" if num_nodes is None else " and below num_nodes")
                )
        if s.size:
            max_id = max(max_id, int(s.max()), int(d.max()))
        srcs.append(s)
        dsts.append(d)
    src = np.concatenate(srcs) if srcs else np.zeros(0, np.int64)
    dst = np.concatenate(dsts) if dsts else np.zeros(0, np.int64)
    weight = (np.concatenate(weights) if weights else np.zeros(0)) if weighted else None
    attr = None
    if edge_attr:
        attr = np.concatenate(weights) if weights else np.zeros((0, rest), np.float32)
    edge_time = (np.concatenate(times) if times else np.zeros(0, np.int64)) if timed else None

    node_data: dict[str, np.ndarray] = {}
    if features is not None:
        x = load_npy(features, "features file")
        if x.ndim != 2 or x.dtype.kind not in "biuf":
            raise DatasetError(
                f"features '{features}' must be a numeric [N, F] array (got {x.dtype} {x.shape})"
            )
        node_data["x"] = x if x.dtype.kind == "f" else x.astype(np.float32)
    if labels is not None:
        y = load_npy(labels, "labels file")
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1 or y.dtype.kind not in "iu":
            raise DatasetError(
                f"labels '{labels}' must be an integer [N] array of class IDs, -1 = unlabelled "
                f"(got {y.dtype} {y.shape})"
            )
        node_data["y"] = class_ids(y, f"labels '{labels}'")
    if node_time is not None:
        t = load_npy(node_time, "node times file")
        if t.ndim == 2 and t.shape[1] == 1:
            t = t[:, 0]
        if t.ndim != 1:
            raise DatasetError(
                f"node times '{node_time}' must be one integer per node, shape [N] (got "
                f"{t.dtype} {t.shape})"
            )
        try:
            node_data["node_time"] = as_node_time(t, int(t.shape[0]))
        except FleetgnnError as e:
            raise DatasetError(f"node times '{node_time}': {e}") from e
    given_files = {"x": ("features", features), "y": ("labels", labels)}
    given_files["node_time"] = ("node times", node_time)
    rows = {k: int(v.shape[0]) for k, v in node_data.items()}
    if num_nodes is None:
        n = max([max_id + 1, *rows.values()])
        if n > _SPARSE_FACTOR * (2 * src.size + sum(rows.values())) + _SPARSE_SLACK:
            raise DatasetError(
                f"'{path}': the largest node ID is {max_id} but there are only {src.size} edges; "
                f"such sparse IDs would allocate {n} nodes. Relabel the IDs to 0..N-1, or pass "
                f"num_nodes to confirm the size"
            )
    else:
        n = int(num_nodes)
    for key, r in rows.items():
        if r != n:
            arg, file = given_files[key]
            raise DatasetError(
                f"{arg} '{file}' has {r} rows but the graph has {n} "
                f"nodes (max ID in the edge list + 1 = {max_id + 1}"
                + ("" if num_nodes is None else f", num_nodes = {num_nodes}")
                + f"); give one {arg} row per node"
            )
    mask_files = {"train_mask": train_mask, "val_mask": val_mask, "test_mask": test_mask}
    given = {k: v for k, v in mask_files.items() if v is not None}
    knobs = {
        "num_train_per_class": num_train_per_class,
        "num_val": num_val,
        "num_test": num_test,
        "split_seed": split_seed,
    }
    check_split_args(given, knobs, split_file=split, has_labels=labels is not None)
    num_classes = None
    if "y" in node_data:
        y = node_data["y"]
        num_classes = num_classes_of(y)
        node_data.update(
            split_masks(y, given, split, num_train_per_class, num_val, num_test, split_seed)
        )
    try:
        g = from_edges(
            src,
            dst,
            n,
            edge_weight=weight,
            edge_attr=attr,
            edge_time=edge_time,
            node_data=node_data,
            num_classes=num_classes,
            name=name if name is not None else path.name.split(".")[0] or "graph",
        )
        return g.to_undirected() if undirected else g
    except FleetgnnError as e:
        raise DatasetError(f"'{path}' does not give a valid graph: {e}") from e


def _check_time_column(k: object, ncols: int, path: Path, line: int) -> None:
    """Refuse a ``time_column`` that is not one of the file's columns after ``src dst``."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 3 <= k <= ncols:
        raise DatasetError(
            f"'{path}', line {line}: time_column = {k!r} is not a column of this file's {ncols} "
            f"(1-based; columns 1 and 2 are src and dst, so the time is one of 3..{ncols})"
            if ncols >= 3
            else f"'{path}', line {line}: time_column = {k!r} but the file has only {ncols} "
            f"columns 'src dst'; add the times as a third column"
        )


def _timed_layout(ncols: int, k: int, edge_attr: bool) -> tuple[np.dtype, str]:
    """The structured dtype (one field per column) and description of a timed edge list.

    Fields ``src``, ``dst``, ``time`` (int64) and ``v0, v1, ..`` (float64) for the other
    columns: the weight, or the edge features with ``edge_attr``.
    """
    fields: list[tuple[str, type]] = [("src", np.int64), ("dst", np.int64)]
    names = ["src", "dst"]
    values = 0
    for col in range(3, ncols + 1):
        if col == k:
            fields.append(("time", np.int64))
            names.append("time")
        else:
            fields.append((f"v{values}", np.float64))
            values += 1
            names.append(f"a_{values}" if edge_attr else "weight")
    return np.dtype(fields), "'" + " ".join(names) + "'"


def _times(t: np.ndarray, table: Table, lines: list[str], first: int) -> np.ndarray:
    """A chunk's times, refused at the first negative one (with its line number)."""
    if t.size and int(t.min()) < 0:
        r = int(np.flatnonzero(t < 0)[0])
        line = table.line_of_row(lines, first, r)
        raise DatasetError(
            f"'{table.path}', line {line}: edge time {int(t[r])} is negative "
            f"({short(lines[line - first])}); times must be integers >= 0: shift them by their "
            f"minimum"
        )
    return t.copy()
