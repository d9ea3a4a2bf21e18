"""The distributed ``minibatch`` engine: epoch time, time breakdown, traffic and memory per rank.

Mini-batch GraphSAGE (mean; 3 layers, hidden 256, fanouts 15,10,5 by hop from the seeds,
batch 1024 seeds *per rank* per step as in PyG's DDP recipe, dropout 0.5, Adam, float32) on a
synthetic dataset (``products-like --scale 0.05`` by default: 122k nodes, 2.9M edges, 100
features, 47 classes, ~9.9k training nodes), generated once with
``fleetgnn.graph.synthetic.prepare_synthetic`` into a cache directory and reused (the same cache
as ``bench_epoch.py``).

Runs, each on its own group of worker processes started by
:func:`fleetgnn.distributed.launch` (torch's elastic launcher, gloo on CPU); each worker builds
the engine with :func:`fleetgnn.train.engine_from_config` and drives ``engine.run_epoch(epoch)``:

- world sizes 1, 2, 4 x device budget 100 %, 25 %, 5 % of the feature bytes ``N * F * 4`` per
  rank (one-sided gathers, prefetch on);
- world size 2, 100 %: two-sided gathers (all-to-all request/response, what ranks on different
  hosts do) instead of one-sided shared-memory reads;
- world size 2, 100 %: prefetch off (sample + gather on the critical path).

The host budget is 0 in every run, so whatever does not fit the device tier is read from the
dataset's memory map ("disk"; after the first epoch its pages sit in the OS page cache). The
device budget covers features *and* topology; with the engine's default ``store.order =
graph_first`` the CSC segments (12.6 MB here) take it first (XGNN), so a small aggregate budget
holds topology only. The budget is per rank: the aggregate device tier grows with the world size.

Every epoch starts after a barrier. Per run: one warm-up epoch (epoch 0; ``--epochs`` counts the
timed ones after it), then the timed epoch(s). Reported per run (timed epochs):

- epoch seconds: the slowest rank, fastest timed epoch (background load on a shared machine
  only adds time; the mean is in the JSON too);
- the time breakdown summed over steps (sample, gather, forward, backward, optimizer; mean over
  ranks and timed epochs; with prefetch on, sample and gather count when the trainer waited for
  the batch at all) and prefetch hidden seconds (sample + gather overlapped with training);
- bytes served per link kind summed over ranks (``local`` own device shard, ``peer`` other
  ranks' shards, ``h2d`` host tier, ``disk`` memory map; features and topology) and the
  ``peer`` bytes the store's communicator moved (one-sided: rows read from peers' shared
  memory; two-sided: the all-to-all requests and responses);
- hit rates per tier (features and topology), device bytes per rank against the budget, and
  the ratio ``reference epoch s / run epoch s`` (> 1: faster than the single-process reference).

Peers in the same run: fleetgnn's ``reference`` engine (single process, same model, same data,
whole feature matrix in memory) for the same warm-up + timed epochs; PyG's DDP recipe
(``NeighborLoader`` + DDP) only when ``NeighborLoader`` can run, which needs ``pyg-lib`` or
``torch-sparse`` (absent here: the peer is recorded as skipped).

On a CPU machine the "devices" are processes and the device tier is shared memory: the numbers
are counts and ratios, not GPU times. Each process uses ``--threads`` torch threads (default 1;
world size 4 on 2 cores is oversubscribed, so compare ratios, not absolute seconds).

Usage::

    python benchmarks/bench_minibatch.py --epochs 3 --out benchmarks/results/bench_minibatch.json
    python benchmarks/bench_minibatch.py --scale 0.01 --runs ws2-100 --max-steps 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.bench.data import cached_dataset, dataset_dir, default_cache_dir
from fleetgnn.bench.machine import loadavg, machine_info
from fleetgnn.engines.base import StepStats
from fleetgnn.train import Config, load_config

PHASES: tuple[str, ...] = ("sample", "gather", "forward", "backward", "optimizer")
LINKS: tuple[str, ...] = ("local", "peer", "h2d", "disk")
SOURCES: tuple[str, ...] = ("local", "peer", "host", "disk")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One minibatch-engine run.

    Attributes:
        name: Short label, e.g. ``"ws2-25"``.
        world_size: Worker processes.
        budget_frac: Device budget per rank as a fraction of the feature bytes ``N * F * 4``.
        gather: ``"one_sided"`` or ``"two_sided"``.
        prefetch: Sample and gather the next batch in a background thread.
    """

    name: str
    world_size: int
    budget_frac: float
    gather: str = "one_sided"
    prefetch: bool = True

    def __repr__(self) -> str:
        return (
            f"RunSpec({self.name}: W={self.world_size}, device={self.budget_frac:.0%} of x, "
            f"{self.gather}, prefetch={'on' if self.prefetch else 'off'})"
        )


