"""Section ``link``: link-prediction training steps of the reference engine against PyG.

``sage-link``: GraphSAGE (mean; 2 layers of width 256, the second the embeddings), a
dot-product decoder, binary cross-entropy on logits, one uniform negative per positive, batches
of 1,024 training edges, fanouts 15,10 (by hop from the seeds), Adam, no dropout, on
``products-like`` with the 85/5/10 edge split (message passing over the training edges). The
seeds of a step are the batch's endpoints and its negatives' destinations; sampling, gathering,
the forward and backward passes, the decoder and the optimizer step are all timed.

A whole epoch is about ``0.85 x E / 2 / 1024`` steps (1,300 on products-like 0.05): every
implementation runs the same first ``steps`` steps of an epoch per timed call (default 10; 3 with
``--quick``), and the row reports the seconds of those steps (the ratio of epochs is the same;
``extra.epoch_s_estimate`` scales each median to the whole epoch).

Peers:

- ``PyG LinkNeighborLoader + SAGEConv``: PyG's link-prediction loop (``LinkNeighborLoader`` over
  the training edges with ``neg_sampling_ratio=1.0``, ``SAGEConv`` on the sampled sub-graph, the
  dot product of the batch's ``edge_label_index`` rows). It needs pyg-lib or torch-sparse to
  sample; without them it is listed as skipped with the reason. Unlike fleetgnn by default
  (``train.keep_target_edges=false``) it keeps a batch's target edges in its own sub-graph.
- ``PyG SAGEConv (CSR adj_t) on fleetgnn's samples``: PyG's layers, the same decoder and loss,
  trained on the blocks and negatives fleetgnn drew (the conversion to PyG's format timed as part
  of its step): that ratio isolates the model's compute.

The PyG models start from fleetgnn's weights with the same optimizer; before timing, the
largest difference of their embeddings on fleetgnn's first batch is kept
(``extra.max_abs_embedding_diff``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fleetgnn.bench.loops import EngineSteps, optimizer_step, peer_optimizer
from fleetgnn.bench.peers import (
    NO_PYG,
    PygSAGE,
    PygSAGEFull,
    block_to_pyg,
    copy_weights,
    graph_to_pyg,
    has_pyg,
    neighbor_loader_missing,
)
from fleetgnn.bench.report import measurement, on_device, progress_line
from fleetgnn.bench.timing import interleaved
from fleetgnn.graph import Graph
from fleetgnn.train import Config, engine_from_config, load_config

SECTION = "link"
#: The peer that runs PyG's own link-prediction loader.
LOADER_PEER = "PyG LinkNeighborLoader + SAGEConv"
#: The peer that runs PyG's layers on fleetgnn's samples.
BLOCKS_PEER = "PyG SAGEConv (CSR adj_t) on fleetgnn's samples"


def link_engine(
    graph: Graph,
    *,
    hidden: int,
    fanouts: Sequence[int],
    batch_size: int,
    negatives: int,
    dataset: Path | None = None,
    device: torch.device | str = "cpu",
) -> tuple[Any, Config]:
    """The reference engine training link prediction on edge mini-batches (float32, seed 0).

    ``dataset``: the graph's directory, where its edge split is kept once drawn (``None``: drawn
    in memory each time).
    """
    cfg = load_config(
        None,
        [
            "train.dtype=float32",
            "train.seed=0",
            "train.task=link",
            "train.mode=minibatch",
            "model.name=sage",
            f"model.num_layers={len(fanouts)}",
            f"model.hidden={hidden}",
            f"train.link_dim={hidden}",
            "model.dropout=0.0",
            f"train.fanouts={list(fanouts)}",
            f"train.batch_size={batch_size}",
            f"train.negatives={negatives}",
            f"train.device={device}",
            *([f"data.dataset={dataset}"] if dataset is not None else []),
        ],
    )
    return engine_from_config(cfg, graph), cfg


def _pair_loss(h: Tensor, src: Tensor, dst: Tensor, neg: Tensor) -> Tensor:
    """Mean binary cross-entropy of positives ``(src, dst)`` and negatives ``(src, neg[:, k])``."""
    k = neg.shape[1]
    pos = (h[src] * h[dst]).sum(-1)
    negs = (h[src.repeat_interleave(k)] * h[neg.reshape(-1)]).sum(-1)
    logits = torch.cat([pos, negs])
    labels = torch.cat([torch.ones_like(pos), torch.zeros_like(negs)])
    return F.binary_cross_entropy_with_logits(logits, labels)


def _blocks_steps(engine: Any, model: PygSAGE, opt: Any, steps: int) -> Callable[[], None]:
    """PyG's SAGE on the edge batches (blocks and negatives) fleetgnn draws for each epoch."""
    state = {"epoch": 0}

    def run() -> None:
        e = state["epoch"]
        state["epoch"] += 1
        dev = engine.device
        for step in range(steps):
            batch = engine.edges.batch(e, step)
            graphs = [block_to_pyg(b, "csr", dev, engine.dtype) for b in batch.blocks]
            x = engine.x[batch.blocks[0].src_ids.to(dev)]
            h = model(x, graphs)
            optimizer_step(opt, _pair_loss(h, batch.src, batch.dst, batch.neg))

    return run


