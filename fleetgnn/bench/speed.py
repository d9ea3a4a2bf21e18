"""The GPU check's speed tier: a products-scale epoch on one device and its peers there.

Each function measures on the device it is given (a CPU dry run measures the CPU: its figures are
the CPU's, and say so through their ``device``) and returns plain figures for the check's JSON:

- :func:`minibatch_epoch`: the ``minibatch`` engine's whole epoch (SAGE, fanouts by hop, float32,
  every row and the sampler's CSC on the device: ``store.sampling=device``) after a warm-up epoch,
  under each Fisher-Yates kernel of :mod:`fleetgnn.kernels` that runs there; phase times, peak
  memory, and on CUDA the kernels' device time a step from ``torch.profiler`` (a separate,
  profiled run: the timed epoch runs without the profiler);
- :func:`peers_on_blocks`: PyG's ``SAGEConv`` stack trained on the batches the engine's sampler
  draws and its store gathers (each PyG graph format), with the engine's optimizer (fused Adam on
  CUDA): a whole epoch each, and the layers alone (forward, backward, optimizer step) on the same
  prepared batches; PyG's own pipeline (``NeighborLoader``, host sampling) where it can sample;
- :func:`full_graph`: full-graph epochs of the reference and ``fullgraph`` engines against PyG
  (CSR ``adj_t`` and ``edge_index``), the same optimizer; out-of-memory is a figure (``"oom"``);
- :func:`offload_arms`: the ``offload`` engine with a device budget below the graph's bytes, its
  copies overlapped (pinned), blocking from pinned memory, and blocking from pageable memory
  (what ``offload.overlap_transfers=false`` runs), against the in-device full-graph epoch.
"""

from __future__ import annotations

import copy
import gc
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fleetgnn.bench.loops import optimizer_step, peer_optimizer
from fleetgnn.bench.peers import (
    PygGCN,
    PygSAGE,
    PygSAGEFull,
    block_to_pyg,
    copy_weights,
    graph_to_pyg,
    has_pyg,
    neighbor_loader_missing,
)
from fleetgnn.bench.timing import sync
from fleetgnn.config import load_config
from fleetgnn.distributed.transfer import Transfers
from fleetgnn.engines.base import resolve_steps
from fleetgnn.engines.common import num_classes_of
from fleetgnn.graph import Graph
from fleetgnn.kernels import KERNELS
from fleetgnn.train import engine_from_config

#: Step phases summed over an epoch (the engines' step stats).
PHASES = ("sample", "gather", "forward", "backward", "optimizer")
#: An arm that ran out of device memory records this instead of seconds.
OOM = "oom"


def _reset_peak(device: torch.device) -> None:
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: torch.device) -> int | None:
    """Peak bytes allocated on a CUDA device since the last reset (None elsewhere)."""
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _is_oom(e: BaseException) -> bool:
    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    return (bool(oom) and isinstance(e, oom)) or "out of memory" in str(e).lower()


