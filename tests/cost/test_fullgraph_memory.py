"""Validation 1 (memory): the full-graph models' memory is what the engines hold, per rank.

``fullgraph``: ``memory["device"]`` against the engine's ``peak_memory()["device"]`` on every
rank. ``reference``: the engine reports no ``peak_memory()``; its state is measured here with the
same walk (:class:`~fleetgnn.engines.fullgraph.HeldBytes`) over the same parts. For both, the
``workspace`` against the step's transient peak the CPU allocator saw (profiled, the smaller of
epochs 1 to 3: an exchange's buffer sometimes outlives its wait by a few KB), and autograd's
saved bytes (:class:`~fleetgnn.nn.recompute.SavedBytesMeter`) against
:func:`~fleetgnn.cost.fullgraph_memory.step_saved_bytes`.
"""

import dataclasses

import pytest
import torch

from fleetgnn.config import load_config
from fleetgnn.cost import PROFILES, predict_engine, workload_from_config
from fleetgnn.cost.fullgraph_memory import (
    RankCounts,
    profiled_peak,
    rank_counts,
    step_saved_bytes,
)
from fleetgnn.distributed.testing import context_or_own, run_world
from fleetgnn.nn.recompute import SavedBytesMeter
from fleetgnn.train import engine_from_config

from ..engines.test_offload import _community_graph

#: The engines ran on CPU processes: every byte is ``device`` (no host split).
HW = dataclasses.replace(PROFILES["dgx-a100"], kind="cpu")
#: (model, partition, K) per world size; the fullgraph engine untuned, depth 1.
FULLGRAPH = {
    1: [("gcn", "range", 1), ("sage", "metis", 2)],
    2: [("gcn", "range", 1), ("sage", "metis", 2), ("gat", "range", 1)],
}
REFERENCE = ["gcn", "sage", "gat"]


def _cfg(engine, model, mode="full"):
    sets = [f"model.name={model}", "model.hidden=16", f"train.mode={mode}"]
    return load_config(None, [f"train.engine={engine}", *sets])


def _epochs(e, x):
    """Train epochs 0-3 of ``e``: the bytes autograd saved in the first (parameters and
    features left out) and the smallest transient peak of the other three (an exchange's
    buffer sometimes outlives its wait, more often on a loaded machine: measured 85,792 bytes
    against 73,304-74,536 in a full-suite run)."""
    meter = SavedBytesMeter([*e.module.parameters(), x])
    with meter():
        e.run_epoch(0)
    return meter.bytes, min(profiled_peak(lambda ep=ep: e.run_epoch(ep)) for ep in (1, 2, 3))


def _fullgraph(comm, cases):
    """This rank's ``(peak_memory()["device"], saved, step peak)`` per case (``None``: here)."""
    out = []
    with context_or_own(comm) as ctx:
        for model, partition, chunks in cases:
            knobs = {"partition": partition, "num_chunks": chunks, "depth": 1, "tune": False}
            e = engine_from_config(_cfg("fullgraph", model), _community_graph(), ctx, **knobs)
            try:
                saved, peak = _epochs(e, e.x)
                out.append((e.peak_memory()["device"], saved, peak))
            finally:
                e.close()
    return out


def _reference(model):
    """The reference engine's held state after full-mode epochs, saved bytes and step peak."""
    e = engine_from_config(_cfg("reference", model), _community_graph(), None)
    saved, peak = _epochs(e, e.x)
    held = sum(e.held_bytes().by_device.values())  # the walk fullgraph's held_bytes makes
    assert e.peak_memory()["device"] == held  # what metrics.jsonl records for the engine
    return held, saved, peak


@pytest.fixture(scope="module")
def fullgraph_measured():
    """Per world size and case, every rank's (device peak, saved bytes, step peak)."""
    out = {2: list(zip(*run_world(_fullgraph, 2, FULLGRAPH[2], timeout_s=300), strict=True))}
    out[1] = [(r,) for r in _fullgraph(None, FULLGRAPH[1])]
    return out


def _within(pred, want):
    return abs(pred - want) <= 0.10 * want


