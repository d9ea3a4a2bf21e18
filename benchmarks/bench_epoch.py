"""One training epoch: fleetgnn's reference engine against PyG running the same model.

Two workloads on a synthetic dataset (``products-like --scale 0.05`` by default: 122k nodes,
~3.1M directed edges, 100 features, 47 classes, ~9.8k training nodes), generated once with
``fleetgnn.graph.synthetic.prepare_synthetic`` into a cache directory and reused:

- ``gcn-full``: full-graph GCN, 2 layers, hidden 128 (hidden 256 is the usual ogbn-products
  setting; 128 keeps an epoch short on a 2-core CPU), dropout 0.5, Adam, one step per epoch.
- ``sage-minibatch``: mini-batch GraphSAGE (mean), 3 layers, hidden 128, fanouts 15,10,5 (by hop
  from the seeds), batch 1024, dropout 0.5, Adam.

fleetgnn runs :class:`~fleetgnn.engines.reference.ReferenceEngine` (config from
:func:`~fleetgnn.train.load_config` with overrides); its time breakdown (sample / gather / forward
/ backward / optimizer) comes from the engine's own step stats. The peers, when ``torch_geometric``
imports, are the same model written with PyG layers (``GCNConv`` with ``cached=True`` as in PyG's
own full-graph examples; ``SAGEConv`` with mean aggregation and a root weight), started from the
same weights, with the same optimizer, loss and dropout rate (``torch.nn.functional.dropout``,
where fleetgnn uses counter-keyed masks), in PyG's two graph formats:

- ``pyg``: an ``edge_index [2, E]`` (gather + scatter message passing, PyG's default path);
- ``pyg_csr``: a ``torch.sparse_csr`` ``adj_t`` (PyG's fused sparse-matrix path,
  ``torch.sparse.mm``), built directly from the CSC arrays.

Before timing, every peer is run once in eval mode on the same input as fleetgnn and the largest
logit difference is recorded (they compute the same function).

PyG's own ``NeighborLoader`` needs ``pyg-lib`` or ``torch-sparse``; when neither is installed the
PyG mini-batch loops are fed the blocks sampled by fleetgnn's sampler (converted to the peer's
format inside the timed ``sample`` phase), so the ratio isolates model compute (forward,
backward, optimizer). Without ``torch_geometric`` only fleetgnn is timed.

Epochs of the implementations are interleaved (fleetgnn, pyg, pyg_csr, fleetgnn, ...) after one
warm-up epoch each, so on a shared machine both see similar background load; the median epoch is
reported. Results (with the machine description and the load average) go to ``--out``.

The PyG models, the dataset cache and the machine description come from :mod:`fleetgnn.bench`;
``fleetgnn bench --only epoch`` runs the suite's version of these workloads (without the phase
breakdown this script reports).

Usage::

    python benchmarks/bench_epoch.py --threads 1 --out benchmarks/results/bench_epoch.json
    python benchmarks/bench_epoch.py --scale 0.01 --repeats 1 --workloads gcn-full
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fleetgnn.bench.data import cached_dataset, default_cache_dir
from fleetgnn.bench.machine import loadavg, machine_info
from fleetgnn.bench.peers import PygGCN, PygSAGE, copy_weights
from fleetgnn.bench.peers import block_to_pyg as _block_to_pyg
from fleetgnn.bench.peers import csc_to_pyg as _csc_to_pyg
from fleetgnn.engines.reference import ReferenceEngine
from fleetgnn.graph import Graph
from fleetgnn.ops import keyed_dropout
from fleetgnn.sampling import Block
from fleetgnn.train import Config, engine_from_config, load_config

PHASES: tuple[str, ...] = ("sample", "gather", "forward", "backward", "optimizer")
WORKLOADS: tuple[str, ...] = ("gcn-full", "sage-minibatch")
#: PyG peers: graph format passed to the layers.
PYG_FORMATS: tuple[str, ...] = ("pyg", "pyg_csr")
#: This script's names of PyG's formats -> :func:`fleetgnn.bench.peers.csc_to_pyg`'s.
_FORMAT = {"pyg": "edge_index", "pyg_csr": "csr"}


def csc_to_pyg(
    indptr: Tensor, indices: Tensor, num_src: int, fmt: str, dtype: torch.dtype
) -> Tensor:
    """:func:`fleetgnn.bench.peers.csc_to_pyg` with this script's format names."""
    return _csc_to_pyg(indptr, indices, num_src, _FORMAT[fmt], dtype)


def block_to_pyg(
    block: Block, fmt: str, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, int, int]:
    """:func:`fleetgnn.bench.peers.block_to_pyg` with this script's format names."""
    return _block_to_pyg(block, _FORMAT[fmt], device, dtype)


