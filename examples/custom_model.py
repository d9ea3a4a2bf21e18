"""Train a model fleetgnn does not ship, through the Python API, on any engine.

The model is the user's own ``nn.Module``: GraphSAGE layers from ``fleetgnn.nn`` for message
passing, with a residual MLP head (``torch.nn`` layers) on the last layer and layer norm between
layers. It follows fleetgnn's layer protocol (``num_layers`` and ``layer_forward``), so every
engine can drive it: sampled blocks (``reference``, ``minibatch``), a full graph split across
processes (``fullgraph``), layer-wise inference. Dropout is fleetgnn's ``KeyedDropout``, so the
model computes the same function on every engine and world size.

Single process, or several under torchrun (one process per device; gloo on CPU)::

    python examples/custom_model.py --dataset data/cora --engine reference
    torchrun --standalone --nproc-per-node 2 examples/custom_model.py \
        --dataset data/cora --engine minibatch --fanouts 10 10

Rank 0 names the run directory on stderr at the start (without --run-dir: a new temporary
directory, which it alone creates) and prints one JSON line at the end: engine, world_size,
test_acc, val_acc, final_train_loss, epochs, mean_epoch_time_s, run_dir.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch
from rich.console import Console
from torch import nn

import fleetgnn
from fleetgnn.nn import KeyedDropout, LayerwiseModule, SAGEConv


class SAGEWithMLPHead(LayerwiseModule):
    """GraphSAGE layers, layer norm between them, and a residual two-layer MLP head.

    Layer ``i < L - 1``: ``h = relu(norm(sage_i(agg, dropout(h))))``.
    Last layer: ``z = sage(agg, dropout(h))``; ``out = z + mlp(z)``, ``mlp = Linear-ReLU-Linear``.

    Shapes:
        - layer ``i`` input: ``[agg.num_src, width_i]``; output ``[agg.num_dst, width_{i+1}]``.
        - logits: ``[num_dst of the last hop, num_classes]``.
    """

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        num_classes: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        seed: int = 0,
    ) -> None:
        super().__init__(num_layers)
        widths = [in_dim] + [hidden] * (num_layers - 1) + [hidden]
        self.convs = nn.ModuleList(SAGEConv(widths[i], widths[i + 1]) for i in range(num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(num_layers - 1))
        self.drop = KeyedDropout(dropout, seed=seed)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.out = nn.Linear(hidden, num_classes)

    def layer_forward(self, i, agg, h_src, *, step=0):  # noqa: D102 (see the class docstring)
        h = self.drop(h_src, agg, step=step, key=i)
        z = self.convs[i](agg, h)
        if i < self.num_layers - 1:
            return torch.relu(self.norms[i](z))
        return self.out(z + self.head(z))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True, help="dataset directory (fleetgnn prepare)")
    p.add_argument("--engine", default="reference", choices=list(fleetgnn.ENGINES))
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 10])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-dir", default=None, help="default: a new temporary directory")
    return p.parse_args(argv)


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
    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = SAGEWithMLPHead(
        graph.num_features,
        args.hidden,
        graph.num_classes or int(graph.y.max()) + 1,
        num_layers=len(args.fanouts),
        seed=args.seed,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    ctx = fleetgnn.distributed.init() if spec.distributed else None
    rank0 = ctx is None or ctx.rank == 0
    # rank 0 alone makes the temporary directory (the others would leave empty ones behind)
    run_dir = args.run_dir or (tempfile.mkdtemp(prefix="fleetgnn-example-") if rank0 else None)
    if ctx is not None and ctx.world_size > 1:  # every rank writes to rank 0's directory
        run_dir = ctx.communicator().broadcast_object(run_dir)
    if rank0:
        print(f"run directory: {run_dir}", file=sys.stderr, flush=True)
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
        print(json.dumps({k: summary[k] for k in keys} | {"run_dir": str(run_dir)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