@pytest.mark.slow
@pytest.mark.parametrize(
    ("world", "i"),
    [(w, i) for w in sorted(FULLGRAPH) for i in range(len(FULLGRAPH[w]))],
    ids=lambda v: str(v),
)
def test_fullgraph_memory_within_10_percent_per_rank(world, i, fullgraph_measured):
    """The fullest rank's held bytes and step peak within 10% (held: exact), every rank's saved
    bytes as modelled."""
    model, partition, chunks = FULLGRAPH[world][i]
    graph = _community_graph()
    wl = workload_from_config(_cfg("fullgraph", model), graph=graph)
    knobs = {"partition": partition, "num_chunks": chunks, "tune": False}
    pred = predict_engine("fullgraph", wl, HW, world, knobs)
    ranks = fullgraph_measured[world][i]
    device = max(r[0] for r in ranks)
    assert _within(pred.memory["device"], device), (pred.memory, ranks)
    assert _within(pred.workspace["device"], max(r[2] for r in ranks)), (pred.workspace, ranks)
    for r, counts in zip(ranks, rank_counts(graph, world, partition), strict=True):
        assert r[0] <= 1.10 * pred.memory["device"], (pred.memory, r)  # no rank holds more
        assert _within(step_saved_bytes(wl.model, counts), r[1]), r


@pytest.mark.parametrize("model", REFERENCE)
def test_reference_memory_within_10_percent(model):
    """Full mode: the engine's held state and its step's peak within 10%, the saved bytes."""
    held, saved, peak = _reference(model)
    graph = _community_graph()
    wl = workload_from_config(_cfg("reference", model), graph=graph)
    pred = predict_engine("reference", wl, HW, 1, {})
    assert _within(pred.memory["device"], held), (pred.memory, held)
    assert _within(pred.workspace["device"], peak), (pred.workspace, peak)
    counts = RankCounts(wl.num_nodes, wl.num_edges, wl.num_edges, 0, 0, wl.num_train)
    assert _within(step_saved_bytes(wl.model, counts, halo=False), saved), saved


def test_gpu_ranks_keep_the_layout_in_host_memory():
    """On GPUs the layout, plans and METIS's IDs are host arrays: host + device = the total."""
    wl = workload_from_config(_cfg("fullgraph", "gcn"), graph=_community_graph())
    knobs = {"partition": "metis", "num_chunks": 2, "tune": False}
    cpu = predict_engine("fullgraph", wl, HW, 2, knobs)
    gpu = predict_engine("fullgraph", wl, PROFILES["dgx-a100"], 2, knobs)
    assert cpu.memory["host"] == 0 and gpu.memory["host"] > 0
    # the GPU adds one device copy of the send rows per aggregator (8 bytes a row)
    extra = gpu.memory["device"] + gpu.memory["host"] - cpu.memory["device"]
    assert 0 < extra < 8 * wl.num_nodes
    tuned = predict_engine("fullgraph", wl, HW, 2, {"partition": "metis"})
    assert tuned.knobs["held_chunks"] == [8, 16]
    assert tuned.memory["device"] > cpu.memory["device"]  # two aggregators while tuning


def _fullgraph_cuda(comm):
    """On the rank's GPU: ``(peak_memory()["device"], step peak on the CUDA allocator)``."""
    with context_or_own(comm, device="cuda") as ctx:
        knobs = {"partition": "range", "num_chunks": 1, "depth": 1, "tune": False}
        cfg = _cfg("fullgraph", "gcn")
        e = engine_from_config(cfg, _community_graph(), ctx, **knobs)
        try:
            e.run_epoch(0)
            mem = e.peak_memory()  # on a GPU: "device" is the CUDA part, "host" the rest
            peak = min(profiled_peak(lambda ep=ep: e.run_epoch(ep), ctx.device) for ep in (1, 2))
            return mem["device"], mem.get("host", 0), peak
        finally:
            e.close()


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(
    "world",
    [
        1,
        pytest.param(
            2,
            marks=pytest.mark.xfail(
                strict=True,
                reason="on one shared GPU the exchange buffers outlive their wait (recorded on "
                "the comm stream, freed when it is done): the H100 measured a step workspace of "
                "91648-93184 bytes against the model's 74536; the model does not price it yet",
            ),
        ),
    ],
)
def test_fullgraph_memory_on_cuda_within_10_percent(world):
    """On CUDA (W = 2: two ranks sharing the GPU): the held state the engine counts lives on the
    device, and the model's step workspace is what the CUDA allocator saw, within 10%."""
    graph = _community_graph()
    wl = workload_from_config(_cfg("fullgraph", "gcn"), graph=graph)
    knobs = {"partition": "range", "num_chunks": 1, "tune": False}
    pred = predict_engine("fullgraph", wl, PROFILES["h100"], world, knobs)
    ranks = run_world(_fullgraph_cuda, world, timeout_s=300, device="cuda")
    assert all(r[0] > 0 and r[1] > 0 for r in ranks), ranks  # layout on the host, rows on the GPU
    held = max(r[0] for r in ranks)
    assert _within(pred.memory["device"], held), (pred.memory, ranks)
    assert _within(pred.workspace["device"], max(r[2] for r in ranks)), (pred.workspace, ranks)
