"""``fleetgnn bench``'s ``sampler`` section on a power-law graph of the size of your choosing.

The measurement is :mod:`fleetgnn.bench.sampler`'s: sampled edges per second of fleetgnn's
``NeighborSampler`` against PyG's sampling core (pyg-lib or torch-sparse, when one imports) and a
per-seed Python loop, implementations interleaved, with the last hop split into its phases
(``extra.last_hop_phases_s``). This script only picks the graph (Pareto-distributed in-degrees,
:func:`fleetgnn.bench.data.power_law_graph`), the fanouts and the batches. Results are written
as ``fleetgnn bench`` writes them (``bench.json`` + ``bench.md`` in ``--out``).

Usage::

    python benchmarks/bench_sampler.py --nodes 1000000 --avg-degree 15 --batches 10 --out /tmp/s
"""

from __future__ import annotations

import argparse
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.bench.data import power_law_graph
from fleetgnn.bench.machine import machine_info
from fleetgnn.bench.sampler import SECTION, run
from fleetgnn.bench.suite import describe, script_results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point; returns the results (``fleetgnn bench``'s format)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--avg-degree", type=float, default=15.0)
    ap.add_argument("--fanouts", default="15,10,5", help="by hop from the seeds")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=10, help="batches per timed call")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0, help="of the graph")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--out", type=Path, default=None, help="directory for bench.json and bench.md")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    machine = machine_info("cpu")
    t0 = time.perf_counter()
    graph = power_law_graph(args.nodes, args.avg_degree, args.seed)
    gen_s = time.perf_counter() - t0
    max_deg = int(np.diff(graph.indptr).max())
    print(f"{graph!r} generated in {gen_s:.1f} s; max in-degree {max_deg}", flush=True)
    name = f"power-law {args.nodes:,} nodes, avg degree {args.avg_degree:g}"
    rows = run(
        types.SimpleNamespace(repeat=args.repeat, quick=False),
        torch.get_num_threads(),
        print,
        graph,
        name,
        fanouts=[int(f) for f in args.fanouts.split(",")],
        batch=args.batch_size,
        batches_per_call=args.batches,
    )
    return script_results(
        "benchmarks/bench_sampler.py",
        argv,
        args,
        rows,
        machine=machine,
        sections=[SECTION],
        started=started,
        extra_settings={"max_in_degree": max_deg},
        datasets={"large": describe(graph, name, gen_s)},
    )


if __name__ == "__main__":
    main()
