"""``fleetgnn bench``'s ``ops`` section at sizes of your choosing (e.g. 1M nodes, 20M edges).

The measurements are :mod:`fleetgnn.bench.ops`'s (``gspmm`` sum/mean forward and forward +
backward against a chunked torch ``index_add_`` and PyG's ``SimpleConv``, and the memcpy limit;
keyed dropout against ``F.dropout``); this script only picks the sizes: one graph, one ``gspmm``
row set per ``--dims`` width, one keyed-dropout input of ``--dropout-rows`` rows per width.
Results are written as ``fleetgnn bench`` writes them (``bench.json`` + ``bench.md`` in ``--out``).

Examples:
    python benchmarks/bench_ops.py --threads 1 --out /tmp/ops      # 1M nodes, 20M edges, D=64,256
    python benchmarks/bench_ops.py --nodes 100000 --edges 2000000 --dims 64 --out /tmp/ops
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from fleetgnn.bench.machine import machine_info
from fleetgnn.bench.ops import SECTION, dropout_rows, gspmm_rows, memcpy_gbps
from fleetgnn.bench.suite import script_results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point; returns the results (``fleetgnn bench``'s format)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--edges", type=int, default=20_000_000)
    p.add_argument("--dims", type=int, nargs="+", default=[64, 256])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk", type=int, default=1 << 20, help="edges per index_add_ chunk (peer)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--skip-peers", action="store_true", help="gspmm: fleetgnn and the limit only")
    p.add_argument("--dropout-rows", type=int, default=200_000)
    p.add_argument("--memcpy-mb", type=int, default=512)
    p.add_argument("--out", type=Path, default=None, help="directory for bench.json and bench.md")
    args = p.parse_args(argv)
    started = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    machine = machine_info(device)
    threads = torch.get_num_threads()
    bw = memcpy_gbps(args.memcpy_mb << 20, args.repeat, device)
    print(f"memcpy (copy_) on {device}: {bw:.1f} GB/s", flush=True)
    rows: list[dict[str, Any]] = []
    for d in args.dims:
        size = {"nodes": args.nodes, "edges": args.edges, "dim": d}
        rows += gspmm_rows(
            size,
            threads,
            args.repeat,
            bw,
            print,
            device,
            with_peers=not args.skip_peers,
            chunk=args.chunk,
            seed=args.seed,
        )
    shapes = {f"D={w}": (args.dropout_rows, w) for w in args.dims}
    rows += dropout_rows(shapes, threads, args.repeat, print, device)
    return script_results(
        "benchmarks/bench_ops.py",
        argv,
        args,
        rows,
        machine=machine,
        sections=[SECTION],
        started=started,
        extra_settings={"memcpy_gbps": bw},
    )


if __name__ == "__main__":
    main()
