"""Section ``epoch``: one training epoch of the reference engine against PyG running the same model.

- ``gcn-full``: full-graph GCN (2 layers, dropout 0.5, Adam, one step per epoch) on Cora (or a
  Cora-sized synthetic graph; hidden 16, the usual Cora setting) and on ``products-like``
  (hidden 128), against PyG's ``GCNConv(cached=True)`` with a ``torch.sparse_csr`` ``adj_t``
  (PyG's fused sparse-matrix path, its fastest on CPU) and, on Cora only, with an
  ``edge_index`` (gather-scatter message passing, PyG's default; 5-10x slower than CSR on the
  large graph, where it would take most of the section's time).
  Each full-graph row also times fleetgnn's own mixed-precision variant (``fleetgnn bf16``:
  ``train.autocast=bf16``, the same weights; kind ``baseline``), interleaved with the float32
  epochs; ``extra.bf16_over_float32`` is its median epoch time over float32's (above 1: slower;
  bf16 matrix products are not faster than float32 on every CPU).
- ``sage-minibatch``: GraphSAGE (mean; 3 layers, hidden 128, fanouts 15,10,5 by hop from the
  seeds, batch 1,024, dropout 0.5, Adam) on ``products-like``, sampling and gathering included,
  against PyG's ``NeighborLoader`` + ``SAGEConv`` when ``NeighborLoader`` can sample (it needs
  pyg-lib or torch-sparse; skipped with the reason otherwise), and against PyG's ``SAGEConv``
  (CSR ``adj_t``) trained on the blocks fleetgnn's sampler drew (the conversion to PyG's format
  timed as part of its epoch): that ratio isolates model compute.

fleetgnn runs :class:`~fleetgnn.engines.reference.ReferenceEngine` (config from
:func:`~fleetgnn.train.load_config`). The PyG models start from the same weights, with the same
optimizer, loss and dropout rate (``F.dropout``, where fleetgnn uses keyed masks); before timing,
each one runs once in eval mode on fleetgnn's input and the largest logit difference is kept
(``extra.max_abs_logit_diff``: they compute the same function). fleetgnn's epoch split into the
engine's own step phases (sample, gather, forward, backward, optimizer) is kept as
``extra.fleetgnn_phases_s``.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fleetgnn.bench.loops import EngineSteps, optimizer_step, peer_optimizer
from fleetgnn.bench.peers import (
    NO_PYG,
    PygGCN,
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
from fleetgnn.engines.common import num_classes_of
from fleetgnn.graph import Graph
from fleetgnn.train import Config, engine_from_config, load_config

SECTION = "epoch"
#: The mixed-precision variant of fleetgnn's full-graph epoch (``train.autocast=bf16``).
BF16 = "fleetgnn bf16"
#: PyG's graph formats: table name -> :func:`~fleetgnn.bench.peers.csc_to_pyg` format.
PYG_FORMATS = {"PyG GCNConv, edge_index": "edge_index", "PyG GCNConv, CSR adj_t": "csr"}


def reference_engine(graph: Graph, overrides: Sequence[str]) -> Any:
    """The reference engine for ``graph`` with the config ``overrides`` (float32, CPU, seed 0)."""
    cfg = load_config(None, ["train.dtype=float32", "train.seed=0", *overrides])
    return engine_from_config(cfg, graph), cfg


#: PyG's layer for each full-graph model :func:`full_epoch` runs.
PYG_CONVS = {"gcn": "GCNConv", "sage": "SAGEConv"}
#: :func:`~fleetgnn.bench.peers.csc_to_pyg` format -> its name in the table.
FORMAT_NAMES = {"edge_index": "edge_index", "csr": "CSR adj_t"}


def gcn_full(
    opts: Any,
    threads: int,
    graph: Graph,
    name: str,
    hidden: int,
    per_call: int,
    formats: Sequence[str] = tuple(PYG_FORMATS),
) -> dict[str, Any]:
    """Full-graph GCN epochs: fleetgnn's reference engine vs PyG ``GCNConv`` (two formats).

    :func:`full_epoch` with ``model="gcn"`` on the CPU; ``formats`` are the table's names of the
    PyG peers (keys of :data:`PYG_FORMATS`), the other arguments are :func:`full_epoch`'s.
    """
    fmts = tuple(PYG_FORMATS[label] for label in formats)
    return full_epoch(opts, threads, graph, name, hidden, per_call, model="gcn", formats=fmts)


def full_epoch(
    opts: Any,
    threads: int,
    graph: Graph,
    name: str,
    hidden: int,
    per_call: int,
    *,
    model: str = "gcn",
    formats: Sequence[str] = tuple(FORMAT_NAMES),
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Full-graph epochs (forward, backward, step) of fleetgnn's reference engine vs PyG.

    Args:
        opts: Suite options (``repeat``).
        threads: torch threads in use (recorded).
        graph: The dataset.
        name: The dataset's name in the table.
        hidden: Hidden width.
        per_call: Epochs per timed call (small graphs: several, so a call is not a few ms).
        model: ``"gcn"`` (against ``GCNConv(cached=True)``) or ``"sage"`` (``SAGEConv`` mean).
        formats: PyG's graph formats to run (:data:`FORMAT_NAMES`: ``edge_index``, ``csr``).
        device: Where every model and its data live (``train.device`` of the engine).

    A PyG peer that fails on its first (untimed) epoch is listed under ``skipped`` with the
    error instead of failing the row.
    """
    overrides = [
        f"model.name={model}",
        "train.mode=full",
        "model.num_layers=2",
        f"model.hidden={hidden}",
        "model.dropout=0.5",
        f"train.device={device}",
    ]
    engine, cfg = reference_engine(graph, overrides)
    mixed, _ = reference_engine(graph, [*overrides, "train.autocast=bf16"])
    mixed.model.load_state_dict(engine.model.state_dict())
    dims = [engine.x.shape[1], hidden, num_classes_of(engine.graph)]
    conv = PYG_CONVS[model]
    fleet = EngineSteps(engine, per_call=per_call)
    calls: dict[str, Callable[[], None]] = {
        "fleetgnn": fleet,
        BF16: EngineSteps(mixed, per_call=per_call),
    }
    diffs: dict[str, float] = {}
    skipped = {}
    if has_pyg():
        engine.model.eval()
        with torch.no_grad():
            ref = engine.model([engine.full_aggregator] * 2, engine.x)
        engine.model.train()
        train = engine.train_ids.to(engine.device)
        target = engine.y[train]
        for fmt in formats:
            label = f"PyG {conv}, {FORMAT_NAMES[fmt]}"
            try:
                adj = graph_to_pyg(graph, fmt, engine.dtype, engine.device)
                peer = (PygGCN if model == "gcn" else PygSAGEFull)(dims, 0.5).to(engine.device)
                copy_weights(engine.model, peer, model)
                peer.eval()
                with torch.no_grad():
                    diffs[label] = float((peer(engine.x, adj) - ref).abs().max())
                peer.train()
                opt = peer_optimizer(cfg, peer)

                def pyg_epochs(
                    peer: nn.Module = peer, opt: Any = opt, adj: Tensor = adj, n: int = per_call
                ) -> None:
                    for _ in range(n):
                        optimizer_step(opt, F.cross_entropy(peer(engine.x, adj)[train], target))

                pyg_epochs(n=1)  # fails here, untimed, if PyG cannot train in this format
            except (RuntimeError, NotImplementedError, ValueError, TypeError) as e:
                skipped[label] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
                continue
            calls[label] = pyg_epochs
    else:
        skipped[f"PyG {conv}"] = NO_PYG
    times = interleaved(calls, opts.repeat, engine.device)
    times = {k: [t / per_call for t in v] for k, v in times.items()}  # seconds per epoch
    bf16_ratio = statistics.median(times[BF16]) / statistics.median(times["fleetgnn"])
    return measurement(
        SECTION,
        f"{model.upper()} full-graph epoch, {name}, 2 layers, hidden {hidden}"
        + on_device(engine.device),
        threads,
        times,
        skipped=skipped,
        kinds={BF16: "baseline"},
        extra={
            "bf16_over_float32": bf16_ratio,
            "max_abs_logit_diff": diffs,
            "fleetgnn_phases_s": fleet.phases(),
            "epochs_per_call": per_call,
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "device": str(engine.device),
            "config": cfg.to_dict(),
        },
    )


