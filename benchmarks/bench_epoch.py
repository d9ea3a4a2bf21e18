"""``fleetgnn bench``'s ``epoch`` section on one graph, with the model sizes of your choosing.

The measurements are :mod:`fleetgnn.bench.epoch`'s: fleetgnn's reference engine against the same
model in PyG (same weights, optimizer, loss and dropout rate; implementations interleaved, median
of ``--repeat`` epochs), with fleetgnn's epoch split into its step phases
(``extra.fleetgnn_phases_s``). This script only picks the graph and the sizes:

- ``gcn-full``: full-graph GCN, 2 layers, against PyG ``GCNConv(cached=True)`` with an
  ``edge_index`` and with a ``torch.sparse_csr`` ``adj_t``;
- ``sage-minibatch``: GraphSAGE (mean), one layer per fanout, against PyG's ``NeighborLoader`` +
  ``SAGEConv`` (when pyg-lib or torch-sparse imports) and PyG's ``SAGEConv`` on fleetgnn's samples.

The graph is ``--preset`` at ``--scale`` (default ``products-like`` 0.05), generated once into the
cache directory, as ``fleetgnn bench`` does. Results are written as ``fleetgnn bench`` writes them
(``bench.json`` + ``bench.md`` in ``--out``).

Usage::

    python benchmarks/bench_epoch.py --threads 1 --out /tmp/epoch
    python benchmarks/bench_epoch.py --scale 0.01 --repeat 1 --workloads gcn-full
"""

from __future__ import annotations

import argparse
import types
import warnings
from pathlib import Path
from typing import Any

from fleetgnn.bench.data import cached_dataset, default_cache_dir
from fleetgnn.bench.epoch import SECTION, full_epoch, sage_minibatch
from fleetgnn.bench.report import progress_line
from fleetgnn.bench.suite import describe, script_options, script_results, script_start

WORKLOADS: tuple[str, ...] = ("gcn-full", "sage-minibatch")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point; returns the results (``fleetgnn bench``'s format)."""
    cache = default_cache_dir()
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--preset", default="products-like")
    p.add_argument("--scale", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0, help="dataset seed")
    p.add_argument("--cache-dir", type=Path, default=cache, help=f"default: {cache}")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--fanouts", default="15,10,5", help="by hop from the seeds (one per layer)")
    p.add_argument("--batch-size", type=int, default=1024)
    script_options(p, "timed epochs per implementation")
    args = p.parse_args(argv)
    started, machine, threads = script_start(args)
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    graph, gen_s = cached_dataset(args.cache_dir, args.preset, args.scale, args.seed)
    name = f"{args.preset} x{args.scale:g}"
    print(f"dataset {name}: {graph!r} ({f'generated in {gen_s:.1f} s' if gen_s else 'cached'})")
    opts = types.SimpleNamespace(repeat=args.repeat)
    rows = []
    if "gcn-full" in args.workloads:
        rows.append(full_epoch(opts, threads, graph, name, args.hidden, 1, device=args.device))
        print(progress_line(rows[-1]), flush=True)
    if "sage-minibatch" in args.workloads:
        fanouts = [int(f) for f in args.fanouts.split(",")]
        rows.append(
            sage_minibatch(
                opts,
                threads,
                graph,
                name,
                args.hidden,
                fanouts=fanouts,
                batch_size=args.batch_size,
                device=args.device,
            )
        )
        print(progress_line(rows[-1]), flush=True)
    return script_results(
        "benchmarks/bench_epoch.py",
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
