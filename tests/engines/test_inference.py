"""Streaming layer-wise inference: chunk bounds, equality with the in-memory evaluation (float64,
one and several ranks, tiny chunks, eval_nodes=all/labelled, one shared scratch file or one per
rank), scratch files removed, a full disk in one line, evaluation's peak memory, and the labelled
restriction (only the rows each layer's successor reads are computed and stored); on typed graphs,
the whole-graph forward's numbers, in chunks, types pruned."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from fleetgnn.config import ReferenceEngineConfig
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines import build_engine
from fleetgnn.engines.chunks import DEFAULT_CHUNK_BYTES, Chunking, iter_chunks, labelled_selector
from fleetgnn.engines.common import normalize_rows, split_metrics
from fleetgnn.engines.inference import (
    needed_types,
    stream_inference,
    stream_typed_inference,
    streaming_metrics,
    typed_layer_widths,
)
from fleetgnn.engines.metric_sums import MetricSums
from fleetgnn.engines.rowfiles import RowFile
from fleetgnn.errors import ConfigError, DiskFullError
from fleetgnn.graph import from_edges
from fleetgnn.graph import rows as rows_mod
from fleetgnn.graph.hetero import HeteroSchema, from_typed_edges
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.graph.rows import RowReader
from fleetgnn.nn.hetero import build_hetero_model
from fleetgnn.sampling import GraphTopology
from fleetgnn.train import engine_from_config, load_config

# dozens of chunks per rank and layer, hidden layers in scratch files even in one process
TINY = Chunking(max_nodes=7, max_edges=40, in_memory_bytes=0)


def random_graph(n=240, e=1200, f=5, c=4, seed=0):
    """A random graph with a hub (node 5: n/2 extra in-edges), isolated nodes and unlabelled
    nodes (half of them in no split)."""
    rng = np.random.default_rng(seed)
    src = np.concatenate([rng.integers(0, n, e), rng.integers(0, n, n // 2)])
    dst = np.concatenate([rng.integers(0, n - 10, e), np.full(n // 2, 5)])
    u = rng.random(n)
    data = {
        "x": rng.standard_normal((n, f)).astype(np.float32),
        "y": rng.integers(0, c, n),
        "train_mask": u < 0.2,
        "val_mask": (u >= 0.2) & (u < 0.35),
        "test_mask": (u >= 0.35) & (u < 0.5),
    }
    return from_edges(src, dst, n, node_data=data, num_classes=c, name="rand")


def _config(engine, model="sage", extra=()):
    items = [
        f"train.engine={engine}",
        "train.mode=minibatch",
        "train.dtype=float64",
        f"model.name={model}",
        "model.num_layers=3",
        "model.hidden=6",
        "train.fanouts=[3,3,3]",
        "train.seed=3",
        *extra,
    ]
    return load_config(None, items)


def _in_memory_metrics(model, state):
    """The old evaluation: every layer's [N, width] in memory, split_metrics over all logits."""
    eng = engine_from_config(_config("reference", model), random_graph())
    eng.module.load_state_dict(state)
    return split_metrics(eng.infer(chunk_size=50), eng.y, eng.masks)


