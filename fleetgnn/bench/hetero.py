"""Section ``hetero``: R-GAT mini-batch training on a typed graph, the reference engine vs PyG.

``rgat-minibatch``: R-GAT (GAT per relation over its in-edges, summed over relations; 3 layers,
64 per head x 4 heads in the hidden layers, one head at the output, ELU between layers, no
dropout, Adam) on ``igbh-like`` (``fleetgnn prepare synthetic --preset igbh-like``, every
relation's reverse added, so 8 relations), fanouts 15,10,5 per relation (by hop from the
seeds), batches of 1,024 training papers. Sampling, gathering the input rows of every type, the
forward and backward passes and the optimizer step are all timed; every implementation runs the
same number of steps per timed call (default: a whole epoch).

Peers:

- ``PyG NeighborLoader + HeteroConv(GATConv)``: the same typed data as a ``HeteroData`` (the
  same feature rows and relations), PyG's ``NeighborLoader`` with the same per-relation fanouts,
  batch size and training nodes (pyg-lib's or torch-sparse's sampler: skipped with the reason
  when neither imports), and :class:`PygRGAT`: per layer a ``HeteroConv`` of one
  ``GATConv(add_self_loops=False)`` per relation summed per destination type, which has
  fleetgnn's layer sizes, heads and parameters. As PyG's examples do, every layer runs on every
  node of the sampled sub-graph.
- ``PyG GATConv on fleetgnn's samples``: the same PyG layers on the typed blocks fleetgnn
  draws (each relation's ``GATConv`` on its block edges, the conversion to ``edge_index`` timed
  with it): that ratio isolates the model's compute from sampling.

The PyG model starts from fleetgnn's weights (:func:`copy_rgat_weights`); before timing, the
largest difference of the target type's logits on fleetgnn's first batch is kept
(``extra.max_abs_logit_diff``) and the parameter counts of both (``extra.parameters``). fleetgnn's
time per phase (sample, gather, forward, backward, optimizer) is ``extra.fleetgnn_phases_s``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fleetgnn.bench.data import default_cache_dir
from fleetgnn.bench.epoch import reference_engine
from fleetgnn.bench.loops import EngineSteps, optimizer_step, peer_optimizer
from fleetgnn.bench.peers import NO_PYG, has_pyg, neighbor_loader_missing
from fleetgnn.bench.report import measurement, on_device, progress_line
from fleetgnn.bench.timing import interleaved
from fleetgnn.engines.common import normalize_rows
from fleetgnn.errors import ConfigError
from fleetgnn.graph.hetero import HeteroGraph

SECTION = "hetero"
#: The peer that runs PyG's own typed loader.
LOADER_PEER = "PyG NeighborLoader + HeteroConv(GATConv)"
#: The peer that runs PyG's layers on fleetgnn's samples.
BLOCKS_PEER = "PyG GATConv on fleetgnn's samples"

Relation = tuple[str, str, str]


class PygRGAT(nn.Module):
    """fleetgnn's R-GAT with PyG's layers: ``HeteroConv`` of ``GATConv`` per relation, summed.

    Hidden layers: ``heads`` heads of ``hidden`` each, concatenated, then ELU; the output layer:
    one head of ``out_dim``. No self loops (as fleetgnn's
    :class:`~fleetgnn.nn.hetero.RGATConv`): a ``GATConv`` per relation has one weight
    ``[in, heads * out]`` for sources and destinations, the two attention vectors and a bias.
    """

    def __init__(
        self,
        relations: Sequence[Relation],
        in_width: int,
        hidden: int,
        heads: int,
        out_dim: int,
        num_layers: int,
    ) -> None:
        super().__init__()
        from torch_geometric.nn import GATConv, HeteroConv

        self.relations = [tuple(r) for r in relations]
        self.convs = nn.ModuleList()
        width = in_width
        for i in range(num_layers):
            last = i == num_layers - 1
            h, out = (1, out_dim) if last else (heads, hidden)
            convs = {
                r: GATConv(width, out, heads=h, concat=not last, add_self_loops=False)
                for r in self.relations
            }
            self.convs.append(HeteroConv(convs, aggr="sum"))
            width = out if last else h * out

    def forward(self, x: Mapping[str, Tensor], edge_index: Mapping[Relation, Tensor]) -> dict:
        """Outputs of every type on a ``NeighborLoader`` sub-graph (every layer on every node)."""
        h = dict(x)
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            h = conv(h, edge_index)
            if i < last:
                h = {t: F.elu(v) for t, v in h.items()}
        return h

    def forward_blocks(self, blocks: Sequence[Any], x: Mapping[str, Tensor]) -> dict:
        """Outputs of the last block's destinations on fleetgnn's typed blocks (input first).

        Each relation's ``GATConv`` runs on ``(h[s], h[d][:D_d])`` with its block edges.
        """
        h = dict(x)
        last = len(self.convs) - 1
        for i, (conv, block) in enumerate(zip(self.convs, blocks, strict=True)):
            out: dict[str, Tensor] = {}
            for rel, (indptr, indices) in block.edges.items():
                s, _, d = rel
                m = block.num_dst[d]
                dst = torch.repeat_interleave(
                    torch.arange(m, device=indptr.device), indptr[1:] - indptr[:-1]
                )
                edge_index = torch.stack([indices, dst])
                res = conv.convs[rel]((h[s], h[d][:m]), edge_index, size=(h[s].shape[0], m))
                out[d] = out[d] + res if d in out else res
            h = {t: F.elu(v) for t, v in out.items()} if i < last else out
        return h


def add_rgat_workload_options(p: argparse.ArgumentParser) -> None:
    """The R-GAT workload's options of the typed benchmark scripts: dataset, model, sampling."""
    cache = default_cache_dir()
    p.add_argument("--scale", type=float, default=0.1, help="igbh-like scale")
    p.add_argument("--seed", type=int, default=0, help="dataset seed")
    p.add_argument("--cache-dir", type=Path, default=cache, help=f"default: {cache}")
    p.add_argument("--hidden", type=int, default=64, help="width per head of the hidden layers")
    p.add_argument("--heads", type=int, default=4, help="heads of the hidden layers")
    p.add_argument("--fanouts", default="15,10,5", help="per relation, by hop from the seeds")
    p.add_argument("--batch-size", type=int, default=1024, help="training nodes per step")


