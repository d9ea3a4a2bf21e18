"""The minibatch engine against a single-process reference, on real gloo process groups."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.graph.compact import feature_codec
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.nn import LocalAggregator, build_model
from fleetgnn.sampling import GraphTopology, NeighborSampler, SeedLoader
from fleetgnn.train import engine_from_config, load_config

STEPS = 3


def _graph():
    return generate_graph(spec_for("tiny", 0.3), seed=4)


def _config(extra):
    base = [
        "train.engine=minibatch",
        "train.dtype=float64",
        "train.batch_size=16",
        "train.fanouts=[4,3]",
        "model.name=sage",
        "model.hidden=8",
        "model.dropout=0.3",
        "optim.optimizer=sgd",
        "optim.lr=0.5",
        "optim.weight_decay=0",
        "train.seed=7",
    ]
    return load_config(None, base + list(extra))


def _train_ranks(comm, extra):
    """Rank body: STEPS steps of epoch 0 (and 1) with the engine; returns params and traffic."""
    engine = engine_from_config(_config(extra), _graph(), context_of(comm))
    on_device = str(engine.device)
    try:
        stats = engine.run_epoch(0)[:STEPS] if engine.steps_per_epoch() <= STEPS else None
        if stats is None:
            stats = []
            for step in range(STEPS):
                stats.append(engine.train_step(0, step, engine.prepare(0, step), 0.0))
        params = {k: v.detach().cpu() for k, v in engine.module.state_dict().items()}
        ev = engine.evaluate()
        return {
            "params": params,
            "steps": engine.steps_per_epoch(),
            "eval": ev,
            "memory": engine.peak_memory(),
            "traffic": [s.traffic for s in stats],
            "count": [s.count for s in stats],
            "device": on_device,
            "sampling": engine.sampling,
            "replica_bytes": engine.replica_bytes,
        }
    finally:
        engine.close()


def _reference(world_size, extra, steps):
    """Single process: the same blocks every rank samples, summed into one loss per step."""
    cfg = _config(extra)
    g = _graph()
    x = torch.from_numpy(np.array(g.x))
    stored = [e.split("=", 1)[1] for e in extra if e.startswith("store.feature_dtype=")]
    if stored:  # the values the store's compact rows read back, then cast
        x = feature_codec(stored[0]).round_trip(x)
    x = x.double()
    y = torch.from_numpy(np.array(g.y))
    torch.manual_seed(cfg.train.seed)
    model = build_model(
        "sage",
        x.shape[1],
        g.num_classes,
        seed=cfg.train.seed,
        hidden_dim=8,
        num_layers=2,
        dropout=0.3,
    ).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    topo = GraphTopology(g)
    sampler = NeighborSampler(topo, [4, 3], seed=cfg.train.seed)
    train = torch.from_numpy(np.flatnonzero(g.train_mask))
    loaders = [
        SeedLoader(train, 16, rank=r, world_size=world_size, seed=cfg.train.seed)
        for r in range(world_size)
    ]
    for step in range(steps):
        total = sum(int(ld.batch(0, step).numel()) for ld in loaders)
        loss = 0.0
        for r, ld in enumerate(loaders):
            seeds = ld.batch(0, step)
            blocks = sampler.sample_from_nodes(seeds, epoch=0, step=step, stream=r).blocks
            aggs = [LocalAggregator(b, dtype=torch.float64) for b in blocks]
            out = model(aggs, x[blocks[0].src_ids], step=step)
            loss = loss + F.cross_entropy(out, y[seeds], reduction="sum")
        opt.zero_grad()
        (loss / total).backward()
        opt.step()
    return model.state_dict()


CASES = [
    (1, []),
    (2, []),
    (2, ["store.device_budget=2KB", "store.host_budget=4KB"]),
    (3, ["store.device_budget=1KB", "store.host_budget=0", "store.gather=two_sided"]),
    (4, ["store.device_budget=3KB", "store.order=features_first", "store.prefetch=false"]),
    (2, ["store.device_budget=2KB", "store.placement=presample", "store.debug_collectives=true"]),
    # a CSC replica on each rank's device, sampled by the torch backend: the same blocks
    (2, ["store.sampling=device", "store.device_budget=64KB", "store.host_budget=4KB"]),
    # compact rows in every tier (own shard, peers, host, disk), read back in the gather
    (2, ["store.feature_dtype=bfloat16", "store.device_budget=2KB", "store.host_budget=2KB"]),
    (3, ["store.feature_dtype=fp8", "store.device_budget=1KB", "store.gather=two_sided"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("world_size, extra", CASES, ids=lambda v: str(v))
def test_parameters_equal_reference_on_union_of_batches(world_size, extra, device):
    """On ``cuda`` the ranks share the GPU; the reference stays on the CPU."""
    if device == "cuda" and world_size > 2:
        pytest.skip("one GPU: the shared-GPU mode is tested at W = 1 and 2")
    extra = [*extra, f"train.device={device}"]
    results = run_world(_train_ranks, world_size, extra, timeout_s=300, device=device)
    assert {r["device"].split(":")[0] for r in results} == {device}
    if "store.sampling=device" in extra:  # the replica's bytes count against the budget
        assert all(r["sampling"] == "device" and r["replica_bytes"] > 0 for r in results)
    elif device == "cpu":  # auto samples on the host on a CPU
        assert all(r["sampling"] == "host" and r["replica_bytes"] == 0 for r in results)
    ref = _reference(world_size, extra, STEPS)
    for res in results:
        for name, value in ref.items():
            torch.testing.assert_close(res["params"][name], value, rtol=1e-9, atol=1e-12)
    # every rank ran the same number of steps and DDP kept replicas identical
    assert len({r["steps"] for r in results}) == 1
    # evaluation is aggregated: every rank reports the same numbers
    assert all(r["eval"] == results[0]["eval"] for r in results)
    # traffic follows the budgets: unlimited -> only device tiers; tiny -> host/disk reads
    totals = {
        k: sum(t[k] for r in results for t in r["traffic"])
        for k in ("local", "peer", "h2d", "disk")
    }
    assert sum(totals.values()) > 0
    if not any(e.startswith("store.device_budget") for e in extra):
        assert totals["h2d"] == 0 and totals["disk"] == 0
        assert (totals["peer"] > 0) == (world_size > 1)
    elif "store.host_budget=0" in extra:
        assert totals["disk"] > 0 and totals["h2d"] == 0
    for res in results:
        budget = [e for e in extra if e.startswith("store.device_budget")]
        if budget:
            limit = int(budget[0].split("=")[1].rstrip("KB")) * 1000
            assert res["memory"]["device"] <= limit


@pytest.mark.slow
def test_evaluation_matches_reference_engine():
    results = run_world(_train_ranks, 2, [], timeout_s=300)
    ref = engine_from_config(_config([]), _graph(), engine="reference")
    ref.model.load_state_dict(results[0]["params"])
    expect = ref.evaluate()
    for key, value in expect.items():
        assert results[0]["eval"][key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


# ---------------------------------------------------------------------------------- hosts
def _host_ranks(comm, hosts, extra):
    """Rank body on a context whose ranks span ``hosts`` (as torchrun with several nodes sets
    LOCAL_RANK / LOCAL_WORLD_SIZE): one epoch, what the store and the log say."""
    import dataclasses
    import logging

    from fleetgnn.errors import ConfigError

    members = [r for r, h in enumerate(hosts) if h == hosts[comm.rank]]
    ctx = dataclasses.replace(
        context_of(comm),
        local_rank=members.index(comm.rank),
        local_world_size=len(members),
    )
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger = logging.getLogger("fleetgnn")
    logger.setLevel(logging.INFO)
    logger.addHandler(Keep())
    engine = engine_from_config(_config(extra), _graph(), ctx)
    try:
        stats = []
        for step in range(min(STEPS, engine.steps_per_epoch())):  # the reference's steps first
            stats.append(engine.train_step(0, step, engine.prepare(0, step), 0.0))
        params = {k: v.detach().clone() for k, v in engine.module.state_dict().items()}
        epoch = engine.run_epoch(1)
        out = {
            "params": params,
            "gather": engine.gather,
            "extra": engine.epoch_extra(),
            "rank_hits": engine.store.requests("features"),
            "traffic": [s.traffic for s in stats],
            "epoch_traffic": [s.traffic for s in epoch],
            "memory": engine.peak_memory(),
            "row_bytes": _graph().x.shape[1] * _graph().x.dtype.itemsize,
            "log": lines,
        }
    finally:
        engine.close()
    try:
        engine_from_config(_config([*extra, "store.gather=one_sided"]), _graph(), ctx).close()
        out["one_sided"] = "built"
    except ConfigError as e:
        out["one_sided"] = str(e)
    return out


HOST_CASES = [
    # the tiered run: graph first, so the device tier holds topology and no feature rows
    ((0, 0), ["store.device_budget=2KB", "store.host_budget=4KB"]),
    # 3 ranks on 2 hosts (0, 1 | 2): local, peer (same host), net (other host), host, disk
    ((0, 0, 1), ["store.device_budget=1KB", "store.host_budget=2KB", "store.order=features_first"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("hosts, extra", HOST_CASES, ids=["one-host", "two-hosts"])
def test_hosts_gather_traffic_and_hit_rates(hosts, extra):
    world = len(hosts)
    results = run_world(_host_ranks, world, hosts, extra, timeout_s=300)
    spans = len(set(hosts)) > 1
    ref = _reference(world, extra, STEPS)
    for rank, res in enumerate(results):
        for name, value in ref.items():  # two-sided across hosts trains exactly the same
            torch.testing.assert_close(res["params"][name], value, rtol=1e-9, atol=1e-12)
        assert res["gather"] == ("two_sided" if spans else "one_sided")
        logged = [ln for ln in res["log"] if "two-sided" in ln]
        assert len(logged) == (1 if spans and rank == 0 else 0), res["log"]
        if spans and rank == 0:
            assert "3 ranks run on 2 hosts" in logged[0]
        if spans:
            assert "store.gather=auto" in res["one_sided"] and "2 hosts" in res["one_sided"]
        else:
            assert res["one_sided"] == "built"
        # host_budget is per host: one copy of at most host_budget bytes on each host
        budget = int([e for e in extra if "host_budget" in e][0].split("=")[1].rstrip("KB"))
        assert 0 < res["memory"]["host"] <= budget * 1000
    # the epoch's extra is over all ranks (like traffic), the same on every rank
    extra0 = results[0]["extra"]
    keys = ("hit_rates", "topology_hit_rates", "store_requests", "store_bytes", "store_gather")
    assert all({k: r["extra"][k] for k in keys} == {k: extra0[k] for k in keys} for r in results)
    req, served = extra0["store_requests"], extra0["store_bytes"]
    assert req["features"] == {s: sum(r["rank_hits"][s] for r in results) for s in req["features"]}
    row = results[0]["row_bytes"]
    links = {"local": "local", "peer": "peer", "net": "net", "host": "h2d", "disk": "disk"}
    for source, link in links.items():  # bytes per tier == hit counts x row bytes
        assert served["features"][link] == req["features"][source] * row, source
    total = sum(req["features"].values())
    assert extra0["hit_rates"] == {s: v / total for s, v in req["features"].items()}
    ttotal = sum(req["topology"].values())
    assert extra0["topology_hit_rates"] == {s: v / ttotal for s, v in req["topology"].items()}
    # the epoch's traffic: the store's bytes of both kinds (+ the all-reduce on peer/net)
    traffic = {}
    for r in results:
        for t in r["epoch_traffic"]:
            for k, v in t.items():
                traffic[k] = traffic.get(k, 0) + v
    for link in ("local", "h2d", "disk"):
        assert traffic.get(link, 0) == served["features"][link] + served["topology"][link]
    for link in ("peer", "net"):
        assert traffic.get(link, 0) >= served["features"][link] + served["topology"][link]
    if spans:
        assert extra0["store_gather"] == "two_sided" and extra0["hosts"] == 2
        for source in links:  # every tier serves feature rows, across hosts too
            assert req["features"][source] > 0, source
        assert traffic["net"] > served["features"]["net"] + served["topology"]["net"]  # + DDP
    else:
        # what the issue saw: no feature row on the device tier (0.0 local/peer hit rates)
        # while local/peer traffic is the topology's, now visible in topology_hit_rates
        assert extra0["hit_rates"]["local"] == extra0["hit_rates"]["peer"] == 0.0
        assert served["topology"]["local"] > 0 and served["topology"]["peer"] > 0
        assert extra0["topology_hit_rates"]["local"] > 0
        assert req["features"]["net"] == req["topology"]["net"] == 0


def test_sampling_on_the_device_needs_the_replica_within_the_budget():
    from fleetgnn.engines.minibatch import replica_bytes, sampling_place
    from fleetgnn.errors import ConfigError

    g = _graph()
    need = replica_bytes(g)
    assert need == g.indptr.nbytes + g.indices.nbytes + (
        0 if g.edge_weight is None else g.edge_weight.nbytes
    )
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert sampling_place("auto", g, cpu, 1 << 40) == "host"  # a CPU samples with numpy
    assert sampling_place("auto", g, cuda, 2 * need) == "device"  # half the budget or less
    assert sampling_place("auto", g, cuda, 2 * need - 1) == "host"
    assert sampling_place("host", g, cuda, 1 << 40) == "host"
    assert sampling_place("device", g, cpu, need) == "device"
    with pytest.raises(ConfigError, match="store.sampling=host") as err:
        engine_from_config(_config(["store.sampling=device", "store.device_budget=1KB"]), g)
    assert "\n" not in str(err.value) and f"takes {need} bytes" in str(err.value)