def _close(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert abs(a[k] - b[k]) <= 1e-12, (k, a[k], b[k])


def test_chunks_cover_the_range_within_both_bounds():
    g = random_graph()
    deg = np.diff(g.indptr)
    assert deg.max() > 40  # the hub exceeds the edge bound alone
    for lo, hi, sel in [(0, g.num_nodes, None), (13, 200, None), (0, 240, labelled_selector(g))]:
        chunks = list(iter_chunks(g.indptr, lo, hi, 7, 40, sel))
        ids = np.concatenate(chunks)
        want = np.arange(lo, hi)
        if sel is not None:
            want = want[sel(lo, hi)]
        np.testing.assert_array_equal(ids, want)
        for c in chunks:
            assert 1 <= c.size <= 7
            assert deg[c].sum() <= 40 or c.size == 1
    hub = [c for c in iter_chunks(g.indptr, 0, 240, 7, 40) if 5 in c]
    assert hub[0].tolist() == [5]
    with pytest.raises(ConfigError, match="max_edges"):
        Chunking(max_edges=0)


def test_eval_nodes_key_reaches_the_sampled_engines():
    cfg = load_config(None, ["train.engine=split", "train.eval_nodes=labelled", "run_dir=r"])
    assert cfg.engine_config().eval_nodes == "labelled"
    assert cfg.engine_config().scratch_dir == "r"  # evaluation's scratch goes to the run dir
    with pytest.raises(ConfigError, match="train.eval_nodes='some'.*all, labelled"):
        load_config(None, ["train.eval_nodes=some"])


def _cached(path) -> float:
    """Fraction of ``path`` found in the page cache: one row per 1 MiB probed, once (a probe
    reads what it misses, with the kernel's read-around)."""
    r = RowReader(path)
    step = max(1, (1 << 20) // r.row_bytes)  # from the second MiB: opening reads the header
    frac = r.cached_fraction(np.arange(step, r.shape[0], step))
    r.close()
    return frac


def test_row_file_drops_written_rows_from_the_page_cache(tmp_path, monkeypatch):
    """Rows written through a RowFile are flushed and dropped from the page cache every
    DROP_WRITTEN_BYTES of consecutive rows and at close, so a layer's output does not push its
    input out; they read back exactly."""
    import fleetgnn.engines.rowfiles as inf

    if rows_mod._RWF_NOWAIT is None or not hasattr(os, "posix_fadvise"):
        pytest.skip("no RWF_NOWAIT / posix_fadvise here")
    control = tmp_path / "control.npy"  # can this filesystem drop pages at all (not tmpfs)?
    np.save(control, np.ones((1 << 15, 64), dtype=np.float32))  # 8 MiB
    fd = os.open(control, os.O_RDONLY)
    os.fdatasync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    if _cached(control) > 0:
        pytest.skip("this filesystem keeps dropped pages (tmpfs?)")
    monkeypatch.setattr(inf, "DROP_WRITTEN_BYTES", 1 << 20)
    n = 1 << 15  # 8 MiB of rows, written in 40 consecutive chunks
    path = RowFile.create(tmp_path / "h.npy", np.float32, (n, 64))
    want = np.random.default_rng(0).standard_normal((n, 64)).astype(np.float32)
    f = RowFile(path)
    for a in range(0, n, 820):
        f.write(a, want[a : a + 820])
    f.close()
    assert _cached(path) == 0
    np.testing.assert_array_equal(np.load(path), want)


def test_row_reader_reads_a_cold_file_ahead_once_when_it_fits(tmp_path, monkeypatch):
    """A call that finds its rows uncached asks the kernel once to read the whole file ahead,
    only when the file fits in the available memory; rows are exact either way."""
    a = np.random.default_rng(0).standard_normal((500, 8))
    np.save(tmp_path / "a.npy", a)
    ids = np.array([499, 3, 3, 250])
    for fits in (False, True):
        monkeypatch.setattr(rows_mod, "fits_in_cache", lambda n, fits=fits: fits)
        reader = RowReader(tmp_path / "a.npy")
        monkeypatch.setattr(RowReader, "cached_fraction", lambda self, sid: 0.0)
        np.testing.assert_array_equal(reader.take(ids), a[ids])
        np.testing.assert_array_equal(reader.take(ids), a[ids])
        assert reader.read_ahead is fits  # asked at most once
        assert (reader.mapped_calls, reader.pread_calls) == (0, 2)
        monkeypatch.undo()
        reader.close()
    assert rows_mod.fits_in_cache(0) or rows_mod.memory_available() is None
    assert not rows_mod.fits_in_cache(1 << 60)


def test_row_reader_reads_scattered_rows_with_bounded_reads(tmp_path, monkeypatch):
    a = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=np.float64, shape=(900, 3))
    a[:] = np.random.default_rng(0).standard_normal(a.shape)
    a.flush()
    m = np.load(tmp_path / "a.npy", mmap_mode="r")
    reader = RowReader(m, cached="pread")  # the pread way (a file just written is cached)
    assert reader._fd is not None  # a file: read with preadv, not through the map
    rng = np.random.default_rng(1)
    for run, gap in [(4 << 20, 64 << 10), (240, 48), (24, 24), (1 << 20, 1)]:
        monkeypatch.setattr(rows_mod, "READ_RUN_BYTES", run)
        monkeypatch.setattr(rows_mod, "READ_GAP_BYTES", gap)
        for n in (0, 1, 17, 900, 3000):
            ids = rng.integers(0, 900, n)
            np.testing.assert_array_equal(reader.take(ids), m[ids])
        np.testing.assert_array_equal(reader.slice(5, 700), m[5:700])
    with pytest.raises(IndexError):
        reader.take(np.array([900]))
    reader.close()
    np.testing.assert_array_equal(RowReader(np.asarray(m)).take(np.array([3, 1])), m[[3, 1]])


@pytest.mark.parametrize("model", ["sage", "gat"])
def test_reference_streaming_equals_in_memory(model, tmp_path):
    eng = engine_from_config(_config("reference", model, [f"run_dir={tmp_path}"]), random_graph())
    old = split_metrics(eng.infer(), eng.y, eng.masks)
    assert eng.config.scratch_dir == str(tmp_path)  # train's run directory holds the scratch
    for chunking in (Chunking(), TINY):
        eng.chunking = chunking
        _close(eng.evaluate(), old)
    eng.config = dataclasses.replace(eng.config, eval_nodes="labelled")
    _close(eng.evaluate(), old)
    assert not list(tmp_path.iterdir())  # scratch directory removed


def _ranks(comm):
    """Rank body: the minibatch and split engines' streaming evaluations, and the cross-host layout
    (one scratch file per rank), on the same parameters."""
    g = random_graph()
    ctx = context_of(comm)
    out = {}
    budgets = ["store.device_budget=1KB", "store.host_budget=2KB"]
    if comm.world_size == 3:
        budgets.append("store.gather=two_sided")  # store reads are collective: equal chunk counts
    with engine_from_config(_config("minibatch", extra=budgets), g, ctx) as eng:
        out["state"] = {k: v.clone() for k, v in eng.module.state_dict().items()}
        eng.chunking = TINY
        out["minibatch"] = eng.evaluate()
        module = eng.module
    # the same parameters, evaluated on the labelled nodes only (a distributed engine's config
    # is fixed at construction: its DistSetup is frozen)
    labelled = _config("minibatch", extra=[*budgets, "train.eval_nodes=labelled"])
    with engine_from_config(labelled, g, ctx) as eng:
        eng.module.load_state_dict(out["state"])
        eng.chunking = TINY
        out["minibatch_labelled"] = eng.evaluate()
    if comm.world_size == 2:
        with engine_from_config(_config("split", extra=["split.partition=range"]), g, ctx) as eng:
            eng.module.load_state_dict(out["state"])
            eng.chunking = TINY
            out["split"] = eng.evaluate()
        before = comm.meter.snapshot()
        out["cross_host"] = streaming_metrics(
            module,
            g,
            GraphTopology(g),
            lambda ids: torch.from_numpy(g.x[ids.numpy()]).double(),
            comm=comm,
            dtype=torch.float64,
            chunking=Chunking(max_nodes=9, max_edges=50, target_bytes=512),
            same_host=False,
        )
        out["cross_host_bytes"] = sum(v["bytes"] for v in comm.meter.delta(before).values())
    return out


@pytest.mark.parametrize("world_size", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_distributed_streaming_equals_in_memory(world_size):
    results = run_world(_ranks, world_size, timeout_s=300)
    old = _in_memory_metrics("sage", results[0]["state"])
    keys = ["minibatch", "minibatch_labelled"]
    keys += ["split", "cross_host"] if world_size == 2 else []
    for res in results:
        for k in keys:
            _close(res[k], old)
    if world_size == 2:
        # two hidden layers all-gathered: every rank receives the other's rows of each
        width_bytes = 6 * 8
        assert results[0]["cross_host_bytes"] >= 2 * 120 * width_bytes


def test_scratch_removed_on_error_and_full_disk_is_one_line(tmp_path, monkeypatch):
    g = random_graph()
    eng = engine_from_config(_config("reference"), g)

    def sink(ids, rows):
        raise RuntimeError("sink failed")

    feats = lambda ids: normalize_rows(torch.from_numpy(g.x[ids.numpy()]).double(), "none")  # noqa: E731
    kw = dict(in_width=5, dtype=torch.float64, chunking=TINY, scratch_dir=tmp_path)
    with pytest.raises(RuntimeError, match="sink failed"):
        stream_inference(eng.module, GraphTopology(g), feats, g.indptr, sink, **kw)
    assert not list(tmp_path.iterdir())
    assert eng.module.training  # the training flag is restored
    monkeypatch.setattr("fleetgnn.engines.rowfiles.free_bytes", lambda path: 100)
    with pytest.raises(DiskFullError) as err:
        stream_inference(eng.module, GraphTopology(g), feats, g.indptr, sink, **kw)
    msg = str(err.value)
    assert "\n" not in msg and "no space left" in msg and "scratch_dir" in msg
    assert not list(tmp_path.iterdir())
    # one process, layers within Chunking.in_memory_bytes: hidden layers stay in memory, so a
    # full disk does not matter
    got = []
    kw["chunking"] = Chunking(max_nodes=7, max_edges=40)
    stream_inference(
        eng.module, GraphTopology(g), feats, g.indptr, lambda i, r: got.append(i), **kw
    )
    assert np.concatenate(got).tolist() == list(range(g.num_nodes))
    assert not list(tmp_path.iterdir())
    with pytest.raises(ConfigError, match="num_layers"):
        stream_inference(eng.module, GraphTopology(g), feats, g.indptr, sink, num_layers=4, **kw)


_PEAK = textwrap.dedent(
    """
    import json, re, sys
    import numpy as np, torch
    from fleetgnn.graph import from_edges, write_dataset, open_dataset
    from fleetgnn.train import engine_from_config, load_config

    n, e, hidden = 250_000, 1_250_000, 320
    rng = np.random.default_rng(0)
    u = rng.random(n)
    data = {"x": rng.standard_normal((n, 4)).astype(np.float32), "y": rng.integers(0, 8, n),
            "train_mask": u < 0.01, "val_mask": (u >= 0.01) & (u < 0.02)}
    g = from_edges(rng.integers(0, n, e), rng.integers(0, n, e), n, node_data=data, num_classes=8)
    write_dataset(g, sys.argv[1] + "/data")
    del g, data
    g = open_dataset(sys.argv[1] + "/data")
    cfg = load_config(None, ["train.engine=minibatch", "model.name=sage", f"model.hidden={hidden}",
        "train.fanouts=[5,5]", "store.device_budget=1MB", "store.host_budget=1MB",
        f"run_dir={sys.argv[1]}"])
    def status(key):
        return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1)) << 10
    with engine_from_config(cfg, g) as eng:
        eng.evaluate()  # warm up (allocator pools, lazy imports)
        open("/proc/self/clear_refs", "w").write("5")  # reset the peak to the current RSS
        before = status("VmRSS")
        eng.evaluate()
        peak = status("VmHWM")
    params = sum(p.numel() * p.element_size() for p in eng.module.parameters())
    print(json.dumps({"delta": peak - before, "layer": n * hidden * 4, "params": params}))
    """
)


@pytest.mark.slow
def test_budgeted_evaluation_never_holds_a_layer(tmp_path):
    """Peak RSS during a budgeted minibatch evaluation (250k nodes, hidden 320: one [N, hidden]
    float32 layer is 320 MB) stays within the budgets + the model + 6x the 32 MiB chunk target
    (a chunk's source rows, its aggregation and output), whatever N."""
    try:
        open("/proc/self/clear_refs", "w").write("5")
    except OSError:
        pytest.skip("cannot reset the peak RSS here (/proc/self/clear_refs)")
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    bound = 2 * (1 << 20) + 2 * r["params"] + 6 * DEFAULT_CHUNK_BYTES
    assert r["delta"] < bound < r["layer"], r


def sparsely_labelled_graph():
    """:func:`random_graph` with 600 edges and 10% of the nodes labelled (4/3/3% per split)."""
    g = random_graph(e=600)
    u = np.random.default_rng(1).random(g.num_nodes)
    data = {"x": g.x, "y": g.y, "train_mask": u < 0.04, "val_mask": (u >= 0.04) & (u < 0.07)}
    data["test_mask"] = (u >= 0.07) & (u < 0.1)
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    return from_edges(g.indices, dst, g.num_nodes, node_data=data, num_classes=4, name="sparse")


def _needed_masks(g, keep, layers):
    """Brute force ``[S_0, ..., S_{L-2}]``: S_{L-1} = keep, S_l = S_{l+1} and its in-neighbours."""
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    sets, cur = [], keep
    for _ in range(layers - 1):
        cur = cur.copy() | np.isin(np.arange(g.num_nodes), g.indices[cur[dst]])
        sets.append(cur)
    return sets[::-1]


def _restricted(comm, scratch_dir):
    """Rank body (``comm=None``: one process): stream_inference with and without the labelled
    selection for 2 and 3 layers, rows written to each scratch file counted per file."""
    from fleetgnn.engines import rowfiles
    from fleetgnn.engines.metric_sums import MetricSums

    g = sparsely_labelled_graph()
    written = {}
    plain_write = rowfiles.RowFile.write

    def counting_write(self, start, rows):
        written[self.path.name] = written.get(self.path.name, 0) + len(rows)
        plain_write(self, start, rows)

    rowfiles.RowFile.write = counting_write
    feats = lambda ids: torch.from_numpy(g.x[ids.numpy()]).double()  # noqa: E731
    out = {}
    try:
        for layers in (2, 3):
            extra = [f"model.num_layers={layers}", f"train.fanouts={[3] * layers}"]
            module = engine_from_config(_config("reference", extra=extra), g).module
            for name, select, same_host in [
                ("all", None, True),
                ("labelled", labelled_selector(g), True),
                ("labelled_hosts", labelled_selector(g), False),
            ]:
                sums = MetricSums(g)
                written.clear()
                kw = dict(comm=comm, dtype=torch.float64, select=select, chunking=TINY)
                stats = stream_inference(
                    module,
                    GraphTopology(g),
                    feats,
                    g.indptr,
                    sums,
                    in_width=5,
                    scratch_dir=scratch_dir,
                    same_host=same_host,
                    **kw,
                )
                out[layers, name] = (sums.result(comm), stats, dict(written))
    finally:
        rowfiles.RowFile.write = plain_write
    return out


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2])
def test_labelled_layers_compute_and_store_only_the_needed_nodes(world_size, tmp_path):
    """With select, layer l computes and writes exactly |S_l| rows (summed over ranks, counted
    at the file writes), and the metrics equal evaluating every node, for 2 and 3 layers."""
    g = sparsely_labelled_graph()
    keep = labelled_selector(g)(0, g.num_nodes)
    if world_size == 1:
        results = [_restricted(None, str(tmp_path))]
    else:
        results = run_world(_restricted, world_size, str(tmp_path), timeout_s=300)
    for layers in (2, 3):
        sizes = [int(s.sum()) for s in _needed_masks(g, keep, layers)] + [int(keep.sum())]
        assert sizes[0] < g.num_nodes * 0.6  # the restriction restricts
        for res in results:
            for name in ("labelled", "labelled_hosts"):
                _close(res[layers, name][0], res[layers, "all"][0])
            _close(res[layers, "all"][0], results[0][layers, "all"][0])
        for name in ("labelled", "labelled_hosts"):
            computed = np.sum([res[layers, name][1].rows for res in results], axis=0)
            assert computed.tolist() == sizes
            assert results[0][layers, name][1].layer_rows == sizes[:-1]
        for i in range(layers - 1):  # rows written into each hidden layer's file, all ranks
            rows = sum(res[layers, "labelled"][2].get(f"h{i + 1}.npy", 0) for res in results)
            assert rows == sizes[i]
        everything = np.sum([res[layers, "all"][1].rows for res in results], axis=0)
        assert everything.tolist() == [g.num_nodes] * layers
    assert not list(tmp_path.iterdir())