def default_runs() -> list[RunSpec]:
    """The grid: W in 1, 2, 4 x budget 100/25/5 %, plus two-sided and no-prefetch at W=2."""
    runs = [RunSpec(f"ws{w}-{int(f * 100)}", w, f) for w in (1, 2, 4) for f in (1.0, 0.25, 0.05)]
    runs.append(RunSpec("ws2-100-two_sided", 2, 1.0, gather="two_sided"))
    runs.append(RunSpec("ws2-100-no_prefetch", 2, 1.0, prefetch=False))
    return runs


# ------------------------------------------------------------------------------------ config


def base_overrides(args: argparse.Namespace) -> list[str]:
    """Config overrides shared by the reference and every minibatch run."""
    fanouts = [int(f) for f in args.fanouts.split(",")]
    return [
        "model.name=sage",
        f"model.num_layers={len(fanouts)}",
        f"model.hidden={args.hidden}",
        f"model.dropout={args.dropout}",
        "train.mode=minibatch",
        f"train.fanouts=[{args.fanouts}]",
        f"train.batch_size={args.batch_size}",
        f"train.seed={args.seed}",
        "train.dtype=float32",
    ]


def run_config(args: argparse.Namespace, spec: RunSpec, feature_bytes: int) -> Config:
    """The config of one minibatch run (device budget in bytes; host budget 0)."""
    budget = int(spec.budget_frac * feature_bytes)
    return load_config(
        None,
        [
            *base_overrides(args),
            "train.engine=minibatch",
            f"train.nproc={spec.world_size}",
            f"store.device_budget={budget}B",
            "store.host_budget=0B",
            f"store.gather={spec.gather}",
            f"store.prefetch={'true' if spec.prefetch else 'false'}",
        ],
    )


# ------------------------------------------------------------------------------------ stats


def sum_steps(stats: list[StepStats]) -> dict[str, Any]:
    """Phase seconds and bytes per link kind summed over steps, plus loss and counts."""
    times = {k: float(sum(s.times.get(k, 0.0) for s in stats)) for k in (*PHASES, "total")}
    traffic = {k: int(sum(s.traffic.get(k, 0) for s in stats)) for k in LINKS}
    count = int(sum(s.count for s in stats))
    return {
        "steps": len(stats),
        "times": times,
        "traffic": traffic,
        "seeds": count,
        "loss": float(sum(s.loss_sum for s in stats)) / max(count, 1),
    }


def _start_step(steps: int, max_steps: int | None) -> int:
    """Run the last ``max_steps`` steps of an epoch (all of them when ``None``)."""
    return 0 if max_steps is None else max(0, steps - max_steps)


# ------------------------------------------------------------------------------------ workers


def minibatch_worker(
    cfg_dict: dict[str, Any], dataset: str, epochs: int, max_steps: int | None, threads: int
) -> dict[str, Any]:
    """One rank of a minibatch run: warm-up epoch 0, then ``epochs`` timed epochs.

    Module-level so the launcher can pickle it. Returns this rank's per-epoch step sums, epoch
    wall seconds, ``engine.epoch_extra()``, ``engine.peak_memory()``, topology hit rates and the
    wire traffic of the store's exchanges.
    """
    import torch.distributed as dist

    from fleetgnn.distributed import destroy, init
    from fleetgnn.graph import open_dataset
    from fleetgnn.train import engine_from_config

    torch.set_num_threads(threads)
    cfg = Config.from_dict(cfg_dict).validate()
    ctx = init()
    engine = None
    try:
        t0 = time.perf_counter()
        engine = engine_from_config(cfg, open_dataset(dataset), ctx)
        setup_s = time.perf_counter() - t0
        start = _start_step(engine.steps_per_epoch(), max_steps)
        out: dict[str, Any] = {
            "rank": ctx.rank,
            "setup_s": setup_s,
            "steps_per_epoch": engine.steps_per_epoch(),
            "start_step": start,
            "epochs": [],
        }
        for epoch in range(1 + epochs):
            engine.store.reset_stats()
            wire0 = engine.meter.snapshot()
            dist.barrier(group=ctx.group)
            t0 = time.perf_counter()
            stats = engine.run_epoch(epoch, start_step=start)
            wall = time.perf_counter() - t0
            row = sum_steps(stats)
            row["epoch"] = epoch
            row["epoch_s"] = wall
            row["extra"] = engine.epoch_extra()
            row["topology_hit_rates"] = engine.store.hit_rates("topology")
            row["feature_requests"] = engine.store.requests("features")
            row["wire"] = {k: v["bytes"] for k, v in engine.meter.delta(wire0).items()}
            out["epochs"].append(row)
        out["peak_memory"] = engine.peak_memory()
        return out
    finally:
        if engine is not None:
            engine.close()
        destroy(ctx)


