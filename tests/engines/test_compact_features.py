"""``store.feature_dtype``: every engine computes on the stored rows' values.

Each engine with compact stored features (bfloat16, float8) equals the reference engine with
the same stored features, in float64 over two epochs at W = 2 (the float32 paths' parity is
the engines' own tests'); the stored dtype changes the losses (the rows really are rounded);
``minibatch`` is checked in ``test_minibatch.py`` against its hand-written reference.
"""

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.graph.compact import feature_codec
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import engine_from_config, load_config

ENGINES = ("split", "fullgraph", "offload")


def _graph():
    return generate_graph(spec_for("tiny", 0.3), seed=4)


def _config(engine, feature_dtype):
    items = [
        f"train.engine={engine}",
        "train.dtype=float64",
        "train.batch_size=24",
        "train.fanouts=[4,3]",
        "model.name=sage",
        "model.hidden=8",
        "model.dropout=0.3",
        "optim.optimizer=sgd",
        "optim.lr=0.5",
        "optim.weight_decay=0",
        "train.seed=7",
        "train.device=cpu",
        f"store.feature_dtype={'null' if feature_dtype is None else feature_dtype}",
    ]
    if engine in ("fullgraph", "offload"):
        items.append("train.mode=full")
    return load_config(None, items)


def _run(cfg, ctx=None, engine=None):
    with engine_from_config(cfg, _graph(), ctx, engine=engine) as eng:
        losses = [s.loss_sum for epoch in range(2) for s in eng.run_epoch(epoch)]
        params = {n: p.detach().clone() for n, p in eng.module.named_parameters()}
    return {"loss": losses, "params": params}


def _ranks(comm):
    ctx = context_of(comm)
    return {
        (e, d): _run(_config(e, d), ctx) for e in ENGINES for d in ("bfloat16", "float8_e4m3", None)
    }


@pytest.mark.slow
def test_every_engine_equals_the_reference_on_the_same_stored_features():
    results = run_world(_ranks, 2, timeout_s=600)
    for engine in ENGINES:
        for dtype in ("bfloat16", "float8_e4m3", None):
            ref = _run(_config(engine, dtype), engine="reference")
            # each rank's loss sums its own targets: the ranks' sums add up to the reference's
            loss = [sum(v) for v in zip(*(r[engine, dtype]["loss"] for r in results))]
            np.testing.assert_allclose(loss, ref["loss"], rtol=1e-9, err_msg=f"{engine} {dtype}")
            for res in results:
                for name, value in ref["params"].items():
                    got = res[engine, dtype]["params"][name]
                    torch.testing.assert_close(got, value, rtol=1e-9, atol=1e-12)
        # the stored dtype is in effect: rounded rows train to other losses
        plain = results[0][engine, None]["loss"]
        assert results[0][engine, "bfloat16"]["loss"] != plain, engine
        assert results[0][engine, "float8_e4m3"]["loss"] != plain, engine


def test_the_reference_reads_the_stored_values():
    """The oracle itself: its features are ``round_trip`` of the dataset's, then cast."""
    g = _graph()
    for dtype in ("bfloat16", "float8_e4m3"):
        with engine_from_config(_config("fullgraph", dtype), g, engine="reference") as ref:
            want = feature_codec(dtype).round_trip(torch.from_numpy(np.asarray(g.x)))
            assert torch.equal(ref.x.cpu(), want.double())
