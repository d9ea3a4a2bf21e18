"""``fleetgnn bench``'s ``hetero`` section on one typed graph, with the sizes of your choosing.

The measurement is :mod:`fleetgnn.bench.hetero`'s: R-GAT mini-batch training steps (typed
sampling, gathering every type's rows, forward, backward, Adam) of fleetgnn's typed reference
engine against PyG's ``NeighborLoader`` + ``HeteroConv`` of ``GATConv`` (when pyg-lib or
torch-sparse imports; skipped with the reason otherwise) and PyG's ``GATConv`` on fleetgnn's
samples, implementations interleaved, median of ``--repeat`` calls of ``--steps`` steps each
(default: a whole epoch). This script only picks the graph and the sizes (default: 3 layers, 4
heads x 64, fanouts 15,10,5 per relation, batch 1024, on ``igbh-like`` 0.1 with every relation's
reverse).

The graph is ``igbh-like`` at ``--scale`` (``fleetgnn prepare synthetic --preset igbh-like``),
generated once into the cache directory with its reverse relations, as ``fleetgnn bench --only
hetero`` does. Results are written as ``fleetgnn bench`` writes them (``bench.json`` +
``bench.md`` in ``--out``).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_hetero.py --threads 1 --out /tmp/hetero
    python benchmarks/bench_hetero.py --scale 0.01 --steps 2 --repeat 1
"""

from __future__ import annotations

import argparse
import types
from typing import Any

from fleetgnn.bench.data import cached_typed_dataset
from fleetgnn.bench.hetero import SECTION, add_rgat_workload_options, rgat_minibatch
from fleetgnn.bench.report import progress_line
from fleetgnn.bench.suite import describe, script_options, script_results, script_start


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point; returns the results (``fleetgnn bench``'s format)."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    add_rgat_workload_options(p)
    p.add_argument("--steps", type=int, default=None, help="steps per timed call (an epoch)")
    script_options(p)
    args = p.parse_args(argv)
    started, machine, threads = script_start(args)
    graph, gen_s = cached_typed_dataset(args.cache_dir, "igbh-like", args.scale, args.seed)
    name = f"igbh-like x{args.scale:g}"
    origin = f"generated in {gen_s:.1f} s" if gen_s else "cached"
    print(f"dataset {name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges ({origin})")
    opts = types.SimpleNamespace(repeat=args.repeat, quick=False)
    row = rgat_minibatch(
        opts,
        threads,
        graph,
        name,
        hidden=args.hidden,
        heads=args.heads,
        fanouts=[int(f) for f in args.fanouts.split(",")],
        batch_size=args.batch_size,
        steps=args.steps,
        device=args.device,
    )
    print(progress_line(row), flush=True)
    return script_results(
        "benchmarks/bench_hetero.py",
        argv,
        args,
        [row],
        machine=machine,
        sections=[SECTION],
        started=started,
        datasets={"typed": describe(graph, name, gen_s)},
    )


if __name__ == "__main__":
    main()
