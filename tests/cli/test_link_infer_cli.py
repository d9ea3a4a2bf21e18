"""fleetgnn embed / predict on a link-prediction run (Cora): the embeddings are the encoder's
output on the run's message-passing graph (the decoder's input), predict --task link --pairs
scores given pairs with the trained decoder (text, CSV and .npy files), and bad pairs files,
tasks and edges are refused in one line."""

import json

import numpy as np
import pytest
import torch

import fleetgnn
from fleetgnn.cli.main import main
from fleetgnn.engines.common import node_features
from fleetgnn.graph import open_dataset, write_dataset
from fleetgnn.graph.edge_split import edge_split_for
from fleetgnn.graph.loaders.bundled import DATA_DIR
from fleetgnn.graph.loaders.planetoid import load_planetoid
from fleetgnn.graph.pairs import read_pairs
from fleetgnn.graph.time_split import split_by_time
from fleetgnn.nn import LocalAggregator
from fleetgnn.train import load_checkpoint, load_config, model_from_config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Short full-graph link runs on Cora (dot and MLP decoders) and a node-classification run."""
    root = tmp_path_factory.mktemp("link_infer")
    data = write_dataset(load_planetoid(DATA_DIR / "planetoid", "cora"), root / "cora")
    out = {"data": data}
    for name, extra in (
        ("dot", ["--task", "link", "--mode", "full"]),
        ("mlp", ["--task", "link", "--mode", "full", "--set", "train.decoder=mlp"]),
        ("node", ["--mode", "full"]),
    ):
        run_dir = root / name
        argv = ["train", "--dataset", str(data), "--model", "gcn", "--epochs", "2", "--quiet"]
        assert main([*argv, *extra, "--run-dir", str(run_dir)]) == 0
        out[name] = run_dir
    return out


def _model_and_embeddings(run_dir, edges="train"):
    """The run's model (best checkpoint) and its encoder's output over the whole graph."""
    cfg = load_config(run_dir / "config.yaml")
    graph = open_dataset(cfg.data.dataset)
    if edges == "train":
        t = cfg.train
        graph = edge_split_for(
            graph, cfg.data.dataset, t.val_edges, t.test_edges, t.seed
        ).train_graph
    model = model_from_config(cfg, graph)
    model.load_state_dict(load_checkpoint(run_dir / "checkpoints" / "best.pt")["engine"]["model"])
    model.eval()
    agg = LocalAggregator.from_graph(graph)
    h = node_features(graph, torch.float32, cfg.data.feature_norm)
    with torch.no_grad():
        for i in range(model.num_layers):
            h = model.layer_forward(i, agg, h)
    return model, h


def test_embed_writes_the_decoders_input(runs, tmp_path, capsys):
    run = runs["dot"]
    model, h = _model_and_embeddings(run)
    assert main(["embed", str(run), "--layer", "2", "--out", str(tmp_path / "e")]) == 0
    assert "embeddings.npy (2708, 16) float32" in capsys.readouterr().out
    emb = np.load(tmp_path / "e" / "embeddings.npy")
    np.testing.assert_allclose(emb, h.numpy(), rtol=1e-5, atol=1e-5)
    meta = json.loads((tmp_path / "e" / "meta.json").read_text())
    assert meta["task"] == "link" and meta["edges"] == "train" and meta["decoder"] == "dot"
    assert "inner product" in meta["retrieval"]
    # retrieval: the dot decoder's logit of (u, v) is the inner product of the two rows
    pairs = torch.tensor([[0, 633], [1, 2], [100, 2000]])
    with torch.no_grad():
        logits = model.decoder(h[pairs[:, 0]], h[pairs[:, 1]])
    np.testing.assert_allclose(
        (emb[pairs[:, 0]] * emb[pairs[:, 1]]).sum(1), logits, rtol=1e-5, atol=1e-5
    )
    # every edge of the dataset as the message-passing graph: a different graph, other rows
    out = fleetgnn.embed(run, tmp_path / "all", layer=2, edges="all")
    _, h_all = _model_and_embeddings(run, "all")
    np.testing.assert_allclose(np.load(out / "embeddings.npy"), h_all, rtol=1e-5, atol=1e-5)
    assert not np.allclose(h_all, h, atol=1e-4)


def test_predict_scores_pairs_with_the_trained_decoder(runs, tmp_path, capsys):
    run = runs["mlp"]  # a decoder with weights: they come from the checkpoint
    model, h = _model_and_embeddings(run)
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 2708, size=(300, 2))
    with torch.no_grad():
        want = model.decoder(h[pairs[:, 0]], h[pairs[:, 1]]).numpy()
    files = {
        "p.csv": "src,dst\n" + "".join(f"{a},{b}\n" for a, b in pairs),
        "p.txt": "# pairs\n" + "".join(f"{a}\t{b}  # one\n" for a, b in pairs),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    np.save(tmp_path / "rows.npy", pairs.astype(np.int32))
    np.save(tmp_path / "cols.npy", pairs.T.copy())  # [2, P], the edge_index layout
    for name in ("p.csv", "p.txt", "rows.npy", "cols.npy"):
        out = tmp_path / f"out-{name}"
        argv = ["predict", str(run), "--task", "link", "--pairs", str(tmp_path / name)]
        assert main([*argv, "--out", str(out)]) == 0, name
        said = capsys.readouterr().out
        logits = np.load(out / "logits.npy")
        probs = np.load(out / "probabilities.npy")
        np.testing.assert_array_equal(np.load(out / "pairs.npy"), pairs)
        np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(probs, 1 / (1 + np.exp(-want)), rtol=1e-5, atol=1e-6)
        meta = json.loads((out / "meta.json").read_text())
        assert meta["pairs"] == 300 and meta["num_nodes"] == 2708 and meta["task"] == "link"
        assert meta["mean_probability"] == pytest.approx(probs.astype(np.float64).mean())
        assert meta["above_half"] == pytest.approx((probs > 0.5).mean())
        assert "300 pairs scored, mean probability" in said
        assert not (out / "embeddings.npy").exists()
    # chunks of pairs give the same scores
    from fleetgnn.train import export

    old, export.PAIR_CHUNK = export.PAIR_CHUNK, 7
    try:
        out = fleetgnn.predict(run, tmp_path / "chunked", pairs=tmp_path / "rows.npy")
    finally:
        export.PAIR_CHUNK = old
    np.testing.assert_allclose(np.load(out / "logits.npy"), want, rtol=1e-5, atol=1e-5)


def _error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_bad_pairs_tasks_and_edges_are_one_line(runs, tmp_path, capsys):
    run, node = str(runs["dot"]), str(runs["node"])
    out = ["--out", str(tmp_path / "o")]

    def pairs_error(path):
        return _error(capsys, ["predict", run, "--task", "link", "--pairs", str(path), *out])

    assert "does not exist" in pairs_error(tmp_path / "missing.csv")
    np.save(tmp_path / "three.npy", np.zeros((4, 3), dtype=np.int64))
    assert "shape (4, 3), not [P, 2]" in pairs_error(tmp_path / "three.npy")
    np.save(tmp_path / "flat.npy", np.zeros(6, dtype=np.int64))
    assert "shape (6,)" in pairs_error(tmp_path / "flat.npy")
    np.save(tmp_path / "float.npy", np.zeros((4, 2)))
    assert "float64 values, not integer node IDs" in pairs_error(tmp_path / "float.npy")
    np.save(tmp_path / "big.npy", np.array([[0, 1], [2, 2708]]))
    assert "node ID 2708 (row 1) is outside [0, 2708)" in pairs_error(tmp_path / "big.npy")
    (tmp_path / "neg.csv").write_text("a,b\n0,1\n\n# x\n-3,4\n")
    assert "node ID -3 (line 5) is outside [0, 2708)" in pairs_error(tmp_path / "neg.csv")
    (tmp_path / "wide.csv").write_text("0,1\n1,2,3\n")
    assert "line 2: '1,2,3' is not two integer node IDs" in pairs_error(tmp_path / "wide.csv")
    (tmp_path / "words.csv").write_text("0,1\nsrc,dst\n")  # a header only on the first line
    assert "line 2" in pairs_error(tmp_path / "words.csv")
    (tmp_path / "empty.csv").write_text("src,dst\n# nothing\n")
    assert "holds no pairs" in pairs_error(tmp_path / "empty.csv")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00\x01")
    assert "not a text file" in pairs_error(tmp_path / "bin.csv")
    # tasks: a link run needs its pairs; a node run takes none; --task must be the run's
    assert "--pairs FILE" in _error(capsys, ["predict", run, *out])
    assert "trained link prediction" in _error(capsys, ["predict", run, "--task", "node", *out])
    (tmp_path / "ok.csv").write_text("0,1\n")
    assert "trained node classification" in _error(
        capsys, ["predict", node, "--pairs", str(tmp_path / "ok.csv"), *out]
    )
    assert "trained node classification" in _error(
        capsys, ["predict", node, "--task", "link", *out]
    )
    assert "the embeddings the decoder scores" in _error(
        capsys, ["embed", run, "--layer", "3", *out]
    )
    with pytest.raises(fleetgnn.FleetgnnError, match="edges 'some' is not one of train, all"):
        fleetgnn.embed(run, tmp_path / "o", layer=2, edges="some")
    assert not (tmp_path / "o").exists()


def test_read_pairs_layouts(tmp_path):
    (tmp_path / "a.tsv").write_text("src\tdst\n1\t2\n3 4\n5,6 # c\n")
    np.testing.assert_array_equal(read_pairs(tmp_path / "a.tsv", 7), [[1, 2], [3, 4], [5, 6]])
    np.save(tmp_path / "two.npy", np.array([[1, 2], [3, 4]], dtype=np.uint16))
    assert read_pairs(tmp_path / "two.npy", 5).dtype == np.int64  # [2, 2]: rows are pairs
    np.testing.assert_array_equal(read_pairs(tmp_path / "two.npy", 5), [[1, 2], [3, 4]])


@pytest.mark.slow
def test_predict_pairs_with_two_processes(runs, tmp_path):
    pairs = np.random.default_rng(1).integers(0, 2708, size=(50, 2))
    np.save(tmp_path / "p.npy", pairs)
    base = ["predict", str(runs["mlp"]), "--task", "link", "--pairs", str(tmp_path / "p.npy")]
    assert main([*base, "--out", str(tmp_path / "one")]) == 0
    assert main([*base, "--out", str(tmp_path / "two"), "--nproc", "2"]) == 0
    for name in ("logits.npy", "probabilities.npy"):
        a, b = np.load(tmp_path / "one" / name), np.load(tmp_path / "two" / name)
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_embed_a_temporal_run_passes_messages_over_its_training_edges(tmp_path, capsys):
    """A run split by time embeds over the time split's training graph (the random split
    refuses a graph with edge times, and used to stop ``embed`` here)."""
    data = tmp_path / "tl"
    assert main(["prepare", "synthetic", "--preset", "temporal-like", "--scale", "0.001",
                 "--out", str(data)]) == 0  # fmt: skip
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(data), "--task", "link", "--engine", "reference"]
    argv += ["--epochs", "1", "--quiet", "--set", "train.eval_edges=200", "--run-dir", str(run)]
    assert main(argv) == 0
    assert main(["embed", str(run), "--layer", "2", "--out", str(tmp_path / "e")]) == 0
    cfg = load_config(run / "config.yaml")
    t = cfg.train
    graph = split_by_time(open_dataset(data), t.val_edges, t.test_edges, t.seed).train_graph
    model = model_from_config(cfg, graph)
    model.load_state_dict(load_checkpoint(run / "checkpoints" / "best.pt")["engine"]["model"])
    model.eval()
    agg = LocalAggregator.from_graph(graph)
    h = node_features(graph, torch.float32, cfg.data.feature_norm)
    with torch.no_grad():
        for i in range(model.num_layers):
            h = model.layer_forward(i, agg, h)
    emb = np.load(tmp_path / "e" / "embeddings.npy")
    np.testing.assert_allclose(emb, h.numpy(), rtol=1e-5, atol=1e-5)
