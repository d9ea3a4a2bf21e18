"""Typed graphs on the engines: reference, minibatch and split train them, the others refuse them.

The split engine's parity with the reference: ``tests/engines/test_split_relations.py``.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fleetgnn.config import (
    FullGraphEngineConfig,
    MinibatchEngineConfig,
    OffloadEngineConfig,
    ReferenceEngineConfig,
    SplitEngineConfig,
)
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines import build_engine
from fleetgnn.engines.fullgraph import FullGraphEngine
from fleetgnn.engines.reference import ReferenceEngine
from fleetgnn.engines.split import SplitEngine
from fleetgnn.engines.typed import TypedReferenceEngine
from fleetgnn.errors import ConfigError
from fleetgnn.graph.compact import feature_codec
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.nn.hetero import TypedAggregator, build_hetero_model
from fleetgnn.sampling import SeedLoader
from fleetgnn.sampling.hetero import HeteroNeighborSampler

STEPS = 3
SEED = 7


def _graph():
    return toy_mag(num_papers=80, num_authors=40, num_fields=6, featureless_fields=True, seed=4)


def _model(graph, conv="rgcn"):
    torch.manual_seed(SEED)
    kw = {"num_bases": 2} if conv == "rgcn" else {"heads": 2, "attn_dropout": 0.2}
    return build_hetero_model(
        conv,
        graph,
        graph.num_classes,
        hidden_dim=6,
        num_layers=2,
        dropout=0.3,
        sparse=True,
        seed=SEED,
        **kw,
    ).double()


FANOUTS = {
    "cites": [3, 2],
    "writes": [2, 2],
    "has_topic": [-1, 1],
    "rev_cites": [2, 0],
    "rev_writes": [1, 1],
    "rev_has_topic": [1, 1],
}


@pytest.mark.parametrize(
    "engine_cfg",
    [FullGraphEngineConfig(), OffloadEngineConfig()],
    ids=lambda c: type(c).__name__,
)
def test_other_engines_refuse_typed_graphs(engine_cfg):
    g = _graph()
    with pytest.raises(
        ConfigError, match=r"does not train typed graphs.*reference or minibatch or split"
    ) as e:
        build_engine(_model(g), g, engine_cfg)
    assert "\n" not in str(e.value)


def test_direct_construction_refuses_too():
    g = _graph()
    with pytest.raises(ConfigError, match="the fullgraph engine (does not|cannot run).*reference"):
        FullGraphEngine(_model(g), g, None, FullGraphEngineConfig())
    with pytest.raises(ConfigError, match="build the reference engine with"):
        ReferenceEngine(_model(g), g, None, ReferenceEngineConfig())
    with pytest.raises(ConfigError, match="build the split engine with"):
        SplitEngine(_model(g), g, None, SplitEngineConfig())


def test_build_engine_picks_the_typed_split_class():
    from fleetgnn.engines.split_relations import TypedSplitEngine

    g = _graph()
    with build_engine(_model(g), g, SplitEngineConfig(fanouts=(2, 2), partition="random")) as e:
        assert type(e) is TypedSplitEngine and e.book.num_nodes == g.num_nodes


@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_reference_trains_typed_graph(mode):
    g = _graph()
    cfg = ReferenceEngineConfig(
        mode=mode, fanouts=(4, 4), batch_size=16, dtype="float64", seed=SEED
    )
    with build_engine(_model(g), g, cfg, optimizer=None) as engine:
        engine.optimizer = torch.optim.SGD(engine.module.parameters(), lr=0.3)  # sparse rows
        before = engine.evaluate()
        losses = []
        for epoch in range(15 if mode == "full" else 8):
            stats = engine.run_epoch(epoch)
            losses.append(sum(s.loss_sum for s in stats) / sum(s.count for s in stats))
        after = engine.evaluate()
    assert losses[-1] < losses[0]
    assert after["val_loss"] < before["val_loss"]
    assert after["train_acc"] > 0.5  # 4 classes


def test_reference_minibatch_step_equals_hand_written_step():
    """The engine's step: keyed sampling of a shuffled batch, mean loss, one SGD update."""
    g = _graph()
    cfg = ReferenceEngineConfig(mode="minibatch", batch_size=16, dtype="float64", seed=SEED)
    model = _model(g, "rgat")
    engine = TypedReferenceEngine(
        model, g, None, cfg, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), fanouts=FANOUTS
    )
    twin = _model(g, "rgat")
    opt = torch.optim.SGD(twin.parameters(), lr=0.5)
    train = torch.from_numpy(np.flatnonzero(g.train_mask))  # papers start at global ID 0
    loader = SeedLoader(train, 16, seed=SEED, shuffle=True)
    sampler = HeteroNeighborSampler(g, FANOUTS, seed=SEED)
    y = torch.from_numpy(g.y)
    for step in range(STEPS):
        stats = engine.train_step(1, step)
        seeds = loader.batch(1, step)
        blocks = sampler.sample_from_nodes(seeds, epoch=1, step=step).blocks
        out = twin(
            [TypedAggregator(b, dtype=torch.float64) for b in blocks],
            _x(g, blocks[0]),
            step=engine.steps_per_epoch() + step,
        )
        loss = F.cross_entropy(out, y[seeds])
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert stats.loss_sum == pytest.approx(float(loss.detach()) * seeds.numel(), rel=1e-12)
    for name, value in twin.state_dict().items():
        torch.testing.assert_close(engine.module.state_dict()[name], value, rtol=1e-12, atol=1e-14)


