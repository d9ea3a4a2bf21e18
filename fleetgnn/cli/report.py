"""Readable reports for ``fleetgnn info`` and ``fleetgnn partition``."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fleetgnn.graph.csc import SPLITS
from fleetgnn.graph.dataset import (
    GRAPH_KIND,
    TYPED_KIND,
    dataset_kind,
    open_dataset,
    read_meta,
    stamp_problem,
)
from fleetgnn.graph.row_array import RowArray
from fleetgnn.graph.verify import iter_rows

_STAT_BYTES = 32 << 20  # bytes of x read per step for feature statistics
_STAT_ROWS = 1 << 22  # nodes per step for degree and label statistics


@contextlib.contextmanager
def check_progress(enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """A progress bar for checking a dataset's values, drawn only once a check reports progress.

    Yields ``update(done_bytes, total_bytes)`` to pass as ``open_dataset(..., progress=...)``:
    opening a dataset whose values need no check draws nothing.
    """
    from fleetgnn.cli.progress import task_progress

    with contextlib.ExitStack() as stack:
        bar: list[Callable[[int, int], None]] = []

        def update(done: int, total: int) -> None:
            if not bar:
                bar.append(stack.enter_context(task_progress("checking values", enabled)))
            bar[0](done, total)

        yield update


def report_removed(removed: Iterable[object], command: str, quiet: bool = False) -> None:
    """Print one line per leftover a sweep removed (``fleetgnn COMMAND: removed ...``, stderr)."""
    if quiet:
        return
    for item in removed:
        print(f"fleetgnn {command}: {item}", file=sys.stderr)


def dataset_info(
    path: Path, verify: bool = False, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Counts, degree and feature statistics, splits and partition books of a dataset directory.

    Args:
        path: Dataset directory.
        verify: Check every value (O(size), in bounded memory) and record the verification
            stamp; otherwise what :func:`~fleetgnn.graph.dataset.open_dataset` does by default
            (compare the stamp, check every value if it does not match).
        progress: ``progress(done_bytes, total_bytes)`` while values are checked.
    """
    if dataset_kind(path) == TYPED_KIND:
        return typed_dataset_info(path, verify=verify, progress=progress)
    meta = read_meta(path, kind=GRAPH_KIND)
    graph = open_dataset(
        path, validate="full" if verify else None, progress=progress, kind=GRAPH_KIND
    )
    problem = stamp_problem(Path(path), list(meta["arrays"]))
    n = graph.num_nodes
    hist = degree_histogram(graph.indptr)
    info: dict[str, Any] = {
        "path": str(path),
        "name": graph.name,
        "num_nodes": n,
        "num_edges": graph.num_edges,
        "num_features": graph.num_features,
        "num_classes": graph.num_classes,
        "format_version": meta["format_version"],
        "index_dtype": str(graph.indices.dtype),
        # the dtype x.npy stores (a compact codec's name: meta.json's feature_dtype)
        "feature_dtype": meta.get("feature_dtype", str(graph.x.dtype))
        if graph.x is not None
        else None,
        "weighted": graph.edge_weight is not None,
        # [min, max] of the edge times (meta.json's, checked with the values), None: untimed
        "edge_time": _time_info(graph.edge_time, meta.get("edge_time_range")),
        # [min, max] of the node times (when each label is asked), None: none
        "node_time": _time_info(graph.node_time, meta.get("node_time_range")),
        "in_degree": _summary(hist),
        "isolated_nodes": int(hist[0]) if hist.size else 0,
        # every value is valid once open_dataset returns; this says whether the next open
        # can skip checking them (the files match verified.json) and if not, why
        "stamp_valid": problem is None,
    }
    if problem is not None:
        info["stamp_problem"] = problem
    for split in SPLITS:
        mask = getattr(graph, split)
        key = "num_" + split.split("_")[0]
        info[key] = int(np.count_nonzero(mask)) if mask is not None else 0
    if graph.y is not None and graph.num_classes:
        counts = np.zeros(graph.num_classes, dtype=np.int64)
        for lo in range(0, n, _STAT_ROWS):  # in blocks: no label copy of the whole graph
            block = np.asarray(graph.y[lo : lo + _STAT_ROWS])
            counts += np.bincount(block[block >= 0], minlength=graph.num_classes)[: counts.size]
        info["labelled_nodes"] = int(counts.sum())
        info["class_counts"] = {"min": int(counts.min()), "max": int(counts.max())}
    if graph.x is not None and n:
        total, sq, cnt = 0.0, 0.0, 0
        # blocks read into one buffer (no float64 copy, no mapped pages left resident)
        decode = graph.x.decode if isinstance(graph.x, RowArray) else None  # compact rows
        for _, raw in iter_rows(Path(path) / "x.npy", _STAT_BYTES):
            block = raw if decode is None else decode(raw)
            total += float(block.sum(dtype=np.float64))
            sq += float(np.square(block).sum(dtype=np.float64))
            cnt += block.size
        mean = total / max(cnt, 1)
        info["features"] = {"mean": mean, "std": float(np.sqrt(max(sq / max(cnt, 1) - mean**2, 0)))}
    parts_dir = Path(path) / "partitions"
    info["partitions"] = (
        sorted(p.name for p in parts_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        if parts_dir.is_dir()
        else []
    )
    info["feature_norm"] = meta.get("feature_norm", "none")  # what `train` applies by default
    for key in ("source", "preset", "scale", "seed"):
        if key in meta:
            info[key] = meta[key]
    return info


def _time_info(times: Any, span: list[int] | None) -> dict[str, Any] | None:
    """``{"min", "max"}`` of a dataset's edge or node times (``None`` without them).

    ``span``: ``meta.json``'s recorded range (``None``: read from the times).
    """
    if times is None:
        return None
    if isinstance(times, dict):  # a typed graph's times (per relation or type): the overall range
        spans = [v for v in (_time_info(t, None) for t in times.values()) if v["min"] is not None]
        if span is None and spans:
            span = [min(v["min"] for v in spans), max(v["max"] for v in spans)]
        return {"min": span[0], "max": span[1]} if span is not None else {"min": None, "max": None}
    if span is None and times.shape[0]:  # written without the range: read the times
        from fleetgnn.graph.edge_time import time_range

        span = time_range(times)
    return {"min": span[0], "max": span[1]} if span is not None else {"min": None, "max": None}


def typed_dataset_info(
    path: Path, verify: bool = False, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """The schema of a typed dataset: node types (counts, feature widths), relations, target.

    Args:
        path: Typed dataset directory.
        verify: Check every value and record the verification stamp (as :func:`dataset_info`).
        progress: ``progress(done_bytes, total_bytes)`` while values are checked.
    """
    meta = read_meta(path, kind=TYPED_KIND)
    graph = open_dataset(
        path, validate="full" if verify else None, progress=progress, kind=TYPED_KIND
    )
    problem = stamp_problem(Path(path), list(meta["arrays"]))
    s = graph.schema
    info: dict[str, Any] = {
        "path": str(path),
        "name": graph.name,
        "kind": TYPED_KIND,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "num_classes": graph.num_classes,
        "target": s.target,
        "format_version": meta["format_version"],
        # a featureless type (features None) gets a learnable embedding table in models
        "node_types": [
            {
                "name": t,
                "num_nodes": n,
                "features": graph.feature_width(t),
                # as stored (a compact table: its codec)
                "feature_dtype": (meta.get("feature_dtype") or {}).get(t, str(graph.x[t].dtype))
                if t in graph.x
                else None,
                # [min, max] of the type's node times, None: none
                "node_time": _time_info(graph.node_time.get(t), None),
            }
            for t, n in zip(s.node_types, s.num_nodes, strict=True)
        ],
        "relations": [
            {
                "src": r[0],
                "name": r[1],
                "dst": r[2],
                "num_edges": graph.num_relation_edges(r),
                # [min, max] of the relation's edge times, None: untimed
                "edge_time": _time_info(graph.edge_time.get(r), None),
            }
            for r in s.relations
        ],
        # over every relation / timed type (meta.json's ranges), None: no times
        "edge_time": _time_info(
            graph.edge_time or None, meta.get("edge_time_range") if graph.edge_time else None
        ),
        "node_time": _time_info(
            graph.node_time or None, meta.get("node_time_range") if graph.node_time else None
        ),
        "stamp_valid": problem is None,
    }
    if problem is not None:
        info["stamp_problem"] = problem
    for split in SPLITS:
        mask = getattr(graph, split)
        info["num_" + split.split("_")[0]] = int(np.count_nonzero(mask)) if mask is not None else 0
    if graph.y is not None:
        info["labelled_nodes"] = sum(  # in blocks: no label copy of the whole type
            int(np.count_nonzero(np.asarray(graph.y[lo : lo + _STAT_ROWS]) >= 0))
            for lo in range(0, graph.y.shape[0], _STAT_ROWS)
        )
    for key in ("source", "preset", "scale", "seed", "reverse_relations"):
        if key in meta:
            info[key] = meta[key]
    return info


def render_typed_info(info: dict[str, Any], console: Console | None = None) -> None:
    """Print ``typed_dataset_info`` as two tables: node types, then relations."""
    console = console or Console()
    target = info["target"]
    types = Table(title=f"typed dataset {escape(str(info['name']))} ({escape(str(info['path']))})")
    timed_types = any(t.get("node_time") for t in info["node_types"])
    for col in ("node type", "nodes", "features", *(("node times",) if timed_types else ())):
        types.add_column(col)
    for t in info["node_types"]:
        feats = (
            "learnable embedding"
            if t["features"] is None
            else f"{t['features']} ({t['feature_dtype']})"
        )
        name = t["name"] + (" (target)" if t["name"] == target else "")
        times = (_time_text(t.get("node_time"), "nodes", ""),) if timed_types else ()
        types.add_row(escape(name), f"{t['num_nodes']:,}", feats, *times)
    console.print(types)
    rels = Table()
    timed = info.get("edge_time") is not None
    for col in ("relation (src, name, dst)", "edges", *(("edge times",) if timed else ())):
        rels.add_column(col)
    for r in info["relations"]:
        times = (_edge_time_text(r.get("edge_time")),) if timed else ()
        rels.add_row(escape(f"{r['src']} -{r['name']}-> {r['dst']}"), f"{r['num_edges']:,}", *times)
    console.print(rels)
    console.print(f"{info['num_nodes']:,} nodes, {info['num_edges']:,} edges (directed)")
    console.print(
        f"edge times: {_edge_time_text(info.get('edge_time'))}; node times: "
        f"{_time_text(info.get('node_time'), 'nodes', '')}"
    )
    if target is not None:
        console.print(
            f"target {escape(target)}: {info['num_classes']} classes, train / val / test "
            f"{info['num_train']:,} / {info['num_val']:,} / {info['num_test']:,}"
        )
    console.print(
        "verification stamp: "
        + (
            "valid (opening skips the value check)"
            if info.get("stamp_valid", True)
            else f"none: {escape(str(info.get('stamp_problem', '')))}"
        )
    )


def degree_histogram(indptr: np.ndarray, block: int | None = None) -> np.ndarray:
    """``hist[d]``: the number of nodes of in-degree ``d``, from ``indptr`` read in blocks.

    Memory is one block of degrees plus ``max degree + 1`` counts, whatever the node count (a
    whole-graph degree array is 8 bytes per node: 0.9 GB at 111M nodes).
    """
    n = int(indptr.shape[0]) - 1
    step = _STAT_ROWS if block is None else block
    hist = np.zeros(0, dtype=np.int64)
    for lo in range(0, max(n, 0), step):
        deg = np.diff(np.asarray(indptr[lo : min(lo + step, n) + 1], dtype=np.int64))
        part = np.bincount(deg)
        if part.size > hist.size:
            hist = np.concatenate([hist, np.zeros(part.size - hist.size, np.int64)])
        hist[: part.size] += part
    return hist


def _summary(hist: np.ndarray) -> dict[str, float]:
    """Min, mean, median, p99 and max of the values counted by ``hist``.

    Median and p99 are NumPy's ``median`` and linear ``percentile`` of the values themselves.
    """
    n = int(hist.sum())
    if n == 0:
        return {"min": 0, "mean": 0.0, "median": 0.0, "p99": 0.0, "max": 0}
    cum = np.cumsum(hist)
    nz = np.flatnonzero(hist)

    def kth(k: int) -> int:  # the k-th smallest value, 0-based
        return int(np.searchsorted(cum, k, side="right"))

    def quantile(q: float) -> float:
        pos = q * (n - 1)
        lo = math.floor(pos)
        a, b = kth(lo), kth(min(lo + 1, n - 1))
        return float(a + (pos - lo) * (b - a))

    values = np.arange(hist.size, dtype=np.float64)
    return {
        "min": int(nz[0]),
        "mean": float(np.dot(hist, values) / n),
        "median": quantile(0.5),
        "p99": quantile(0.99),
        "max": int(nz[-1]),
    }


def render_info(info: dict[str, Any], console: Console | None = None) -> None:
    """Print ``dataset_info`` as a table (a typed dataset's as :func:`render_typed_info`)."""
    console = console or Console()
    if info.get("kind") == TYPED_KIND:
        render_typed_info(info, console)
        return
    # names and paths are the user's text, not markup: "[/]" in a name is shown, not parsed
    title = f"dataset {escape(str(info['name']))} ({escape(str(info['path']))})"
    table = Table(title=title, show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    deg = info["in_degree"]
    rows = [
        ("nodes", f"{info['num_nodes']:,}"),
        ("edges (directed)", f"{info['num_edges']:,}"),
        ("features", f"{info['num_features']} ({info['feature_dtype']})"),
        ("classes", str(info["num_classes"])),
        (
            "train / val / test",
            f"{info['num_train']:,} / {info['num_val']:,} / {info['num_test']:,}",
        ),
        (
            "in-degree min/mean/median/p99/max",
            f"{deg['min']} / {deg['mean']:.2f} / {deg['median']:.0f} / {deg['p99']:.0f} / "
            f"{deg['max']}",
        ),
        ("isolated nodes", f"{info['isolated_nodes']:,}"),
        ("edge weights", "yes" if info["weighted"] else "no"),
        ("edge times", _edge_time_text(info.get("edge_time"))),
        ("node times", _time_text(info.get("node_time"), "nodes", "")),
        (
            "verification stamp",
            "valid (opening skips the value check)"
            if info.get("stamp_valid", True)
            else f"none: {info.get('stamp_problem', '')} (each open checks every value)",
        ),
        ("partition books", ", ".join(info["partitions"]) or "none"),
    ]
    if "features" in info:
        rows.append(
            (
                "feature mean / std",
                f"{info['features']['mean']:.4f} / {info['features']['std']:.4f}",
            )
        )
        rows.append(("feature transform (train default)", str(info.get("feature_norm", "none"))))
    for key, value in rows:
        table.add_row(key, escape(value))
    console.print(table)


def _edge_time_text(span: dict[str, Any] | None) -> str:
    return _time_text(span, "edges", " (sorted per node)")


def _time_text(span: dict[str, Any] | None, what: str, note: str) -> str:
    if span is None:
        return "no"
    if span["min"] is None:
        return f"yes (no {what})"
    return f"yes, {span['min']:,} .. {span['max']:,}{note}"


def render_partition(result: dict[str, Any], console: Console | None = None) -> None:
    """Print a partition quality report as a table."""
    console = console or Console()
    table = Table(
        title=f"{escape(str(result['method']))} partition into {result['parts']} parts "
        f"({result['seconds']:.2f} s)",
        show_header=False,
    )
    table.add_column("metric", style="bold")
    table.add_column("value")
    for key, value in result.items():
        if key in ("method", "parts", "seconds"):
            continue
        if isinstance(value, float):
            value = f"{value:.4f}"
        elif isinstance(value, (list, tuple)):
            value = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in value)
        table.add_row(escape(str(key)), escape(str(value)))
    console.print(table)
