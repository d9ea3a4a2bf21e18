"""Section ``sampler``: multi-hop neighbour sampling throughput (sampled edges per second).

fleetgnn's :class:`~fleetgnn.sampling.NeighborSampler` (fanouts 15,10,5 by hop from the seeds,
batches of 1,024 training nodes) on ``products-like`` against PyG's sampling core (pyg-lib's
``neighbor_sample``, what ``NeighborLoader`` runs, or torch-sparse's ``sample_adj``) when one of
them imports, and against a per-seed Python loop (``rng.choice`` per node; one batch per call,
it is slow). Rates are sampled edges (sum over hops) per second of each call.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fleetgnn.bench.peers import neighbor_loader_missing, pyg_sampler, python_sampler
from fleetgnn.bench.report import measurement, progress_line
from fleetgnn.bench.timing import interleaved
from fleetgnn.graph import Graph
from fleetgnn.sampling import NeighborSampler

SECTION = "sampler"
FANOUTS = (15, 10, 5)
BATCH = 1024


def run(
    opts: Any, threads: int, log: Callable[[str], None], graph: Graph, name: str
) -> list[dict[str, Any]]:
    """The sampler measurement on ``graph`` (named ``name`` in the table)."""
    train = np.flatnonzero(np.asarray(graph.train_mask))
    rng = np.random.default_rng(1)
    n_batches = 2 if opts.quick else 5
    batches = [
        torch.from_numpy(rng.choice(train, min(BATCH, train.size), replace=False))
        for _ in range(n_batches)
    ]
    sampler = NeighborSampler(graph, list(FANOUTS), seed=0)
    edges: dict[str, list[int]] = {}

    def counted(key: str, fn: Callable[[], int]) -> Callable[[], None]:
        edges[key] = []
        return lambda: edges[key].append(fn())

    def fleet() -> int:
        total = 0
        for step, seeds in enumerate(batches):
            total += sum(b.num_edges for b in sampler.sample(seeds, 0, step))
        return total

    calls = {"fleetgnn": counted("fleetgnn", fleet)}
    skipped = {}
    pyg = pyg_sampler(graph, FANOUTS)
    if pyg is None:
        skipped["PyG sampler"] = neighbor_loader_missing() or "neither pyg-lib nor torch-sparse"
    else:
        backend, sample = pyg
        calls[f"PyG sampler ({backend})"] = counted("pyg", lambda: sum(sample(s) for s in batches))
    loop = python_sampler(graph, FANOUTS, seed=0)
    calls["per-seed Python loop (1 batch)"] = counted("python", lambda: loop(batches[0]))
    times = interleaved(calls, opts.repeat)
    work = {
        name_: statistics.fmean(edges[key]) / 1e6 for name_, key in zip(calls, edges, strict=True)
    }
    row = measurement(
        SECTION,
        f"{len(FANOUTS)}-hop sampling, fanouts {','.join(map(str, FANOUTS))}, batch {BATCH}, "
        f"{name}",
        threads,
        times,
        work=work,
        unit="M edges/s",
        skipped=skipped,
        extra={
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "batches_per_call": n_batches,
            "edges_per_batch": statistics.fmean(edges["fleetgnn"]) / n_batches,
        },
    )
    log(progress_line(row))
    return [row]
