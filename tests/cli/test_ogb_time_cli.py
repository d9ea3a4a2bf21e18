"""``fleetgnn prepare ogb`` on a folder with OGB's time files, then a temporal link task trains
on it: the years of ``edge_year.csv.gz`` reach the time split and the temporal sampler."""

import gzip
import json
from pathlib import Path

import numpy as np

from fleetgnn.cli.main import main
from fleetgnn.graph import open_dataset, read_meta
from tests.graph.test_loaders_ogb_hetero import _write_mag


def _gz(path: Path, lines) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(f"{line}\n" for line in lines))


def _write_collab(root: Path, n=120, e=900, f=8, seed=0, edge_years=True):
    """An ogbl-collab-like raw folder: edges with a year each, node features and node years.

    Like ogbl-collab it has no node labels and no node split (link prediction reads neither).
    Without ``edge_years`` it is an ogbn-arxiv-like folder: node years only, with labels and a
    node split.
    """
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    raw = root / "raw"
    _gz(raw / "edge.csv.gz", [f"{a},{b}" for a, b in zip(src, dst, strict=True)])
    _gz(raw / "num-node-list.csv.gz", [n])
    _gz(raw / "num-edge-list.csv.gz", [e])
    x = rng.standard_normal((n, f))
    _gz(raw / "node-feat.csv.gz", [",".join(f"{v:.4f}" for v in row) for row in x])
    if edge_years:
        _gz(raw / "edge_year.csv.gz", rng.integers(2000, 2020, e))
    _gz(raw / "node_year.csv.gz", rng.integers(1990, 2000, n))
    _gz(raw / "edge_weight.csv.gz", [1] * e)  # in ogbl-collab too; not read
    if edge_years:
        return
    _gz(raw / "node-label.csv.gz", rng.integers(0, 3, n))
    perm = rng.permutation(n)
    for stem, ids in (("train", perm[:80]), ("valid", perm[80:100]), ("test", perm[100:])):
        _gz(root / "split" / "time" / f"{stem}.csv.gz", ids)


def test_prepare_ogb_help_names_the_time_files(capsys):
    try:
        main(["prepare", "ogb", "--help"])
    except SystemExit as done:
        assert done.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in ("edge_year.csv.gz", "node_year.csv.gz", "edge_time", "node_time"):
        assert text in out, text


def test_a_prepared_timed_ogb_folder_trains_a_temporal_link_task(tmp_path, capsys):
    _write_collab(tmp_path / "ogbl_collab")
    data, run = tmp_path / "collab", tmp_path / "run"
    argv = ["prepare", "ogb", "--root", str(tmp_path / "ogbl_collab"), "--undirected"]
    assert main([*argv, "--out", str(data)]) == 0
    meta = read_meta(data)
    assert open_dataset(data).y is None and open_dataset(data).train_mask is None
    assert meta["has_edge_time"] is True and meta["edge_time_range"][0] >= 2000
    assert meta["has_node_time"] is True and meta["node_time_range"][1] < 2000
    assert open_dataset(data).edge_time is not None
    argv = ["train", "--dataset", str(data), "--task", "link", "--engine", "reference"]
    argv += ["--mode", "minibatch", "--epochs", "1", "--run-dir", str(run)]
    argv += ["--set", "train.fanouts=[3,3]", "--set", "train.batch_size=128"]
    argv += ["--set", "train.eval_edges=100", "--set", "model.hidden=8"]
    # train.temporal=on refuses a graph without edge times: the years are what it splits by
    assert main([*argv, "--set", "train.temporal=on"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["engine"], summary["epochs"]) == ("reference", 1)
    assert np.isfinite(summary["final_train_loss"]) and 0.0 <= summary["val_auc"] <= 1.0


def test_node_years_alone_train_without_time_under_auto(tmp_path, capsys):
    """ogbn-arxiv has node years and no edge times: ``train.temporal=auto`` (the default)
    trains the static task it always trained; ``on`` is refused in one line."""
    _write_collab(tmp_path / "ogbn_arxiv", edge_years=False)
    data = tmp_path / "arxiv"
    assert main(["prepare", "ogb", "--root", str(tmp_path / "ogbn_arxiv"), "--out", str(data)]) == 0
    g = open_dataset(data)
    assert g.node_time is not None and g.edge_time is None
    argv = ["train", "--dataset", str(data), "--engine", "reference", "--epochs", "1", "--quiet"]
    argv += ["--set", "model.hidden=8"]
    assert main([*argv, "--run-dir", str(tmp_path / "auto")]) == 0
    capsys.readouterr()
    on = [*argv, "--set", "train.temporal=on", "--run-dir", str(tmp_path / "on")]
    assert main(on) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "has node times (node_time) but no edge times" in err


def test_typed_node_years_alone_train_without_time_under_auto(tmp_path, capsys):
    """ogbn-mag's paper years, without edge times: the default typed run trains as before."""
    _write_mag(tmp_path / "ogbn_mag")
    data = tmp_path / "mag"
    assert main(["prepare", "ogb", "--root", str(tmp_path / "ogbn_mag"), "--out", str(data)]) == 0
    assert set(open_dataset(data).node_time) == {"paper"}
    argv = ["train", "--dataset", str(data), "--model", "rgcn", "--engine", "reference"]
    argv += ["--epochs", "1", "--quiet", "--set", "model.hidden=8"]
    assert main([*argv, "--run-dir", str(tmp_path / "auto")]) == 0
    capsys.readouterr()
    on = [*argv, "--set", "train.temporal=on", "--run-dir", str(tmp_path / "on")]
    assert main(on) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "has node times of its target type 'paper' but no edge" in err