def copy_rgat_weights(fleet: nn.Module, pyg: PygRGAT) -> None:
    """Load a fleetgnn :class:`~fleetgnn.nn.hetero.HeteroGNN` (R-GAT) into :class:`PygRGAT`."""
    with torch.no_grad():
        for fc, pc in zip(fleet.convs, pyg.convs, strict=True):  # type: ignore[attr-defined]
            for r, rel in enumerate(fc.relations):
                conv = pc.convs[rel]
                conv.lin.weight.copy_(fc.lin[r].T)
                conv.att_src.copy_(fc.att_src[r][None])
                conv.att_dst.copy_(fc.att_dst[r][None])
                conv.bias.copy_(fc.bias[r])


def hetero_data(engine: Any) -> Any:
    """The engine's typed graph as PyG's ``HeteroData``: the rows fleetgnn reads, every relation.

    Features as the engine gathers them (its dtype and feature normalisation); labels on the
    target type (``y``); ``edge_index`` per relation in type-local IDs (``[src; dst]``).
    """
    from torch_geometric.data import HeteroData

    graph: HeteroGraph = engine.graph
    s = graph.schema
    data = HeteroData()
    for t in s.node_types:
        data[t].num_nodes = s.count(t)
        rows = torch.from_numpy(np.array(graph.x[t]))  # a copy: PyG owns its tensors
        data[t].x = normalize_rows(rows.to(engine.dtype), engine.feature_norm)
    data[s.target].y = engine.y
    for rel in s.relations:
        src, dst = graph.relation_edges(rel)
        data[rel].edge_index = torch.from_numpy(np.stack([src, dst]))
    return data


def _loader_steps(
    engine: Any, data: Any, model: PygRGAT, opt: Any, fanouts: list[int], steps: int
) -> Callable[[], None]:
    """PyG's ``NeighborLoader`` over the training nodes: the first ``steps`` batches."""
    from torch_geometric.loader import NeighborLoader

    target = engine.schema.target
    loader = NeighborLoader(
        data,
        num_neighbors={rel: list(fanouts) for rel in engine.schema.relations},
        input_nodes=(target, engine.train_ids - engine.target_offset),
        batch_size=engine.config.batch_size,
        shuffle=True,
    )

    def run() -> None:
        model.train()
        for i, batch in enumerate(loader):
            if i == steps:
                break
            batch = batch.to(engine.device)
            n = int(batch[target].batch_size)
            logits = model(batch.x_dict, batch.edge_index_dict)[target][:n]
            optimizer_step(opt, F.cross_entropy(logits, batch[target].y[:n]))

    return run


def _blocks_steps(engine: Any, model: PygRGAT, opt: Any, steps: int) -> Callable[[], None]:
    """PyG's layers on the typed blocks fleetgnn's sampler draws for each epoch."""
    state = {"epoch": 0}

    def run() -> None:
        e = state["epoch"]
        state["epoch"] += 1
        model.train()
        for step in range(steps):
            seeds = engine.loader.batch(e, step)
            sample = engine.sampler.sample_from_nodes(seeds, epoch=e, step=step)
            blocks = [b.to(engine.device) for b in sample.blocks]
            x = engine.features(blocks[0])
            logits = model.forward_blocks(blocks, x)[engine.schema.target]
            optimizer_step(opt, F.cross_entropy(logits, engine.labels(seeds)))

    return run