def reference_run(
    graph: Any, args: argparse.Namespace, epochs: int, max_steps: int | None
) -> dict[str, Any]:
    """The single-process reference engine: warm-up epoch 0, then ``epochs`` timed epochs."""
    from fleetgnn.train import engine_from_config

    cfg = load_config(None, [*base_overrides(args), "train.engine=reference"])
    t0 = time.perf_counter()
    engine = engine_from_config(cfg, graph, engine="reference")
    setup_s = time.perf_counter() - t0
    start = _start_step(engine.steps_per_epoch(), max_steps)
    rows = []
    for epoch in range(1 + epochs):
        t0 = time.perf_counter()
        stats = engine.run_epoch(epoch, start_step=start)
        wall = time.perf_counter() - t0
        row = sum_steps(stats)
        row["epoch"] = epoch
        row["epoch_s"] = wall
        rows.append(row)
    return {"setup_s": setup_s, "steps_per_epoch": engine.steps_per_epoch(), "epochs": rows}


# ------------------------------------------------------------------------------------ summary


def summarise_run(
    spec: RunSpec, ranks: dict[int, dict[str, Any]], budget: int, ref: dict[str, Any]
) -> dict[str, Any]:
    """Aggregate one run's ranks over its timed epochs (epoch 0 is the warm-up)."""
    per_rank = [ranks[r] for r in sorted(ranks)]
    timed = [[e for e in r["epochs"] if e["epoch"] > 0] for r in per_rank]
    n_ep = len(timed[0])
    # slowest rank per epoch; the fastest timed epoch is the headline (least background load)
    slowest = [max(t[i]["epoch_s"] for t in timed) for i in range(n_ep)]
    epoch_s = float(min(slowest))
    warmup_s = max(r["epochs"][0]["epoch_s"] for r in per_rank)

    def mean_over(getter: Any) -> float:
        return float(np.mean([getter(e) for t in timed for e in t]))

    times = {k: mean_over(lambda e, k=k: e["times"][k]) for k in (*PHASES, "total")}
    traffic = {
        k: int(np.mean([sum(t[i]["traffic"][k] for t in timed) for i in range(n_ep)]))
        for k in LINKS
    }
    wire_keys = sorted({k for t in timed for e in t for k in e["wire"]})
    wire = {
        k: int(np.mean([sum(t[i]["wire"].get(k, 0) for t in timed) for i in range(n_ep)]))
        for k in wire_keys
    }
    # hit rates over all ranks: sum the request counts (numerators and denominators)
    req = {s: sum(e["feature_requests"][s] for t in timed for e in t) for s in SOURCES}
    total_req = sum(req.values())
    feat_hits = {s: (req[s] / total_req if total_req else 0.0) for s in SOURCES}
    topo_hits = {
        s: float(np.mean([e["topology_hit_rates"][s] for t in timed for e in t])) for s in SOURCES
    }
    device_bytes = [int(r["peak_memory"]["device"]) for r in per_rank]
    ref_s = ref["epoch_s"]
    ref_model = sum(ref["times"][k] for k in ("forward", "backward", "optimizer"))
    run_model = sum(times[k] for k in ("forward", "backward", "optimizer"))
    return {
        "name": spec.name,
        "world_size": spec.world_size,
        "budget_frac": spec.budget_frac,
        "device_budget_bytes": budget,
        "host_budget_bytes": 0,
        "gather": spec.gather,
        "prefetch": spec.prefetch,
        "steps_per_rank": per_rank[0]["steps_per_epoch"] - per_rank[0]["start_step"],
        "setup_s": max(r["setup_s"] for r in per_rank),
        "warmup_epoch_s": warmup_s,
        "epoch_s": epoch_s,
        "epoch_s_mean": float(np.mean(slowest)),
        "epoch_s_all": slowest,
        "times_mean_per_rank": times,
        "prefetch_hidden_s": mean_over(lambda e: e["extra"].get("prefetch_hidden_s", 0.0)),
        "prefetch_wait_s": mean_over(lambda e: e["extra"].get("prefetch_wait_s", 0.0)),
        "traffic_bytes": traffic,
        "wire_bytes": wire,
        "feature_hit_rates": feat_hits,
        "topology_hit_rates": topo_hits,
        "device_bytes_per_rank": device_bytes,
        "within_budget": all(b <= budget for b in device_bytes),
        "peak_memory_per_rank": [r["peak_memory"] for r in per_rank],
        "loss": float(np.mean([e["loss"] for t in timed for e in t])),
        "ratios": {
            "reference_over_run_epoch": ref_s / epoch_s,
            "reference_over_run_model_compute": ref_model / run_model if run_model else None,
        },
        "ranks": per_rank,
    }


