"""``store.edge_feature_dtype``: edge feature rows stored compact, in the edge table and beside it.

The store's edge table holds compact rows (2 bytes a value for 16-bit, ``D + 4`` bytes a row for
float8) and reads back the codec's values, bit for bit; every engine that trains an edge-feature
model (``gine``: ``reference``, ``minibatch``, ``fullgraph``) computes on those values, in float64
the same as on a graph whose edge rows are those values stored plainly, and ``fullgraph`` equals
the reference on them at W = 2; ``fleetgnn predict`` reads the values the trained model read.
"""

import dataclasses

import numpy as np
import pytest
import torch

from fleetgnn.cli.main import main
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.graph import write_dataset
from fleetgnn.graph.compact import feature_codec
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.nn import LocalAggregator
from fleetgnn.store.edge_table import EdgeTable, edge_row_bytes, split_budgets
from fleetgnn.store.tiers import TierBudgets
from fleetgnn.train import engine_from_config, load_checkpoint, load_config, model_from_config

DTYPES = ("bfloat16", "float8_e4m3", None)


def _graph():
    spec = dataclasses.replace(spec_for("tiny", 0.3), edge_features=6)
    return generate_graph(spec, seed=4)


def test_the_edge_table_holds_compact_rows_and_reads_back_their_values():
    g = _graph()
    d = int(g.edge_attr.shape[1])
    attr = torch.from_numpy(np.asarray(g.edge_attr))
    ids = torch.randint(0, g.num_edges, (500,), generator=torch.Generator().manual_seed(1))
    for dtype, row in (("bfloat16", 2 * d), ("float16", 2 * d), ("float8_e4m3", d + 4)):
        assert edge_row_bytes(g, dtype) == row
        budget = 40 * row  # 40 compact rows on the device, 100 in the host tier
        table = EdgeTable.build(g, budgets=TierBudgets(budget, 100 * row), feature_dtype=dtype)
        try:
            assert table.plan.num_device == 40 and table.plan.num_host == 100
            got = table.gather(ids)
            assert got.dtype == attr.dtype
            assert torch.equal(got, feature_codec(dtype).round_trip(attr[ids]))
            mem = table.memory()
            assert (mem["device"], mem["host"]) == (budget, 100 * row)
        finally:
            table.close()
    # the budget split counts the rows as stored: the edge table's share grows as they shrink
    budgets = TierBudgets(1 << 20, 1 << 20)
    plain = split_budgets(budgets, g).edges.device
    compact = split_budgets(budgets, g, edge_feature_dtype="float8_e4m3").edges.device
    assert compact < plain
    assert split_budgets(budgets, g, feature_dtype="float8_e4m3").edges.device > plain


def _config(engine, dtype, mode="minibatch"):
    return load_config(
        None,
        [
            f"train.engine={engine}",
            f"train.mode={mode}",
            "train.dtype=float64",
            "train.batch_size=24",
            "train.fanouts=[4,3]",
            "model.name=gine",
            "model.hidden=8",
            "model.dropout=0.3",
            "optim.optimizer=sgd",
            "optim.lr=0.5",
            "optim.weight_decay=0",
            "train.seed=7",
            "train.device=cpu",
            "store.device_budget=4KB",  # the edge rows span the device, host and disk tiers
            "store.host_budget=8KB",
            f"store.edge_feature_dtype={'null' if dtype is None else dtype}",
        ],
    )


ARMS = (("minibatch", "minibatch"), ("fullgraph", "full"))


def _rounded(dtype):
    """The graph with its edge rows replaced by their stored values, kept uncompressed."""
    g = _graph()
    if dtype is None:
        return g
    attr = feature_codec(dtype).round_trip(torch.from_numpy(np.asarray(g.edge_attr)))
    return g.replace(edge_attr=attr.numpy())


