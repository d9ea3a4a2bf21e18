"""``fleetgnn bench``'s ``link`` section on one graph, with the sizes of your choosing.

The measurement is :mod:`fleetgnn.bench.link`'s: link-prediction training steps (edge batches,
negatives, sampling, gathering, the encoder, the dot-product decoder, binary cross-entropy,
Adam) of fleetgnn's reference engine against PyG's ``LinkNeighborLoader`` + ``SAGEConv`` (when
pyg-lib or torch-sparse imports) and PyG's ``SAGEConv`` on fleetgnn's samples, implementations
interleaved, median of ``--repeat`` calls of ``--steps`` steps each. This script only picks the
graph and the sizes (default: the issue's GraphSAGE 2 x 256, fanouts 15,10, batch 1024 edges,
one negative per positive, on ``products-like`` 0.05).

The graph is ``--preset`` at ``--scale``, generated once into the cache directory, as
``fleetgnn bench`` does (its edge split is kept there). Results are written as ``fleetgnn
bench`` writes them (``bench.json`` + ``bench.md`` in ``--out``).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_link.py --threads 1 --out /tmp/link
    python benchmarks/bench_link.py --scale 0.005 --steps 2 --repeat 1
"""

from __future__ import annotations

import argparse
import types
import warnings
from pathlib import Path
from typing import Any

from fleetgnn.bench.data import cached_dataset, dataset_dir, default_cache_dir
from fleetgnn.bench.link import SECTION, sage_link
from fleetgnn.bench.report import progress_line
from fleetgnn.bench.suite import describe, script_options, script_results, script_start


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
    p.add_argument("--hidden", type=int, default=256, help="width of every layer")
    p.add_argument("--fanouts", default="15,10", help="by hop from the seeds (one per layer)")
    p.add_argument("--batch-size", type=int, default=1024, help="training edges per step")
    p.add_argument("--negatives", type=int, default=1, help="negatives per positive")
    p.add_argument("--steps", type=int, default=10, help="steps per timed call")
    script_options(p)
    args = p.parse_args(argv)
    started, machine, threads = script_start(args)
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    graph, gen_s = cached_dataset(args.cache_dir, args.preset, args.scale, args.seed)
    name = f"{args.preset} x{args.scale:g}"
    print(f"dataset {name}: {graph!r} ({f'generated in {gen_s:.1f} s' if gen_s else 'cached'})")
    opts = types.SimpleNamespace(repeat=args.repeat, quick=False)
    row = sage_link(
        opts,
        threads,
        graph,
        name,
        hidden=args.hidden,
        fanouts=[int(f) for f in args.fanouts.split(",")],
        batch_size=args.batch_size,
        negatives=args.negatives,
        steps=args.steps,
        dataset=dataset_dir(args.cache_dir, args.preset, args.scale, args.seed),
        device=args.device,
    )
    print(progress_line(row), flush=True)
    return script_results(
        "benchmarks/bench_link.py",
        argv,
        args,
        [row],
        machine=machine,
        sections=[SECTION],
        started=started,
        datasets={"large": describe(graph, name, gen_s)},
    )


if __name__ == "__main__":
    main()
