"""Temporal neighbour sampling throughput: sampled edges per second, against peers in the same run.

fleetgnn's :class:`~fleetgnn.sampling.TemporalSampler` (each seed at its own time, only in-edges
strictly before it, disjoint per-seed subtrees) with ``uniform`` and ``last`` on the numpy
backend and ``uniform`` on the torch backend, beside:

- fleetgnn's plain :class:`~fleetgnn.sampling.NeighborSampler` on the same seeds (no times,
  subtrees shared): what the times cost;
- a per-seed Python loop with the same semantics (a binary search for the candidates, then
  ``rng.choice`` without replacement or the last ``k``; one subtree per seed whose next hop
  samples every node it holds, as a block's sources), one batch a call;
- PyG's temporal sampling core, pyg-lib's ``neighbor_sample`` with ``edge_time`` /
  ``seed_time`` and ``disjoint=True`` (what ``NeighborLoader(time_attr=...)`` runs), when
  pyg-lib imports; otherwise the JSON says why it did not run. pyg-lib takes edges with
  ``time <= t``, so its row runs fleetgnn's ``inclusive`` switch beside it.

The graph is :func:`~fleetgnn.bench.data.power_law_graph` with integer edge times drawn
uniformly in ``[0, --times)`` and sorted within each node's in-edges (the format's invariant);
seed times uniform in the same range, seeds distinct within a batch (the plain sampler's rule).
Rates are sampled edges (summed over hops) per second of a call of ``--batches`` batches, median
over ``--repeat`` interleaved repetitions.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_temporal_sampler.py \\
        --out benchmarks/results/bench_temporal_sampler.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.bench.data import power_law_graph
from fleetgnn.bench.machine import machine_info
from fleetgnn.bench.timing import interleaved
from fleetgnn.graph import Graph
from fleetgnn.sampling import GraphTopology, NeighborSampler, TemporalSampler


def timed_graph(num_nodes: int, avg_degree: float, times: int, seed: int) -> Graph:
    """The power-law graph with uniform integer edge times, sorted within each node's in-edges."""
    g = power_law_graph(num_nodes, avg_degree, seed)
    indptr = np.asarray(g.indptr)
    rng = np.random.default_rng(seed + 1)
    t = rng.integers(0, times, g.num_edges, dtype=np.int64)
    segment = np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(indptr))
    return g.replace(edge_time=t[np.lexsort((t, segment))])


def python_temporal(graph: Graph, fanouts: list[int], strategy: str, seed: int = 0) -> Any:
    """The per-seed loop: ``(seeds, seed_time) -> sampled edges``, one subtree per seed."""
    indptr = np.asarray(graph.indptr)
    indices = np.asarray(graph.indices)
    etime = np.asarray(graph.edge_time)
    rng = np.random.default_rng(seed)

    def run(seeds: np.ndarray, seed_time: np.ndarray) -> int:
        edges = 0
        for root, t in zip(seeds.tolist(), seed_time.tolist(), strict=True):
            nodes = np.array([root], dtype=np.int64)  # the subtree's nodes, as a block's sources
            for fanout in fanouts:
                parts = []
                for v in nodes.tolist():
                    lo = int(indptr[v])
                    hi = lo + int(np.searchsorted(etime[lo : indptr[v + 1]], t, side="left"))
                    n = hi - lo
                    if fanout < 0 or n <= fanout:
                        parts.append(indices[lo:hi])
                    elif strategy == "last":
                        parts.append(indices[hi - fanout : hi])
                    else:
                        parts.append(indices[lo + rng.choice(n, fanout, replace=False)])
                picked = np.concatenate(parts).astype(np.int64)
                edges += picked.size
                new = np.unique(picked)
                nodes = np.concatenate([nodes, new[~np.isin(new, nodes)]])
        return edges

    return run


