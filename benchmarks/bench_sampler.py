"""Neighbour-sampling throughput: fleetgnn's vectorised sampler vs per-seed references.

Measures sampled edges per second for a multi-layer sample (default fanouts 15,10,5, batch 1024)
on a synthetic power-law graph generated here, against

- ``python-ref``: a per-seed Python loop with ``np.random.choice(deg, k, replace=False)`` plus a
  dict-free ``np.unique`` relabel (same output shape as fleetgnn's blocks);
- ``pyg``: PyG's ``NeighborLoader`` sampling core (``torch.ops.pyg.neighbor_sample`` from pyg-lib,
  or torch-sparse's ``sample_adj``), only when importable.

Each phase is also timed separately (draw + Alg. 1, neighbour reads, AppendUnique).
Writes a JSON file with the numbers and a machine description.

Usage::

    python benchmarks/bench_sampler.py --nodes 1000000 --avg-degree 15 --batches 10
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from fleetgnn.bench.machine import machine_info
from fleetgnn.bench.peers import pyg_sampler, python_sampler
from fleetgnn.graph import Graph
from fleetgnn.sampling import GraphTopology, NeighborSampler, append_unique
from fleetgnn.sampling.neighbor import _draws, _offsets_numpy, _sample_offsets


def power_law_graph(num_nodes: int, avg_degree: float, seed: int) -> Graph:
    """Random CSC graph: Pareto-distributed in-degrees, uniform random sources."""
    rng = np.random.default_rng(seed)
    raw = rng.pareto(1.5, num_nodes) + 1.0
    deg = np.minimum(np.floor(raw * avg_degree / raw.mean()), num_nodes).astype(np.int64)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    indices = rng.integers(0, num_nodes, int(indptr[-1]), dtype=np.int32)
    return Graph(indptr=indptr, indices=indices, name="powerlaw", validate="structure")


def machine() -> dict[str, object]:
    """The machine description every benchmark records."""
    return machine_info("cpu")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--avg-degree", type=float, default=15.0)
    ap.add_argument("--fanouts", default="15,10,5", help="by hop from the seeds")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--ref-batches", type=int, default=2, help="batches for the Python loop")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/bench_sampler.json")
    args = ap.parse_args()
    fanouts = [int(f) for f in args.fanouts.split(",")]

    t0 = time.perf_counter()
    g = power_law_graph(args.nodes, args.avg_degree, args.seed)
    gen_s = time.perf_counter() - t0
    print(f"{g!r} generated in {gen_s:.1f}s; max in-degree {int(np.diff(g.indptr).max())}")
    rng = np.random.default_rng(args.seed + 1)
    batches = [
        torch.from_numpy(rng.choice(g.num_nodes, args.batch_size, replace=False))
        for _ in range(args.batches)
    ]

    sampler = NeighborSampler(g, fanouts, seed=args.seed)
    sampler.sample(batches[0], 0, 0)  # warm-up
    edges, nodes = 0, 0
    t0 = time.perf_counter()
    for step, seeds in enumerate(batches):
        blocks = sampler.sample(seeds, 0, step)
        edges += sum(b.num_edges for b in blocks)
        nodes += blocks[0].num_src
    fleet_s = time.perf_counter() - t0
    results: dict[str, object] = {
        "fleetgnn": {
            "seconds_per_batch": fleet_s / len(batches),
            "edges_per_batch": edges / len(batches),
            "input_nodes_per_batch": nodes / len(batches),
            "edges_per_s": edges / fleet_s,
        }
    }

    # phase breakdown on the last hop's frontier (the largest)
    topo = GraphTopology(g)
    frontier = blocks[1].src_ids if len(blocks) > 1 else batches[-1]
    deg = topo.in_degree(frontier).numpy()
    f_last = fanouts[-1]
    big = deg > f_last
    gen = np.random.default_rng(0)
    phases = {}
    t = time.perf_counter()
    r = _draws(gen, deg[big], f_last)
    phases["draws"] = time.perf_counter() - t
    t = time.perf_counter()
    _offsets_numpy(r, deg[big])
    phases["alg1"] = time.perf_counter() - t
    t = time.perf_counter()
    indptr_s, row, off = _sample_offsets(deg, f_last, gen)
    phases["offsets_total"] = time.perf_counter() - t
    t = time.perf_counter()
    nbrs = topo.neighbors_at(frontier[torch.from_numpy(row)], torch.from_numpy(off))
    phases["neighbor_reads"] = time.perf_counter() - t
    t = time.perf_counter()
    append_unique(frontier, nbrs)
    phases["append_unique"] = time.perf_counter() - t
    results["last_hop_phases_s"] = {
        "frontier": int(frontier.numel()),
        "sampled_edges": int(nbrs.numel()),
        **phases,
    }

    ref_batches = batches[: args.ref_batches]
    python_reference = python_sampler(g, fanouts, seed=args.seed)
    t0 = time.perf_counter()
    ref_edges = sum(python_reference(s) for s in ref_batches)
    ref_s = time.perf_counter() - t0
    results["python-ref"] = {
        "seconds_per_batch": ref_s / len(ref_batches),
        "edges_per_s": ref_edges / ref_s,
    }
    results["speedup_vs_python_ref"] = (edges / fleet_s) / (ref_edges / ref_s)

    pyg = pyg_sampler(g, fanouts)
    if pyg is None:
        results["pyg"] = "not importable (needs torch_geometric with pyg-lib or torch-sparse)"
    else:
        name, run = pyg
        run(batches[0])
        t0 = time.perf_counter()
        pyg_edges = sum(run(s) for s in batches)
        pyg_s = time.perf_counter() - t0
        results["pyg"] = {"backend": name, "edges_per_s": pyg_edges / pyg_s}
        results["ratio_vs_pyg"] = (edges / fleet_s) / (pyg_edges / pyg_s)

    report = {
        "benchmark": "sampler",
        "config": {**vars(args), "fanouts": fanouts},
        "graph": {"num_nodes": g.num_nodes, "num_edges": g.num_edges, "generate_s": gen_s},
        "machine": machine(),
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
