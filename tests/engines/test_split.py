"""The split engine (GSplit) against the reference engine's mini-batch steps (gloo worlds).

Same global batch size and seed: every rank draws the reference's sample, computes only its
split, and after the gradient all-reduce takes the reference's optimizer step. Checked in
float64 with dropout on, for several world sizes, models and partitions (METIS, random, one
part empty, everything on one rank), plus the splitting invariants on their own.
"""

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines.split import SplitEngine, split_block
from fleetgnn.graph.loaders.bundled import DATA_DIR
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.partition import PartitionBook, partition
from fleetgnn.sampling import GraphTopology, NeighborSampler, SeedLoader
from fleetgnn.sampling.presample import presample_hotness
from fleetgnn.store import SOURCES
from fleetgnn.train import (
    engine_from_config,
    load_config,
    model_from_config,
    optimizer_from_config,
)

STEPS = 3


def _graph():
    return generate_graph(spec_for("tiny", 0.3), seed=4)


def _config(model, extra=()):
    base = [
        "train.engine=split",
        "train.dtype=float64",
        "train.batch_size=24",
        "train.fanouts=[4,3]",
        f"model.name={model}",
        "model.hidden=8",
        "model.dropout=0.3",
        "optim.optimizer=sgd",
        "optim.lr=0.5",
        "optim.weight_decay=0",
        "train.seed=7",
    ]
    return load_config(None, base + (["model.heads=2"] if model == "gat" else []) + list(extra))


def _book(kind, graph, w):
    n = graph.num_nodes
    if kind == "metis":
        return partition(graph, "metis", w, seed=0)
    if kind == "random":
        return partition(graph, "random", w, seed=3)
    if kind == "one_empty":  # the last rank owns nothing
        part = np.arange(n) % max(w - 1, 1)
        return PartitionBook.from_part_of(part, w, "degenerate")
    if kind == "all_on_0":
        return PartitionBook.from_part_of(np.zeros(n, dtype=np.int64), w, "degenerate")
    raise AssertionError(kind)


def _cases(w):
    out = [(m, "metis") for m in ("gcn", "sage", "gin", "gat")]
    if w > 1:
        out += [("sage", "random"), ("gat", "one_empty"), ("gcn", "all_on_0")]
    return out


def _split_rank(comm, device="cpu"):
    # one intra-op thread here and in the reference: a multi-threaded reduction (GIN's layer
    # norm backward) may sum in another order, and W=1 compares the parameters bit for bit
    torch.set_num_threads(1)
    graph = _graph()
    res = []
    for model_name, kind in _cases(comm.world_size):
        cfg = _config(model_name, [f"train.device={device}"])
        model = model_from_config(cfg, graph)
        with SplitEngine(
            model,
            graph,
            context_of(comm),
            cfg.engine_config(),
            optimizer=optimizer_from_config(model, cfg.optim),
            book=_book(kind, graph, comm.world_size),
        ) as eng:
            losses, counts = [], []
            for step in range(STEPS):
                st, _ = eng.train_step(0, step, eng.prepare(0, step))
                losses.append(st.loss_sum)
                counts.append(st.count)
                if step == 0:
                    grads = {n: p.grad.cpu() for n, p in eng.module.named_parameters()}
            params = {n: p.detach().cpu() for n, p in eng.module.named_parameters()}
            res.append({"loss": losses, "count": counts, "grads": grads, "params": params})
    return res