def summarise_reference(ref: dict[str, Any]) -> dict[str, Any]:
    """Mean over the reference engine's timed epochs."""
    timed = [e for e in ref["epochs"] if e["epoch"] > 0]
    return {
        "setup_s": ref["setup_s"],
        "warmup_epoch_s": ref["epochs"][0]["epoch_s"],
        "epoch_s": float(min(e["epoch_s"] for e in timed)),
        "epoch_s_mean": float(np.mean([e["epoch_s"] for e in timed])),
        "epoch_s_all": [e["epoch_s"] for e in timed],
        "steps": timed[0]["steps"],
        "times": {k: float(np.mean([e["times"][k] for e in timed])) for k in (*PHASES, "total")},
        "traffic_bytes": {"local": int(np.mean([e["traffic"]["local"] for e in timed]))},
        "loss": float(np.mean([e["loss"] for e in timed])),
        "epochs": ref["epochs"],
    }


def pyg_ddp_status() -> str:
    """Whether PyG's DDP recipe (``NeighborLoader`` + DDP) can run here, and why not."""
    try:
        import torch_geometric.typing as pyg_typing
    except ImportError:
        return "skipped: torch_geometric is not installed"
    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        return (
            "skipped: torch_geometric is installed but NeighborLoader needs pyg-lib or "
            "torch-sparse (both absent)"
        )
    return "skipped: NeighborLoader could run, but this script does not time the PyG DDP peer"


def _mb(n: float) -> str:
    return f"{n / 1e6:8.1f}"


