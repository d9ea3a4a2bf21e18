"""Typed scale run: igbh-like from disk, trained at 2 ranks through the keyed store.

Per scale: ``fleetgnn prepare synthetic --preset igbh-like --scale S`` (its own process), then the
reverse relations written next to it (one process: ``add_reverse_relations`` of the memory-mapped
graph, ``write_dataset``; every type then receives messages), then one epoch (or
``--max-steps``) of R-GAT mini-batch training at 2 gloo ranks (``TypedMinibatchEngine`` through
the Python API, as ``fleetgnn train`` does not take typed datasets on this branch yet) with
``store.device_budget`` and ``store.host_budget`` well below the feature bytes.

Memory, as the scale ladder (``bench_scale.py``) reads it: each rank samples its own
``/proc/self/status`` (``RssAnon``, ``RssFile``, ``RssShmem``) every ``--poll`` seconds during the
epoch and reports the anonymous RSS when the engine is built (start), its peak over the epoch and
at the end. The claim: anonymous RSS per rank stays flat over the epoch and does not follow the
data's size between scales (the features are read through the tiers; device shards live in shared
memory on CPU, ``RssShmem``; the dataset's pages are file-backed and reclaimable).

Usage::

    python benchmarks/bench_typed_scale.py --scales 0.5 2.5 \\
        --out benchmarks/results/typed_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


def _status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "RssShmem"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _train(comm: Any, path: str, opts: dict[str, Any]) -> dict[str, Any]:
    import torch

    from fleetgnn.config import MinibatchEngineConfig
    from fleetgnn.distributed.testing import context_of
    from fleetgnn.engines.typed import TypedMinibatchEngine
    from fleetgnn.graph.dataset import open_dataset
    from fleetgnn.nn.hetero import build_hetero_model

    torch.set_num_threads(1)
    opened = _status()
    g = open_dataset(path, kind="typed")
    torch.manual_seed(0)
    model = build_hetero_model(
        "rgat", g, int(g.num_classes), hidden_dim=opts["hidden"], num_layers=len(opts["fanouts"])
    )
    cfg = MinibatchEngineConfig(
        batch_size=opts["batch_size"],
        fanouts=tuple(opts["fanouts"]),
        device_budget=opts["device_budget"],
        host_budget=opts["host_budget"],
        seed=0,
    )
    t0 = time.perf_counter()
    engine = TypedMinibatchEngine(model, g, context_of(comm), cfg)
    build_s = time.perf_counter() - t0
    start = _status()
    peak = dict(start)
    trace: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            st = _status()
            for k, v in st.items():
                peak[k] = max(peak[k], v)
            trace.append(st["RssAnon"])
            done.wait(opts["poll"])

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    steps = min(engine.steps_per_epoch(), opts["max_steps"] or engine.steps_per_epoch())
    losses, t1 = [], time.perf_counter()
    engine.module.train()
    engine.store.reset_stats()
    for step in range(steps):
        s = engine.train_step(0, step)
        losses.append(s.loss_sum / max(s.count, 1))
    epoch_s = time.perf_counter() - t1
    done.set()
    thread.join()
    end = _status()
    out = {
        "rank": comm.rank,
        "steps": steps,
        "steps_per_epoch": engine.steps_per_epoch(),
        "build_s": build_s,
        "epoch_s": epoch_s,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "rss_opened": opened,
        "rss_start": start,
        "rss_peak": peak,
        "rss_end": end,
        # anonymous RSS at 10%, 50% and 100% of the epoch's samples
        "anon_trace": [trace[int(f * (len(trace) - 1))] for f in (0.1, 0.5, 1.0)] if trace else [],
        "store_memory": engine.peak_memory(),
        "hit_rates": engine.store.hit_rates(),
        "bytes_served": engine.store.bytes_served(),
    }
    engine.close()
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f}"


def rung(args: argparse.Namespace, scale: float) -> dict[str, Any]:
    from fleetgnn.distributed.testing import run_world
    from fleetgnn.graph.dataset import open_dataset

    base = args.root / f"igbh-like-{scale:g}"
    rev = args.root / f"igbh-like-{scale:g}-rev"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res: dict[str, Any] = {"scale": scale}
    if not rev.exists():
        cmd = [sys.executable, "-m", "fleetgnn", "prepare", "synthetic", "--preset", "igbh-like"]
        cmd += ["--scale", str(scale), "--out", str(base), "--overwrite"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, capture_output=True)
        res["prepare_s"] = time.perf_counter() - t0
        res["prepare_cmd"] = " ".join(cmd[1:])
        code = (
            "import sys; from fleetgnn.graph.dataset import open_dataset, write_dataset; "
            "from fleetgnn.graph.hetero import add_reverse_relations; "
            "write_dataset(add_reverse_relations(open_dataset(sys.argv[1])), "
            "sys.argv[2], overwrite=True, source='igbh-like + reverse relations')"
        )
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code, str(base), str(rev)], check=True, env=env)
        res["reverse_s"] = time.perf_counter() - t0
    g = open_dataset(rev, kind="typed")
    feat = sum(int(a.nbytes) for a in g.x.values())
    res.update(
        nodes=g.num_nodes,
        edges=g.num_edges,
        relations=len(g.schema.relations),
        feature_bytes=feat,
        device_budget=int(args.device_frac * feat),
        host_budget=int(args.host_frac * feat),
    )
    opts = {
        "fanouts": args.fanouts,
        "batch_size": args.batch_size,
        "hidden": args.hidden,
        "device_budget": res["device_budget"],
        "host_budget": res["host_budget"],
        "max_steps": args.max_steps,
        "poll": args.poll,
    }
    t0 = time.perf_counter()
    res["ranks"] = run_world(_train, 2, str(rev), opts, timeout_s=args.timeout)
    res["train_wall_s"] = time.perf_counter() - t0
    return res


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| scale | edges | feature MiB | device MiB/rank | host MiB | rank | steps | epoch s "
        "| anon MiB start / peak / end | shmem MiB end | hit local/peer/host/disk |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for k in r["ranks"]:
            h = k["hit_rates"]
            lines.append(
                f"| {r['scale']:g} | {r['edges']:,} | {_mib(r['feature_bytes'])} "
                f"| {_mib(r['device_budget'])} | {_mib(r['host_budget'])} | {k['rank']} "
                f"| {k['steps']}/{k['steps_per_epoch']} | {k['epoch_s']:.1f} "
                f"| {_mib(k['rss_start']['RssAnon'])} / {_mib(k['rss_peak']['RssAnon'])} / "
                f"{_mib(k['rss_end']['RssAnon'])} | {_mib(k['rss_end']['RssShmem'])} "
                f"| {h['local']:.2f}/{h['peer']:.2f}/{h['host']:.2f}/{h['disk']:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scales", type=float, nargs="+", default=[0.5, 2.5])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    p.add_argument("--root", type=Path, default=cache / "fleetgnn" / "typed-scale")
    p.add_argument("--device-frac", type=float, default=0.05, help="device budget per rank")
    p.add_argument("--host-frac", type=float, default=0.15, help="host budget (one host)")
    p.add_argument("--fanouts", type=int, nargs="+", default=[5, 5])
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--max-steps", type=int, default=0, help="0: the whole epoch")
    p.add_argument("--poll", type=float, default=0.2)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    results = [rung(args, s) for s in args.scales]
    print(table(results))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {"args": vars(args) | {"root": str(args.root)}, "results": results},
                indent=1,
                default=str,
            )
        )


if __name__ == "__main__":
    main()
