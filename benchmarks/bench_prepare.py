"""Benchmark: generate a large synthetic dataset to disk with bounded memory.

Generates a preset (default ``products-like`` scaled to about 50M directed edges) into a temporary
directory with :func:`fleetgnn.graph.synthetic.prepare_synthetic` and reports:

* generation throughput (edges/s and output MB/s), and the same bytes written through ``.npy``
  memory maps by a plain sequential copy in the same run (the machine's write limit for this
  access pattern) as the peer;
* peak resident memory of the process (``ru_maxrss``; it includes touched pages of the memory
  maps, which the kernel can drop) and, with ``--trace-heap``, the peak traced heap (numpy
  allocations only, the bounded part);
* the time to open the dataset with ``open_dataset(validate="structure")`` (memory maps).

Usage::

    python benchmarks/bench_prepare.py                       # ~50M edges
    python benchmarks/bench_prepare.py --edges 5e6 --out-json results/prepare.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from fleetgnn.graph import open_dataset
from fleetgnn.graph.synthetic import PRESETS, SyntheticSpec, prepare_synthetic, spec_for

#: The presets this benchmark writes: the homogeneous static ones (it reads their edge count).
STATIC = sorted(p for p, s in PRESETS.items() if isinstance(s, SyntheticSpec))


def machine() -> dict[str, Any]:
    """A description of the machine the numbers come from."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        mem = None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        usable = os.cpu_count()
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "memory_bytes": mem,
        "gpu": None,
    }


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB


def sequential_write(root: Path, nbytes: int, chunk: int = 64 << 20) -> float:
    """Seconds to write ``nbytes`` through a ``.npy`` memory map in chunks and flush it."""
    path = root / "peer.npy"
    t0 = time.perf_counter()
    arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(nbytes,))
    block = np.full(min(chunk, max(1, nbytes)), 7, dtype=np.uint8)
    for lo in range(0, nbytes, block.size):
        hi = min(nbytes, lo + block.size)
        arr[lo:hi] = block[: hi - lo]
    arr.flush()
    del arr
    seconds = time.perf_counter() - t0
    path.unlink()
    return seconds


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark and return its JSON-ready results."""
    base = PRESETS[args.preset]
    scale = args.scale if args.scale is not None else float(args.edges) / base.num_edges
    spec = spec_for(args.preset, scale)
    root = Path(tempfile.mkdtemp(prefix="fleetgnn-bench-prepare-", dir=args.workdir))
    try:
        if args.trace_heap:
            tracemalloc.start()
        t0 = time.perf_counter()
        out = prepare_synthetic(
            root / "ds", args.preset, scale=scale, seed=args.seed, chunk_edges=args.chunk_edges
        )
        prepare_s = time.perf_counter() - t0
        heap_peak = None
        if args.trace_heap:
            heap_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        rss_peak = peak_rss_bytes()
        out_bytes = sum(p.stat().st_size for p in out.iterdir())
        t0 = time.perf_counter()
        g = open_dataset(out, validate="structure")
        open_s = time.perf_counter() - t0
        num_edges, num_nodes = g.num_edges, g.num_nodes
        max_degree = int(np.diff(g.indptr).max())
        del g
        peer_s = sequential_write(root, out_bytes) if args.peer else None
    finally:
        if args.keep:
            print(f"kept dataset in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    results = {
        "num_nodes": num_nodes,
        "num_edges": num_edges,
        "target_edges": spec.num_edges,
        "num_features": spec.num_features,
        "max_degree": max_degree,
        "output_bytes": out_bytes,
        "prepare_s": prepare_s,
        "edges_per_s": num_edges / prepare_s,
        "output_mb_per_s": out_bytes / prepare_s / 2**20,
        "peer_sequential_write_s": peer_s,
        "peer_mb_per_s": out_bytes / peer_s / 2**20 if peer_s else None,
        "ratio_to_peer": (peer_s / prepare_s) if peer_s else None,
        "peak_rss_bytes": rss_peak,
        "peak_rss_over_output": rss_peak / out_bytes,
        "peak_heap_bytes": heap_peak,
        "open_structure_s": open_s,
    }
    return {
        "benchmark": "prepare_synthetic",
        "machine": machine(),
        "config": {
            "preset": args.preset,
            "scale": scale,
            "seed": args.seed,
            "chunk_edges": args.chunk_edges,
            "spec": {k: getattr(spec, k) for k in spec.__dataclass_fields__},
        },
        "results": results,
    }


def print_table(report: dict[str, Any]) -> None:
    """Print the results as a two-column table."""
    r, c = report["results"], report["config"]
    mib = 2**20
    rows = [
        ("preset", f"{c['preset']} @ scale {c['scale']:.4g} (seed {c['seed']})"),
        ("nodes", f"{r['num_nodes']:,}"),
        ("edges (generated / target)", f"{r['num_edges']:,} / {r['target_edges']:,}"),
        ("max degree", f"{r['max_degree']:,}"),
        ("output size", f"{r['output_bytes'] / mib:,.1f} MiB"),
        ("prepare time", f"{r['prepare_s']:.2f} s"),
        ("throughput", f"{r['edges_per_s'] / 1e6:.2f} M edges/s, {r['output_mb_per_s']:.1f} MiB/s"),
    ]
    if r["peer_mb_per_s"] is not None:
        rows.append(
            (
                "peer: sequential mmap write",
                f"{r['peer_mb_per_s']:.1f} MiB/s (prepare = {r['ratio_to_peer']:.3f}x of it)",
            )
        )
    rows.append(
        ("peak RSS", f"{r['peak_rss_bytes'] / mib:,.1f} MiB ({r['peak_rss_over_output']:.2f}x out)")
    )
    if r["peak_heap_bytes"] is not None:
        rows.append(("peak traced heap", f"{r['peak_heap_bytes'] / mib:,.1f} MiB"))
    rows.append(("open_dataset(structure)", f"{r['open_structure_s'] * 1e3:.2f} ms"))
    m = report["machine"]
    mem = f"{m['memory_bytes'] / 2**30:.0f} GiB" if m["memory_bytes"] else "?"
    rows.append(("machine", f"{m['platform']}, {m['cpus_usable']}/{m['cpu_count']} CPUs, {mem}"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="products-like", choices=STATIC)
    p.add_argument(
        "--edges", type=float, default=50e6, help="target directed edges (sets the scale)"
    )
    p.add_argument("--scale", type=float, default=None, help="explicit scale (overrides --edges)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk-edges", type=int, default=4_000_000)
    p.add_argument("--workdir", default=None, help="where the temporary dataset goes")
    p.add_argument("--keep", action="store_true", help="keep the generated dataset")
    p.add_argument("--no-peer", dest="peer", action="store_false", help="skip the write peer")
    p.add_argument("--trace-heap", action="store_true", help="also report peak traced heap")
    p.add_argument("--out-json", default=None, help="write the results as JSON here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    report = run(args)
    print_table(report)
    if args.out_json:
        path = Path(args.out_json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