def table(ref: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """Markdown tables: time breakdown, then bytes, hit rates and memory."""
    lines = [
        "| run | W | dev budget/rank | epoch s | ref/run | sample | gather | fwd | bwd | opt "
        "| prefetch hidden s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    t = ref["times"]
    lines.append(
        f"| reference | 1 | all in RAM | {ref['epoch_s']:.2f} | 1.00 | "
        + " | ".join(f"{t[k]:.2f}" for k in PHASES)
        + " | - |"
    )
    for r in rows:
        t = r["times_mean_per_rank"]
        lines.append(
            f"| {r['name']} | {r['world_size']} | {r['device_budget_bytes'] / 1e6:.1f} MB "
            f"({r['budget_frac']:.0%}) | {r['epoch_s']:.2f} | "
            f"{r['ratios']['reference_over_run_epoch']:.2f} | "
            + " | ".join(f"{t[k]:.2f}" for k in PHASES)
            + f" | {r['prefetch_hidden_s']:.2f} |"
        )
    lines += [
        "",
        "| run | MB local | MB peer | MB h2d | MB disk | MB comm peer | feat hits local/peer/disk "
        "| topo hits local/peer/disk | device MB per rank | <= budget |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b, fh, th = r["traffic_bytes"], r["feature_hit_rates"], r["topology_hit_rates"]
        wire = r["wire_bytes"].get("peer", 0)
        dev = ", ".join(f"{d / 1e6:.1f}" for d in r["device_bytes_per_rank"])
        lines.append(
            f"| {r['name']} | "
            + " | ".join(_mb(b[k]).strip() for k in LINKS)
            + f" | {_mb(wire).strip()} | "
            + "/".join(f"{fh[s]:.2f}" for s in ("local", "peer", "disk"))
            + " | "
            + "/".join(f"{th[s]:.2f}" for s in ("local", "peer", "disk"))
            + f" | {dev} | {'yes' if r['within_budget'] else 'NO'} |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    cache = default_cache_dir()
    names = [s.name for s in default_runs()]
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--preset", default="products-like")
    p.add_argument("--scale", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0, help="dataset and training seed")
    p.add_argument("--cache-dir", type=Path, default=cache, help=f"default: {cache}")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--fanouts", default="15,10,5", help="by hop from the seeds (one per layer)")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per rank per step")
    p.add_argument("--epochs", type=int, default=1, help="timed epochs after one warm-up epoch")
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="cap on steps per epoch and rank (runs the last ones; default: all)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--runs", nargs="+", default=names, choices=names, metavar="RUN")
    p.add_argument("--no-reference", dest="reference", action="store_false")
    p.add_argument("--out", type=Path, default=None, help="write the JSON results here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point; returns the JSON-ready report."""
    from fleetgnn.distributed import launch

    args = parse_args(argv)
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    torch.set_num_threads(args.threads)
    info = machine_info(torch.device("cpu"))
    graph, gen_s = cached_dataset(args.cache_dir, args.preset, args.scale, args.seed)
    path = str(dataset_dir(args.cache_dir, args.preset, args.scale, args.seed))
    feature_bytes = graph.num_nodes * graph.num_features * 4
    print(f"machine: {info}")
    print(f"graph: {graph!r} ({f'generated in {gen_s:.1f} s' if gen_s else 'cached'})")
    print(f"feature bytes N*F*4 = {feature_bytes / 1e6:.1f} MB")
    t_all = time.perf_counter()
    ref_raw = reference_run(graph, args, args.epochs, args.max_steps)
    ref = summarise_reference(ref_raw)
    print(f"reference: epoch {ref['epoch_s']:.2f} s (warm-up {ref['warmup_epoch_s']:.2f} s)")
    specs = [s for s in default_runs() if s.name in args.runs]
    rows = []
    for spec in specs:
        cfg = run_config(args, spec, feature_bytes)
        budget = int(spec.budget_frac * feature_bytes)
        t0 = time.perf_counter()
        ranks = launch(
            minibatch_worker,
            args=(cfg.to_dict(), path, args.epochs, args.max_steps, args.threads),
            nproc=spec.world_size,
        )
        row = summarise_run(spec, ranks, budget, ref)
        row["launch_s"] = time.perf_counter() - t0
        rows.append(row)
        print(
            f"{spec!r}: epoch {row['epoch_s']:.2f} s (warm-up {row['warmup_epoch_s']:.2f} s, "
            f"whole launch {row['launch_s']:.1f} s), ref/run x"
            f"{row['ratios']['reference_over_run_epoch']:.2f}"
        )
    pyg = pyg_ddp_status()
    text = table(ref, rows)
    print()
    print(text)
    print(f"\nPyG DDP peer: {pyg}")
    info["loadavg_end"] = loadavg()
    report = {
        "benchmark": "minibatch",
        "machine": info,
        "graph": {
            "preset": args.preset,
            "scale": args.scale,
            "seed": args.seed,
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "num_features": graph.num_features,
            "num_classes": graph.num_classes,
            "num_train": int(np.asarray(graph.train_mask).sum()),
            "feature_bytes": feature_bytes,
            "generate_s": gen_s or None,
        },
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "model": (
            f"SAGE(mean) {graph.num_features} -> {args.hidden} x{len(args.fanouts.split(',')) - 1}"
            f" -> {graph.num_classes}, fanouts {args.fanouts}, batch {args.batch_size} per rank"
        ),
        "host_budget": "0 in every run (the rest is read from the dataset's memory map)",
        "pyg_ddp": pyg,
        "reference": ref,
        "runs": rows,
        "table_markdown": text,
        "total_s": time.perf_counter() - t_all,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, default=_json_default))
        print(f"wrote {args.out}")
    return report


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


if __name__ == "__main__":
    main()
