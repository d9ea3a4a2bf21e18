"""``fleetgnn predict`` and ``fleetgnn embed``: a trained run's outputs for every node.

For a link-prediction run ``predict --task link --pairs FILE`` scores the given node pairs.

Both check everything before any worker starts (the run directory, its config and checkpoint,
the dataset, ``--layer``, that ``--out`` is free) and print one line per error; the work itself
is :func:`fleetgnn.train.export.predict` / :func:`~fleetgnn.train.export.embed`: streaming
layer-wise inference in bounded memory, on ``--nproc`` local processes or under ``torchrun``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory of 'train'")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument(
        "--checkpoint",
        default="best",
        choices=["best", "last"],
        help="best: the best-validation epoch (checkpoints/best.pt, default); last: the latest",
    )
    p.add_argument(
        "--dataset",
        type=Path,
        default=None,
        help="dataset directory (default: the one the run trained on)",
    )
    p.add_argument("--nproc", type=int, default=1, help="worker processes on this host")
    p.add_argument(
        "--device", default=None, help="cpu, cuda or cuda:N (default: the run's train.device)"
    )
    p.add_argument(
        "--chunk-size",
        default=None,
        metavar="SIZE",
        help="bytes of source rows per chunk of nodes, e.g. 64MB: memory (about 6x this) "
        "against speed (default 32MiB)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument(
        "--edges",
        default="train",
        choices=["train", "all"],
        help="link runs: the message-passing graph; train: the training edges of the run's edge "
        "split (default; held-out edges stay held out), all: every edge of the dataset",
    )


def add_predict(sub: Any) -> None:
    """Register ``fleetgnn predict``."""
    p = sub.add_parser(
        "predict",
        help="predict every node's class (or score node pairs) with a trained run",
        description="Write predictions.npy (int64 class per node), probabilities.npy (float32 "
        "[N, C]) and meta.json to --out. Row i is node i of the dataset. Layer-wise "
        "full-neighbour inference, streamed in bounded memory. A link-prediction run "
        "(--task link) scores the node pairs of --pairs: pairs.npy, logits.npy and "
        "probabilities.npy (sigmoid), row i for pair i.",
    )
    _common(p)
    p.add_argument(
        "--task",
        default=None,
        choices=["node", "link"],
        help="the run's task (default: the one it trained; a different one is refused)",
    )
    p.add_argument(
        "--pairs",
        type=Path,
        default=None,
        metavar="FILE",
        help="link runs: node pairs to score, .npy [P, 2] or text/CSV with two columns of node "
        "IDs (one pair per line; a header line is skipped)",
    )


def add_embed(sub: Any) -> None:
    """Register ``fleetgnn embed``."""
    p = sub.add_parser(
        "embed",
        help="write every node's layer-K output (embeddings) of a trained run",
        description="Write embeddings.npy ([N, width of layer K]) and meta.json to --out. Row i "
        "is node i of the dataset. Layer-wise full-neighbour inference, streamed in bounded "
        "memory.",
    )
    _common(p)
    p.add_argument(
        "--layer",
        type=int,
        required=True,
        metavar="K",
        help="the layer whose output to write, 1..L (L, the last layer, gives the logits; for "
        "a link run the embeddings its decoder scores)",
    )


def _dataset(args: argparse.Namespace, recorded: Any) -> Path | None:
    """``--dataset``, or the generated default dataset a run without ``data.dataset`` used.

    ``recorded``: the run's :class:`~fleetgnn.train.export.RunConfig`.
    """
    if args.dataset is not None:
        return args.dataset
    if recorded.api or recorded.config.data.dataset:  # the export's checks say what to pass
        return None
    from fleetgnn.cli.train import resolve_dataset

    return resolve_dataset(recorded.config.data, show_progress=False)[1]


def run_export(args: argparse.Namespace) -> int:
    """Run ``fleetgnn predict`` or ``fleetgnn embed`` for parsed arguments; the exit status."""
    import dataclasses

    from fleetgnn.cli.messages import printable
    from fleetgnn.config.units import parse_bytes
    from fleetgnn.engines.chunks import Chunking
    from fleetgnn.train.export import describe, prepare_job, read_run_config, run_job

    chunking = Chunking()
    if args.chunk_size is not None:
        chunking = Chunking(target_bytes=max(1, parse_bytes(args.chunk_size, "--chunk-size")))
    layer = getattr(args, "layer", None) if args.command == "embed" else None
    recorded = read_run_config(args.run_dir)  # config.yaml, read once for every check below
    job = prepare_job(
        args.command,
        args.run_dir,
        args.out,
        layer,
        args.checkpoint,
        _dataset(args, recorded),
        args.overwrite,
        args.device,
        run_config=recorded,
        pairs=getattr(args, "pairs", None),
        task=getattr(args, "task", None),
        edges=args.edges,
    )
    out = run_job(dataclasses.replace(job, chunking=chunking), args.nproc)
    if int(os.environ.get("RANK", "0")) == 0:
        print(printable(describe(out)), flush=True)  # an --out in other bytes: \xNN
    return 0
