"""fullgraph's per-process memory: int32 layout, at most two aggregators, an honest ``memory``."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines.fullgraph import HeldBytes, process_memory
from fleetgnn.engines.halo import RankLayout, build_layout, build_plan
from fleetgnn.exchange import HaloSpmm, build_exchange_layout, range_owner
from fleetgnn.graph import from_edges
from fleetgnn.ops.adjacency import Structure
from fleetgnn.train import engine_from_config, load_config

NARROW = ("dst_ids", "row_ids", "src", "src_row", "halo", "halo_owner", "halo_pos", "in_degree")


def _graph(n: int = 40, e: int = 200):
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    split = rng.integers(0, 3, n)
    data = {
        "x": rng.standard_normal((n, 6)),
        "y": rng.integers(0, 3, n),
        "train_mask": split == 0,
        "val_mask": split == 1,
        "test_mask": split == 2,
    }
    return from_edges(src, dst, n, node_data=data, num_classes=3, name="mem")


def test_layout_is_int32_and_equals_the_int64_build():
    g = _graph()
    bounds = np.array([0, 13, 27, 40])
    for rank in range(3):
        lay = build_layout(g, bounds, rank)
        assert all(getattr(lay, f).dtype == np.int32 for f in NARROW), rank
        assert lay.indptr.dtype == np.int64 and lay.need_counts.dtype == np.int64
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        ptr = np.asarray(g.indptr[lo : hi + 1], dtype=np.int64)
        wide = build_exchange_layout(
            np.arange(lo, hi),
            ptr - ptr[0],
            np.asarray(g.indices[ptr[0] : ptr[-1]], dtype=np.int64),
            range_owner(bounds),
            rank=rank,
            world_size=3,
        )
        for f in dataclasses.fields(wide):
            assert np.array_equal(getattr(lay, f.name), getattr(wide, f.name)), f.name
        assert np.array_equal(lay.in_degree, np.diff(ptr))
        # the aggregator's index structures are built int64 and equal from either layout
        int64 = RankLayout(
            **{f.name: getattr(wide, f.name) for f in dataclasses.fields(wide)},
            bounds=lay.bounds,
            in_degree=np.diff(ptr),
        )
        send = (np.zeros(0, dtype=np.int64), np.zeros(3, dtype=np.int64))
        for k in (1, 3):
            a = HaloSpmm(lay, build_plan(lay, *send, k), None)
            b = HaloSpmm(int64, build_plan(int64, *send, k), None)
            assert a.structure.indices.dtype == torch.int64
            assert torch.equal(a.structure.indices, b.structure.indices)
            assert torch.equal(a.structure.indptr, b.structure.indptr)
            for (sa, ea), (sb, eb) in zip(a._chunks, b._chunks, strict=True):
                assert torch.equal(sa.indices, sb.indices) and torch.equal(ea, eb)


def test_held_bytes_counts_each_buffer_once_and_skips_memory_maps(tmp_path):
    arr = np.arange(1000, dtype=np.int64)
    mm = np.lib.format.open_memmap(tmp_path / "m.npy", mode="w+", dtype=np.float32, shape=(500,))
    st = Structure(torch.zeros(11, dtype=torch.int64), torch.from_numpy(arr), 10, 1000)
    held = HeldBytes()
    # the tensor shares the array's buffer, the slice is a view, the memmap is file-backed
    assert held.add([arr, arr[10:20]], {"t": torch.from_numpy(arr), "m": mm, "s": mm[3:]}) == 8000
    assert held.add(st) == 88  # only the indptr is new (slots are walked)
    assert held.add(arr, st) == 0
    assert held.by_device == {"cpu": 8088}


def test_process_memory_reads_proc():
    mem = process_memory()
    if not Path("/proc/self/status").exists():
        assert mem == {}
        return
    assert set(mem) == {"rss_anon", "rss_peak"}
    assert 0 < mem["rss_anon"] <= mem["rss_peak"]


def _oracle(c):
    return 1.0 / (c[0] * (c[1] + 1))  # every larger K and depth is faster: all trials run


def _tuned_run(comm, evict: bool):
    cfg = load_config(
        None,
        [
            "train.engine=fullgraph",
            "train.mode=full",
            "train.dtype=float64",
            "model.name=sage",
            "model.hidden=4",
            "model.dropout=0.3",
            "train.seed=3",
        ],
    )
    eng = engine_from_config(
        cfg, _graph(), context_of(comm), tune=True, tuner_chunks=(1, 2, 4), tuner_depths=(1, 2)
    )
    report = eng.tuner.report
    eng.tuner.report = lambda c, _latency: report(c, _oracle(c))
    if not evict:
        eng._evict = lambda keep: None
    out = {"loss": [], "held": [], "plans": [], "knobs": []}
    for epoch in range(6):
        (st,) = eng.run_epoch(epoch)
        out["loss"].append(st.loss_sum)
        out["held"].append(sorted(eng._aggs))
        out["plans"].append(sorted(eng._plans))
        out["knobs"].append((eng.num_chunks, eng.depth, eng.tuner.best))
    out["params"] = {n: p.detach().clone() for n, p in eng.module.named_parameters()}
    out["eval"] = eng.evaluate()
    out["memory"] = eng.peak_memory()
    out["parts"] = eng.held_bytes()
    out["rank_extra"] = eng.rank_extra()
    out["extra"] = eng.epoch_extra()
    out["min_state"] = eng.x.numel() * eng.x.element_size() + eng.layout.src.nbytes
    eng.close()
    return out


def _world(comm):
    return {"evict": _tuned_run(comm, True), "keep": _tuned_run(comm, False)}


@pytest.mark.slow
def test_tuner_holds_at_most_two_aggregators_with_the_same_results():
    for res in run_world(_world, 2, timeout_s=300):
        ev, kept = res["evict"], res["keep"]
        # the oracle's search: K 1 -> 2 -> 4, then depth 1 -> 2, settled at (4, 2)
        assert [k[:2] for k in ev["knobs"]] == [(1, 1), (2, 1), (4, 1), (4, 2), (4, 2), (4, 2)]
        assert ev["knobs"] == kept["knobs"]
        for held, plans, (k, d, best) in zip(ev["held"], ev["plans"], ev["knobs"], strict=True):
            assert len(held) <= 2 and set(held) <= {(k, d), tuple(best)}
            assert len(plans) <= 2 and set(plans) == {c for c, _ in held}
        assert ev["held"][-1] == [(4, 2)] and len(kept["held"][-1]) == 4
        # bit-identical to keeping every trial's aggregator
        assert ev["loss"] == kept["loss"] and ev["eval"] == kept["eval"]
        for n, p in ev["params"].items():
            assert torch.equal(p, kept["params"][n]), n
        # memory: the held state, each part counted, and the process's RSS
        mem, parts = ev["memory"], ev["parts"]
        assert parts["aggregators_held"] == 1 and parts["aggregators"] > 0
        assert parts["model"] > 0 and parts["layout"] > 0
        assert mem["device"] >= sum(v for k, v in parts.items() if k != "aggregators_held")
        assert mem["device"] >= ev["min_state"]
        assert kept["memory"]["device"] > mem["device"]  # four aggregators held there
        if Path("/proc/self/status").exists():
            assert 0 < mem["rss_anon"] <= mem["rss_peak"]
        assert ev["rank_extra"]["memory"]["device"] == mem["device"]
        assert ev["extra"]["held_bytes"]["aggregators_held"] >= 1
