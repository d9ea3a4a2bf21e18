"""Epoch metrics of a multi-rank run are the whole job's, not rank 0's share.

Each rank records its own steps' raw numbers (loss sums, counts, bytes the store served, model
size); the test aggregates them independently and compares with what the Trainer wrote to
metrics.jsonl and summary.json.
"""

import math

import pytest
from rich.console import Console

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import Trainer, engine_from_config, load_config, read_metrics


def _config(run_dir):
    return load_config(
        None,
        [
            "train.engine=minibatch",
            "train.batch_size=16",
            "train.fanouts=[4,3]",
            "train.epochs=2",
            "train.checkpoint_every=3",
            "model.name=sage",
            "model.hidden=8",
            "train.seed=5",
            f"run_dir={run_dir}",
        ],
    )


def _rank(comm, run_dir):
    graph = generate_graph(spec_for("tiny", 0.3), seed=4)
    cfg = _config(run_dir)
    with engine_from_config(cfg, graph, context_of(comm)) as engine:
        seen = []
        original = engine.train_step

        def recording(epoch, step, batch, waited):
            stats = original(epoch, step, batch, waited)
            seen.append((epoch, step, stats.loss_sum, stats.count, dict(batch.traffic)))
            return stats

        engine.train_step = recording
        summary = Trainer.from_config(
            engine, cfg, console=Console(quiet=True), show_progress=False
        ).fit()
        params = sum(p.numel() for p in engine.module.parameters())
        itemsize = next(engine.module.parameters()).element_size()
        return {"seen": seen, "summary": summary, "grad_bytes": params * itemsize}


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3])
def test_epoch_loss_and_traffic_are_aggregated_over_ranks(tmp_path, world_size):
    out = run_world(_rank, world_size, str(tmp_path), timeout_s=300)
    recs = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["epoch"] for r in recs] == [0, 1]
    for rec in recs:
        e = rec["epoch"]
        rows = [s for o in out for s in o["seen"] if s[0] == e]
        steps = len(rows) // world_size
        loss = sum(s[2] for s in rows) / sum(s[3] for s in rows)
        assert rec["loss"] == pytest.approx(loss, rel=1e-12)
        # rank 0's share differs: the test would fail if only rank 0 were reported
        r0 = [s for s in out[0]["seen"] if s[0] == e]
        assert not math.isclose(sum(s[2] for s in r0) / sum(s[3] for s in r0), loss)
        assert rec["extra"]["per_rank"]["count"] == [
            sum(s[3] for s in o["seen"] if s[0] == e) for o in out
        ]
        # traffic: what the store served on every rank, plus DDP's gradient all-reduce through
        # the communicator (ring model, 2 (W-1)/W of the gradient bytes per rank and step)
        served = {}
        for s in rows:
            for k, v in s[4].items():
                served[k] = served.get(k, 0) + v
        grad = out[0]["grad_bytes"]
        ring = 2 * (world_size - 1) * grad // world_size
        assert rec["traffic"]["peer"] >= served.get("peer", 0) + steps * world_size * ring
        for k in ("h2d", "disk", "local"):
            assert rec["traffic"].get(k, 0) == served.get(k, 0), k
        assert rec["traffic"]["peer"] - served.get("peer", 0) <= steps * world_size * (ring + 64)
        assert rec["epoch_time_s"] == max(rec["extra"]["per_rank"]["epoch_time_s"])
    summary = out[0]["summary"]
    assert summary["final_train_loss"] == pytest.approx(recs[-1]["loss"], rel=1e-12)


RING = [[100, 50, 0, 25], [50, 100, 25, 0], [0, 25, 100, 50], [25, 0, 50, 100]]


def _topology_rank(comm, run_dir, topo_file):
    graph = generate_graph(spec_for("tiny", 0.3), seed=4)
    cfg = load_config(
        None,
        [
            "train.engine=minibatch",
            "train.batch_size=16",
            "train.fanouts=[4,3]",
            "train.epochs=1",
            "model.hidden=8",
            f"store.topology={topo_file}",
            f"run_dir={run_dir}",
        ],
    )
    with engine_from_config(cfg, graph, context_of(comm)) as engine:
        Trainer.from_config(engine, cfg, console=Console(quiet=True), show_progress=False).fit()
        plan = engine.store.placement
        return {
            "sources": [list(s) for s in plan.sources],
            "stores": [list(s) for s in plan.stores],
        }


@pytest.mark.slow
def test_store_reads_follow_the_placement_plan(tmp_path):
    """An asymmetric 4-rank topology: every rank reads each partition from the rank the XGNN
    solver names, and metrics.jsonl reports the reads per (rank, source)."""
    import yaml

    topo = tmp_path / "ring.yaml"
    topo.write_text(yaml.safe_dump(RING))
    out = run_world(_topology_rank, 4, str(tmp_path / "run"), str(topo), timeout_s=300)
    sources = out[0]["sources"]
    assert any(len(s) > 1 for s in out[0]["stores"])  # the ring needs replicas
    (rec,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    reads = rec["extra"]["per_rank"]["store_reads"]
    assert len(reads) == 4
    for rank, per_source in enumerate(reads):
        used = {int(src) for src, v in per_source.items() if v["rows"] > 0}
        assert used, rank
        assert used <= set(sources[rank]), (rank, used, sources[rank])
        # a rank never reads from a device it has no link to
        assert all(RING[rank][src] > 0 for src in used)
