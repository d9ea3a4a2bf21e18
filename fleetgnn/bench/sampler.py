"""Section ``sampler``: multi-hop neighbour sampling throughput (sampled edges per second).

fleetgnn's :class:`~fleetgnn.sampling.NeighborSampler` (fanouts 15,10,5 by hop from the seeds,
batches of 1,024 training nodes) on ``products-like`` against PyG's sampling core (pyg-lib's
``neighbor_sample``, what ``NeighborLoader`` runs, or torch-sparse's ``sample_adj``) when one of
them imports, and against a per-seed Python loop (``rng.choice`` per node; one batch per call,
it is slow). Rates are sampled edges (sum over hops) per second of each call. The row also keeps
the last hop's time split into its phases (:func:`last_hop_phases`: draws, WholeGraph's
Algorithm 1, neighbour reads, AppendUnique).

fleetgnn's sampler has two backends giving identical blocks: numpy on the host and torch on the
seeds' device. On the CPU ``fleetgnn`` is the default (numpy) and the torch backend on the CPU is
a ``baseline``; on a CUDA device (``device=``) ``fleetgnn`` is the torch backend over the topology
copied to the device (:class:`~fleetgnn.sampling.DeviceTopology`) with seeds there, and the
CPU's numpy backend is the ``baseline`` (the issue's "sampled edges/s on CUDA vs the CPU path").
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from fleetgnn.bench.peers import neighbor_loader_missing, pyg_sampler, python_sampler
from fleetgnn.bench.report import measurement, progress_line
from fleetgnn.bench.timing import interleaved
from fleetgnn.graph import Graph
from fleetgnn.kernels import KERNELS
from fleetgnn.sampling import DeviceTopology, GraphTopology, NeighborSampler, append_unique
from fleetgnn.sampling.neighbor import _draws_numpy, _offsets_numpy, _sample_offsets

SECTION = "sampler"
FANOUTS = (15, 10, 5)
BATCH = 1024


def run(
    opts: Any,
    threads: int,
    log: Callable[[str], None],
    graph: Graph,
    name: str,
    *,
    fanouts: Sequence[int] = FANOUTS,
    batch: int = BATCH,
    batches_per_call: int | None = None,
    device: torch.device | str = "cpu",
    peers: bool = True,
) -> list[dict[str, Any]]:
    """The sampler measurement on ``graph`` (named ``name`` in the table), on ``device``.

    Seeds are drawn from the training nodes (every node when ``graph`` has no training mask);
    ``batches_per_call`` defaults to 5 (2 with ``opts.quick``). Peers (PyG, the per-seed loop)
    run on the CPU, and only with ``peers``.
    """
    device = torch.device(device)
    fanouts = tuple(fanouts)
    mask = graph.train_mask
    train = np.arange(graph.num_nodes) if mask is None else np.flatnonzero(np.asarray(mask))
    rng = np.random.default_rng(1)
    n_batches = batches_per_call or (2 if opts.quick else 5)
    # every timed call samples batches of its own (other seeds, other draws' keys): calls that
    # re-sampled the same batches would measure them with their reads cached; a pool of
    # groups, one per call of the warm-up and the repetitions
    groups = max(1, int(opts.repeat)) + 1
    pool = [
        [
            torch.from_numpy(rng.choice(train, min(batch, train.size), replace=False))
            for _ in range(n_batches)
        ]
        for _ in range(groups)
    ]
    batches = pool[0]
    sampler = NeighborSampler(graph, list(fanouts), seed=0)  # numpy on the CPU
    cpu_torch = NeighborSampler(graph, list(fanouts), seed=0, backend="torch")
    on_device = device.type != "cpu"
    if on_device:
        dev_sampler = NeighborSampler(DeviceTopology.from_graph(graph, device), list(fanouts))
        dev_pool = [[b.to(device) for b in group] for group in pool]
    edges: dict[str, list[int]] = {}

    def counted(key: str, fn: Callable[[], int]) -> Callable[[], None]:
        edges[key] = []
        return lambda: edges[key].append(fn())

    def sample_all(s: NeighborSampler, groups_of: list[list[torch.Tensor]], who: str) -> int:
        # the k-th call of implementation `who`: group k of the pool, its draws keyed by epoch k
        k = calls_of[who] = calls_of.get(who, -1) + 1
        total = 0
        for step, seeds in enumerate(groups_of[k % len(groups_of)]):
            total += sum(b.num_edges for b in s.sample_from_nodes(seeds, epoch=k, step=step).blocks)
        return total

    calls_of: dict[str, int] = {}

    kinds = {}
    if on_device:
        calls = {"fleetgnn": counted("fleetgnn", lambda: sample_all(dev_sampler, dev_pool, "dev"))}
        calls["fleetgnn numpy (CPU)"] = counted("numpy", lambda: sample_all(sampler, pool, "numpy"))
        kinds["fleetgnn numpy (CPU)"] = "baseline"
        # the device's other Fisher-Yates kernels (fleetgnn.kernels), so a measurement can
        # choose between them (the default is torch's until one is measured faster)
        chosen = KERNELS.chosen("fisher_yates", device.type)
        for impl in KERNELS.available("fisher_yates", device.type):
            if impl == chosen:
                continue
            label = f"fleetgnn, fisher_yates={impl}"

            def with_impl(impl: str = impl) -> int:
                with KERNELS.using("fisher_yates", device.type, impl):
                    return sample_all(dev_sampler, dev_pool, impl)

            calls[label] = counted(f"fisher_yates={impl}", with_impl)
            kinds[label] = "baseline"
    else:
        calls = {"fleetgnn": counted("fleetgnn", lambda: sample_all(sampler, pool, "numpy"))}
    calls["fleetgnn torch (CPU)"] = counted(
        "torch_cpu", lambda: sample_all(cpu_torch, pool, "torch_cpu")
    )
    kinds["fleetgnn torch (CPU)"] = "baseline"
    skipped = {}
    pyg = pyg_sampler(graph, fanouts) if peers else None
    if not peers:
        skipped["peers"] = "not asked for (peers=False)"
    elif pyg is None:
        skipped["PyG sampler"] = neighbor_loader_missing() or "neither pyg-lib nor torch-sparse"
    else:
        backend, sample = pyg
        calls[f"PyG sampler ({backend})"] = counted("pyg", lambda: sum(sample(s) for s in batches))
    if peers:
        loop = python_sampler(graph, fanouts, seed=0)
        calls["per-seed Python loop (1 batch)"] = counted("python", lambda: loop(batches[0]))
    times = interleaved(calls, opts.repeat, device)
    work = {
        name_: statistics.fmean(edges[key]) / 1e6 for name_, key in zip(calls, edges, strict=True)
    }
    row = measurement(
        SECTION,
        f"{len(fanouts)}-hop sampling, fanouts {','.join(map(str, fanouts))}, batch {batch}, "
        f"{name}" + (f", on {device}" if on_device else ""),
        threads,
        times,
        work=work,
        unit="M edges/s",
        skipped=skipped,
        kinds=kinds,
        extra={
            "device": str(device),
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "batches_per_call": n_batches,
            "edges_per_batch": statistics.fmean(edges["fleetgnn"]) / n_batches,
            "last_hop_phases_s": last_hop_phases(
                graph, list(sampler.sample_from_nodes(batches[-1]).blocks), fanouts[-1]
            ),
        },
    )
    log(progress_line(row))
    return [row]


def last_hop_phases(graph: Graph, blocks: Sequence[Any], fanout: int) -> dict[str, Any]:
    """Seconds of each phase of one hop, sampled again from the frontier of ``blocks``' last hop.

    Phases: ``draws`` (the random draws of the seeds with more neighbours than ``fanout``),
    ``alg1`` (WholeGraph's Algorithm 1 turning them into distinct offsets), ``offsets_total``
    (draws, Algorithm 1 and the seeds taking all their neighbours), ``neighbor_reads`` and
    ``append_unique`` (the relabelling).
    """
    topo = GraphTopology(graph)
    frontier = blocks[1].src_ids if len(blocks) > 1 else blocks[0].dst_ids
    deg = topo.in_degree(frontier).numpy()
    big = deg > fanout
    key = 0
    phases: dict[str, Any] = {"frontier": int(frontier.numel())}
    t = time.perf_counter()
    r = _draws_numpy(frontier.numpy()[big], deg[big], fanout, key)
    phases["draws"] = time.perf_counter() - t
    t = time.perf_counter()
    _offsets_numpy(r, deg[big])
    phases["alg1"] = time.perf_counter() - t
    t = time.perf_counter()
    _, row, off = _sample_offsets(frontier.numpy(), deg, fanout, key)
    phases["offsets_total"] = time.perf_counter() - t
    t = time.perf_counter()
    nbrs = topo.neighbors_at(frontier[torch.from_numpy(row)], torch.from_numpy(off))
    phases["neighbor_reads"] = time.perf_counter() - t
    t = time.perf_counter()
    append_unique(frontier, nbrs)
    phases["append_unique"] = time.perf_counter() - t
    phases["sampled_edges"] = int(nbrs.numel())
    return phases