def pyg_temporal(graph: Graph, fanouts: list[int], strategy: str) -> Any:
    """pyg-lib's temporal ``neighbor_sample`` as ``(seeds, seed_time) -> edges``, or the reason
    it cannot run (a string).

    fleetgnn's CSC segments are pyg-lib's rows: the sampled neighbours of a seed are its
    in-neighbours, as in fleetgnn's sampler.
    """
    try:
        from pyg_lib.sampler import neighbor_sample
    except (ImportError, OSError, RuntimeError) as e:
        return f"pyg-lib does not import ({type(e).__name__}: {e})"
    rowptr = torch.from_numpy(np.array(graph.indptr, dtype=np.int64))
    col = torch.from_numpy(np.array(graph.indices, dtype=np.int64))
    etime = torch.from_numpy(np.asarray(graph.edge_time, dtype=np.int64))

    def run(seeds: torch.Tensor, seed_time: torch.Tensor) -> int:
        out = neighbor_sample(
            rowptr,
            col,
            seeds,
            fanouts,
            edge_time=etime,
            seed_time=seed_time,
            disjoint=True,
            temporal_strategy=strategy,
        )
        return int(out[0].numel())

    try:
        run(torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64))
    except (TypeError, RuntimeError) as e:  # an older pyg-lib: node times only
        return f"pyg-lib's neighbor_sample does not sample by edge time ({type(e).__name__}: {e})"
    return run


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point; returns the results written to ``--out``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--avg-degree", type=float, default=20.0)
    ap.add_argument("--times", type=int, default=1000, help="edge times are drawn in [0, times)")
    ap.add_argument("--fanouts", default="15,10,5", help="by hop from the seeds")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=4, help="batches per timed call")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="of the graph")
    ap.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    fanouts = [int(f) for f in args.fanouts.split(",")]
    t0 = time.perf_counter()
    graph = timed_graph(args.nodes, args.avg_degree, args.times, args.seed)
    gen_s = time.perf_counter() - t0
    print(f"{graph!r} generated in {gen_s:.1f} s", flush=True)
    rng = np.random.default_rng(args.seed + 2)
    batches = [
        (
            torch.from_numpy(rng.choice(args.nodes, args.batch_size, replace=False)),
            torch.from_numpy(rng.integers(0, args.times, args.batch_size, dtype=np.int64)),
        )
        for _ in range(args.batches)
    ]
    topo = GraphTopology(graph)
    samplers = {
        "fleetgnn temporal uniform (numpy)": TemporalSampler(topo, fanouts, backend="numpy"),
        "fleetgnn temporal last (numpy)": TemporalSampler(
            topo, fanouts, strategy="last", backend="numpy"
        ),
        "fleetgnn temporal uniform (torch)": TemporalSampler(topo, fanouts, backend="torch"),
        "fleetgnn temporal uniform <= (numpy)": TemporalSampler(
            topo, fanouts, inclusive=True, backend="numpy"
        ),
    }
    plain = NeighborSampler(topo, fanouts, backend="numpy")
    calls: dict[str, Callable[[], int]] = {}
    for name, s in samplers.items():
        calls[name] = lambda s=s: sum(
            sum(b.num_edges for b in s.sample_from_nodes(seeds, seed_time=st, step=i).blocks)
            for i, (seeds, st) in enumerate(batches)
        )
    calls["fleetgnn plain NeighborSampler (numpy, no times)"] = lambda: sum(
        sum(b.num_edges for b in plain.sample_from_nodes(seeds, step=i).blocks)
        for i, (seeds, _) in enumerate(batches)
    )
    skipped: dict[str, str] = {}
    for strategy in ("uniform", "last"):
        peer = pyg_temporal(graph, fanouts, strategy)
        if isinstance(peer, str):
            skipped[f"PyG temporal {strategy} (pyg-lib, <=)"] = peer
        else:
            calls[f"PyG temporal {strategy} (pyg-lib, <=)"] = lambda p=peer: sum(
                p(seeds, st) for seeds, st in batches
            )
    loop = python_temporal(graph, fanouts, "uniform")
    seeds0, st0 = batches[0]
    per_call_edges = {name: fn() for name, fn in calls.items()}
    times_s = interleaved(calls, args.repeat)
    # the Python loop: one batch a call, timed apart from the interleaved calls (3 at most)
    loop_s = []
    for _ in range(min(3, args.repeat)):
        t = time.perf_counter()
        loop_edges = loop(seeds0.numpy(), st0.numpy())
        loop_s.append(time.perf_counter() - t)
    rows = []
    for name, ts in times_s.items():
        med = statistics.median(ts)
        rows.append(
            {
                "implementation": name,
                "edges_per_call": per_call_edges[name],
                "median_s": med,
                "times_s": ts,
                "edges_per_s": per_call_edges[name] / med,
            }
        )
    rows.append(
        {
            "implementation": "per-seed Python loop, temporal uniform (one batch)",
            "edges_per_call": loop_edges,
            "median_s": statistics.median(loop_s),
            "times_s": loop_s,
            "edges_per_s": loop_edges / statistics.median(loop_s),
        }
    )
    base = rows[0]["edges_per_s"]
    for r in rows:
        r["ratio_to_fleetgnn_temporal_uniform"] = r["edges_per_s"] / base
        print(
            f"{r['implementation']:<52} {r['edges_per_s'] / 1e6:8.2f} M edges/s "
            f"({r['ratio_to_fleetgnn_temporal_uniform']:.2f}x)",
            flush=True,
        )
    for name, why in skipped.items():
        print(f"{name:<52} not run: {why}", flush=True)
    result = {
        "script": "benchmarks/bench_temporal_sampler.py",
        "argv": argv if argv is not None else [],
        "settings": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}},
        "machine": machine_info("cpu"),
        "torch_threads": torch.get_num_threads(),
        "graph": {
            "nodes": graph.num_nodes,
            "edges": graph.num_edges,
            "generated_s": gen_s,
        },
        "rows": rows,
        "skipped": skipped,
        "elapsed_s": time.perf_counter() - started,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.out}", flush=True)
    return result


if __name__ == "__main__":
    main()
