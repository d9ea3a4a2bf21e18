"""Full-graph epochs of the ``fullgraph`` engine (MGG) against the single-process reference.

Workloads (MGG's models): ``gcn`` (2 layers, hidden 256) and ``gin`` (2 layers, hidden 64), one
full-graph step per epoch, on a synthetic graph written once with
:func:`~fleetgnn.graph.synthetic.prepare_synthetic` and memory-mapped by every rank. The MGG
scale (~2M nodes / 40M edges) does not fit a 2-core CPU, so the size is an argument
(default 100k nodes / 2M directed edges).

For every world size in ``--ranks`` (gloo processes on this host) and every model, in one run:

- ``unpipelined``: ``K = 1`` chunk, ``depth = 0`` (the whole halo arrives before aggregating);
- ``tuned``: MGG's online greedy search over ``(K, depth)`` (one trial per epoch, at most
  ``len(chunks) + len(depth) - 1`` epochs), then timed epochs with the best configuration;
- ``reference``: :class:`~fleetgnn.engines.reference.ReferenceEngine` in this process.

Reported per case: median epoch time (the slowest rank's), the engine's ``epoch_extra()`` of the
last epoch (comm / wait / compute seconds, hidden fraction, MGG vs deduplicated volume),
preprocessing (partition + layout + need-list exchange) time, and ratios against the reference
and against the unpipelined run. Results and the machine description go to ``--out``.

Usage::

    python benchmarks/bench_fullgraph.py --nodes 100000 --edges 2000000 --ranks 1,2,4
    python benchmarks/bench_fullgraph.py --nodes 5000 --edges 50000 --epochs 2   # smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from fleetgnn.bench.machine import machine_info
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines.fullgraph import TunerSpace
from fleetgnn.graph.dataset import open_dataset
from fleetgnn.graph.synthetic import SyntheticSpec, prepare_synthetic
from fleetgnn.train import engine_from_config, load_config

MODELS = {"gcn": 256, "gin": 64}
SPACE = TunerSpace(chunks=(1, 2, 4, 8), depth=(1, 2))


def machine() -> dict[str, Any]:
    """Where the numbers come from."""
    return machine_info("cpu")


def _config(model: str, threads: int) -> Any:
    return load_config(
        None,
        [
            "train.engine=fullgraph",
            "train.mode=full",
            f"model.name={model}",
            f"model.hidden={MODELS[model]}",
            "train.seed=0",
        ],
    )


def _time_epochs(engine: Any, comm: Any, first: int, epochs: int) -> list[float]:
    """Slowest rank's wall time of each epoch."""
    out = []
    for e in range(first, first + epochs):
        comm.barrier()
        t0 = time.perf_counter()
        engine.run_epoch(e)
        dt = time.perf_counter() - t0
        out.append(max(comm.all_gather_object(dt)))
    return out


def _worker(comm: Any, data_dir: str, models: list[str], epochs: int, threads: int) -> Any:
    torch.set_num_threads(threads)
    graph = open_dataset(data_dir)
    out: dict[str, Any] = {}
    for model in models:
        cfg = _config(model, threads)
        res: dict[str, Any] = {}
        # unpipelined baseline: K = 1, whole halo first
        eng = engine_from_config(cfg, graph, context_of(comm), num_chunks=1, depth=0)
        _time_epochs(eng, comm, 0, 1)  # warm-up
        times = _time_epochs(eng, comm, 1, epochs)
        res["unpipelined"] = {
            "epoch_s": statistics.median(times),
            "epochs_s": times,
            "extra": eng.epoch_extra(),
            "preprocess_s": eng.preprocess_s,
        }
        eng.close()
        # tuned: the greedy search, then the best configuration
        eng = engine_from_config(
            cfg,
            graph,
            context_of(comm),
            tune=True,
            tuner_chunks=SPACE.chunks,
            tuner_depths=SPACE.depth,
        )
        e = 0
        t_search = time.perf_counter()
        while eng.tuner is not None and not eng.tuner.done:
            eng.run_epoch(e)
            e += 1
        t_search = time.perf_counter() - t_search
        times = _time_epochs(eng, comm, e, epochs)
        res["tuned"] = {
            "epoch_s": statistics.median(times),
            "epochs_s": times,
            "extra": eng.epoch_extra(),
            "search_epochs": e,
            "search_s": t_search,
            "table": {f"K={k},depth={d}": v for (k, d), v in eng.tuner.table.items()}
            if eng.tuner
            else {},
            "preprocess_s": eng.preprocess_s,
        }
        eng.close()
        out[model] = res
    return out