def _reference(model_name):
    cfg = _config(model_name, ["train.device=cpu"])  # the engine under test may be on a GPU
    ref = engine_from_config(cfg, _graph(), engine="reference")
    losses, counts, grads = [], [], None
    for step in range(STEPS):
        st = ref.train_step(0, step)
        losses.append(st.loss_sum)
        counts.append(st.count)
        if step == 0:
            grads = {n: p.grad.clone() for n, p in ref.model.named_parameters()}
    params = {n: p.detach().clone() for n, p in ref.model.named_parameters()}
    return {"loss": losses, "count": counts, "grads": grads, "params": params}


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_steps_equal_the_reference(world_size, device):
    """On ``cuda`` the ranks share the GPU; the reference stays on the CPU."""
    if device == "cuda" and world_size > 2:
        pytest.skip("one GPU: the shared-GPU mode is tested at W = 1 and 2")
    results = run_world(_split_rank, world_size, device, timeout_s=300, device=device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks (see _split_rank)
    try:
        refs = {name: _reference(name) for name, _ in _cases(world_size)}
    finally:
        torch.set_num_threads(threads)
    for i, (model_name, kind) in enumerate(_cases(world_size)):
        ref = refs[model_name]
        ranks = [r[i] for r in results]
        what = f"{model_name}/{kind}/W={world_size}"
        # every rank's owned targets add up to the global batch, losses to the reference's
        assert [sum(c) for c in zip(*(r["count"] for r in ranks))] == ref["count"], what
        loss = [sum(v) for v in zip(*(r["loss"] for r in ranks))]
        np.testing.assert_allclose(loss, ref["loss"], rtol=1e-10, err_msg=what)
        for r in ranks:  # all-reduced gradients and parameters equal the reference's
            for name, g in ref["grads"].items():
                torch.testing.assert_close(r["grads"][name], g, rtol=1e-9, atol=1e-11)
            for name, p in ref["params"].items():
                if world_size == 1 and device == "cpu":  # bit for bit on the same device
                    assert torch.equal(r["params"][name], p), (what, name)
                torch.testing.assert_close(r["params"][name], p, rtol=1e-9, atol=1e-11)


# ---------------------------------------------------------------------------------- invariants
def _sample(graph, fanouts=(4, 3), batch=24, step=0):
    train = torch.from_numpy(np.flatnonzero(np.asarray(graph.train_mask)))
    seeds = SeedLoader(train, batch, seed=7).batch(0, step)
    return (
        NeighborSampler(GraphTopology(graph), list(fanouts), seed=7)
        .sample_from_nodes(seeds, epoch=0, step=step)
        .blocks
    )


@pytest.mark.parametrize("w", [1, 2, 3, 5])
def test_split_invariants(w):
    graph = _graph()
    rng = np.random.default_rng(w)
    owner = rng.integers(0, w, graph.num_nodes)
    for block in _sample(graph):
        own = owner[block.src_ids.numpy()]
        splits = [split_block(block, own, r, w) for r in range(w)]
        m = block.num_dst
        # owned sets are disjoint and cover the layer's vertices (sources and destinations)
        rows = np.concatenate([sp.rows for sp in splits])
        assert np.array_equal(np.sort(rows), np.arange(block.num_src))
        assert sum(sp.num_dst for sp in splits) == m
        for sp in splits:  # destinations are the prefix of the rows
            assert np.all(sp.rows[: sp.num_dst] < m) and np.all(sp.rows[sp.num_dst :] >= m)
        # every sampled edge is processed exactly once, by its destination's owner
        assert sum(sp.num_edges for sp in splits) == block.num_edges
        assert sum(sp.local.num_edges + sp.refs_out.num_edges for sp in splits) == block.num_edges
        # send counts equal receive counts pairwise
        for i in range(w):
            for j in range(w):
                assert splits[i].send_counts[j] == splits[j].recv_counts[i]
        # a reference vertex of v in split j iff some edge (u, v) has owner(u) = j != owner(v)
        dpos = np.repeat(np.arange(m), np.diff(block.indptr.numpy()))
        spos = block.indices.numpy()
        for j in range(w):
            expect = np.unique(dpos[(own[spos] == j) & (own[dpos] != j)])
            got = []
            for q in range(w):  # the receivers' view of what j sends
                sp = splits[q]
                lo = int(sp.recv_counts[:j].sum())
                got.append(sp.rows[sp.recv_rows[lo : lo + sp.recv_counts[j]]])
            assert np.array_equal(np.sort(np.concatenate(got)), expect)
            if w == 1:
                assert splits[0].refs_out.num_dst == 0


def _hot_order(graph):
    """Nodes by in- plus out-degree, descending, ties by ID (the store's degree ranking)."""
    n = graph.num_nodes
    score = np.diff(np.asarray(graph.indptr)) + np.bincount(np.asarray(graph.indices), minlength=n)
    return sorted(range(n), key=lambda v: (-int(score[v]), v))


def _tier_rows(graph, owner, w, dev_rows, host_rows):
    """Each rank's device rows (its part's ``dev_rows`` hottest) and the host tier's rows."""
    order = _hot_order(graph)
    dev = [[v for v in order if owner[v] == r][:dev_rows] for r in range(w)]
    on_dev = {v for d in dev for v in d}
    return dev, set([v for v in order if v not in on_dev][:host_rows])


def _store_rank(comm):
    graph = _graph()
    book = _book("metis", graph, comm.world_size)
    out = {}
    # row = 16 float32 = 64 B: 1KiB holds 16 rows per rank, 2KiB 32 rows on the host
    for name, sets in (
        ("unlimited", ["store.device_budget=null"]),
        ("tiered", ["store.device_budget=1KiB", "store.host_budget=2KiB", "split.report_dp=true"]),
    ):
        cfg = _config("sage", sets)
        model = model_from_config(cfg, graph)
        with SplitEngine(model, graph, context_of(comm), cfg.engine_config(), book=book) as eng:
            b = eng.prepare(0, 0)
            stats, _ = eng.train_step(0, 0, b)
            loaded = b.splits[0].block.src_ids.numpy()[b.splits[0].rows]
            out[name] = {
                "loaded": loaded,
                "x_exact": bool(torch.equal(b.x.cpu(), torch.from_numpy(graph.x[loaded]).double())),
                "rows": {k[5:]: v for k, v in b.counters.items() if k.startswith("rows_")},
                "traffic": {k: stats.traffic.get(k, 0) for k in ("local", "h2d", "disk")},
                "shard": eng.store.plan.features.shard_rows(comm.rank).tolist(),
                "device_bytes": eng.peak_memory()["device"],
                "dp_rows": b.counters.get("dp_input_rows"),
                "total_rows": b.counters["input_rows_total"],
            }
    return out


@pytest.mark.slow
def test_each_input_row_is_loaded_once_from_its_owners_tiers():
    """Every input row is loaded once, by its owner, through the store: from the owner's device
    shard (its own part's hottest rows), the host tier or disk, never a peer's shard; the counts
    per source are exact and the step's bytes per link are the store's."""
    w = 3
    out = run_world(_store_rank, w, timeout_s=300)
    graph = _graph()
    owner = np.asarray(_book("metis", graph, w).part_of)
    row = 64
    dev, host = _tier_rows(graph, owner, w, 16, 32)
    for name in ("unlimited", "tiered"):
        loaded = np.concatenate([o[name]["loaded"] for o in out])
        assert loaded.size == np.unique(loaded).size == out[0][name]["total_rows"], name
    for r, o in enumerate(out):
        full, tiered = o["unlimited"], o["tiered"]
        assert full["x_exact"] and tiered["x_exact"]
        assert np.all(owner[full["loaded"]] == r)  # training reads only owned rows
        # unlimited: the whole part on the device, every row a device hit
        assert sorted(full["shard"]) == np.flatnonzero(owner == r).tolist()
        assert full["rows"] == {**dict.fromkeys(SOURCES, 0), "local": full["loaded"].size}
        assert full["traffic"] == {"local": full["loaded"].size * row, "h2d": 0, "disk": 0}
        # 1KiB: the part's 16 hottest rows on the device, the next 32 of all parts on the host
        assert tiered["shard"] == dev[r] and tiered["device_bytes"] == len(dev[r]) * row
        ids = tiered["loaded"].tolist()
        want = {
            "local": sum(v in set(dev[r]) for v in ids),
            "peer": 0,
            "net": 0,
            "host": sum(v in host for v in ids),
        }
        want["disk"] = len(ids) - want["local"] - want["host"]
        assert tiered["rows"] == want and min(want["local"], want["host"], want["disk"]) > 0
        links = {"local": "local", "host": "h2d", "disk": "disk"}
        assert tiered["traffic"] == {links[k]: want[k] * row for k in links}
    # split parallelism loads no more input rows than data parallelism on the same targets
    assert out[0]["tiered"]["total_rows"] <= out[0]["tiered"]["dp_rows"]


@pytest.mark.slow
def test_split_engine_through_the_cli(tmp_path):
    """`fleetgnn train --engine split --nproc 2`: aggregated metrics and GSplit's reports."""
    import json

    from fleetgnn.cli.main import main

    run = tmp_path / "run"
    argv = ["train", "--engine", "split", "--nproc", "2", "--epochs", "2", "--run-dir", str(run)]
    argv += ["--no-progress", "--set", "data.preset=tiny", "--set", "data.scale=0.3"]
    argv += ["--set", f"data.cache_dir={tmp_path / 'cache'}", "--set", "train.batch_size=64"]
    argv += ["--set", "split.partition=random", "--set", "split.report_dp=true"]
    assert main(argv) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["engine"] == "split" and summary["world_size"] == 2
    rec = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    extra = rec["extra"]
    assert 0.0 < extra["local_edge_ratio"] < 1.0 and extra["edge_skew"] >= 0.0
    dp = extra["dp_counterfactual"]
    assert dp["edges"] >= extra["edges"] * 0.5 and dp["input_rows"] >= dp["split_input_rows"]
    rows = extra["per_rank"]["input_rows"]  # each rank's own part's rows per store source
    assert all(r["peer"] == r["net"] == 0 for r in rows) and sum(r["local"] for r in rows) > 0
    for source in SOURCES:  # the epoch's requests are the ranks' rows, summed
        assert extra["store_requests"]["features"][source] == sum(r[source] for r in rows)
    assert extra["hit_rates"]["local"] == 1.0  # no budget: every rank holds its whole part
    assert len(extra["per_rank"]["shuffle_bytes_per_layer"]) == 2


def _count_rank(comm, model_name):
    graph = _graph()
    cfg = _config(model_name)
    model = model_from_config(cfg, graph)
    book = _book("random", graph, comm.world_size)
    with SplitEngine(model, graph, context_of(comm), cfg.engine_config(), book=book) as eng:
        batch = eng.prepare(0, 0)
        calls = {"exchanges": 0, "all_reduce_sum": 0}
        marks = {}
        exchange, reduce, zero_grad = eng.comm._exchange, eng.comm.all_reduce_sum, None

        def counted_exchange(*a, **k):  # every all_to_all_single, forward or backward
            calls["exchanges"] += 1
            return exchange(*a, **k)

        def counted_reduce(*a, **k):
            calls["all_reduce_sum"] += 1
            return reduce(*a, **k)

        zero_grad = eng.optimizer.zero_grad

        def mark(*a, **k):  # between the forward and the backward
            marks["forward"] = calls["exchanges"]
            return zero_grad(*a, **k)

        eng.comm._exchange, eng.comm.all_reduce_sum = counted_exchange, counted_reduce
        eng.optimizer.zero_grad = mark
        eng.train_step(0, 0, batch)
        return {
            "forward": marks["forward"],
            "backward": calls["exchanges"] - marks["forward"],
            "all_reduce_sum": calls["all_reduce_sum"],
        }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model_name", "forward", "backward"), [("sage", 1, 1), ("gcn", 1, 1), ("gat", 3, 2)]
)
def test_collectives_per_step(model_name, forward, backward):
    """Per layer: one all-to-all per aggregation call forward (GAT makes three: source scores,
    normaliser, messages), the transposed one backward where a gradient flows (not into GAT's
    constant normaliser input); one gradient all-reduce per step."""
    out = run_world(_count_rank, 2, model_name, timeout_s=300)
    layers = 2
    for calls in out:
        assert calls["forward"] == forward * layers
        assert calls["backward"] == backward * layers
        assert calls["all_reduce_sum"] == 1


