"""Readable reports for ``fleetgnn info`` and ``fleetgnn partition``."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fleetgnn.graph.csc import SPLITS
from fleetgnn.graph.dataset import open_dataset, read_meta, stamp_problem
from fleetgnn.graph.verify import iter_rows

_STAT_BYTES = 32 << 20  # bytes of x read per step for feature statistics


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
    meta = read_meta(path)
    graph = open_dataset(path, validate="full" if verify else None, progress=progress)
    problem = stamp_problem(Path(path), list(meta["arrays"]))
    n = graph.num_nodes
    deg = graph.in_degrees()
    info: dict[str, Any] = {
        "path": str(path),
        "name": graph.name,
        "num_nodes": n,
        "num_edges": graph.num_edges,
        "num_features": graph.num_features,
        "num_classes": graph.num_classes,
        "format_version": meta["format_version"],
        "index_dtype": str(graph.indices.dtype),
        "feature_dtype": str(graph.x.dtype) if graph.x is not None else None,
        "weighted": graph.edge_weight is not None,
        "in_degree": _summary(deg),
        "isolated_nodes": int(np.count_nonzero(deg == 0)) if n else 0,
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
        labelled = graph.y[graph.y >= 0]
        counts = np.bincount(labelled, minlength=graph.num_classes)
        info["labelled_nodes"] = int(labelled.size)
        info["class_counts"] = {"min": int(counts.min()), "max": int(counts.max())}
    if graph.x is not None and n:
        total, sq, cnt = 0.0, 0.0, 0
        # blocks read into one buffer (no float64 copy, no mapped pages left resident)
        for _, block in iter_rows(Path(path) / "x.npy", _STAT_BYTES):
            total += float(block.sum(dtype=np.float64))
            sq += float(np.square(block).sum(dtype=np.float64))
            cnt += block.size
        mean = total / max(cnt, 1)
        info["features"] = {"mean": mean, "std": float(np.sqrt(max(sq / max(cnt, 1) - mean**2, 0)))}
    parts_dir = Path(path) / "partitions"
    info["partitions"] = (
        sorted(p.name for p in parts_dir.iterdir() if p.is_dir()) if parts_dir.is_dir() else []
    )
    info["feature_norm"] = meta.get("feature_norm", "none")  # what `train` applies by default
    for key in ("source", "preset", "scale", "seed"):
        if key in meta:
            info[key] = meta[key]
    return info


def _summary(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {"min": 0, "mean": 0.0, "median": 0.0, "p99": 0.0, "max": 0}
    return {
        "min": int(values.min()),
        "mean": float(values.mean()),
        "median": float(np.median(values)),
        "p99": float(np.percentile(values, 99)),
        "max": int(values.max()),
    }


def render_info(info: dict[str, Any], console: Console | None = None) -> None:
    """Print ``dataset_info`` as a table."""
    console = console or Console()
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
