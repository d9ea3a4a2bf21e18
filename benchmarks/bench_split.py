"""Split parallelism (``split``, GSplit) against data parallelism (``minibatch``) at equal budgets.

GraphSAGE (mean; 3 layers, hidden 256, fanouts 15,10,5, dropout 0.5, Adam, float32) on
``products-like --scale 0.05`` (122k nodes, 2.9M edges, 100 features; the cache shared with
``bench_epoch.py``), global batch 4096 seeds per step for both engines (``minibatch``: 4096 / W
per rank), the same per-rank device budget, W = 2 and 4. Each run is what a user types,
``fleetgnn train --engine E --nproc W ...`` (one warm-up epoch, then the timed ones), read back
from its ``metrics.jsonl``:

- epoch seconds (the slowest rank; best timed epoch), the time breakdown;
- edges computed per epoch: ``split`` from its splits (every sampled edge once), ``minibatch``
  as the data-parallel counterfactual ``split`` reports for the same targets (GSplit Table 2);
- input rows per store source and bytes per link kind, summed over ranks (GSplit Table 1's
  analogue); both engines read features through the unified store with the same device budget
  and ``store.host_budget=0`` (``split``: each rank's shard holds its own part's hottest rows);
- the split quality: edge skew and local-edge ratio (GSplit Table 5).

Cooperative sampling (every rank samples the global batch itself vs one leader samples and
broadcasts it) is measured in a 2-process gloo world on the same data: seconds per step for each.

On a CPU machine processes stand in for GPUs: compare ratios between engines in one run, not
absolute seconds; with W = 4 on 2 cores every run is oversubscribed.

Usage::

    python benchmarks/bench_split.py --out benchmarks/results/bench_split.json
    python benchmarks/bench_split.py --scale 0.01 --world-sizes 2 --epochs 1
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.bench.data import cached_dataset, dataset_dir, default_cache_dir
from fleetgnn.bench.machine import machine_info
from fleetgnn.bench.runs import train_epochs
from fleetgnn.distributed.testing import run_world
from fleetgnn.graph import open_dataset
from fleetgnn.sampling import GraphTopology, NeighborSampler, SeedLoader


def train_run(
    args: argparse.Namespace,
    dataset: str,
    engine: str,
    world: int,
    run_dir: Path,
    report_dp: bool = False,
    epochs: int | None = None,
) -> list[dict[str, Any]]:
    """``fleetgnn train`` for one engine and world size; the epoch records of metrics.jsonl.

    Timed runs leave ``split.report_dp`` off (its W extra samplings per step on rank 0 would
    compete for the cores); one extra untimed split run per W reports the counterfactual.
    """
    epochs = args.epochs if epochs is None else epochs
    per_rank = args.batch_size // world if engine == "minibatch" else args.batch_size
    sets = [
        "model.num_layers=3",
        f"model.hidden={args.hidden}",
        f"train.fanouts=[{args.fanouts}]",
        f"train.batch_size={per_rank}",
        f"store.device_budget={args.budget}",
        "store.host_budget=0",  # both engines' stores: the rest is read from the dataset
        *([f"split.report_dp={str(report_dp).lower()}"] if engine == "split" else []),
    ]
    recs, _ = train_epochs(
        dataset, engine, "sage", world, epochs, run_dir, sets=sets, threads=args.threads
    )
    return recs


def summarise(engine: str, world: int, recs: list[dict[str, Any]]) -> dict[str, Any]:
    """The best timed epoch, with its traffic, loads and (split) split quality."""
    best = min(recs, key=lambda r: r["epoch_time_s"])
    extra = best["extra"]
    out: dict[str, Any] = {
        "engine": engine,
        "world_size": world,
        "epoch_s": best["epoch_time_s"],
        "epoch_s_all": [r["epoch_time_s"] for r in recs],
        "times": best["times"],
        "traffic_bytes": best["traffic"],
        "steps": best["num_steps"],
    }
    if engine == "split":
        out["edges"] = extra["edges"]
        out["edge_skew"] = extra["edge_skew"]
        out["local_edge_ratio"] = extra["local_edge_ratio"]
        rows = extra["per_rank"]["input_rows"]  # per store source (local: own device hits)
        out["input_rows"] = {k: sum(r[k] for r in rows) for k in rows[0]}
        out["hit_rates"] = extra.get("hit_rates")
        out["shuffle_bytes_per_layer"] = [
            sum(v) for v in zip(*extra["per_rank"]["shuffle_bytes_per_layer"], strict=True)
        ]
    else:
        out["hit_rates_rank0"] = extra.get("hit_rates")
    return out


def _sampling_rank(comm: Any, dataset: str, batch: int, fanouts: list[int], steps: int) -> dict:
    """Seconds per step: every rank samples the global batch vs rank 0 samples and broadcasts."""
    torch.set_num_threads(1)
    graph = open_dataset(dataset)
    train = torch.from_numpy(graph.train_mask.nonzero()[0])
    loader = SeedLoader(train, batch, seed=0)
    sampler = NeighborSampler(GraphTopology(graph), fanouts, seed=0)

    def every_rank(s: int) -> None:
        sampler.sample_from_nodes(loader.batch(0, s % loader.num_batches), step=s)

    def leader(s: int) -> None:
        blocks = None
        if comm.rank == 0:
            batch = loader.batch(0, s % loader.num_batches)
            blocks = list(sampler.sample_from_nodes(batch, step=s).blocks)
        comm.broadcast_object(blocks)

    for s in range(steps):  # warm-up: the topology's pages and the sampler's buffers
        every_rank(s)
    times: dict[str, list[float]] = {
        "every_rank_samples_s": [],
        "leader_samples_and_broadcasts_s": [],
    }
    for s in range(steps):  # alternate, so background load hits both alike
        for key, fn in (
            ("every_rank_samples_s", every_rank),
            ("leader_samples_and_broadcasts_s", leader),
        ):
            comm.barrier()
            t0 = time.perf_counter()
            fn(s)
            comm.barrier()
            times[key].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    cache = default_cache_dir()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="products-like")
    p.add_argument("--scale", type=float, default=0.05)
    p.add_argument("--cache-dir", type=Path, default=cache)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=4096, help="global seeds per step")
    p.add_argument("--budget", default="4MB", help="device budget per rank (both engines)")
    p.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    p.add_argument("--epochs", type=int, default=2, help="timed epochs after one warm-up")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sampling-steps", type=int, default=5)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the comparison, print a table, optionally write JSON."""
    args = parse_args(argv)
    graph, _ = cached_dataset(args.cache_dir, args.preset, args.scale, 0)
    dataset = str(dataset_dir(args.cache_dir, args.preset, args.scale))
    print(f"graph: {graph!r}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for world in args.world_sizes:
            for engine in ("minibatch", "split"):
                recs = train_run(args, dataset, engine, world, Path(tmp) / f"{engine}-{world}")
                rows.append(summarise(engine, world, recs))
                print(json.dumps(rows[-1])[:400])
            counts = train_run(args, dataset, "split", world, Path(tmp) / f"dp-{world}", True, 0)
            rows[-1]["dp_counterfactual"] = counts[-1]["extra"]["dp_counterfactual"]
    fanouts = [int(f) for f in args.fanouts.split(",")]
    sampling = run_world(
        _sampling_rank, 2, dataset, args.batch_size, fanouts, args.sampling_steps, timeout_s=900
    )[0]
    print("cooperative sampling, s/step:", sampling)
    result = {
        "machine": machine_info(torch.device("cpu")),
        "dataset": {"preset": args.preset, "scale": args.scale, "repr": repr(graph)},
        "settings": {k: str(v) for k, v in vars(args).items()},
        "runs": rows,
        "cooperative_sampling": sampling,
    }
    print(table(rows))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return result


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of the runs."""
    out = [
        "| engine | W | epoch s | MB local | MB peer | MB h2d | MB disk | edges | skew | local |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = r["traffic_bytes"]
        mb = [f"{t.get(k, 0) / 1e6:.1f}" for k in ("local", "peer", "h2d", "disk")]
        edges = r.get("edges", "-")
        out.append(
            f"| {r['engine']} | {r['world_size']} | {r['epoch_s']:.2f} | {' | '.join(mb)} | "
            f"{edges} | {_f(r.get('edge_skew'))} | {_f(r.get('local_edge_ratio'))} |"
        )
    return "\n".join(out)


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


if __name__ == "__main__":
    main()