PLANETOID = DATA_DIR / "planetoid"  # the Cora that ships with fleetgnn


def _cora_config():
    return load_config(
        None,
        [
            "train.engine=split",
            "model.name=sage",
            "train.fanouts=[10,10]",
            "train.batch_size=32",
            "data.feature_norm=row",
            "train.seed=0",
        ],
    )


def _cora_rank(comm, path):
    from fleetgnn.graph import open_dataset

    torch.set_num_threads(1)
    cfg = _cora_config()
    with engine_from_config(cfg, open_dataset(path), context_of(comm)) as eng:
        return [[(s.loss_sum, s.count) for s in eng.run_epoch(e)] for e in range(3)]


@pytest.mark.slow
def test_cora_loss_trajectory_matches_the_reference(tmp_path):
    """Real Cora, 2 ranks, METIS: the epoch losses are the reference engine's (float32)."""
    from fleetgnn.graph import open_dataset, write_dataset
    from fleetgnn.graph.loaders.planetoid import load_planetoid

    path = write_dataset(load_planetoid(PLANETOID, "cora"), tmp_path / "cora")
    out = run_world(_cora_rank, 2, str(path), timeout_s=300)
    ref = engine_from_config(_cora_config(), open_dataset(path), engine="reference")
    for epoch in range(3):
        expect = [(s.loss_sum, s.count) for s in ref.run_epoch(epoch)]
        for step, (loss, count) in enumerate(expect):
            parts = [o[epoch][step] for o in out]
            assert sum(c for _, c in parts) == count
            assert sum(v for v, _ in parts) == pytest.approx(loss, rel=2e-5), (epoch, step)