def _reference(data_dir: str, models: list[str], epochs: int, threads: int) -> dict[str, Any]:
    torch.set_num_threads(threads)
    graph = open_dataset(data_dir)
    out = {}
    for model in models:
        cfg = load_config(
            None,
            [
                "train.engine=reference",
                "train.mode=full",
                f"model.name={model}",
                f"model.hidden={MODELS[model]}",
            ],
        )
        ref = engine_from_config(cfg, graph, engine="reference")
        ref.run_epoch(0)
        times = []
        for e in range(1, epochs + 1):
            t0 = time.perf_counter()
            ref.run_epoch(e)
            times.append(time.perf_counter() - t0)
        out[model] = {"epoch_s": statistics.median(times), "epochs_s": times}
    return out


def main() -> None:
    """Run the benchmark and write the JSON results."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=2_000_000, help="directed edges (both ways)")
    p.add_argument("--features", type=int, default=100)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--models", default="gcn,gin")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs per case (median)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--cache", default=None, help="dataset cache directory")
    p.add_argument("--out", default="benchmarks/results/bench_fullgraph.json")
    args = p.parse_args()
    models = args.models.split(",")
    spec = SyntheticSpec(
        num_nodes=args.nodes,
        num_edges=args.edges,
        num_features=args.features,
        num_classes=args.classes,
        train_frac=0.1,
        val_frac=0.05,
        test_frac=0.1,
        name=f"fullgraph-bench-{args.nodes}-{args.edges}",
    )
    cache = Path(args.cache or tempfile.gettempdir()) / spec.name
    t0 = time.perf_counter()
    if not (cache / "meta.json").exists():
        prepare_synthetic(cache, spec, seed=0, overwrite=True)
    prepare_s = time.perf_counter() - t0
    graph = open_dataset(cache)
    print(f"graph: {graph.num_nodes} nodes, {graph.num_edges} edges (prepare {prepare_s:.1f} s)")
    results: dict[str, Any] = {
        "machine": machine(),
        "graph": {"nodes": graph.num_nodes, "edges": graph.num_edges, "features": args.features},
        "args": vars(args),
        "reference": _reference(str(cache), models, args.epochs, args.threads),
        "fullgraph": {},
    }
    print("reference:", {m: round(v["epoch_s"], 3) for m, v in results["reference"].items()})
    for w in [int(r) for r in args.ranks.split(",")]:
        t0 = time.perf_counter()
        per_rank = run_world(
            _worker, w, str(cache), models, args.epochs, args.threads, timeout_s=3600
        )
        res = per_rank[0]
        for m in models:
            ref = results["reference"][m]["epoch_s"]
            un, tu = res[m]["unpipelined"], res[m]["tuned"]
            tu["speedup_vs_unpipelined"] = un["epoch_s"] / tu["epoch_s"]
            tu["speedup_vs_reference"] = ref / tu["epoch_s"]
            un["speedup_vs_reference"] = ref / un["epoch_s"]
            print(
                f"W={w} {m}: reference {ref:.3f} s, unpipelined {un['epoch_s']:.3f} s, tuned "
                f"{tu['epoch_s']:.3f} s (K={tu['extra']['num_chunks']}, "
                f"depth={tu['extra']['depth']}, hidden {tu['extra']['hidden_fraction']:.2f}, "
                f"dedup saves {tu['extra']['dedup_saving']:.2f}), preprocess "
                f"{un['preprocess_s']:.3f} s"
            )
        res["wall_s"] = time.perf_counter() - t0
        results["fullgraph"][str(w)] = res
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