def test_labelled_scratch_space_is_proportional_to_the_needed_rows(tmp_path, monkeypatch):
    """The scratch file of a labelled evaluation has |S_0| rows on disk (st_size and st_blocks),
    and the free-space check asks for |S_0| rows: a disk too small for N rows suffices."""
    n, width = 20_000, 64
    rng = np.random.default_rng(0)
    keep = np.zeros(n, dtype=bool)
    keep[rng.choice(n, 100, replace=False)] = True
    data = {"x": rng.standard_normal((n, 5)), "y": rng.integers(0, 4, n), "val_mask": keep}
    edges = rng.integers(0, n, (2, 2 * n))
    g = from_edges(edges[0], edges[1], n, node_data=data, num_classes=4)
    extra = ["model.num_layers=2", "train.fanouts=[3,3]", f"model.hidden={width}"]
    module = engine_from_config(_config("reference", extra=extra), random_graph()).module
    s0 = int(_needed_masks(g, keep, 2)[0].sum())
    row_bytes = width * 8
    assert s0 * row_bytes * 20 < n * row_bytes
    seen = []

    def sink(ids, rows):  # the final layer: the hidden layer's file is still there
        if not seen:
            (path,) = tmp_path.glob("*/h1.npy")
            seen.append(os.stat(path))

    feats = lambda ids: torch.from_numpy(g.x[ids.numpy()]).double()  # noqa: E731
    kw = dict(in_width=5, dtype=torch.float64, scratch_dir=tmp_path)
    kw["chunking"] = Chunking(in_memory_bytes=0)
    stats = stream_inference(
        module, GraphTopology(g), feats, g.indptr, sink, select=labelled_selector(g), **kw
    )
    assert stats.scratch_bytes == s0 * row_bytes
    st = seen[0]
    assert s0 * row_bytes <= st.st_size <= s0 * row_bytes + 4096
    assert st.st_blocks * 512 <= s0 * row_bytes + 64 * 1024  # allocated: the rows, not N of them
    # room for the needed rows but not for N of them: labelled runs, all is refused
    monkeypatch.setattr("fleetgnn.engines.rowfiles.free_bytes", lambda path: 4 * s0 * row_bytes)
    stream_inference(
        module, GraphTopology(g), feats, g.indptr, sink, select=labelled_selector(g), **kw
    )
    with pytest.raises(DiskFullError, match="no space left"):
        stream_inference(module, GraphTopology(g), feats, g.indptr, sink, **kw)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("bitwise_count", [True, False])
