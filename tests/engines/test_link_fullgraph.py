"""Link prediction on the fullgraph engine against the reference full-graph link loss, W = 1..3."""

import pytest
import torch

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.train import engine_from_config

from .link_setup import link_config, link_graph

EPOCHS = 2


_graph = link_graph


def _config(engine, extra=()):
    sets = ["train.mode=full", "train.device=cpu", "train.negatives=3", "model.name=sage"]
    return link_config(f"train.engine={engine}", *sets, *extra)


def _run(engine):
    out = {"loss": [], "count": [], "grads": []}
    for epoch in range(EPOCHS):
        (st,) = engine.run_epoch(epoch)
        out["loss"].append(st.loss_sum)
        out["count"].append(st.count)
        out["grads"].append(
            {n: p.grad.detach().clone() for n, p in engine.module.named_parameters()}
        )
    out["eval"] = engine.evaluate()
    return out


def _rank(comm, partition, extra=()):
    engine = engine_from_config(
        _config("fullgraph", extra), _graph(), context_of(comm), partition=partition, num_chunks=2
    )
    try:
        return _run(engine)
    finally:
        engine.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, partition, extra",
    [
        (1, "range", ()),
        (2, "range", ()),
        (3, "range", ()),
        (3, "metis", ()),
        (2, "range", ("train.eval_edges=7",)),
    ],
)
def test_fullgraph_link_loss_gradients_and_metrics_equal_reference(world_size, partition, extra):
    results = run_world(_rank, world_size, partition, extra, timeout_s=300)
    with engine_from_config(_config("reference", extra), _graph()) as ref:
        want = _run(ref)
    for e in range(EPOCHS):
        # each rank scores the pairs whose source it owns: together, every training pair once
        assert sum(r["count"][e] for r in results) == want["count"][e]
        assert min(r["count"][e] for r in results) > 0
        assert sum(r["loss"][e] for r in results) == pytest.approx(want["loss"][e], rel=1e-10)
        for res in results:
            for n, g in want["grads"][e].items():
                torch.testing.assert_close(res["grads"][e][n], g, rtol=1e-9, atol=1e-12)
    for res in results:  # metric sums over ranks == one process's scores of every pair
        assert res["eval"].keys() == want["eval"].keys()
        for k, v in want["eval"].items():
            assert res["eval"][k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