def _x(g, block, feature_dtype=None):
    """The block's input rows (with ``feature_dtype``: the stored rows' values), float64."""
    off = {t: g.schema.type_range(t)[0] for t in g.schema.node_types}
    codec = feature_codec(feature_dtype)
    x = {t: torch.from_numpy(g.x[t]) for t in g.x}
    if codec is not None:
        x = {t: codec.round_trip(v) for t, v in x.items()}
    return {t: x[t].double()[block.src_ids[t] - off[t]] for t in g.x}


def _train_ranks(comm, conv, store=None):
    g = _graph()
    cfg = MinibatchEngineConfig(
        batch_size=8, dtype="float64", seed=SEED, fanouts=(3, 2), **(store or {})
    )
    model = _model(g, conv)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with build_engine(model, g, cfg, context_of(comm), optimizer=opt) as engine:
        out = []
        for step in range(STEPS):
            stats = engine.train_step(0, step)
            grads = {k: p.grad.detach().clone() for k, p in engine.module.named_parameters()}
            out.append((stats.loss_sum, stats.count, grads, dict(stats.traffic)))
        params = {k: v.detach().clone() for k, v in engine.module.state_dict().items()}
        extra = {"memory": engine.peak_memory(), **engine.rank_extra()}
        return {"steps": out, "params": params, "eval": engine.evaluate(), "store": extra}


def _reference_union(world_size, conv, feature_dtype=None):
    """One process: every rank's keyed blocks of a step, their summed loss over the step's seeds."""
    g = _graph()
    model = _model(g, conv)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    train = torch.from_numpy(np.flatnonzero(g.train_mask))
    loaders = [
        SeedLoader(train, 8, rank=r, world_size=world_size, seed=SEED) for r in range(world_size)
    ]
    sampler = HeteroNeighborSampler(g, [3, 2], seed=SEED)
    y = torch.from_numpy(g.y)
    out = []
    for step in range(STEPS):
        total = sum(int(ld.batch(0, step).numel()) for ld in loaders)
        loss, losses = 0.0, []
        for r, ld in enumerate(loaders):
            seeds = ld.batch(0, step)
            blocks = sampler.sample_from_nodes(seeds, epoch=0, step=step, stream=r).blocks
            logits = model(
                [TypedAggregator(b, dtype=torch.float64) for b in blocks],
                _x(g, blocks[0], feature_dtype),
                step=step,
            )
            part = F.cross_entropy(logits, y[seeds], reduction="sum")
            losses.append(float(part))
            loss = loss + part
        opt.zero_grad()
        (loss / total).backward()
        grads = {
            k: p.grad.to_dense() if p.grad.is_sparse else p.grad.clone()
            for k, p in model.named_parameters()
        }
        opt.step()
        out.append((losses, grads))
    return out, model.state_dict()


@pytest.mark.slow
@pytest.mark.parametrize("conv", ["rgcn", "rgat"])
def test_minibatch_two_ranks_equals_reference_step_for_step(conv):
    results = run_world(_train_ranks, 2, conv, timeout_s=300)
    steps, params = _reference_union(2, conv)
    for step, (losses, grads) in enumerate(steps):
        for rank, res in enumerate(results):
            loss_sum, _, rank_grads, _ = res["steps"][step]
            assert loss_sum == pytest.approx(losses[rank], rel=1e-12)
            for name, g in grads.items():
                torch.testing.assert_close(rank_grads[name], g, rtol=1e-10, atol=1e-13)
        emb = grads["embed.field.weight"]
        assert 0 < int((emb.abs().sum(1) > 0).sum())  # the embedding table's touched rows
    for res in results:
        for name, value in params.items():
            torch.testing.assert_close(res["params"][name], value, rtol=1e-10, atol=1e-13)
    assert results[0]["eval"] == results[1]["eval"]


def _feature_bytes():
    return sum(int(a.nbytes) for a in _graph().x.values())


