"""Link prediction on the offload engine against the reference full-graph link step, W = 1..3.

The decoder and loss run on the last layer held in host memory, in chunks of pairs; the chunked
backward is seeded from its gradient. Loss, every gradient (encoder and decoder) and the
evaluation metrics must equal the reference engine's, whatever the ranks, chunks, partition and
recompute/cache choice.
"""

import pytest
import torch

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.nn.decoders import DotDecoder, LinkModel
from fleetgnn.nn.models import build_model
from fleetgnn.train import engine_from_config

from .link_setup import link_config, link_graph

EPOCHS = 2


_graph = link_graph


def _config(engine, model, extra=()):
    sets = ["train.mode=full", "train.device=cpu", "train.negatives=3", f"model.name={model}"]
    return link_config(f"train.engine={engine}", *sets, *extra)


def _run(engine, params=None):
    """Losses, counts and gradients of ``EPOCHS`` epochs, then the metrics.

    ``params``: evaluate with these parameters (the reference's after training: ulp-level
    differences of the trained weights would flip near-tied ranks of the MLP decoder).
    """
    out = {"loss": [], "count": [], "grads": []}
    for epoch in range(EPOCHS):
        (st,) = engine.run_epoch(epoch)
        out["loss"].append(st.loss_sum)
        out["count"].append(st.count)
        out["grads"].append(
            {n: p.grad.detach().clone() for n, p in engine.module.named_parameters()}
        )
    out["params"] = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    if params is not None:
        with torch.no_grad():
            for n, p in engine.module.named_parameters():
                p.copy_(params[n])
    out["eval"] = engine.evaluate()
    out["hybrid"] = list(getattr(engine, "hybrid", []))
    return out


def _rank(comm, model, extra, knobs, params):
    engine = engine_from_config(
        _config("offload", model, extra), _graph(), context_of(comm), **knobs
    )
    try:
        return _run(engine, params)
    finally:
        engine.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, model, extra, knobs",
    [
        (1, "sage", ("train.decoder=mlp",), {"chunks": 3, "partition": "range"}),
        (2, "sage", (), {"chunks": 3}),
        (3, "gcn", ("train.decoder=mlp",), {"chunks": 4, "cache_aggregates": False}),
        (3, "sage", (), {"chunks": 1, "partition": "range"}),
    ],
)
def test_offload_link_loss_gradients_and_metrics_equal_reference(world_size, model, extra, knobs):
    with engine_from_config(_config("reference", model, extra), _graph()) as ref:
        want = _run(ref)
    results = run_world(_rank, world_size, model, extra, knobs, want["params"], timeout_s=300)
    cached = knobs.get("cache_aggregates", True) is not False
    for res in results:  # the encoder's cacheable layers are cached behind the LinkModel too
        assert any(res["hybrid"]) == cached
    for e in range(EPOCHS):
        # each rank scores the pairs whose source it owns: together, every training pair once
        assert sum(r["count"][e] for r in results) == want["count"][e]
        assert min(r["count"][e] for r in results) > 0
        assert sum(r["loss"][e] for r in results) == pytest.approx(want["loss"][e], rel=1e-10)
        for res in results:
            assert res["grads"][e].keys() == want["grads"][e].keys()
            for n, g in want["grads"][e].items():
                torch.testing.assert_close(res["grads"][e][n], g, rtol=1e-9, atol=1e-12)
    for res in results:  # the trained weights
        for n, p in want["params"].items():
            torch.testing.assert_close(res["params"][n], p, rtol=1e-9, atol=1e-12)
        # metric sums over ranks == one process's scores of every pair. The MLP decoder's
        # scores change in the last bit with the batch they are computed in (BLAS), and
        # evaluation scores in chunks of pairs: a positive tied with a negative may then rank
        # either side of it, so its ranking metrics may differ by one query's share
        assert res["eval"].keys() == want["eval"].keys()
        mlp = "train.decoder=mlp" in extra
        for k, v in want["eval"].items():
            ranking = k.endswith("_mrr") or "_hits@" in k
            tol = 0.02 if mlp and ranking else 1e-12
            assert res["eval"][k] == pytest.approx(v, rel=1e-9, abs=tol), k


def test_link_model_passes_on_the_encoders_cacheable_aggregation():
    gat = build_model("gat", 5, 3, hidden_dim=4)
    assert not LinkModel(gat, DotDecoder()).cacheable_aggregation(0)
    gcn = build_model("gcn", 5, 3, hidden_dim=4)
    link = LinkModel(gcn, DotDecoder())
    want = [gcn.cacheable_aggregation(i) for i in range(gcn.num_layers)]
    assert any(want)
    assert [link.cacheable_aggregation(i) for i in range(gcn.num_layers)] == want
