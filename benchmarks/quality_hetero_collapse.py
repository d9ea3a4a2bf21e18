"""Typed models against the same model on the homogeneous collapse of a ``mag-like`` graph.

Issue 28's quality check: R-GCN and R-GAT on the typed graph (4 node types, one weight per
relation) against the same model on its collapse (one node type, one relation: every relation's
edges over global IDs, :meth:`~fleetgnn.graph.hetero.HeteroGraph.to_homogeneous`), the same
epochs, seed and hyper-parameters (the ``rgcn`` / ``rgat`` defaults of ``fleetgnn train``), full
neighbourhoods on the ``reference`` engine. The reported accuracy is the test accuracy at the
epoch of best validation accuracy.

Inputs: both graphs see the same numbers. Papers have their features; the featureless types
(author, institution, field_of_study) get zero rows of the papers' width in both (``--inputs
zeros``), so the typed model wins only by telling the relations apart. ``--inputs embed`` gives
the typed model its learnable embeddings for those types instead (the collapse cannot have them:
its one node type has features), which is how a typed model is normally trained.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/quality_hetero_collapse.py --scale 0.01 --epochs 30 \\
        --seeds 0 1 2

``--json FILE`` also writes the rows with their settings, under the run's ``--inputs`` (a file
holding the other ``--inputs``' rows keeps them). docs/heterogeneous.md's table is
``benchmarks/results/quality_hetero_collapse.json``: ``--scale 0.003 --epochs 20 --seeds 0 1 2``,
once per ``--inputs``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from fleetgnn.graph.dataset import open_dataset
from fleetgnn.graph.hetero import HeteroGraph, add_reverse_relations
from fleetgnn.graph.hetero_toy import homogeneous_collapse
from fleetgnn.graph.synthetic import prepare_synthetic
from fleetgnn.train import engine_from_config, load_config

MODELS = ("rgcn", "rgat")


def with_zero_inputs(g: HeteroGraph) -> HeteroGraph:
    """``g`` with zero feature rows (of the target's width) for its featureless types."""
    width = int(g.x[g.schema.target].shape[1])  # type: ignore[index]
    x = {t: np.asarray(g.x[t]) for t in g.x}
    for t in g.schema.node_types:
        if t not in x:
            x[t] = np.zeros((g.schema.count(t), width), dtype=np.float32)
    return dataclasses.replace(g, x=x, validate="structure")


def collapse(g: HeteroGraph) -> HeteroGraph:
    """One node type, one relation: :func:`~fleetgnn.graph.hetero_toy.homogeneous_collapse` of
    ``g`` with zero rows for its featureless types (as :func:`with_zero_inputs`)."""
    return homogeneous_collapse(with_zero_inputs(g))


def train(graph: HeteroGraph, model: str, epochs: int, seed: int) -> dict[str, float]:
    """Full-neighbourhood training on ``reference``; test accuracy at the best validation."""
    keys = [f"model.name={model}", "train.engine=reference", "train.mode=full"]
    cfg = load_config(None, [*keys, f"train.epochs={epochs}", f"train.seed={seed}"])
    best = (-1.0, 0.0, 0)
    t0 = time.perf_counter()
    with engine_from_config(cfg, graph) as engine:
        for epoch in range(epochs):
            engine.run_epoch(epoch)
            m = engine.evaluate()
            if m["val_acc"] > best[0]:
                best = (m["val_acc"], m["test_acc"], epoch)
    return {"val": best[0], "test": best[1], "epoch": best[2], "s": time.perf_counter() - t0}


def compare(
    dataset: Path, models: tuple[str, ...], epochs: int, seeds: list[int], inputs: str
) -> list[dict[str, Any]]:
    """Per model and seed: the typed graph's and the collapse's test accuracies."""
    g = add_reverse_relations(open_dataset(dataset, kind="typed"))
    typed = with_zero_inputs(g) if inputs == "zeros" else g
    flat = collapse(g)
    rows = []
    for model in models:
        for seed in seeds:
            a, b = train(typed, model, epochs, seed), train(flat, model, epochs, seed)
            rows.append({"model": model, "seed": seed, "typed": a, "collapse": b})
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Entry point; prints one line per model and seed, returns the rows."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, help="a mag-like dataset (default: generate one)")
    ap.add_argument("--scale", type=float, default=0.01, help="mag-like scale when generating")
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/fleetgnn-hetero-collapse"))
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--inputs", choices=("zeros", "embed"), default="zeros")
    ap.add_argument("--json", type=Path, help="write (or add to) this JSON file, per --inputs")
    args = ap.parse_args(argv)
    dataset = args.dataset
    if dataset is None:
        dataset = args.out / f"mag-like-x{args.scale:g}-s{args.data_seed}"
        if not (dataset / "meta.json").is_file():
            prepare_synthetic(dataset, "mag-like", scale=args.scale, seed=args.data_seed)
    rows = compare(dataset, tuple(args.models), args.epochs, args.seeds, args.inputs)
    for r in rows:
        a, b = r["typed"], r["collapse"]
        print(
            f"{r['model']} seed {r['seed']}: test acc typed {a['test']:.4f} (epoch {a['epoch']}, "
            f"{a['s']:.1f} s), collapse {b['test']:.4f} (epoch {b['epoch']}, {b['s']:.1f} s), "
            f"inputs={args.inputs}, {args.epochs} epochs",
            flush=True,
        )
    if args.json is not None:
        doc = json.loads(args.json.read_text()) if args.json.is_file() else {}
        doc.update(
            what="test accuracy at the best validation epoch: typed graph against its collapse",
            machine=f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
        )
        doc.setdefault("runs", {})[args.inputs] = {
            "scale": args.scale,
            "data_seed": args.data_seed,
            "epochs": args.epochs,
            "seeds": args.seeds,
            "rows": rows,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