def _run(cfg, graph, ctx=None, engine=None):
    with engine_from_config(cfg, graph, ctx, engine=engine) as eng:
        losses = [s.loss_sum for epoch in range(2) for s in eng.run_epoch(epoch)]
        params = {n: p.detach().clone() for n, p in eng.module.named_parameters()}
        metrics = eng.evaluate()
    return {"loss": losses, "params": params, "metrics": metrics}


def _ranks(comm):
    ctx = context_of(comm)
    out = {}
    for engine, mode in ARMS:
        for dtype in DTYPES:
            out[engine, dtype] = _run(_config(engine, dtype, mode), _graph(), ctx)
            # the same training on the stored values kept as plain rows
            out[engine, dtype, "plain"] = _run(_config(engine, None, mode), _rounded(dtype), ctx)
    return out


def _assert_same(got, want, what):
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-9, err_msg=str(what))
    for name, value in want["params"].items():
        torch.testing.assert_close(got["params"][name], value, rtol=1e-9, atol=1e-12)
    for key in ("val_acc", "test_acc", "val_loss"):
        assert got["metrics"][key] == pytest.approx(want["metrics"][key], rel=1e-9), (what, key)


@pytest.mark.slow
def test_edge_feature_engines_train_on_the_stored_edge_rows():
    """At W = 2: compact edge rows train as their read-back values stored plainly would, and
    ``fullgraph`` equals the reference on them (its ranks' losses add up to the reference's)."""
    results = run_world(_ranks, 2, timeout_s=600)
    for engine, mode in ARMS:
        for dtype in DTYPES:
            for res in results:
                _assert_same(res[engine, dtype], res[engine, dtype, "plain"], (engine, dtype))
            if engine == "fullgraph":
                ref = _run(_config(engine, dtype, mode), _graph(), engine="reference")
                loss = [sum(v) for v in zip(*(r[engine, dtype]["loss"] for r in results))]
                np.testing.assert_allclose(loss, ref["loss"], rtol=1e-9, err_msg=str(dtype))
                for res in results:
                    _assert_same({**res[engine, dtype], "loss": ref["loss"]}, ref, dtype)
        plain = results[0][engine, None]["loss"]  # the stored dtype is in effect
        assert results[0][engine, "bfloat16"]["loss"] != plain, engine
        assert results[0][engine, "float8_e4m3"]["loss"] != plain, engine


def test_the_reference_trains_on_the_stored_edge_rows():
    """The oracle itself, in both modes: compact edge rows train as their values stored plainly."""
    for engine, mode in ARMS:
        got = _run(_config(engine, "float8_e4m3", mode), _graph(), engine="reference")
        want = _run(_config(engine, None, mode), _rounded("float8_e4m3"), engine="reference")
        _assert_same(got, want, mode)
        assert (
            got["loss"] != _run(_config(engine, None, mode), _graph(), engine="reference")["loss"]
        )


def test_predict_reads_the_edge_rows_the_model_trained_on(tmp_path):
    data = write_dataset(_graph(), tmp_path / "data")
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(data), "--model", "gine", "--epochs", "2", "--quiet"]
    argv += ["--run-dir", str(run), "--set", "store.edge_feature_dtype=fp8"]
    assert main(argv) == 0
    assert main(["predict", str(run), "--out", str(tmp_path / "preds")]) == 0
    probs = np.load(tmp_path / "preds" / "probabilities.npy")

    cfg = load_config(run / "config.yaml")
    g = _graph()
    model = model_from_config(cfg, g)
    model.load_state_dict(load_checkpoint(run / "checkpoints" / "best.pt")["engine"]["model"])
    model.eval()
    attr = torch.from_numpy(np.asarray(g.edge_attr))
    for stored, same in ((feature_codec("fp8").round_trip(attr), True), (attr, False)):
        agg = LocalAggregator.from_graph(g, edge_attr=stored)
        with torch.no_grad():
            x = torch.from_numpy(np.asarray(g.x))
            want = torch.softmax(model([agg] * model.num_layers, x), dim=1).numpy()
        assert np.allclose(probs, want, atol=1e-5) == same