# ------------------------------------------------------------------------------------ timing


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_time(fn: Callable[[], Any], device: torch.device, repeat: int = 5) -> float:
    """Median seconds of ``repeat`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _zero_times() -> dict[str, float]:
    return dict.fromkeys(PHASES, 0.0)


def fleet_epoch(engine: ReferenceEngine, epoch: int) -> dict[str, Any]:
    """One epoch of the fleetgnn engine: wall seconds, phase seconds, steps, loss."""
    _sync(engine.device)
    t0 = time.perf_counter()
    steps = engine.run_epoch(epoch)
    _sync(engine.device)
    wall = time.perf_counter() - t0
    times = _zero_times()
    for s in steps:
        for k in PHASES:
            times[k] += float(s.times.get(k, 0.0))
    count = sum(s.count for s in steps)
    return {
        "epoch_s": wall,
        "times": times,
        "steps": len(steps),
        "loss": sum(s.loss_sum for s in steps) / max(count, 1),
    }


def _pyg_step(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    forward: Callable[[], Tensor],
    target: Tensor,
    times: dict[str, float],
    device: torch.device,
) -> float:
    t0 = time.perf_counter()
    logits = forward()
    loss = F.cross_entropy(logits, target)
    _sync(device)
    t1 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    _sync(device)
    t2 = time.perf_counter()
    opt.step()
    _sync(device)
    t3 = time.perf_counter()
    times["forward"] += t1 - t0
    times["backward"] += t2 - t1
    times["optimizer"] += t3 - t2
    return float(loss.detach()) * int(target.numel())


def pyg_gcn_epoch(
    model: PygGCN, opt: torch.optim.Optimizer, engine: ReferenceEngine, graph: Tensor
) -> dict[str, Any]:
    """One full-graph epoch of the PyG GCN on the engine's features, labels and train nodes."""
    model.train()
    times = _zero_times()
    train = engine.train_ids.to(engine.device)
    t0 = time.perf_counter()
    loss_sum = _pyg_step(
        model,
        opt,
        lambda: model(engine.x, graph)[train],
        engine.y[train],
        times,
        engine.device,
    )
    wall = time.perf_counter() - t0
    return {"epoch_s": wall, "times": times, "steps": 1, "loss": loss_sum / train.numel()}


