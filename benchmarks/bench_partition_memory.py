"""Peak memory and time of the partitioners on one dataset, in bytes per edge.

Each measurement runs in a fresh subprocess: the dataset is opened with ``mmap=False`` (its
arrays read into memory first, so they do not count), the peak resident size is reset
(``/proc/self/clear_refs``) and then the step runs; the result is the rise of the peak resident
size (``VmHWM``) over the resident size before the step, divided by the directed edge count.

Steps: ``metis-adjacency`` (building the symmetrised CSR METIS takes), ``metis`` (the whole
``partition(..., "metis")`` call, METIS included), ``ldg`` (the streaming partitioner, on the
memory-mapped dataset; its resident size then includes the pages of the mapped files it reads,
reported separately as file-backed), and ``range`` / ``hash`` for reference.

Usage::

    python benchmarks/bench_partition_memory.py --dataset DIR --parts 8 \
        --steps metis-adjacency metis ldg --out-json part-mem.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import json, re, sys, time
from fleetgnn.graph import open_dataset
from fleetgnn.partition import evaluate, metis_adjacency, partition

def status():
    text = open("/proc/self/status").read()
    return {k: int(re.search(k + r":\s+(\d+)", text).group(1)) * 1024
            for k in ("VmRSS", "VmHWM", "RssAnon", "RssFile")}

step, path, parts = sys.argv[1], sys.argv[2], int(sys.argv[3])
g = open_dataset(path, mmap=step == "ldg")
before = status()
open("/proc/self/clear_refs", "w").write("5")  # reset VmHWM to the current resident size
t = time.perf_counter()
if step == "metis-adjacency":
    out = metis_adjacency(g)
else:
    book = partition(g, step, parts)
seconds = time.perf_counter() - t
after = status()
quality = None if step == "metis-adjacency" else evaluate(g, book).local_edge_ratio
print(json.dumps({"step": step, "seconds": seconds, "rss_before": before["VmRSS"],
                  "peak": after["VmHWM"], "rss_file_after": after["RssFile"],
                  "num_nodes": g.num_nodes, "num_edges": g.num_edges,
                  "local_edge_ratio": quality}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, type=Path)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument(
        "--steps",
        nargs="+",
        default=["metis-adjacency", "metis", "ldg", "range", "hash"],
        choices=["metis-adjacency", "metis", "ldg", "range", "hash"],
    )
    ap.add_argument("--out-json", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    print(f"{'step':>16} {'time s':>8} {'peak MB':>9} {'B/edge':>7} {'local':>7}")
    for step in args.steps:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, step, str(args.dataset), str(args.parts)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(f"{step:>16} failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        rise = r["peak"] - r["rss_before"]
        r["bytes_per_edge"] = rise / max(1, r["num_edges"])
        rows.append(r)
        local = f"{r['local_edge_ratio']:.4f}" if r["local_edge_ratio"] is not None else "-"
        print(
            f"{step:>16} {r['seconds']:8.2f} {rise / 1e6:9.1f} {r['bytes_per_edge']:7.1f} "
            f"{local:>7}"
        )
    if args.out_json:
        args.out_json.write_text(json.dumps({"dataset": str(args.dataset), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