def sage_minibatch(
    opts: Any,
    threads: int,
    graph: Graph,
    name: str,
    hidden: int,
    *,
    fanouts: Sequence[int] = (15, 10, 5),
    batch_size: int = 1024,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Mini-batch GraphSAGE epochs: fleetgnn (sampling and gathering included) vs PyG.

    ``fanouts`` by hop from the seeds (one layer each); the other arguments are
    :func:`full_epoch`'s.
    """
    fanouts = list(fanouts)
    engine, cfg = reference_engine(
        graph,
        [
            "model.name=sage",
            "train.mode=minibatch",
            f"model.num_layers={len(fanouts)}",
            f"model.hidden={hidden}",
            "model.dropout=0.5",
            f"train.fanouts={fanouts}",
            f"train.batch_size={batch_size}",
            f"train.device={device}",
        ],
    )
    dims = [engine.x.shape[1], *[hidden] * (len(fanouts) - 1), num_classes_of(engine.graph)]
    fleet = EngineSteps(engine)
    calls: dict[str, Callable[[], None]] = {"fleetgnn": fleet}
    diffs: dict[str, float] = {}
    skipped = {}
    if not has_pyg():
        skipped["PyG NeighborLoader + SAGEConv"] = NO_PYG
    else:
        missing = neighbor_loader_missing()
        if missing is None:
            calls["PyG NeighborLoader + SAGEConv"] = _neighbor_loader_epoch(engine, cfg, dims)
        else:
            skipped["PyG NeighborLoader + SAGEConv"] = missing
        # PyG's layers on fleetgnn's blocks: the same samples, model compute compared
        aggs, x, seeds, _ = engine.batch(0, 0)
        blocks = list(engine.sampler.sample_from_nodes(seeds.cpu()).blocks)
        engine.model.eval()
        with torch.no_grad():
            ref = engine.model(aggs, x)
        engine.model.train()
        model = PygSAGE(dims, 0.5).to(engine.device)
        copy_weights(engine.model, model, "sage")
        model.eval()
        with torch.no_grad():
            got = model(x, [block_to_pyg(b, "csr", engine.device, engine.dtype) for b in blocks])
        label = "PyG SAGEConv (CSR adj_t) on fleetgnn's samples"
        diffs[label] = float((got - ref).abs().max())
        model.train()
        calls[label] = _blocks_epoch(engine, model, peer_optimizer(cfg, model))
    times = interleaved(calls, opts.repeat, engine.device)
    return measurement(
        SECTION,
        f"GraphSAGE mini-batch epoch, {name}, {len(fanouts)} layers, hidden {hidden}, fanouts "
        f"{','.join(map(str, fanouts))}, batch {batch_size} ({engine.steps_per_epoch()} steps)"
        + on_device(engine.device),
        threads,
        times,
        skipped=skipped,
        extra={
            "max_abs_logit_diff": diffs,
            "fleetgnn_phases_s": fleet.phases(),
            "device": str(engine.device),
            "steps_per_epoch": engine.steps_per_epoch(),
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "config": cfg.to_dict(),
        },
    )


def _blocks_epoch(engine: Any, model: PygSAGE, opt: torch.optim.Optimizer) -> Callable[[], None]:
    """One epoch of PyG's SAGE on the blocks fleetgnn's sampler draws for that epoch."""
    state = {"epoch": 0}

    def epoch() -> None:
        e = state["epoch"]
        state["epoch"] += 1
        dev = engine.device
        for step in range(engine.steps_per_epoch()):
            seeds = engine.loader.batch(e, step)
            blocks = engine.sampler.sample_from_nodes(seeds, epoch=e, step=step).blocks
            graphs = [block_to_pyg(b, "csr", dev, engine.dtype) for b in blocks]
            x = engine.x[blocks[0].src_ids.to(dev)]
            target = engine.y[seeds.to(dev)]
            optimizer_step(opt, F.cross_entropy(model(x, graphs), target))

    return epoch


def _neighbor_loader_epoch(engine: Any, cfg: Config, dims: list[int]) -> Callable[[], None]:
    """One epoch of PyG's ``NeighborLoader`` + ``SAGEConv`` over the engine's graph and data."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    edge_index = graph_to_pyg(engine.graph, "edge_index", engine.dtype, torch.device("cpu"))
    data = Data(x=engine.x.cpu(), y=engine.y.cpu(), edge_index=edge_index)
    data.num_nodes = engine.graph.num_nodes
    loader = NeighborLoader(
        data,
        num_neighbors=list(cfg.train.fanouts),
        batch_size=cfg.train.batch_size,
        input_nodes=engine.train_ids,
        shuffle=True,
    )
    model = PygSAGEFull(dims, 0.5).to(engine.device)
    copy_weights(engine.model, model, "sage")
    opt = peer_optimizer(cfg, model)

    def epoch() -> None:
        for batch in loader:
            batch = batch.to(engine.device)
            n = int(batch.batch_size)
            logits = model(batch.x, batch.edge_index)[:n]
            optimizer_step(opt, F.cross_entropy(logits, batch.y[:n]))

    return epoch


def run(
    opts: Any,
    threads: int,
    log: Callable[[str], None],
    small: tuple[Graph, str],
    large: tuple[Graph, str],
) -> list[dict[str, Any]]:
    """The epoch measurements: GCN on the small and the large graph, SAGE on the large one."""
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    rows = []
    small_g, small_name = small
    large_g, large_name = large
    rows.append(gcn_full(opts, threads, small_g, small_name, 16, 5 if opts.quick else 20))
    log(progress_line(rows[-1]))
    # PyG's edge_index path is 5-10x slower than its CSR one on the large graph: CSR only there
    csr = ("PyG GCNConv, CSR adj_t",)
    rows.append(gcn_full(opts, threads, large_g, large_name, 128, 1, formats=csr))
    log(progress_line(rows[-1]))
    rows.append(sage_minibatch(opts, threads, large_g, large_name, 128))
    log(progress_line(rows[-1]))
    return rows