@pytest.mark.slow
@pytest.mark.parametrize(
    "store",
    [
        {"device": 0.15, "host": 0.3},  # rows from own shard, the peer's, host and disk
        {"device": 0.0, "host": 0.0, "gather": "two_sided"},  # everything from disk
        {"device": 0.3, "host": None, "gather": "two_sided"},  # the rest on the host tier
        # compact rows in the tables: fp16 features, read back in the gather
        {"device": 0.1, "host": 0.15, "feature_dtype": "float16"},
    ],
    ids=["mixed", "disk", "two-sided", "float16"],
)
def test_minibatch_through_the_keyed_store_equals_reference(store):
    """Budgets smaller than the features: the same steps as the reference, rows from the tiers."""
    fb = _feature_bytes()
    opts = {
        "device_budget": int(store["device"] * fb / 2),
        "host_budget": None if store["host"] is None else int(store["host"] * fb),
        "gather": store.get("gather", "auto"),
        "feature_dtype": store.get("feature_dtype"),
    }
    results = run_world(_train_ranks, 2, "rgat", opts, timeout_s=300)
    steps, params = _reference_union(2, "rgat", opts["feature_dtype"])
    for step, (losses, grads) in enumerate(steps):
        for rank, res in enumerate(results):
            loss_sum, _, rank_grads, traffic = res["steps"][step]
            assert loss_sum == pytest.approx(losses[rank], rel=1e-12)
            for name, g in grads.items():
                torch.testing.assert_close(rank_grads[name], g, rtol=1e-10, atol=1e-13)
            assert "disk" in traffic and set(traffic) != {"local"}  # bytes from the store's meter
    for res in results:
        for name, value in params.items():
            torch.testing.assert_close(res["params"][name], value, rtol=1e-10, atol=1e-13)
        mem, hits = res["store"]["memory"], res["store"]["hit_rates"]
        assert mem["device"] <= opts["device_budget"]
        assert mem["disk"] > 0 or store["host"] is None  # budgets smaller than the features
        if store["device"] == 0 and store["host"] == 0:
            assert hits["disk"] == 1.0
        if store["device"] > 0:
            assert hits["local"] > 0 and hits["peer"] > 0
        if store["host"] is None:
            assert hits["disk"] == 0.0 and hits["host"] > 0
        elif store["host"] > 0:
            assert mem["host"] <= opts["host_budget"] and hits["host"] > 0 and hits["disk"] > 0


def _run_config(extra):
    from fleetgnn.train import load_config

    base = [
        "train.engine=reference",
        "train.dtype=float64",
        "train.batch_size=16",
        "train.fanouts=[3,2]",
        "model.hidden=6",
        "train.seed=7",
    ]
    return load_config(None, base + list(extra))


@pytest.mark.parametrize("name", ["rgcn", "rgat", "hetero-sage"])
def test_engine_from_config_builds_typed_models(name):
    from fleetgnn.train import engine_from_config

    g = _graph()
    cfg = _run_config([f"model.name={name}", "model.num_bases=2", "model.heads=2"])
    with engine_from_config(cfg, g) as engine:
        assert type(engine).__name__ == "TypedReferenceEngine"
        assert engine.module.conv_name == name
        if name == "rgcn":
            assert engine.module.convs[0].num_bases == 2
        stats = engine.run_epoch(0)
        assert sum(s.count for s in stats) == int(g.train_mask.sum())


def test_typed_model_names_need_typed_graphs_and_back():
    from fleetgnn.train import engine_from_config

    g = _graph()
    with pytest.raises(ConfigError, match="is a typed graph: model.name=sage.*rgcn, rgat"):
        engine_from_config(_run_config(["model.name=sage"]), g)
    flat, _ = toy_mag(num_papers=20, num_authors=10, num_fields=4).to_homogeneous()
    with pytest.raises(ConfigError, match="model.name=rgcn needs a typed graph"):
        engine_from_config(_run_config(["model.name=rgcn"]), flat)
    with pytest.raises(ConfigError, match="num_bases"):
        _run_config(["model.num_bases=0"])
    with pytest.raises(ConfigError, match="per relation is for typed graphs"):
        build_engine(
            _model(g),
            flat,
            ReferenceEngineConfig(),
            fanouts={"cites": [1]},
        )


@pytest.mark.parametrize("conv", ["rgcn", "rgat"])
def test_relations_beat_the_homogeneous_collapse(conv):
    """Same model, epochs and fanouts: telling relations apart reads the field's class."""
    from fleetgnn.graph.hetero_toy import homogeneous_collapse

    g = toy_mag(num_papers=300, num_authors=150, num_fields=16, seed=0)
    acc = {}
    for name, graph in (("typed", g), ("collapse", homogeneous_collapse(g))):
        torch.manual_seed(0)
        model = build_hetero_model(conv, graph, 4, hidden_dim=16, dropout=0.2, heads=2)
        cfg = ReferenceEngineConfig(mode="minibatch", fanouts=(10, 10), batch_size=64)
        with build_engine(model, graph, cfg) as engine:
            for epoch in range(12):
                engine.run_epoch(epoch)
            acc[name] = engine.evaluate()["test_acc"]
    assert acc["typed"] >= 0.9
    assert acc["typed"] > acc["collapse"] + 0.1, acc
