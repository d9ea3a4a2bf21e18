"""Section ``trainer``: what a whole training epoch costs, the Trainer's overhead included.

Cora GCN (2 layers, hidden 16, dropout 0.5), full graph, evaluated after every epoch: the time
per epoch of :meth:`Trainer.fit <fleetgnn.train.Trainer.fit>` (the engine's step, the evaluation,
metrics lines, checkpoints at their cadence) against PyG's equivalent loop (``GCNConv``, CSR
``adj_t``; a training step, then the accuracy of every split and the validation loss from one
eval-mode forward pass, as in PyG's ``examples/gcn.py``). The row's ``extra`` splits fleetgnn's
epoch into the engine's step, its evaluation and the rest (the Trainer's own overhead).
"""

from __future__ import annotations

import json
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fleetgnn.bench.epoch import reference_engine
from fleetgnn.bench.peers import NO_PYG, PygGCN, copy_weights, graph_to_pyg, has_pyg
from fleetgnn.bench.report import measurement, progress_line
from fleetgnn.bench.timing import interleaved
from fleetgnn.engines.common import num_classes_of
from fleetgnn.graph import Graph
from fleetgnn.train import Trainer

SECTION = "trainer"


def run(
    opts: Any, threads: int, log: Callable[[str], None], graph: Graph, name: str
) -> list[dict[str, Any]]:
    """The Trainer measurement on ``graph`` (Cora, or a graph of its size)."""
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    epochs = 10 if opts.quick else 30
    engine, cfg = reference_engine(
        graph,
        [
            "model.name=gcn",
            "train.mode=full",
            "model.num_layers=2",
            "model.hidden=16",
            "model.dropout=0.5",
            f"train.epochs={epochs}",
        ],
    )
    parts: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="fleetgnn-bench-") as tmp:
        run_dir = Path(tmp) / "run"

        def fit() -> None:
            Trainer.from_config(engine, cfg, run_dir, quiet=True).fit(overwrite=True)
            parts.append(_breakdown(run_dir / "metrics.jsonl"))

        calls: dict[str, Callable[[], None]] = {"fleetgnn": fit}
        skipped = {}
        if has_pyg():
            calls["PyG GCNConv loop (CSR adj_t), eval every epoch"] = _pyg_loop(engine, epochs)
        else:
            skipped["PyG GCNConv loop"] = NO_PYG
        times = interleaved(calls, opts.repeat)
    times = {k: [t / epochs for t in v] for k, v in times.items()}  # seconds per epoch
    fleet = times["fleetgnn"]
    timed = parts[-len(fleet) :]
    best = min(range(len(fleet)), key=lambda i: fleet[i])
    split = {k: timed[best][k] for k in ("step_s", "run_epoch_s", "eval_s")}
    split["overhead_s"] = fleet[best] - split["run_epoch_s"] - split["eval_s"]
    row = measurement(
        SECTION,
        f"training epoch with evaluation (Trainer.fit / {epochs}), {name} GCN full-graph, "
        f"hidden 16",
        threads,
        times,
        skipped=skipped,
        extra={"epochs_per_call": epochs, "fleetgnn_fastest_call_per_epoch": split},
    )
    log(
        progress_line(row)
        + f" (step {split['step_s'] * 1e3:.1f} ms, eval {split['eval_s'] * 1e3:.1f} ms, "
        f"Trainer {split['overhead_s'] * 1e3:.2f} ms)"
    )
    return [row]


def _breakdown(metrics: Path) -> dict[str, float]:
    """Mean seconds per epoch: the engine's step, ``run_epoch`` and evaluation, from metrics."""
    recs = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    recs = [r for r in recs if "epoch" in r]
    n = max(len(recs), 1)
    return {
        "step_s": sum(r["times"]["total"] for r in recs) / n,
        "run_epoch_s": sum(r["epoch_time_s"] for r in recs) / n,
        "eval_s": sum(r["eval_time_s"] for r in recs) / n,
    }


def _pyg_loop(engine: Any, epochs: int) -> Callable[[], None]:
    """PyG's Cora loop: per epoch, a training step, then every split's accuracy and val loss."""
    dims = [engine.x.shape[1], 16, num_classes_of(engine.graph)]
    adj = graph_to_pyg(engine.graph, "csr", engine.dtype, engine.device)
    model = PygGCN(dims, 0.5).to(engine.device)
    copy_weights(engine.model, model, "gcn")
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    x, y = engine.x, engine.y
    masks = {
        s: torch.from_numpy(np.array(getattr(engine.graph, f"{s}_mask"), dtype=bool))
        for s in ("train", "val", "test")
    }
    train = engine.train_ids.to(engine.device)
    last: dict[str, Any] = {}

    def loop() -> None:
        for _ in range(epochs):
            model.train()
            loss = F.cross_entropy(model(x, adj)[train], y[train])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            model.eval()
            with torch.no_grad():
                out = model(x, adj)
                pred = out.argmax(1)
                last["acc"] = {k: float((pred[m] == y[m]).float().mean()) for k, m in masks.items()}
                last["val_loss"] = float(F.cross_entropy(out[masks["val"]], y[masks["val"]]))

    return loop
