"""Section ``engines``: an epoch of each distributed engine with 2 processes vs the reference.

On ``products-like``: the sampled engines (``minibatch``: 1,024 seeds per rank per step, PyG's
DDP convention; ``split``: 1,024 seeds per step split across the ranks) train GraphSAGE (3
layers, hidden 128, fanouts 15,10,5), the full-graph engines (``fullgraph``, ``offload``) train
GCN (2 layers, hidden 128). Each run is a fresh group of worker processes from
:func:`fleetgnn.distributed.launch` (gloo; 1 torch thread per process, so 2 processes use the
2 cores), building the engine with :func:`~fleetgnn.train.engine_from_config` and timing
``run_epoch`` after a barrier: one warm-up epoch, then ``--repeat`` timed ones (at most 2, to
keep the suite within its budget); an epoch takes as long as its slowest rank. The baseline is
the single-process reference engine on the same model, run in this process just before (runs
are whole process groups, so they cannot be interleaved epoch by epoch). On a CPU the "devices"
are processes: compare the ratios.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fleetgnn.bench.report import measurement, progress_line, skipped_row
from fleetgnn.config import Config, load_config
from fleetgnn.graph import Graph, open_dataset

SECTION = "engines"
WORLD = 2
#: engine -> (model, mode, extra config overrides).
RUNS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "minibatch": ("sage", "minibatch", ()),
    "split": ("sage", "minibatch", ()),
    "fullgraph": ("gcn", "full", ()),
    "offload": ("gcn", "full", ()),
}


def _config(engine: str, model: str, mode: str, extra: tuple[str, ...], world: int) -> Config:
    layers = 3 if model == "sage" else 2
    sets = [
        f"train.engine={engine}",
        f"train.mode={mode}",
        f"model.name={model}",
        f"model.num_layers={layers}",
        "model.hidden=128",
        "model.dropout=0.5",
        "train.fanouts=[15,10,5]",
        "train.batch_size=1024",
        "train.dtype=float32",
        "train.seed=0",
        f"train.nproc={world}",
        "train.threads=1",
        *extra,
    ]
    return load_config(None, sets)


def engine_worker(cfg_dict: dict[str, Any], dataset: str, epochs: int) -> dict[str, Any]:
    """One rank of a run: the engine, a warm-up epoch, then ``epochs`` timed epochs.

    Module-level, so the launcher can pickle it. Returns this rank's epoch wall seconds.
    """
    import torch.distributed as dist

    from fleetgnn.distributed import destroy, init
    from fleetgnn.train import engine_from_config

    torch.set_num_threads(1)
    cfg = Config.from_dict(cfg_dict).validate()
    ctx = init()
    engine = None
    try:
        t0 = time.perf_counter()
        engine = engine_from_config(cfg, open_dataset(dataset, kind="graph"), ctx)
        setup_s = time.perf_counter() - t0
        walls = []
        for epoch in range(1 + epochs):
            dist.barrier(group=ctx.group)
            t0 = time.perf_counter()
            engine.run_epoch(epoch)
            walls.append(time.perf_counter() - t0)
        return {"epoch_s": walls, "setup_s": setup_s, "steps": engine.steps_per_epoch()}
    finally:
        if engine is not None:
            engine.close()
        destroy(ctx)


def _reference(graph: Graph, cfg: Config, epochs: int) -> list[float]:
    """Epoch seconds of the reference engine (warm-up first, not returned)."""
    from fleetgnn.train import engine_from_config

    torch.set_num_threads(1)
    engine = engine_from_config(cfg, graph, engine="reference")
    try:
        walls = []
        for epoch in range(1 + epochs):
            t0 = time.perf_counter()
            engine.run_epoch(epoch)
            walls.append(time.perf_counter() - t0)
    finally:
        engine.close()
    return walls[1:]


def run(
    opts: Any, log: Callable[[str], None], graph: Graph, dataset: Path, name: str
) -> list[dict[str, Any]]:
    """Every engine's run on ``graph`` (the dataset directory ``dataset``), 2 processes each."""
    from fleetgnn.distributed import launch
    from fleetgnn.distributed.errors import WorkerFailed

    threads = torch.get_num_threads()
    epochs = min(opts.repeat, 2)  # whole process groups per run: the suite's budget
    rows = []
    baselines: dict[tuple[str, str], list[float]] = {}
    try:
        for engine, (model, mode, extra) in RUNS.items():
            cfg = _config(engine, model, mode, extra, WORLD)
            key = (model, mode)
            if key not in baselines:
                ref_cfg = _config("reference", model, mode, (), 1)
                baselines[key] = _reference(graph, ref_cfg, epochs)
            case = f"{engine} epoch, {WORLD} processes, {model.upper()} {mode}, {name}"
            t0 = time.perf_counter()
            try:
                ranks = launch(
                    engine_worker, args=(cfg.to_dict(), str(dataset), epochs), nproc=WORLD
                )
            except WorkerFailed as e:
                rows.append(skipped_row(SECTION, case, 1, f"failed: {e}"))
                log(progress_line(rows[-1]))
                continue
            per_rank = [ranks[r]["epoch_s"] for r in sorted(ranks)]
            slowest = [max(r[i] for r in per_rank) for i in range(len(per_rank[0]))]
            row = measurement(
                SECTION,
                case,
                1,
                {"fleetgnn": slowest[1:], "reference engine, 1 process": baselines[key]},
                kinds={"reference engine, 1 process": "baseline"},
                extra={
                    "world_size": WORLD,
                    "warmup_epoch_s": slowest[0],
                    "setup_s": [ranks[r]["setup_s"] for r in sorted(ranks)],
                    "steps_per_epoch": ranks[0]["steps"],
                    "run_s": time.perf_counter() - t0,
                    "reference_median_s": statistics.median(baselines[key]),
                    "config": cfg.to_dict(),
                },
            )
            rows.append(row)
            log(progress_line(row))
    finally:
        torch.set_num_threads(threads)
    return rows