def _why(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"


def _timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    """Seconds of ``fn()`` with the device's queue drained before and after, and its result.

    A list of step stats comes back resolved (the engines' steps may hand back numbers still
    on their way from the device: read after the clock stopped).
    """
    sync(device)
    t0 = time.perf_counter()
    got = fn()
    sync(device)
    secs = time.perf_counter() - t0
    if isinstance(got, list) and got and hasattr(got[-1], "resolve"):
        got = resolve_steps(got)
    return secs, got


def _loss(st: Any) -> float:
    return float(st.loss_sum)


def sage_engine(graph: Graph, device: torch.device, size: dict[str, Any]) -> tuple[Any, Any]:
    """The speed tier's minibatch engine and its config: SAGE, every row on the device.

    ``size``: ``hidden``, ``layers``, ``fanouts``, ``batch``. The sampler's CSC is on the device
    (``store.sampling=device``) on every device, so the Fisher-Yates kernels run in a dry run too.
    """
    fanouts = list(size["fanouts"])
    sets = [
        "train.engine=minibatch",
        "train.mode=minibatch",
        f"train.device={device}",
        "train.dtype=float32",
        "train.seed=0",
        "model.name=sage",
        f"model.hidden={size['hidden']}",
        f"model.num_layers={len(fanouts)}",
        f"train.fanouts={fanouts}",
        f"train.batch_size={size['batch']}",
        "store.device_budget=null",
        "store.host_budget=null",
        "store.sampling=device",
    ]
    cfg = load_config(None, sets)
    return engine_from_config(cfg, graph, None), cfg


def _epoch_phases(stats: Sequence[Any]) -> dict[str, float]:
    return {k: sum(float(st.times.get(k, 0.0)) for st in stats) for k in PHASES}


def device_us(events: Any) -> float:
    """Microseconds the device spent, from ``torch.profiler``'s ``key_averages()``.

    The device's own events only (kernels, copies, memsets: every event whose ``device_type``
    is not the CPU), as torch's profiler table totals "Self CUDA": a CPU op's
    ``self_device_time_total`` is the time of the kernels it launched, so summing every event
    would count a kernel twice.
    """
    from torch.autograd import DeviceType

    return float(
        sum(
            e.self_device_time_total
            for e in events
            if getattr(e, "device_type", DeviceType.CPU) != DeviceType.CPU
            and not getattr(e, "is_user_annotation", False)
        )
    )


def profile_steps(eng: Any, epoch: int, steps: int, device: torch.device) -> dict[str, Any]:
    """The last ``steps`` steps of an epoch under ``torch.profiler``: kernels' device time a step.

    ``kernel_s_per_step`` is the sum of the device kernels' own times over the steps (CUDA
    only; None elsewhere), not the profiled wall time, which the profiler inflates (it is kept
    as ``profiled_step_s``, labelled so).
    """
    from torch.profiler import ProfilerActivity, profile

    start = max(0, eng.steps_per_epoch() - steps)
    # the very steps once first: a Triton kernel compiles per specialisation of its integer
    # arguments, and the profile must not time a compile
    _timed(lambda: eng.run_epoch(epoch, start), device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        wall, stats = _timed(lambda: eng.run_epoch(epoch, start), device)
    n = max(len(stats), 1)
    events = prof.key_averages()
    kernel_us = device_us(events)
    launches = sum(
        e.count
        for e in events
        if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC")
    )
    syncs = sum(
        e.count for e in events if e.key in ("cudaStreamSynchronize", "cudaDeviceSynchronize")
    )
    return {
        "steps": len(stats),
        "kernel_s_per_step": kernel_us / n / 1e6 if device.type == "cuda" else None,
        "profiled_step_s": wall / n,
        "profiled_step_s_note": "wall time under torch.profiler (inflated by it): not a speed "
        "figure",
        "aten_ops_per_step": sum(e.count for e in events if e.key.startswith("aten::")) / n,
        "kernel_launches_per_step": launches / n if device.type == "cuda" else None,
        "stream_syncs_per_step": syncs / n if device.type == "cuda" else None,
        "scalar_reads_per_step": sum(
            e.count for e in events if e.key == "aten::_local_scalar_dense"
        )
        / n,
    }


def minibatch_epoch(
    eng: Any, device: torch.device, profile_n: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """Whole epochs of ``eng`` after a warm-up epoch, under each Fisher-Yates kernel there.

    Returns the figures of the kernel the registry chooses on this device (``epoch_s``,
    ``step_s``, ``phases_s``, ``peak_device_bytes``), ``fisher_yates`` (kernel -> epoch seconds)
    with each kernel's own record under ``by_kernel``, and the profiled steps' figures.
    """
    default = chosen = KERNELS.chosen("fisher_yates", device.type)
    kernels = [chosen] + [k for k in KERNELS.available("fisher_yates", device.type) if k != chosen]
    by_kernel: dict[str, Any] = {}
    failed: dict[str, str] = {}
    epoch = 0
    steps = eng.steps_per_epoch()
    for impl in kernels:
        try:
            with KERNELS.using("fisher_yates", device.type, impl):
                warm, _ = _timed(lambda e=epoch: eng.run_epoch(e), device)  # compiles, allocator
                _reset_peak(device)
                secs, stats = _timed(lambda e=epoch + 1: eng.run_epoch(e), device)
        except Exception as e:  # noqa: BLE001 - a kernel that fails here (a Triton compile) is
            failed[impl] = OOM if _is_oom(e) else _why(e)  # a finding; the others still run
            log(f"products minibatch epoch, fisher_yates={impl}: {failed[impl]}")
            continue
        finally:
            epoch += 2
        by_kernel[impl] = {
            "epoch_s": secs,
            "warmup_epoch_s": warm,
            "steps": len(stats),
            "step_s": secs / max(len(stats), 1),
            "phases_s": _epoch_phases(stats),
            "loss_sum": sum(_loss(st) for st in stats),
            "peak_device_bytes": _peak(device),
        }
        log(f"products minibatch epoch, fisher_yates={impl}: {secs:.3f} s ({len(stats)} steps)")
    if not by_kernel:
        raise RuntimeError(f"no Fisher-Yates kernel ran an epoch: {failed}")
    if chosen not in by_kernel:  # the registry's choice failed: the figures of another
        chosen = next(iter(by_kernel))
    with KERNELS.using("fisher_yates", device.type, chosen):
        others, epoch = _other_kernels(eng, device, epoch, log)
        prof = profile_steps(eng, epoch, min(profile_n, steps), device)
    best = by_kernel[chosen]
    return {
        "epoch_s": best["epoch_s"],
        "steps": best["steps"],
        "step_s": best["step_s"],
        "kernel_s_per_step": prof["kernel_s_per_step"],
        "fisher_yates": {k: v["epoch_s"] for k, v in by_kernel.items()},
        "fisher_yates_chosen": chosen,  # the kernel epoch_s, step_s and phases_s are of
        "fisher_yates_default": default,
        "fisher_yates_failed": failed,
        "phases_s": best["phases_s"],
        "phases_note": "seconds per epoch in each phase of the engine's step stats (sample and "
        "gather run in the prefetch thread, overlapping the steps)",
        "peak_device_bytes": best["peak_device_bytes"],
        "store_memory": eng.peak_memory(),
        "epoch_extra": _plain(eng.epoch_extra()),
        "by_kernel": by_kernel,
        "kernels": others,
        "kernels_note": "epoch seconds with one op's implementation switched from the default "
        "(under the chosen Fisher-Yates kernel); 'default' is the default's epoch in the same "
        "sweep. Each arm trains later epochs of the same model, so their loss sums differ; "
        "the implementations' agreement is tests/test_kernels.py's gpu tests",
        "profile": prof,
        "step_over_kernel": (
            best["step_s"] / prof["kernel_s_per_step"] if prof["kernel_s_per_step"] else None
        ),
    }


#: The step's ops whose other implementations the speed tier times in whole epochs.
SWEPT_OPS = ("keyed_dropout", "csr_mm")


def _other_kernels(
    eng: Any, device: torch.device, epoch: int, log: Callable[[str], None]
) -> tuple[dict[str, Any], int]:
    """Epochs with each :data:`SWEPT_OPS` op's non-default implementations, one op at a time.

    ``{op: {"default": {name, epoch_s, loss_sum}, impl: {epoch_s, loss_sum} or {failed}}}``
    for the ops that have another implementation on this device (none on a CPU), and the next
    unused epoch number. Each arm runs a warm-up epoch first (Triton compiles there).
    """
    out: dict[str, Any] = {}

    def arm() -> dict[str, Any]:
        nonlocal epoch
        try:
            _timed(lambda e=epoch: eng.run_epoch(e), device)
            secs, stats = _timed(lambda e=epoch + 1: eng.run_epoch(e), device)
        except Exception as e:  # noqa: BLE001 - a kernel that fails is a finding, not a stop
            return {"failed": OOM if _is_oom(e) else _why(e)}
        finally:
            epoch += 2
        return {"epoch_s": secs, "loss_sum": sum(_loss(st) for st in stats)}

    for op in SWEPT_OPS:
        default = KERNELS.chosen(op, device.type)
        alternatives = [n for n in KERNELS.available(op, device.type) if n != default]
        if not alternatives:
            continue
        out[op] = {"default": {"name": default, **arm()}}
        for impl in alternatives:
            with KERNELS.using(op, device.type, impl):
                out[op][impl] = arm()
            log(f"products minibatch epoch, {op}={impl}: {out[op][impl]}")
    return out, epoch


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    """The JSON-able scalars and small dicts of an engine's epoch extra."""
    keep = ("sampling", "hit_rates", "topology_hit_rates", "prefetch_wait_s", "prefetch_hidden_s")
    return {k: d[k] for k in keep if k in d}


#: PyG's graph formats for the block peers: name -> (format for block_to_pyg, what it needs).
BLOCK_FORMATS = {
    "PyG SAGEConv, CSR adj_t (torch.sparse_csr)": "csr",
    "PyG SAGEConv, SparseTensor adj_t (torch_sparse)": "sparse_tensor",
    "PyG SAGEConv, edge_index": "edge_index",
}


def _dropout(model: Any) -> float:
    """The dropout rate of a fleetgnn model (its layers' inputs), for the PyG peer."""
    p = getattr(model, "dropout", None)
    return float(p) if isinstance(p, (int, float)) else 0.5


def _torch_sparse_missing() -> str | None:
    try:
        import torch_sparse  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any failure to import means absent
        return f"torch_sparse does not import here ({type(e).__name__}: {str(e)[:120]})"
    return None


def _block_graph(block: Any, fmt: str, device: torch.device, dtype: torch.dtype) -> Any:
    if fmt != "sparse_tensor":
        return block_to_pyg(block, fmt, device, dtype)
    from torch_sparse import SparseTensor

    b = block.to(device)
    adj = SparseTensor(
        rowptr=b.indptr.long(), col=b.indices.long(), sparse_sizes=(b.num_dst, b.num_src)
    )
    return adj, b.num_src, b.num_dst


def peers_on_blocks(
    eng: Any,
    cfg: Any,
    device: torch.device,
    layer_steps: int,
    log: Callable[[str], None],
    epoch0: int = 1000,
) -> dict[str, Any]:
    """PyG's ``SAGEConv`` on the engine's own batches, and PyG's own pipeline where it runs.

    ``epochs``: name -> seconds of a whole epoch, every step's batch prepared inline by the
    engine's sampler and store (fleetgnn's epoch overlaps that work in its prefetch thread; the
    PyG ones do not). ``layers_s_per_step``: name -> seconds a step of forward, backward and
    optimizer on the same ``layer_steps`` prepared batches (fleetgnn: the engine's step on them):
    the layers compared alone. ``skipped``: name -> why.
    """
    out: dict[str, Any] = {"epochs": {}, "layers_s_per_step": {}, "skipped": {}, "logit_diff": {}}
    if not has_pyg():
        out["skipped"]["PyG"] = "torch_geometric does not import"
        return out
    dims = [int(eng.graph.x.shape[1]), *[int(cfg.model.hidden)] * (len(cfg.train.fanouts) - 1)]
    dims.append(num_classes_of(eng.graph))
    steps = eng.steps_per_epoch()
    dt = eng.dtype
    n = min(layer_steps, steps)
    batches = [eng.prepare(epoch0, s) for s in range(n)]
    eng.model.train()
    # fleetgnn's layers on the prepared batches (the first round warms up)
    for _ in range(2):
        secs, _ = _timed(
            lambda: [eng.train_step(epoch0, s, b, 0.0) for s, b in enumerate(batches)], device
        )
    out["layers_s_per_step"]["fleetgnn"] = secs / n
    missing_ts = _torch_sparse_missing()
    for name, fmt in BLOCK_FORMATS.items():
        if fmt == "sparse_tensor" and missing_ts is not None:
            out["skipped"][name] = missing_ts
            continue
        try:
            model = PygSAGE(dims, _dropout(eng.model)).to(device)
            copy_weights(eng.model, model, "sage")
            opt = peer_optimizer(cfg, model, device)
            graphs = [[_block_graph(b, fmt, device, dt) for b in p.blocks] for p in batches]
            targets = [p.target.to(device) for p in batches]

            def layers(
                model: Any = model, opt: Any = opt, graphs: Any = graphs, targets: Any = targets
            ) -> None:
                for p, g, t in zip(batches, graphs, targets, strict=True):
                    optimizer_step(opt, F.cross_entropy(model(p.x, g), t))

            for _ in range(2):  # the first round warms up
                secs, _ = _timed(layers, device)
            out["layers_s_per_step"][name] = secs / n
            del graphs

            def epoch(e: int, model: Any = model, opt: Any = opt, fmt: str = fmt) -> int:
                for s in range(steps):
                    p = eng.prepare(e, s)
                    g = [_block_graph(b, fmt, device, dt) for b in p.blocks]
                    optimizer_step(opt, F.cross_entropy(model(p.x, g), p.target.to(device)))
                return steps

            secs, _ = _timed(lambda epoch=epoch: epoch(epoch0 + 1), device)
            out["epochs"][name] = secs
            log(f"peer {name}: epoch {secs:.3f} s, layers {out['layers_s_per_step'][name]:.4f} s")
        except Exception as e:  # noqa: BLE001 - a format PyG cannot run here is a finding
            if _is_oom(e):
                out["epochs"][name] = OOM
            else:
                out["skipped"][name] = _why(e)
        finally:  # the closures hold the model, its optimizer and the graphs
            model = opt = graphs = layers = epoch = None  # noqa: F841
            _free(device)
    why = neighbor_loader_missing()
    label = "PyG NeighborLoader + SAGEConv (host sampling)"
    if why is not None:
        out["skipped"][label] = why
    else:
        try:
            run = neighbor_loader_epoch(eng, cfg, dims, device)
            run()  # warm-up
            out["epochs"][label], _ = _timed(run, device)
        except Exception as e:  # noqa: BLE001
            out["skipped"][label] = _why(e) if not _is_oom(e) else OOM
    return out


def neighbor_loader_epoch(
    eng: Any, cfg: Any, dims: list[int], device: torch.device
) -> Callable[[], None]:
    """One epoch of PyG's ``NeighborLoader`` (host sampling) + ``SAGEConv`` on ``device``."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    graph = eng.graph
    edge_index = graph_to_pyg(graph, "edge_index", eng.dtype, torch.device("cpu"))
    x = torch.as_tensor(graph.x[:], dtype=eng.dtype)
    y = eng.y.cpu()
    data = Data(x=x, y=y, edge_index=edge_index)
    data.num_nodes = graph.num_nodes
    loader = NeighborLoader(
        data,
        num_neighbors=list(cfg.train.fanouts),
        batch_size=int(cfg.train.batch_size),
        input_nodes=torch.from_numpy(np.flatnonzero(np.asarray(graph.train_mask))),
        shuffle=True,
    )
    model = PygSAGEFull(dims, _dropout(eng.model)).to(device)
    copy_weights(eng.model, model, "sage")
    opt = peer_optimizer(cfg, model, device)

    def epoch() -> None:
        for batch in loader:
            batch = batch.to(device)
            n = int(batch.batch_size)
            logits = model(batch.x, batch.edge_index)[:n]
            optimizer_step(opt, F.cross_entropy(logits, batch.y[:n]))

    return epoch


# ------------------------------------------------------------------------------ full graph


def _full_cfg(engine: str, model: str, device: torch.device, size: dict[str, Any]) -> Any:
    return load_config(
        None,
        [
            f"train.engine={engine}",
            "train.mode=full",
            f"train.device={device}",
            "train.dtype=float32",
            "train.seed=0",
            f"model.name={model}",
            f"model.hidden={size['full_hidden']}",
            f"model.num_layers={size['full_layers']}",
        ],
    )


def _median_epochs(run: Callable[[], Any], repeat: int, device: torch.device) -> dict[str, Any]:
    warm, _ = _timed(run, device)
    _reset_peak(device)
    times = [_timed(run, device)[0] for _ in range(max(1, repeat))]
    return {
        "epoch_s": statistics.median(times),
        "epoch_times_s": times,
        "warmup_epoch_s": warm,
        "peak_device_bytes": _peak(device),
    }


def full_graph(
    graph: Graph,
    device: torch.device,
    size: dict[str, Any],
    repeat: int,
    log: Callable[[str], None],
    models: Sequence[str] = ("gcn", "sage"),
) -> dict[str, Any]:
    """Full-graph epochs: fleetgnn's reference and ``fullgraph`` engines against PyG.

    Returns ``model -> {name -> {"epoch_s", ...} or "oom"}`` and each model's ``skipped``.
    Every arm is built, warmed up and timed on its own (its memory freed after it), so one that
    runs out of device memory is recorded as ``"oom"`` and the next one runs.
    """
    out: dict[str, Any] = {}
    for model in models:
        res: dict[str, Any] = {"skipped": {}}
        out[model] = res
        inputs: dict[str, Any] = {}  # the reference engine's x, y, training IDs, logits, model
        for engine in ("reference", "fullgraph"):
            name = f"fleetgnn {engine}"
            eng = None
            try:
                eng = engine_from_config(_full_cfg(engine, model, device, size), graph, None)
                ep = {"n": 0}

                def run(eng: Any = eng, ep: dict[str, int] = ep) -> Any:
                    ep["n"] += 1
                    return eng.run_epoch(ep["n"])

                res[name] = _median_epochs(run, repeat, device)
                if engine == "reference" and has_pyg():
                    eng.model.eval()
                    with torch.no_grad():
                        logits = eng.model([eng.full_aggregator] * size["full_layers"], eng.x)
                    eng.model.train()
                    inputs = {
                        "x": eng.x,
                        "y": eng.y,
                        "train": eng.train_ids.to(device),
                        "logits": logits.cpu(),
                        "model": copy.deepcopy(eng.model).cpu(),
                    }
                    del logits
            except Exception as e:  # noqa: BLE001 - oom is a figure, other errors say why
                if _is_oom(e):
                    res[name] = OOM
                else:
                    res["skipped"][name] = _why(e)
            finally:  # `run` holds the engine too
                if eng is not None:
                    eng.close()
                eng = run = None
                _free(device)
            log(f"full-graph {model} {name}: {_short(res.get(name))}")
        conv = "GCNConv" if model == "gcn" else "SAGEConv"
        if not has_pyg():
            res["skipped"][f"PyG {conv}"] = "torch_geometric does not import"
            continue
        if not inputs:
            res["skipped"][f"PyG {conv}"] = "the reference engine did not run (its inputs)"
            continue
        cfg = _full_cfg("reference", model, device, size)
        x, y, train = inputs["x"], inputs["y"], inputs["train"]
        dims = [int(x.shape[1]), *[size["full_hidden"]] * (size["full_layers"] - 1)]
        dims.append(int(inputs["logits"].shape[1]))
        for fmt, label in (("csr", "CSR adj_t"), ("edge_index", "edge_index")):
            name = f"PyG {conv}, {label}"
            adj = peer = opt = None
            try:
                adj = graph_to_pyg(graph, fmt, torch.float32, device)
                peer = (PygGCN if model == "gcn" else PygSAGEFull)(dims, 0.5).to(device)
                copy_weights(inputs["model"], peer, model)
                peer.eval()
                with torch.no_grad():
                    diff = (peer(x, adj).cpu() - inputs["logits"]).abs().max()
                res.setdefault("logit_diff", {})[name] = float(diff)
                peer.train()
                opt = peer_optimizer(cfg, peer, device)

                def step(
                    peer: Any = peer, opt: Any = opt, adj: Any = adj, xyt: Any = (x, y, train)
                ) -> None:
                    x, y, train = xyt
                    optimizer_step(opt, F.cross_entropy(peer(x, adj)[train], y[train]))

                res[name] = _median_epochs(step, repeat, device)
            except Exception as e:  # noqa: BLE001
                if _is_oom(e):
                    res[name] = OOM
                else:
                    res["skipped"][name] = _why(e)
            finally:  # freed before the next arm (`step` holds them too)
                adj = peer = opt = step = None
                _free(device)
            log(f"full-graph {model} {name}: {_short(res.get(name))}")
        inputs.clear()
        _free(device)
        fleet = res.get("fleetgnn fullgraph")
        csr = res.get(f"PyG {conv}, CSR adj_t")
        if isinstance(fleet, dict) and isinstance(csr, dict):
            res["fullgraph_over_pyg_csr"] = csr["epoch_s"] / fleet["epoch_s"]
    return out


def _short(v: Any) -> str:
    if isinstance(v, dict) and "epoch_s" in v:
        return f"{v['epoch_s']:.4f} s"
    return str(v)


# ------------------------------------------------------------------------------ offload


class PinnedBlockingTransfers(Transfers):
    """Blocking copies from page-locked memory: the arm overlap is compared against.

    Loads gather the rows into a pinned staging buffer and copy it on the compute stream,
    waiting for it; saves copy into pinned memory, waiting for it. Nothing overlaps computation
    (the engine runs its blocking order), only the copies' source differs from the pageable arm.
    """

    @property
    def pins(self) -> bool:
        """True: the engine's host data were pinned when it was built (overlap on)."""
        return True

    def load(self, src: torch.Tensor, index: torch.Tensor | None = None, *, key: Any = None) -> Any:
        """Gather ``src[index]`` into pinned memory, copy it to the device and wait for it."""
        if index is None or not self.cuda:
            return super().load(src, index, key=key)
        t0 = time.perf_counter()
        shape = (int(index.numel()), *src.shape[1:])
        buf = self._staging(("pinned-blocking", key), shape, src.dtype)
        torch.index_select(src, 0, index, out=buf)
        gather_s = time.perf_counter() - t0
        self.times.transfer_s += gather_s
        self.times.wait_s += gather_s
        return super().load(buf, None, key=key)  # the blocking path: buf.to(device), pinned

    def save(self, src: torch.Tensor, dst: torch.Tensor | None = None, *, key: Any = None) -> Any:
        """Copy ``src`` into ``dst`` or a pinned buffer of ``key`` and wait for it."""
        if dst is None and self.cuda:
            dst = self._staging(("pinned-blocking-save", key), tuple(src.shape), src.dtype)
        return super().save(src, dst, key=key)


def offload_engine(cfg: Any, graph: Graph, chunks: int, overlap: bool) -> Any:
    """The offload engine of ``cfg`` in ``chunks`` range-partitioned chunks.

    ``overlap``: pinned host data and copies on a side stream; else pageable, blocking copies.
    """
    return engine_from_config(
        cfg, graph, None, partition="range", chunks=chunks, overlap_transfers=overlap
    )


def pinned_blocking(eng: Any) -> None:
    """Make an offload engine built with overlap on (its host data pinned) the blocking arm.

    The blocking order, and blocking copies from pinned memory (PinnedBlockingTransfers).
    """
    eng.overlap = False
    eng.xfer.drain()
    if eng.xfer.stream is not None:
        eng.xfer.stream = None
        eng.xfer.overlap = False
        eng.xfer.__class__ = PinnedBlockingTransfers


def offload_arms(
    graph: Graph,
    device: torch.device,
    size: dict[str, Any],
    repeat: int,
    log: Callable[[str], None],
    deadline: float,
    in_device_epoch_s: float | None,
) -> dict[str, Any]:
    """The ``offload`` engine (GCN) in fixed chunks, its device peak against the graph's bytes.

    Three arms: ``overlap`` (pinned host data, copies on a side stream overlapping the chunks'
    compute), ``pinned_blocking`` (the same engine and pinned data, blocking copies in the
    blocking order: overlap's gain over it is the overlap alone) and ``pageable_blocking`` (an
    engine built with ``offload.overlap_transfers=false``: pageable host data, blocking copies).
    The first two share one engine; the third is built when ``deadline`` (a
    ``time.monotonic()``) leaves time for it.

    ``size["offload_chunks"]`` chunks and no ``offload.device_budget``: choosing the chunks for a
    budget of half the graph's bytes predicted the peak at every doubling (a transition plan
    each) and took 113 s for 512 chunks at products-like 0.2 on a CPU here; a budget of the
    graph's bytes refuses 16 chunks (predicted 1.01 GB against 248 MB) and needs 256. Each arm
    records the device's measured peak (CUDA) and ``peak_over_graph_bytes``.
    """
    from fleetgnn.store import feature_row_bytes, topology_row_bytes

    graph_bytes = int(topology_row_bytes(graph).sum()) + graph.num_nodes * feature_row_bytes(graph)
    res: dict[str, Any] = {
        "graph_bytes": graph_bytes,
        "chunks_given": size["offload_chunks"],
        "device_budget": None,
        "device_budget_note": "not set: chunks given, the device's peak measured (see the "
        "docstring of fleetgnn.bench.speed.offload_arms)",
        "partition": "range",
        "model": f"gcn, {size['full_layers']} layers, hidden {size['full_hidden']}",
        "in_device_epoch_s": in_device_epoch_s,
        "in_device_what": "the fullgraph engine's epoch of the same model (products full_graph)",
        "skipped": {},
    }

    def build(overlap: bool) -> tuple[Any, float]:
        cfg = _full_cfg("offload", "gcn", device, size)
        t0 = time.perf_counter()
        eng = offload_engine(cfg, graph, size["offload_chunks"], overlap)
        return eng, time.perf_counter() - t0

    def arm(eng: Any, label: str, first_epoch: int) -> None:
        times, losses = [], []
        for ep in range(first_epoch, first_epoch + 1 + max(1, repeat)):  # the first warms up
            if ep == first_epoch + 1:
                _reset_peak(device)
            secs, stats = _timed(lambda ep=ep: eng.run_epoch(ep), device)
            times.append(secs)
            losses.append(sum(_loss(st) for st in stats))
        peak = _peak(device)
        extra = eng.epoch_extra()
        res[label] = {
            "epoch_s": min(times[1:]),
            "losses": losses,
            "pinned": bool(eng.xfer.pins),
            "overlap": bool(eng.overlap),
            "chunks": int(eng.num_chunks),
            "transfer_s": extra.get("transfer_s"),
            "transfer_wait_s": extra.get("transfer_wait_s"),
            "hidden_fraction": extra.get("hidden_fraction"),
            "peak_device_bytes": peak,
            "peak_over_graph_bytes": peak / graph_bytes if peak is not None else None,
        }
        log(f"offload {label}: {res[label]['epoch_s']:.3f} s an epoch")

    eng = None
    try:
        eng, res["build_s"] = build(True)
        state = copy.deepcopy(eng.state_dict())  # each arm from the same model and optimizer
        arm(eng, "overlap", 0)
        eng.load_state_dict(state)  # its only use: no copy of the copy
        pinned_blocking(eng)
        arm(eng, "pinned_blocking", 0)  # epoch 0 again: the same losses as overlap's
    except Exception as e:  # noqa: BLE001
        res["skipped"]["overlap"] = OOM if _is_oom(e) else _why(e)
    finally:
        if eng is not None:
            eng.close()
        eng = None
        _free(device)
    # its build as long as the first one's, and its epochs up to 5x overlap's (pageable copies)
    over_s = res["overlap"]["epoch_s"] if isinstance(res.get("overlap"), dict) else 0.0
    need = res.get("build_s", 0.0) + 5 * over_s * (max(1, repeat) + 1)
    if time.monotonic() + need > deadline:
        res["skipped"]["pageable_blocking"] = "no time left in the bench's budget for its build"
    else:
        try:
            eng, res["pageable_build_s"] = build(False)
            arm(eng, "pageable_blocking", 0)
        except Exception as e:  # noqa: BLE001
            res["skipped"]["pageable_blocking"] = OOM if _is_oom(e) else _why(e)
        finally:
            if eng is not None:
                eng.close()
            _free(device)
    over = res.get("overlap")
    if isinstance(over, dict):
        for base in ("pinned_blocking", "pageable_blocking"):
            if isinstance(res.get(base), dict):
                res[f"overlap_speedup_over_{base}"] = res[base]["epoch_s"] / over["epoch_s"]
        if in_device_epoch_s:
            res["overlap_over_in_device"] = over["epoch_s"] / in_device_epoch_s
        pb = res.get("pinned_blocking")
        if isinstance(pb, dict):
            res["same_losses_overlap_pinned_blocking"] = pb["losses"] == over["losses"]
            res["max_rel_loss_diff"] = max(
                abs(a - b) / max(abs(b), 1e-30)
                for a, b in zip(over["losses"], pb["losses"], strict=True)
            )
    return res


def finite(v: Any) -> bool:
    """A finite number (not an ``"oom"``, not None)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
