"""Mixed precision (``train.autocast=bf16``): every engine trains, exchanged rows halve.

bfloat16 is not a parity dtype: runs are checked for training (finite, decreasing losses) and
against float32 (close losses, exactly half the exchanged bytes), not for equality.
"""

import math

import pytest

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.errors import ConfigError
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import engine_from_config, load_config

EPOCHS = 6


def _graph():
    return generate_graph(spec_for("tiny", 0.3), seed=2)


def _config(engine, model, autocast, extra=()):
    items = [
        f"train.engine={engine}",
        f"model.name={model}",
        "model.hidden=16",
        "model.dropout=0",
        "optim.lr=0.02",
        "train.seed=3",
        "train.batch_size=64",
        "train.fanouts=[5,5]",
        f"train.autocast={'null' if autocast is None else autocast}",
    ]
    if engine == "reference":
        items.append("train.mode=full")
    return load_config(None, items + list(extra))


def _train(engine, model, autocast, ctx=None, **changes):
    eng = engine_from_config(_config(engine, model, autocast), _graph(), ctx, **changes)
    losses, traffic, extra = [], [], []
    for epoch in range(EPOCHS):
        stats = eng.run_epoch(epoch)
        losses.append(sum(s.loss_sum for s in stats) / max(sum(s.count for s in stats), 1))
        traffic.append(stats[0].traffic)
        extra.append(dict(eng.epoch_extra()) if hasattr(eng, "epoch_extra") else {})
    ev = eng.evaluate()
    n_params = sum(p.numel() for p in eng.module.parameters())
    eng.close()
    return {"losses": losses, "traffic": traffic, "extra": extra, "eval": ev, "params": n_params}


def _trains(res, what):
    losses = res["losses"]
    assert all(math.isfinite(v) for v in losses), what
    assert losses[-1] < losses[0], what
    assert all(math.isfinite(v) for v in res["eval"].values()), what


def test_autocast_needs_float32_master_weights():
    with pytest.raises(ConfigError, match=r"train\.autocast='bf16' needs float32"):
        load_config(None, ["train.dtype=float64", "train.autocast=bf16"])


@pytest.mark.parametrize("model", ["gcn", "sage", "gat", "gin"])
def test_reference_trains_in_bf16_close_to_float32(model):
    bf16 = _train("reference", model, "bf16")
    fp32 = _train("reference", model, None)
    _trains(bf16, model)
    assert bf16["losses"] != fp32["losses"]  # autocast is on
    for a, b in zip(bf16["losses"], fp32["losses"]):
        assert a == pytest.approx(b, rel=0.05), model


DISTRIBUTED = ("minibatch", "split", "fullgraph", "offload")


def _rank(comm):
    ctx = context_of(comm)
    out = {}
    for engine in DISTRIBUTED:
        for autocast in (None, "bf16"):
            out[engine, autocast] = _train(engine, "gcn", autocast, ctx)
    return out


@pytest.mark.slow
def test_every_distributed_engine_trains_in_bf16_and_halves_exchanged_rows():
    """W = 2: bf16 runs train; the halo rows of fullgraph and split, and offload's vertex rows,
    travel at half the float32 bytes (the float32 gradient all-reduce is unchanged)."""
    w = 2
    results = run_world(_rank, w, timeout_s=600)
    for r in results:
        for engine in DISTRIBUTED:
            bf16, fp32 = r[engine, "bf16"], r[engine, None]
            _trains(bf16, engine)
            _trains(fp32, engine)
            b, f = bf16["traffic"][0], fp32["traffic"][0]
            if engine in ("fullgraph", "split"):
                # peer bytes = exchanged rows (both directions) + the float32 gradient all-reduce
                grad_sync = fp32["params"] * 4 * (w - 1)
                assert b["peer"] - grad_sync > 0, engine
                assert f["peer"] - grad_sync == 2 * (b["peer"] - grad_sync), engine
                assert b["local"] == f["local"], engine  # the feature rows read as stored
            if engine == "fullgraph":
                ex_b, ex_f = bf16["extra"][0], fp32["extra"][0]
                assert 2 * ex_b["volume_dedup_bytes"] == ex_f["volume_dedup_bytes"]
                assert 2 * ex_b["volume_mgg_bytes"] == ex_f["volume_mgg_bytes"]
            if engine == "offload":  # vertex rows halve; gradient rows stay float32
                for link in ("h2d", "local", "peer", "d2h"):
                    assert f[link] / 2 <= b[link] < f[link], (engine, link)
            if engine == "minibatch":  # nothing exchanged but the float32 gradients
                assert b == f