def _loader_steps(engine: Any, cfg: Config, dims: list[int], steps: int) -> Callable[[], None]:
    """PyG's ``LinkNeighborLoader`` + ``SAGEConv``: the first ``steps`` batches of an epoch."""
    from torch_geometric.data import Data
    from torch_geometric.loader import LinkNeighborLoader

    edge_index = graph_to_pyg(engine.graph, "edge_index", engine.dtype, torch.device("cpu"))
    data = Data(x=engine.x.cpu(), edge_index=edge_index)
    data.num_nodes = engine.graph.num_nodes
    src, dst = engine.task.train_pairs()
    loader = LinkNeighborLoader(
        data,
        num_neighbors=list(cfg.train.fanouts),
        edge_label_index=torch.stack([src, dst]),  # labels made by PyG: 1 positive, 0 negative
        neg_sampling_ratio=float(cfg.train.negatives),
        batch_size=cfg.train.batch_size,
        shuffle=True,
    )
    model = PygSAGEFull(dims, 0.0).to(engine.device)
    copy_weights(engine.model.encoder, model, "sage")
    opt = peer_optimizer(cfg, model)

    def run() -> None:
        model.train()
        for i, batch in enumerate(loader):
            if i == steps:
                break
            batch = batch.to(engine.device)
            h = model(batch.x, batch.edge_index)
            eli = batch.edge_label_index
            logits = (h[eli[0]] * h[eli[1]]).sum(-1)
            optimizer_step(opt, F.binary_cross_entropy_with_logits(logits, batch.edge_label))

    return run


def sage_link(
    opts: Any,
    threads: int,
    graph: Graph,
    name: str,
    *,
    hidden: int = 256,
    fanouts: Sequence[int] = (15, 10),
    batch_size: int = 1024,
    negatives: int = 1,
    steps: int | None = None,
    dataset: Path | None = None,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Link-prediction steps: fleetgnn's reference engine vs PyG (see the module docstring).

    Args:
        opts: Suite options (``repeat``, ``quick``).
        threads: torch threads in use (recorded).
        graph: The dataset.
        name: The dataset's name in the table.
        hidden: Width of both layers (the second is the embeddings).
        fanouts: By hop from the seeds (one layer each).
        batch_size: Training edges per step.
        negatives: Negatives per positive.
        steps: Steps per timed call (``None``: 10, or 3 with ``opts.quick``).
        dataset: The graph's directory (its edge split is kept there).
        device: Where every model and its data live.
    """
    fanouts = list(fanouts)
    engine, cfg = link_engine(
        graph,
        hidden=hidden,
        fanouts=fanouts,
        batch_size=batch_size,
        negatives=negatives,
        dataset=dataset,
        device=device,
    )
    per_epoch = engine.steps_per_epoch()
    steps = min(per_epoch, steps if steps is not None else (3 if opts.quick else 10))
    dims = [engine.x.shape[1], *[hidden] * len(fanouts)]
    calls: dict[str, Callable[[], None]] = {"fleetgnn": EngineSteps(engine, steps)}
    diffs: dict[str, float] = {}
    skipped = {}
    if not has_pyg():
        skipped[LOADER_PEER] = NO_PYG
    else:
        missing = neighbor_loader_missing()
        if missing is None:
            calls[LOADER_PEER] = _loader_steps(engine, cfg, dims, steps)
        else:
            skipped[LOADER_PEER] = missing
        batch = engine.edges.batch(0, 0)
        aggs = [engine._local(b) for b in batch.blocks]
        x = engine.x[batch.blocks[0].src_ids.to(engine.device)]
        model = PygSAGE(dims, 0.0).to(engine.device)
        copy_weights(engine.model.encoder, model, "sage")
        with torch.no_grad():
            ref = engine.model(aggs, x)
            got = model(
                x, [block_to_pyg(b, "csr", engine.device, engine.dtype) for b in batch.blocks]
            )
        diffs[BLOCKS_PEER] = float((got - ref).abs().max())
        calls[BLOCKS_PEER] = _blocks_steps(engine, model, peer_optimizer(cfg, model), steps)
    times = interleaved(calls, opts.repeat, engine.device)
    medians = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return measurement(
        SECTION,
        f"GraphSAGE link prediction, {name}, {len(fanouts)} x {hidden}, fanouts "
        f"{','.join(map(str, fanouts))}, batch {batch_size} edges, {negatives} negative(s), dot "
        f"decoder ({steps} of {per_epoch} steps per epoch)" + on_device(engine.device),
        threads,
        times,
        skipped=skipped,
        extra={
            "max_abs_embedding_diff": diffs,
            "steps_timed": steps,
            "steps_per_epoch": per_epoch,
            "epoch_s_estimate": {k: v * per_epoch / steps for k, v in medians.items()},
            "device": str(engine.device),
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "config": cfg.to_dict(),
        },
    )


def run(
    opts: Any,
    threads: int,
    log: Callable[[str], None],
    large: tuple[Graph, str],
    dataset: Path | None = None,
) -> list[dict[str, Any]]:
    """The link measurements: GraphSAGE link prediction on the large graph."""
    row = sage_link(opts, threads, *large, dataset=dataset)
    log(progress_line(row))
    return [row]