def test_node_set_positions_and_selection(bitwise_count, monkeypatch):
    """NodeSet: members, ranks below every ID of [0, N] and windows, with and without numpy's
    bitwise_count (numpy < 2 uses a byte table)."""
    from fleetgnn.engines.chunks import NodeSet

    if not bitwise_count:
        monkeypatch.delattr(np, "bitwise_count", raising=False)
    rng = np.random.default_rng(0)
    for n in (1, 63, 64, 65, 1000):
        mask = rng.random(n) < 0.3
        s = NodeSet(mask)
        assert s.size == mask.sum()
        want = np.concatenate([[0], np.cumsum(mask)])
        np.testing.assert_array_equal(s.position(np.arange(n + 1)), want)
        for a, b in [(0, n), (n // 3, n), (1, max(1, n - 1))]:
            np.testing.assert_array_equal(s.select(a, b), mask[a:b])


# ------------------------------------------------------------------------------ typed graphs
def _engine(conv, layers=2):
    g = toy_mag(num_papers=60, num_authors=30, num_fields=5, featureless_fields=True, seed=3)
    torch.manual_seed(0)
    kw = {"heads": 2} if conv == "rgat" else {}
    model = build_hetero_model(conv, g, g.num_classes, hidden_dim=5, num_layers=layers, **kw)
    cfg = ReferenceEngineConfig(mode="full", dtype="float64", seed=0)
    return build_engine(model.double(), g, cfg)


def _streamed_logits(engine, chunking, tmp_path):
    n = engine.graph.schema.count(engine.schema.target)
    out = torch.full((n, engine.num_classes), float("nan"), dtype=torch.float64)

    def sink(ntype, ids, rows):
        assert ntype == engine.schema.target
        out[torch.from_numpy(ids)] = rows

    rows = stream_typed_inference(
        engine.module,
        engine.graph,
        engine.type_rows,
        sink,
        dtype=engine.dtype,
        chunking=chunking,
        scratch_dir=tmp_path,
    )
    return out, rows


@pytest.mark.parametrize("conv", ["rgcn", "rgat", "hetero-sage"])
@pytest.mark.parametrize("chunking", [TINY, Chunking()], ids=["files", "memory"])
def test_streamed_logits_equal_the_whole_graph_forward(conv, chunking, tmp_path):
    with _engine(conv) as engine:
        engine.train_step(0, 0)  # parameters away from their start
        full = engine.infer()
        got, rows = _streamed_logits(engine, chunking, tmp_path)
        torch.testing.assert_close(got, full, rtol=1e-12, atol=1e-12)
        assert rows[-1] == full.shape[0]  # the last layer: the target type only
        assert list(tmp_path.iterdir()) == []  # scratch files removed
        want = split_metrics(full, engine.y, engine.masks)
        ev = engine.evaluate()
        assert ev.keys() == want.keys()
        for k, v in want.items():
            assert ev[k] == pytest.approx(v, rel=1e-12)


def test_types_no_later_layer_reads_are_not_computed(tmp_path):
    """A chain a -> b -> c classified at c: 2 layers compute b and c, then c; never a."""
    schema = HeteroSchema(
        ("a", "b", "c"),
        (5, 4, 3),
        (("a", "ab", "b"), ("b", "bc", "c"), ("c", "cc", "c")),
        target="c",
    )
    edges = {
        schema.relations[0]: ([0, 1, 2, 3, 4], [0, 1, 2, 3, 0]),
        schema.relations[1]: ([0, 1, 2, 3], [0, 1, 2, 2]),
        schema.relations[2]: ([0, 1], [1, 2]),
    }
    rng = np.random.default_rng(0)
    x = {t: rng.normal(size=(n, 3)).astype(np.float32) for t, n in zip("abc", (5, 4, 3))}
    g = from_typed_edges(schema, edges, x=x, y=np.array([0, 1, 0]), train_mask=np.ones(3, bool))
    torch.manual_seed(0)
    model = build_hetero_model("rgcn", g, 2, hidden_dim=4, num_layers=2).double()
    produced = typed_layer_widths(model, g, dtype=torch.float64)
    assert [sorted(p) for p in produced] == [["a", "b", "c"]] * 2  # R-GCN's self term
    assert needed_types(schema, produced, ["c"]) == [["b", "c"], ["c"]]
    assert needed_types(schema, produced, ["a", "c"]) == [["a", "b", "c"], ["a", "c"]]
    cfg = ReferenceEngineConfig(mode="full", dtype="float64")
    with build_engine(model, g, cfg) as engine:
        got, rows = _streamed_logits(engine, TINY, tmp_path)
        torch.testing.assert_close(got, engine.infer(), rtol=1e-12, atol=1e-12)
    assert rows == [4 + 3, 3]
    with pytest.raises(ConfigError, match=r"no rows of node type\(s\) \['x'\]"):
        stream_typed_inference(model, g, print, print, outputs=["c", "x"], dtype=torch.float64)


def _stream_ranks(comm, same_host, conv):
    with _engine(conv) as engine:
        engine.train_step(0, 0)
        sums = MetricSums(engine.graph)
        rows = stream_typed_inference(
            engine.module,
            engine.graph,
            engine.type_rows,
            lambda _, ids, rows: sums(ids, rows),
            comm=comm,
            dtype=engine.dtype,
            chunking=TINY,
            same_host=same_host,
        )
        return sums.result(comm), rows, split_metrics(engine.infer(), engine.y, engine.masks)


@pytest.mark.slow
@pytest.mark.parametrize("same_host", [True, False], ids=["one-host", "hosts"])
def test_two_ranks_split_the_nodes_and_agree(same_host):
    """Each rank computes half of every layer's nodes (one shared file per type, or its own
    files filled by all-gathers) and the all-reduced metrics are the whole-graph forward's."""
    results = run_world(_stream_ranks, 2, same_host, "rgat", timeout_s=240)
    (m0, rows0, want), (m1, rows1, _) = results
    assert m0 == m1
    for k, v in want.items():
        assert m0[k] == pytest.approx(v, rel=1e-12)
    n_paper = 60
    assert rows0[-1] + rows1[-1] == n_paper and 0 < rows0[-1] < n_paper