def pyg_sage_epoch(
    model: PygSAGE, opt: torch.optim.Optimizer, engine: ReferenceEngine, epoch: int, fmt: str
) -> dict[str, Any]:
    """One mini-batch epoch of the PyG SAGE model on blocks from fleetgnn's sampler.

    Same seeds and same samples as the engine's epoch ``epoch`` (both are keyed by
    ``(seed, epoch, step)``).
    """
    model.train()
    times = _zero_times()
    dev = engine.device
    loss_sum, count = 0.0, 0
    t_epoch = time.perf_counter()
    for step in range(engine.steps_per_epoch()):
        t0 = time.perf_counter()
        seeds = engine.loader.batch(epoch, step)
        blocks = engine.sampler.sample(seeds, epoch, step)
        edges = [block_to_pyg(b, fmt, dev, engine.dtype) for b in blocks]
        t1 = time.perf_counter()
        x = engine.x[blocks[0].src_ids.to(dev)]
        _sync(dev)
        t2 = time.perf_counter()
        times["sample"] += t1 - t0
        times["gather"] += t2 - t1
        target = engine.y[seeds.to(dev)]
        loss_sum += _pyg_step(
            model, opt, lambda x=x, edges=edges: model(x, edges), target, times, dev
        )
        count += int(seeds.numel())
    wall = time.perf_counter() - t_epoch
    return {
        "epoch_s": wall,
        "times": times,
        "steps": engine.steps_per_epoch(),
        "loss": loss_sum / max(count, 1),
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median epoch time, mean phase times and the raw per-epoch numbers."""
    epochs = [r["epoch_s"] for r in runs]
    return {
        "epoch_s_median": statistics.median(epochs),
        "epoch_s_min": min(epochs),
        "epoch_s_all": epochs,
        "times_mean": {k: statistics.fmean(r["times"][k] for r in runs) for k in PHASES},
        "steps": runs[0]["steps"],
        "loss_last": runs[-1]["loss"],
    }


def _optim(cfg: Config, model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(
        model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
    )


# ------------------------------------------------------------------------------------ workloads


def bench_gcn_full(graph: Graph, args: argparse.Namespace, use_pyg: bool) -> dict[str, Any]:
    """Full-graph GCN: fleetgnn reference engine vs PyG ``GCNConv``."""
    cfg = load_config(
        None,
        [
            "model.name=gcn",
            "train.mode=full",
            "model.num_layers=2",
            f"model.hidden={args.hidden}",
            f"model.dropout={args.dropout}",
            f"train.seed={args.seed}",
            f"train.device={args.device}",
            "train.dtype=float32",
        ],
    )
    t0 = time.perf_counter()
    engine = engine_from_config(cfg, graph)
    setup_s = time.perf_counter() - t0
    dims = [engine.x.shape[1], args.hidden, engine.num_classes]
    out: dict[str, Any] = {
        "workload": "gcn-full",
        "model": f"GCN {' -> '.join(map(str, dims))}, dropout {args.dropout}",
        "config": cfg.to_dict(),
        "fleetgnn_setup_s": setup_s,
        "max_abs_logit_diff": {},
    }
    peers: dict[str, tuple[PygGCN, torch.optim.Optimizer, Tensor]] = {}
    if use_pyg:
        indptr = torch.from_numpy(np.array(graph.indptr, dtype=np.int64)).to(engine.device)
        indices = torch.from_numpy(np.array(graph.indices, dtype=np.int64)).to(engine.device)
        engine.model.eval()
        with torch.no_grad():
            ref = engine.model([engine.full_aggregator] * 2, engine.x)
        engine.model.train()
        for fmt in PYG_FORMATS:
            adj = csc_to_pyg(indptr, indices, graph.num_nodes, fmt, engine.dtype)
            model = PygGCN(dims, args.dropout).to(engine.device)
            copy_weights(engine.model, model, "gcn")
            model.eval()
            with torch.no_grad():
                diff = (model(engine.x, adj) - ref).abs().max().item()
            out["max_abs_logit_diff"][fmt] = diff
            peers[fmt] = (model, _optim(cfg, model), adj)
    # the input layer's dropout alone: fleetgnn hashes (seed, step, layer, node ID, feature)
    ids = torch.arange(engine.x.shape[0], device=engine.device)
    out["input_dropout_probe_s"] = {
        "keyed_dropout": _median_time(
            lambda: keyed_dropout(engine.x, args.dropout, 0, 0, 0, ids), engine.device
        ),
        "torch_dropout": _median_time(lambda: F.dropout(engine.x, args.dropout), engine.device),
        "shape": list(engine.x.shape),
    }
    runs: dict[str, list[dict[str, Any]]] = {"fleetgnn": [], **{k: [] for k in peers}}
    fleet_epoch(engine, 0)  # warm-up (builds the cached full-graph aggregator)
    for model, opt, adj in peers.values():
        pyg_gcn_epoch(model, opt, engine, adj)  # warm-up (fills GCNConv's cache)
    for r in range(args.repeats):
        runs["fleetgnn"].append(fleet_epoch(engine, 1 + r))
        for fmt, (model, opt, adj) in peers.items():
            runs[fmt].append(pyg_gcn_epoch(model, opt, engine, adj))
    out["impls"] = {k: summarise(v) for k, v in runs.items()}
    return out


def bench_sage_minibatch(graph: Graph, args: argparse.Namespace, use_pyg: bool) -> dict[str, Any]:
    """Mini-batch GraphSAGE: fleetgnn reference engine vs PyG ``SAGEConv`` on the same blocks."""
    fanouts = [int(f) for f in args.fanouts.split(",")]
    cfg = load_config(
        None,
        [
            "model.name=sage",
            "train.mode=minibatch",
            f"model.num_layers={len(fanouts)}",
            f"model.hidden={args.hidden}",
            f"model.dropout={args.dropout}",
            f"train.fanouts={args.fanouts}",
            f"train.batch_size={args.batch_size}",
            f"train.seed={args.seed}",
            f"train.device={args.device}",
            "train.dtype=float32",
        ],
    )
    engine = engine_from_config(cfg, graph)
    dims = [engine.x.shape[1], *[args.hidden] * (len(fanouts) - 1), engine.num_classes]
    out: dict[str, Any] = {
        "workload": "sage-minibatch",
        "model": f"SAGE(mean) {' -> '.join(map(str, dims))}, dropout {args.dropout}",
        "fanouts": fanouts,
        "batch_size": args.batch_size,
        "config": cfg.to_dict(),
        "pyg_sampler": None,
        "max_abs_logit_diff": {},
    }
    peers: dict[str, tuple[PygSAGE, torch.optim.Optimizer]] = {}
    if use_pyg:
        import torch_geometric.typing as pyg_typing

        has_native = bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)
        out["pyg_sampler"] = (
            "fleetgnn blocks (PyG NeighborLoader not timed)"
            if has_native
            else "fleetgnn blocks (PyG NeighborLoader needs pyg-lib or torch-sparse: absent)"
        )
        aggs, x, seeds, _ = engine.batch(0, 0)
        blocks = engine.sampler.sample(seeds.cpu(), 0, 0)  # the same blocks (keyed sampling)
        engine.model.eval()
        with torch.no_grad():
            ref = engine.model(aggs, x)
        engine.model.train()
        for fmt in PYG_FORMATS:
            model = PygSAGE(dims, args.dropout).to(engine.device)
            copy_weights(engine.model, model, "sage")
            model.eval()
            with torch.no_grad():
                got = model(x, [block_to_pyg(b, fmt, engine.device, engine.dtype) for b in blocks])
            out["max_abs_logit_diff"][fmt] = (got - ref).abs().max().item()
            peers[fmt] = (model, _optim(cfg, model))
    runs: dict[str, list[dict[str, Any]]] = {"fleetgnn": [], **{k: [] for k in peers}}
    fleet_epoch(engine, 0)  # warm-up
    for fmt, (model, opt) in peers.items():
        pyg_sage_epoch(model, opt, engine, 0, fmt)
    for r in range(args.repeats):
        runs["fleetgnn"].append(fleet_epoch(engine, 1 + r))
        for fmt, (model, opt) in peers.items():
            runs[fmt].append(pyg_sage_epoch(model, opt, engine, 1 + r, fmt))
    out["impls"] = {k: summarise(v) for k, v in runs.items()}
    return out


# ------------------------------------------------------------------------------------ main


def _ratios(row: dict[str, Any]) -> None:
    """``<peer>_over_fleetgnn`` epoch and model-compute ratios (> 1: fleetgnn faster)."""
    impls = row["impls"]
    f = impls["fleetgnn"]
    model = ("forward", "backward", "optimizer")
    f_model = sum(f["times_mean"][k] for k in model)
    row["ratios"] = {
        name: {
            "epoch": p["epoch_s_median"] / f["epoch_s_median"],
            "model_compute": sum(p["times_mean"][k] for k in model) / f_model,
        }
        for name, p in impls.items()
        if name != "fleetgnn"
    }


def print_row(row: dict[str, Any]) -> None:
    """One workload as a small table."""
    print(f"\n{row['workload']}: {row['model']}")
    for name, diff in row["max_abs_logit_diff"].items():
        print(f"  same weights, eval mode: max |logit diff| fleetgnn vs {name} = {diff:.2e}")
    print(f"  {'impl':<9} {'epoch s':>8} " + " ".join(f"{k:>9}" for k in PHASES))
    for name, r in row["impls"].items():
        cells = " ".join(f"{r['times_mean'][k]:9.3f}" for k in PHASES)
        print(f"  {name:<9} {r['epoch_s_median']:8.3f} {cells}")
    for name, q in row["ratios"].items():
        print(
            f"  {name} / fleetgnn: epoch x{q['epoch']:.2f}, forward+backward+optimizer "
            f"x{q['model_compute']:.2f} (> 1: fleetgnn faster)"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    cache = default_cache_dir()
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--preset", default="products-like")
    p.add_argument("--scale", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0, help="dataset and training seed")
    p.add_argument("--cache-dir", type=Path, default=cache, help=f"default: {cache}")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--fanouts", default="15,10,5", help="by hop from the seeds (one per layer)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=3, help="timed epochs per implementation")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-pyg", dest="pyg", action="store_false", help="time fleetgnn only")
    p.add_argument("--out", type=Path, default=None, help="write the JSON results here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point; returns the JSON-ready report."""
    args = parse_args(argv)
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    info = machine_info(device)
    use_pyg = args.pyg and info["torch_geometric"] is not None
    graph, gen_s = cached_dataset(args.cache_dir, args.preset, args.scale, args.seed)
    print(f"machine: {info}")
    origin = f"generated in {gen_s:.1f} s" if gen_s else "cached"
    print(f"graph: {graph!r} ({origin})")
    if not use_pyg:
        print("PyG peer: not importable (or --no-pyg); timing fleetgnn only")
    benches = {"gcn-full": bench_gcn_full, "sage-minibatch": bench_sage_minibatch}
    rows = []
    for name in args.workloads:
        row = benches[name](graph, args, use_pyg)
        _ratios(row)
        print_row(row)
        rows.append(row)
    info["loadavg_end"] = loadavg()
    report = {
        "benchmark": "epoch",
        "machine": info,
        "graph": {
            "preset": args.preset,
            "scale": args.scale,
            "seed": args.seed,
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "num_features": graph.num_features,
            "num_classes": graph.num_classes,
            "num_train": int(np.asarray(graph.train_mask).sum()),
            "generate_s": gen_s or None,
        },
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "results": rows,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
