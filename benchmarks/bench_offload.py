"""Host-offloaded full-graph training (``offload``, HongTu) against in-memory full-graph engines.

GCN (2 layers, hidden 256, dropout 0.5, Adam, float32; HongTu's products setting) on
``products-like --scale 0.05`` (122k nodes, 2.9M edges, 100 features; the cache shared with
``bench_epoch.py``). Each run is what a user types, ``fleetgnn train --engine E [--nproc W]
--mode full ...`` (one warm-up epoch, then the timed ones), in its own process tree:

- ``reference`` (whole graph in one process) and ``fullgraph`` (MGG, W ranks): in-memory
  full-graph training, the peers;
- ``offload`` with ``M`` = 4, 8, 16, 32 chunks per part (HongTu's "doubling chunks" trend) and
  one run with the chunk count chosen from a device budget below the whole-graph activations.

Reported per run: the best timed epoch's seconds (slowest rank), the peak resident memory of the
largest process (``ru_maxrss`` of the run's process tree), and for ``offload`` the engine's peak
live device bytes per rank (buffers + autograd's saved tensors), host-resident vertex bytes, rows
per channel (h2d / peer / reuse / d2h) and the host-device reductions against the no-dedup
baseline (HongTu Table 8), with the Eq. 4 modelled time. On a CPU machine "device" memory is
accounted, not allocated separately, and processes stand in for GPUs: compare ratios between runs
of one invocation, not absolute seconds.

Usage::

    python benchmarks/bench_offload.py --out benchmarks/results/bench_offload.json
    python benchmarks/bench_offload.py --scale 0.01 --chunks 4 8 --epochs 1
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from fleetgnn.bench.data import cached_dataset, dataset_dir, default_cache_dir
from fleetgnn.bench.machine import machine_info
from fleetgnn.bench.runs import train_epochs


def train_run(
    args: argparse.Namespace, dataset: str, engine: str, world: int, run_dir: Path, sets: list[str]
) -> tuple[list[dict[str, Any]], int]:
    """One ``fleetgnn train``; its timed epoch records and the tree's peak RSS in bytes."""
    recs, rss = train_epochs(
        dataset,
        engine,
        "gcn",
        world,
        args.epochs,
        run_dir,
        mode="full",
        sets=[f"model.hidden={args.hidden}", *sets],
        threads=args.threads,
        peak_rss=True,
    )
    assert rss is not None
    return recs, rss


def summarise(name: str, world: int, recs: list[dict[str, Any]], rss: int) -> dict[str, Any]:
    """The best timed epoch, peak RSS and, for offload, the engine's volumes and peak."""
    best = min(recs, key=lambda r: r["epoch_time_s"])
    out: dict[str, Any] = {
        "run": name,
        "world_size": world,
        "epoch_s": best["epoch_time_s"],
        "epoch_s_all": [r["epoch_time_s"] for r in recs],
        "loss": best["loss"],
        "peak_rss_bytes": rss,
        "memory": best.get("memory", {}),
        "times": best["times"],
    }
    extra = best.get("extra", {})
    if "volume_rows" in extra:
        per_rank = extra.get("per_rank", {})
        out |= {
            "chunks": extra["chunks"],
            "reorganized": extra["reorganized"],
            "cached_layers": extra["cached_layers"],
            "volume_rows_per_pass": extra["volume_rows"],
            "reduction": extra["reduction"],
            "modelled_s": extra["modelled_s"],
            "budget_bytes": extra["budget_bytes"],
            "preprocess_s": extra["preprocess_s"],
            "peak_device_bytes_per_rank": per_rank.get("peak_device_bytes")
            or [best.get("memory", {}).get("device")],
            "rows_per_rank": per_rank.get("rows"),
        }
    return out


def _mib(b: float | None) -> str:
    return "-" if b is None else f"{b / 2**20:8.1f}"


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the runs."""
    head = (
        "| run | W | M | epoch s | vs reference | peak RSS MiB | peak device MiB/rank "
        "| h2d reduction (inter + intra) |\n|---|---|---|---|---|---|---|---|"
    )
    ref = next((r["epoch_s"] for r in rows if r["run"] == "reference"), None)
    lines = [head]
    for r in rows:
        dev = r.get("peak_device_bytes_per_rank")
        dev_s = "-" if not dev else _mib(max(x or 0 for x in dev)).strip()
        red = r.get("reduction")
        red_s = (
            "-"
            if not red
            else f"{red['total']:.1%} ({red['inter_rank']:.1%} + {red['intra_rank']:.1%})"
        )
        ratio = f"{r['epoch_s'] / ref:.2f}x" if ref else "-"
        lines.append(
            f"| {r['run']} | {r['world_size']} | {r.get('chunks', '-')} | {r['epoch_s']:.2f} | "
            f"{ratio} | {_mib(r['peak_rss_bytes']).strip()} | {dev_s} | {red_s} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    cache = default_cache_dir()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="products-like")
    p.add_argument("--scale", type=float, default=0.05)
    p.add_argument("--cache-dir", type=Path, default=cache)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--chunks", type=int, nargs="+", default=[4, 8, 16, 32])
    p.add_argument("--world-size", type=int, default=2, help="ranks of fullgraph and offload")
    p.add_argument("--budget", default="64MiB", help="device budget of the budgeted offload run")
    p.add_argument("--epochs", type=int, default=2, help="timed epochs after one warm-up")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the comparison, print a table, optionally write JSON."""
    args = parse_args(argv)
    graph, _ = cached_dataset(args.cache_dir, args.preset, args.scale, 0)
    dataset = str(dataset_dir(args.cache_dir, args.preset, args.scale))
    print(f"graph: {graph!r}")
    w = args.world_size
    plan: list[tuple[str, str, int, list[str]]] = [
        ("reference", "reference", 1, []),
        ("fullgraph", "fullgraph", w, ["fullgraph.num_chunks=1", "fullgraph.depth=1"]),
    ]
    for m in args.chunks:
        plan.append((f"offload M={m}", "offload", 1, [f"offload.chunks={m}"]))
    plan.append((f"offload M={args.chunks[1]}", "offload", w, [f"offload.chunks={args.chunks[1]}"]))
    plan.append(
        (f"offload budget {args.budget}", "offload", w, [f"offload.device_budget={args.budget}"])
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, engine, world, sets) in enumerate(plan):
            recs, rss = train_run(args, dataset, engine, world, Path(tmp) / f"run{i}", sets)
            rows.append(summarise(name, world, recs, rss))
            print(json.dumps(rows[-1])[:500], flush=True)
    print(table(rows))
    result = {
        "machine": machine_info(torch.device("cpu")),
        "dataset": {"preset": args.preset, "scale": args.scale, "repr": repr(graph)},
        "settings": {k: str(v) for k, v in vars(args).items()},
        "runs": rows,
        "table": table(rows),
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
