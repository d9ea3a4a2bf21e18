"""``fleetgnn bench``'s store gather per stored feature dtype, on a table of your choosing.

The measurement is :func:`fleetgnn.bench.gather.dtype_rows`: one process on the CPU, a
:class:`~fleetgnn.store.UnifiedStore` with every row on the device tier, its rows stored as the
dataset's float32 (``store.feature_dtype`` None), ``bfloat16``, ``float16`` and ``float8_e4m3``,
the same random IDs gathered through each (read back to float32) into a fresh output each
call and into one output buffer reused call after call, interleaved. Reported per output and
dtype: million rows per second, stored bytes per row, GB/s counted in stored bytes, and the
rate over the float32 rows' with the same output. This script only picks the table
(``--rows`` x ``--features`` float32 uniform in [0, 1), an edgeless graph) and the batch of
IDs. Results are written as ``fleetgnn bench`` writes them (``bench.json`` + ``bench.md`` in
``--out``).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_gather_dtypes.py --rows 2000000 --features 100 \\
        --ids 100000 --repeat 7 --threads 1
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.bench.gather import SECTION, dtype_rows
from fleetgnn.bench.machine import machine_info
from fleetgnn.bench.suite import describe, script_results
from fleetgnn.graph import Graph


def table_graph(rows: int, features: int, seed: int = 0) -> Graph:
    """An edgeless graph whose features are a float32 table ``[rows, features]`` in [0, 1)."""
    x = np.random.default_rng(seed).random((rows, features), dtype=np.float32)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    return Graph(
        indptr=indptr, indices=np.zeros(0, np.int64), x=x, name="table", validate="structure"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point; returns the results (``fleetgnn bench``'s format)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000, help="rows of the feature table")
    ap.add_argument("--features", type=int, default=100, help="features per row (products: 100)")
    ap.add_argument("--ids", type=int, default=100_000, help="random rows per gather")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="of the table and the IDs")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--out", type=Path, default=None, help="directory for bench.json and bench.md")
    args = ap.parse_args(argv)
    for name in ("rows", "features", "ids", "repeat"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1 (got {getattr(args, name)})")
    started = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    machine = machine_info("cpu")
    t0 = time.perf_counter()
    graph = table_graph(args.rows, args.features, args.seed)
    gen_s = time.perf_counter() - t0
    ids = torch.from_numpy(np.random.default_rng(args.seed + 1).integers(0, args.rows, args.ids))
    name = f"{args.rows:,} x {args.features} float32 table"
    print(f"{name} ({args.rows * args.features * 4 / 2**20:,.0f} MiB) made in {gen_s:.1f} s")
    rows = dtype_rows(graph, name, ids, args.repeat, torch.get_num_threads(), print)
    return script_results(
        "benchmarks/bench_gather_dtypes.py",
        argv,
        args,
        rows,
        machine=machine,
        sections=[SECTION],
        started=started,
        datasets={"large": describe(graph, name, gen_s)},
    )


if __name__ == "__main__":
    main()
