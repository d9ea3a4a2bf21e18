"""fleetgnn predict / embed on a temporal node run: every node's rows at its node time, the rows
the run's evaluation computes (never the full-neighbour ones, which read future edges)."""

import json

import numpy as np
import pytest
import torch

from fleetgnn.cli.main import main
from fleetgnn.config import ReferenceEngineConfig
from fleetgnn.engines import build_engine
from fleetgnn.engines.common import node_features
from fleetgnn.engines.temporal_node import temporal_node_rows
from fleetgnn.graph import open_dataset
from fleetgnn.nn import LocalAggregator
from fleetgnn.sampling import TemporalSampler
from fleetgnn.tasks import TemporalNodeClassification
from fleetgnn.train import load_checkpoint, load_config, model_from_config
from fleetgnn.train.setup import task_from_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A two-epoch temporal node run (reference, mini-batch) on temporal-like x0.001."""
    root = tmp_path_factory.mktemp("node_time_infer")
    data = root / "tl"
    argv = ["prepare", "synthetic", "--preset", "temporal-like", "--scale", "0.001"]
    assert main([*argv, "--out", str(data)]) == 0
    run_dir = root / "run"
    argv = ["train", "--dataset", str(data), "--epochs", "2", "--quiet", "--run-dir", str(run_dir)]
    assert main([*argv, "--set", "train.fanouts=[5,3]", "--set", "train.batch_size=128"]) == 0
    return run_dir


def _model(run_dir):
    cfg = load_config(run_dir / "config.yaml")
    graph = open_dataset(cfg.data.dataset)
    model = model_from_config(cfg, graph)
    model.load_state_dict(load_checkpoint(run_dir / "checkpoints" / "best.pt")["engine"]["model"])
    return cfg, graph, model


def test_predict_writes_the_rows_at_the_node_times(run, tmp_path, capsys):
    cfg, graph, model = _model(run)
    task = task_from_config(cfg, graph)
    assert isinstance(task, TemporalNodeClassification)
    out = tmp_path / "p"
    assert main(["predict", str(run), "--out", str(out)]) == 0
    probs = np.load(out / "probabilities.npy")
    engine_cfg = ReferenceEngineConfig(
        mode="minibatch", fanouts=cfg.train.fanouts, seed=cfg.train.seed, feature_norm="none"
    )
    with build_engine(model, graph, engine_cfg, task=task) as eng:
        want = torch.softmax(eng.infer(), dim=1).numpy()
    np.testing.assert_allclose(probs, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.load(out / "predictions.npy"), want.argmax(1))
    meta = json.loads((out / "meta.json").read_text())
    assert meta["task"] == "node"
    # the full-neighbour rows (every edge, future ones too) are other rows
    agg = LocalAggregator.from_graph(graph)
    h = node_features(graph, torch.float32, "none")
    model.eval()
    with torch.no_grad():
        for i in range(model.num_layers):
            h = model.layer_forward(i, agg, h)
    assert np.abs(torch.softmax(h, 1).numpy() - probs).max() > 1e-2


def test_embed_an_inner_layer_samples_its_hops_with_the_last_fanouts(run, tmp_path):
    cfg, graph, model = _model(run)
    out = tmp_path / "e"
    assert main(["embed", str(run), "--layer", "1", "--out", str(out), "--nproc", "2"]) == 0
    emb = np.load(out / "embeddings.npy")
    sampler = TemporalSampler(graph, [3], seed=cfg.train.seed)  # the first layer's hop: fanout 3
    task = TemporalNodeClassification(graph.node_time)
    x = torch.from_numpy(np.array(graph.x))
    rows = []
    temporal_node_rows(
        model,
        sampler,
        task,
        lambda ids: x[ids],
        np.arange(graph.num_nodes),
        lambda ids, h: rows.append(h),
        dtype=torch.float32,
        device=torch.device("cpu"),
    )
    np.testing.assert_allclose(emb, torch.cat(rows).numpy(), rtol=1e-5, atol=1e-6)
    assert emb.shape == (graph.num_nodes, int(cfg.model.hidden))