def _gradcheck_rank(comm):
    """Directional gradcheck of the distributed function ``x (all ranks) -> out (all ranks)``.

    Per-rank ``torch.autograd.gradcheck`` cannot apply: rank r's output depends on every rank's
    input. With random directions ``v_r`` (input) and ``u_r`` (output) on every rank, the central
    difference ``sum_r u_r . (f_r(x + e v) - f_r(x - e v)) / 2e`` must equal the backward's
    ``sum_r grad_r(u) . v_r``; both sums are all-reduced.
    """
    from fleetgnn.engines.split import SplitAggregator

    graph = _graph()
    w, r = comm.world_size, comm.rank
    owner = np.random.default_rng(11).integers(0, w, graph.num_nodes)
    out = []
    for block in _sample(graph):
        sp = split_block(block, owner[block.src_ids.numpy()], r, w)
        agg = SplitAggregator(sp, comm, dtype=torch.float64)
        gen = torch.Generator().manual_seed(100 + r)
        x = torch.randn(sp.num_rows, 3, dtype=torch.float64, generator=gen)
        ew = torch.rand(agg.halo.num_edges, dtype=torch.float64, generator=gen) + 0.5
        for reduce, weights in (("mean", None), ("sum", ew)):
            v = torch.randn(x.shape, dtype=torch.float64, generator=gen)
            u = torch.randn(sp.num_dst, 3, dtype=torch.float64, generator=gen)
            eps = 1e-6
            with torch.no_grad():
                plus = agg.aggregate(x + eps * v, reduce, weights)
                minus = agg.aggregate(x - eps * v, reduce, weights)
            numeric = float((u * (plus - minus)).sum()) / (2 * eps)
            xg = x.clone().requires_grad_(True)
            agg.aggregate(xg, reduce, weights).backward(u)
            analytic = float((xg.grad * v).sum())
            sums = comm.all_reduce_sum(torch.tensor([numeric, analytic], dtype=torch.float64))
            out.append((float(sums[0]), float(sums[1])))
    return out