def _parameters(model: nn.Module) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def rgat_minibatch(
    opts: Any,
    threads: int,
    graph: HeteroGraph,
    name: str,
    *,
    hidden: int = 64,
    heads: int = 4,
    fanouts: Sequence[int] = (15, 10, 5),
    batch_size: int = 1024,
    steps: int | None = None,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """R-GAT mini-batch steps: fleetgnn's typed reference engine vs PyG (see the module doc).

    Args:
        opts: Suite options (``repeat``).
        threads: torch threads in use (recorded).
        graph: The typed graph (every type featured, one width).
        name: The dataset's name in the table.
        hidden: Width per head of the hidden layers.
        heads: Heads of the hidden layers.
        fanouts: Per relation, by hop from the seeds (one layer each).
        batch_size: Training nodes per step.
        steps: Steps per timed call (``None``: a whole epoch).
        device: Where every model and its data live.

    Raises:
        ConfigError: A type without features, or features of several widths.
    """
    widths = {t: graph.feature_width(t) for t in graph.schema.node_types}
    if None in widths.values() or len(set(widths.values())) != 1:
        raise ConfigError(
            f"the hetero benchmark needs features of one width on every type (got {widths}); "
            f"use the igbh-like preset"
        )
    fanouts = list(fanouts)
    engine, cfg = reference_engine(
        graph,
        [
            "model.name=rgat",
            "train.mode=minibatch",
            f"model.num_layers={len(fanouts)}",
            f"model.hidden={hidden}",
            f"model.heads={heads}",
            "model.dropout=0.0",
            f"train.fanouts={fanouts}",
            f"train.batch_size={batch_size}",
            f"train.device={device}",
        ],
    )
    per_epoch = engine.steps_per_epoch()
    steps = per_epoch if steps is None else min(per_epoch, steps)
    fleet = EngineSteps(engine, steps)
    calls: dict[str, Callable[[], None]] = {"fleetgnn": fleet}
    diffs: dict[str, float] = {}
    params = {"fleetgnn": _parameters(engine.model)}
    skipped = {}
    if not has_pyg():
        skipped[LOADER_PEER] = skipped[BLOCKS_PEER] = NO_PYG
    else:
        relations = graph.schema.relations
        in_width = int(next(iter(widths.values())))  # type: ignore[arg-type]

        def pyg_model() -> PygRGAT:
            m = PygRGAT(relations, in_width, hidden, heads, engine.num_classes, len(fanouts))
            copy_rgat_weights(engine.model, m)
            return m.to(engine.device)

        model = pyg_model()
        params["PyG"] = _parameters(model)
        seeds = engine.loader.batch(0, 0)
        blocks = [b.to(engine.device) for b in engine.sampler.sample_from_nodes(seeds).blocks]
        x = engine.features(blocks[0])
        engine.model.eval()
        model.eval()
        with torch.no_grad():
            ref = engine.model(engine.aggregators(blocks), x)
            got = model.forward_blocks(blocks, x)[graph.schema.target]
        engine.model.train()
        diffs[BLOCKS_PEER] = float((got - ref).abs().max())
        calls[BLOCKS_PEER] = _blocks_steps(engine, model, peer_optimizer(cfg, model), steps)
        missing = neighbor_loader_missing()
        if missing is None:
            loader_model = pyg_model()
            calls[LOADER_PEER] = _loader_steps(
                engine,
                hetero_data(engine),
                loader_model,
                peer_optimizer(cfg, loader_model),
                fanouts,
                steps,
            )
        else:
            skipped[LOADER_PEER] = missing
    times = interleaved(calls, opts.repeat, engine.device)
    s = graph.schema
    return measurement(
        SECTION,
        f"R-GAT mini-batch, {name}, {len(s.relations)} relations, {len(fanouts)} layers, "
        f"{heads} x {hidden} hidden, fanouts {','.join(map(str, fanouts))} per relation, batch "
        f"{batch_size} ({steps} of {per_epoch} steps per epoch)" + on_device(engine.device),
        threads,
        times,
        skipped=skipped,
        extra={
            "max_abs_logit_diff": diffs,
            "parameters": params,
            "fleetgnn_phases_s": fleet.phases(),
            "steps_timed": steps,
            "steps_per_epoch": per_epoch,
            "device": str(engine.device),
            "num_nodes": {t: s.count(t) for t in s.node_types},
            "num_edges": {"__".join(r): graph.num_relation_edges(r) for r in s.relations},
            "config": cfg.to_dict(),
        },
    )


def run(
    opts: Any, threads: int, log: Callable[[str], None], typed: tuple[HeteroGraph, str]
) -> list[dict[str, Any]]:
    """The hetero measurements: R-GAT mini-batch steps on the typed graph."""
    row = rgat_minibatch(opts, threads, *typed, steps=2 if opts.quick else None)
    log(progress_line(row))
    return [row]
