"""Partitioner time and quality: range / hash / random / metis at several part counts.

For each method and part count prints the partitioning time, the local-edge ratio (and its ratio
to the random partition measured in the same run, the ~1/P baseline), the replication factor and
the node / edge / train balance (max / mean over parts). Writes everything, with a machine
description, to ``--out-json``.

The graph is a dataset directory (``--dataset DIR``, as written by ``fleetgnn prepare``) or a
synthetic graph: fleetgnn's ``products-like`` preset scaled to ``--nodes`` when
``fleetgnn.graph.synthetic`` is available, else (or with ``--generator community``) a simple
planted-community graph generated here.

Usage::

    python benchmarks/bench_partition.py --nodes 100000 --parts 2 4 8 --out-json part.json
    python benchmarks/bench_partition.py --dataset data/cora --out-json cora-part.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from fleetgnn.graph import Graph, from_edges, open_dataset
from fleetgnn.partition import METHODS, evaluate, partition


def community_graph(
    num_nodes: int, avg_degree: float, num_communities: int, p_in: float, seed: int
) -> Graph:
    """Symmetric graph with planted communities (IDs shuffled) and a 10% train split.

    Each of ``num_nodes * avg_degree / 2`` draws picks a uniform source and, with probability
    ``p_in``, a destination in the source's community, else a uniform one; both directions are
    stored and duplicates / self loops dropped.
    """
    rng = np.random.default_rng(seed)
    comm = rng.integers(0, num_communities, num_nodes)
    order = np.argsort(comm, kind="stable")  # nodes grouped by community
    starts = np.searchsorted(comm[order], np.arange(num_communities + 1))
    draws = int(num_nodes * avg_degree / 2)
    src = rng.integers(0, num_nodes, draws)
    c = comm[src]
    size = starts[c + 1] - starts[c]
    inside = order[starts[c] + (rng.random(draws) * size).astype(np.int64)]
    dst = np.where(rng.random(draws) < p_in, inside, rng.integers(0, num_nodes, draws))
    keep = src != dst
    g = from_edges(
        np.concatenate([src[keep], dst[keep]]),
        np.concatenate([dst[keep], src[keep]]),
        num_nodes,
        node_data={"train_mask": rng.random(num_nodes) < 0.1},
        name=f"community-{num_nodes}",
    )
    return g.to_undirected()


def load_graph(args: argparse.Namespace) -> tuple[Graph, str]:
    if args.dataset:
        return open_dataset(args.dataset), f"dataset {args.dataset}"
    if args.generator in ("auto", "synthetic"):
        try:
            from fleetgnn.graph.synthetic import generate_graph, spec_for
        except ImportError:
            if args.generator == "synthetic":
                raise
        else:
            scale = args.nodes / 2_449_029
            spec = spec_for("products-like", scale)
            return generate_graph(spec, args.seed), f"synthetic products-like@{scale:.4g}"
    g = community_graph(args.nodes, args.avg_degree, args.communities, args.p_in, args.seed)
    return g, f"community generator (p_in={args.p_in}, {args.communities} communities)"


def machine() -> dict[str, object]:
    import pymetis
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "pymetis": getattr(pymetis, "version", "?"),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", help="dataset directory (default: generate a graph)")
    ap.add_argument("--generator", choices=("auto", "synthetic", "community"), default="auto")
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--avg-degree", type=float, default=25.0, help="community generator only")
    ap.add_argument("--communities", type=int, default=64, help="community generator only")
    ap.add_argument("--p-in", type=float, default=0.8, help="community generator only")
    ap.add_argument("--parts", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-json", type=Path, default=Path("bench_partition.json"))
    args = ap.parse_args()

    t0 = time.perf_counter()
    g, source = load_graph(args)
    gen_s = time.perf_counter() - t0
    print(f"graph: {g!r} from {source} ({gen_s:.1f} s)")
    rows = []
    header = (
        f"{'method':>7} {'P':>3} {'time s':>8} {'local':>7} {'x rand':>7} {'repl':>6} "
        f"{'nodes':>6} {'edges':>6} {'train':>6}"
    )
    print(header)
    print("-" * len(header))
    for p in args.parts:
        random_local = None
        for method in sorted(args.methods, key=lambda m: m != "random"):  # random first
            t = time.perf_counter()
            book = partition(g, method, p, seed=args.seed)
            part_s = time.perf_counter() - t
            t = time.perf_counter()
            q = evaluate(g, book)
            eval_s = time.perf_counter() - t
            if method == "random":
                random_local = q.local_edge_ratio
            vs = q.local_edge_ratio / random_local if random_local else float("nan")
            train = f"{q.train_balance:6.3f}" if q.train_balance is not None else f"{'-':>6}"
            print(
                f"{method:>7} {p:>3} {part_s:8.3f} {q.local_edge_ratio:7.4f} {vs:7.2f} "
                f"{q.replication_factor:6.3f} {q.node_balance:6.3f} {q.edge_balance:6.3f} {train}"
            )
            rows.append(
                {
                    "method": method,
                    "num_parts": p,
                    "partition_s": part_s,
                    "evaluate_s": eval_s,
                    "local_edge_ratio_vs_random": vs,
                    **q.to_dict(),
                }
            )
    result = {
        "benchmark": "partition",
        "graph": {
            "source": source,
            "name": g.name,
            "num_nodes": g.num_nodes,
            "num_edges": g.num_edges,
            "build_s": gen_s,
        },
        "seed": args.seed,
        "machine": machine(),
        "results": rows,
    }
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out_json}")


if __name__ == "__main__":
    main()
