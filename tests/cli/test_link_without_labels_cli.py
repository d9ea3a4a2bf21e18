"""``fleetgnn train --task link`` on a dataset with features and edges only: no labels, no split.

Interaction edge lists and OGB's ogbl-* folders carry no node labels; link prediction trains on
them and reports its test AUC, and node classification refuses them in one line.
"""

import json

import numpy as np
import pytest

from fleetgnn.cli.main import main
from fleetgnn.graph import open_dataset


def _edge_list(tmp_path, n=200, e=1200, f=8):
    """A label-free dataset prepared from an edge list and a feature file."""
    rng = np.random.default_rng(0)
    np.savetxt(tmp_path / "edges.txt", rng.integers(0, n, size=(e, 2)), fmt="%d")
    np.save(tmp_path / "x.npy", rng.normal(size=(n, f)).astype(np.float32))
    data = tmp_path / "data"
    argv = ["prepare", "edgelist", "--edges", str(tmp_path / "edges.txt"), "--undirected"]
    assert main([*argv, "--features", str(tmp_path / "x.npy"), "--out", str(data)]) == 0
    g = open_dataset(data)
    assert g.x is not None and g.y is None
    assert (g.train_mask, g.val_mask, g.test_mask) == (None, None, None)
    return data


def test_link_prediction_trains_on_an_edge_list_without_labels(tmp_path, capsys):
    data = _edge_list(tmp_path)
    capsys.readouterr()
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(data), "--task", "link", "--epochs", "2"]
    assert main([*argv, "--run-dir", str(run), "--set", "model.hidden=8"]) == 0
    out = capsys.readouterr().out
    summary = json.loads((run / "summary.json").read_text())
    assert 0.0 <= summary["test_auc"] <= 1.0 and np.isfinite(summary["final_train_loss"])
    assert "test auc" in out and f"{summary['test_auc']:.4f}" in out
    # no node metric is measured (no labels were made up) nor printed
    assert all(summary[k] is None for k in ("train_acc", "val_acc", "test_acc"))
    assert "acc" not in out


@pytest.mark.slow
def test_minibatch_link_training_without_labels_on_two_processes(tmp_path, capsys):
    data = _edge_list(tmp_path)
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(data), "--task", "link", "--engine", "minibatch"]
    argv += ["--nproc", "2", "--epochs", "1", "--quiet", "--run-dir", str(run)]
    assert main([*argv, "--set", "model.hidden=8", "--set", "train.fanouts=[3,3]"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and 0.0 <= summary["test_auc"] <= 1.0


def test_node_classification_refuses_the_same_dataset_in_one_line(tmp_path, capsys):
    data = _edge_list(tmp_path)
    capsys.readouterr()
    argv = ["train", "--dataset", str(data), "--epochs", "1", "--run-dir", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith("fleetgnn train: error: dataset 'edges' has no labels (y); node ")
    assert "--task link" in err