@pytest.mark.slow
def test_gradcheck_of_the_shuffles():
    """Both exchanges (pre-aggregated partial sums; weighted source rows): the backward is the
    adjoint of the forward, checked against central differences across ranks."""
    for pairs in run_world(_gradcheck_rank, 3, timeout_s=300):
        assert pairs
        for numeric, analytic in pairs:
            assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize(("host", "link"), [("null", "h2d"), ("0", "disk")])
def test_zero_device_budget_loads_every_row_from_the_host_tier_or_disk(host, link):
    """``store.device_budget=0``: an empty device tier, every row from the host tier (or disk
    with ``store.host_budget=0``), in the rows' own dtype (an empty cache once had float64
    rows, and meeting float32 misses, failed with 'Index put requires the source and
    destination dtypes match')."""
    from fleetgnn.distributed.testing import context_or_own

    graph = _graph()
    assert np.asarray(graph.x).dtype == np.float32
    sets = ["store.device_budget=0", f"store.host_budget={host}", "train.dtype=float32"]
    cfg = _config("sage", sets)
    with context_or_own(None) as ctx, engine_from_config(cfg, graph, ctx) as eng:
        assert eng.peak_memory()["device"] == 0 and eng.store.plan.features.num_device == 0
        batch = eng.prepare(0, 0)
        assert batch.x.dtype == torch.float32
        st, _ = eng.train_step(0, 0, batch)
        assert st.count > 0 and np.isfinite(st.loss_sum)
        rows = batch.splits[0].rows.size  # one rank: it owns every input row
        assert st.traffic.get("local", 0) == 0 and st.traffic[link] == rows * 64
        source = "host" if link == "h2d" else "disk"
        assert batch.counters[f"rows_{source}"] == rows


def test_store_placement_follows_the_presampled_ranking():
    """``store.placement=presample`` ranks the part's rows by pre-sampled accesses (one rank
    owns every row: its shard holds the 16 most accessed)."""
    from fleetgnn.distributed.testing import context_or_own
    from fleetgnn.engines.common import presample_seeds

    graph = _graph()
    cfg = _config("sage", ["store.device_budget=1KiB", "store.placement=presample"])
    with context_or_own(None) as ctx, engine_from_config(cfg, graph, ctx) as eng:
        sc = eng.config
        seeds = presample_seeds(eng.task, graph)
        hot = presample_hotness(graph, seeds, sc.batch_size, sc.fanouts, sc.seed)
        assert hot.policy == "presample"
        assert eng.store.plan.features.shard_rows(0).tolist() == hot.order[:16].tolist()


def test_a_device_topology_is_refused_in_one_line():
    from fleetgnn.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^store.topology='dgx1-v100' does not apply to the s"):
        _config("sage", ["store.topology=dgx1-v100"]).engine_config()
