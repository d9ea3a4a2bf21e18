"""Typed streaming evaluation: the whole-graph forward's numbers, in chunks, types pruned."""

import numpy as np
import pytest
import torch

from fleetgnn.config import ReferenceEngineConfig
from fleetgnn.distributed.testing import run_world
from fleetgnn.engines import build_engine
from fleetgnn.engines.chunks import Chunking
from fleetgnn.engines.common import split_metrics
from fleetgnn.engines.inference import (
    needed_types,
    stream_typed_inference,
    typed_layer_widths,
)
from fleetgnn.engines.metric_sums import MetricSums
from fleetgnn.errors import ConfigError
from fleetgnn.graph.hetero import HeteroSchema, from_typed_edges
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.nn.hetero import build_hetero_model

SMALL = Chunking(max_nodes=7, max_edges=40, in_memory_bytes=0)  # many chunks, scratch files


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
@pytest.mark.parametrize("chunking", [SMALL, Chunking()], ids=["files", "memory"])
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
        got, rows = _streamed_logits(engine, SMALL, tmp_path)
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
            chunking=SMALL,
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
