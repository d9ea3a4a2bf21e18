"""Train a PyG model, unchanged, on fleetgnn's engines through the Python API.

The user builds ``torch_geometric.nn.GraphSAGE`` exactly as in PyG and hands
``fleetgnn.nn.from_pyg(model)`` to an engine: the adapter shares the model's parameters (the
user's model is trained in place) and feeds each PyG layer the hop an engine's aggregator holds
(source rows, including halo or remote rows, the destination rows, an ``edge_index`` over them
and the bipartite ``size``). It runs on ``reference``, ``minibatch``, ``split`` and ``fullgraph``;
``offload`` refuses it in one line. Needs ``torch_geometric`` (``pip install 'fleetgnn[pyg]'``).

Single process, or several under torchrun (one process per device; gloo on CPU)::

    python examples/pyg_model.py --dataset data/cora --engine reference
    torchrun --standalone --nproc-per-node 2 examples/pyg_model.py \
        --dataset data/cora --engine fullgraph --epochs 60

``--model fleetgnn`` trains fleetgnn's own GraphSAGE (``fleetgnn.nn.build_model("sage")``) of
the same width instead, to compare epoch times. Rank 0 prints one JSON line at the end: model,
engine, world_size, test_acc, val_acc, final_train_loss, epochs, mean_epoch_time_s, run_dir.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch
from rich.console import Console

import fleetgnn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True, help="dataset directory (fleetgnn prepare)")
    p.add_argument("--engine", default="reference", choices=list(fleetgnn.ENGINES))
    p.add_argument("--model", default="pyg", choices=["pyg", "fleetgnn"])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 10])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-dir", default=None, help="default: a new temporary directory")
    return p.parse_args(argv)


def build(args: argparse.Namespace, graph: fleetgnn.Graph) -> tuple[torch.nn.Module, object]:
    """``(model for the engine, the user's model)``: PyG's GraphSAGE, or fleetgnn's own."""
    num_classes = graph.num_classes or int(graph.y.max()) + 1
    torch.manual_seed(args.seed)  # the same initial model on every rank
    if args.model == "fleetgnn":
        model = fleetgnn.nn.build_model(
            "sage",
            graph.num_features,
            num_classes,
            hidden_dim=args.hidden,
            num_layers=len(args.fanouts),
            dropout=args.dropout,
            seed=args.seed,
        )
        return model, model
    from torch_geometric.nn import GraphSAGE

    # the user's PyG model, built as in PyG
    model = GraphSAGE(
        graph.num_features, args.hidden, len(args.fanouts), num_classes, dropout=args.dropout
    )
    return fleetgnn.nn.from_pyg(model, seed=args.seed), model


def engine_config(args: argparse.Namespace) -> fleetgnn.EngineConfig:
    """The typed config of ``--engine`` (features row-normalised, as for Cora)."""
    spec = fleetgnn.ENGINES[args.engine]
    common = {"seed": args.seed, "feature_norm": "row"}
    if "minibatch" in spec.modes:
        common |= {"fanouts": tuple(args.fanouts), "batch_size": args.batch_size}
    return spec.config_cls(**common)


def main(argv: list[str] | None = None) -> int:
    """Train and print the summary line; returns the exit status."""
    args = parse_args(argv)
    spec = fleetgnn.ENGINES[args.engine]
    if not spec.distributed and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        print(
            f"engine {args.engine!r} runs in one process; start it without torchrun",
            file=sys.stderr,
        )
        return 2
    graph = fleetgnn.open_dataset(args.dataset)
    try:
        model, users_model = build(args, graph)
    except fleetgnn.FleetgnnError as exc:  # torch_geometric missing, or a refused model
        print(f"error: {exc}", file=sys.stderr)
        return 2
    optimizer = torch.optim.Adam(
        users_model.parameters(), lr=args.lr, weight_decay=args.weight_decay
    )
    ctx = fleetgnn.distributed.init() if spec.distributed else None
    rank0 = ctx is None or ctx.rank == 0
    # rank 0 alone makes the temporary directory (the others would leave empty ones behind)
    run_dir = args.run_dir or (tempfile.mkdtemp(prefix="fleetgnn-example-") if rank0 else None)
    if ctx is not None and ctx.world_size > 1:  # every rank writes to rank 0's directory
        run_dir = ctx.communicator().broadcast_object(run_dir)
    try:
        with fleetgnn.build_engine(
            model, graph, engine_config(args), ctx, optimizer=optimizer
        ) as engine:
            trainer = fleetgnn.Trainer(
                engine,
                fleetgnn.TrainerConfig(epochs=args.epochs, seed=args.seed),
                run_dir,
                console=Console(quiet=True),
                show_progress=False,
            )
            summary = trainer.fit()
    except fleetgnn.FleetgnnError as exc:  # e.g. an engine that cannot host a PyG model
        if rank0:
            print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if ctx is not None:
            fleetgnn.distributed.destroy(ctx)
    if rank0:
        keys = (
            "engine",
            "world_size",
            "test_acc",
            "val_acc",
            "final_train_loss",
            "epochs",
            "mean_epoch_time_s",
        )
        out = {"model": args.model} | {k: summary[k] for k in keys}
        print(json.dumps(out | {"run_dir": str(run_dir)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
