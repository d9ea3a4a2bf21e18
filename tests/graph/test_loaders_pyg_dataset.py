"""prepare pyg: a PyG dataset already on disk, from its processed file, never downloaded, with
hostile files refused (weights_only loads, sizes checked, PyG's classes never instantiated)."""

import json
import shutil
import sys

import numpy as np
import pytest
import torch

from fleetgnn.cli.main import main
from fleetgnn.errors import DatasetError
from fleetgnn.graph import open_dataset
from fleetgnn.graph.loaders.bundled import DATA_DIR
from fleetgnn.graph.loaders.pyg_dataset import find_processed, load_pyg_dataset

pyg_data = pytest.importorskip("torch_geometric.data")
InMemoryDataset = pyg_data.InMemoryDataset

PLANETOID = DATA_DIR / "planetoid"  # the Cora that ships with fleetgnn


def _save(root, name, data_list):
    """Write ``data_list`` as PyG writes a processed dataset: ROOT/NAME/processed/data.pt."""
    processed = root / name / "processed"
    processed.mkdir(parents=True, exist_ok=True)
    InMemoryDataset.save(data_list, str(processed / "data.pt"))
    return processed / "data.pt"


def _small(n=6, splits=None):
    ei = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    kw = {}
    for key in ("train_mask", "val_mask", "test_mask"):
        shape = (n,) if splits is None else (n, splits)
        m = torch.zeros(shape, dtype=torch.bool)
        kw[key] = m
    kw["train_mask"][0] = True
    kw["val_mask"][1] = True
    kw["test_mask"][2] = True
    if splits is not None:
        kw["train_mask"][3, 1] = True  # split 1 differs from split 0
    return pyg_data.Data(
        x=torch.arange(n * 2, dtype=torch.float32).view(n, 2), edge_index=ei,
        y=torch.tensor([0, 1, 0, 1, 0, 1]), **kw,
    )  # fmt: skip


class Payload:
    """Unpickling this runs ``touch MARKER``: what a hostile processed file would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_pyg_processed_cora_matches_prepare_planetoid(tmp_path, same_graph):
    """PyG processes the real Cora raw files (no download); prepare pyg reads what it wrote."""
    from torch_geometric.datasets import Planetoid

    raw = tmp_path / "pyg" / "Cora" / "raw"
    raw.mkdir(parents=True)
    for f in PLANETOID.glob("ind.cora.*"):
        shutil.copy(f, raw)
    Planetoid(str(tmp_path / "pyg"), "Cora")  # raw files present: processes, never downloads
    assert (tmp_path / "pyg" / "Cora" / "processed" / "data.pt").is_file()

    out_pyg, out_ref = tmp_path / "from_pyg", tmp_path / "from_planetoid"
    assert main(["prepare", "pyg", "--root", str(tmp_path / "pyg"), "--name", "cora",
                 "--out", str(out_pyg)]) == 0  # fmt: skip
    assert main(["prepare", "planetoid", "--root", str(PLANETOID), "--name", "cora",
                 "--out", str(out_ref)]) == 0  # fmt: skip
    a, b = open_dataset(out_pyg), open_dataset(out_ref)
    same_graph(a, b)
    assert (a.num_nodes, a.num_edges, int(a.train_mask.sum())) == (2708, 10556, 140)
    meta = json.loads((out_pyg / "meta.json").read_text())
    assert meta["source"] == "pyg" and meta["feature_norm"] == "row"
    assert meta["feature_norm"] == json.loads((out_ref / "meta.json").read_text())["feature_norm"]


def test_several_splits_take_split_zero_and_say_so(tmp_path):
    _save(tmp_path, "WikiLike", [_small(splits=3)])
    with pytest.warns(UserWarning, match="train_mask has 3.*using split 0"):
        g = load_pyg_dataset(tmp_path, "wikilike")
    assert np.flatnonzero(g.train_mask).tolist() == [0]
    np.testing.assert_array_equal(g.x, np.arange(12, dtype=np.float32).reshape(6, 2))
    # in-neighbour CSC: node d's in-neighbour is d - 1
    assert g.indices[g.indptr[:-1]].tolist() == [5, 0, 1, 2, 3, 4]


def test_edge_attr_is_carried_in_csc_order(tmp_path):
    data = _small()
    data.edge_attr = torch.arange(12, dtype=torch.float32).view(6, 2)  # edge i: i -> i + 1
    _save(tmp_path, "withattr", [data])
    assert main(["prepare", "pyg", "--root", str(tmp_path), "--name", "withattr",
                 "--out", str(tmp_path / "out")]) == 0  # fmt: skip
    g = open_dataset(tmp_path / "out")
    # node d's one in-edge is edge d - 1 (mod 6), at CSC position d
    want = data.edge_attr.numpy()[(np.arange(6) - 1) % 6]
    np.testing.assert_array_equal(g.edge_attr, want)


def test_own_split_replaces_the_files_masks_and_no_split_is_warned(tmp_path, capsys):
    _save(tmp_path, "small", [_small()])
    split = tmp_path / "s.json"
    split.write_text(json.dumps({"train": [3, 4], "test": [5]}))
    args = ["prepare", "pyg", "--root", str(tmp_path), "--name", "small"]
    assert main([*args, "--split", str(split), "--out", str(tmp_path / "a")]) == 0
    g = open_dataset(tmp_path / "a")
    assert [np.flatnonzero(m).tolist() for m in (g.train_mask, g.val_mask, g.test_mask)] == [
        [3, 4], [], [5],
    ]  # fmt: skip
    np.save(tmp_path / "t.npy", np.ones(6, bool))
    capsys.readouterr()
    both = ["--split", str(split), "--train-mask", str(tmp_path / "t.npy")]
    assert main([*args, *both, "--out", str(tmp_path / "b")]) == 2
    assert "not both" in capsys.readouterr().err
    bare = _small()
    for key in ("train_mask", "val_mask", "test_mask"):
        del bare[key]
    _save(tmp_path, "bare", [bare])
    with pytest.warns(UserWarning, match="no train/val/test masks.*--split FILE"):
        g = load_pyg_dataset(tmp_path, "bare")
    assert g.train_mask is None


def test_layouts_found_and_missing_files_explained(tmp_path):
    path = _save(tmp_path, "ogbn_arxiv", [_small()])
    assert find_processed(tmp_path, "ogbn-arxiv") == path  # OGB's directory naming
    flat = tmp_path / "Reddit"
    (flat / "processed").mkdir(parents=True)
    InMemoryDataset.save([_small()], str(flat / "processed" / "other.pt"))
    (flat / "processed" / "pre_transform.pt").write_bytes(b"never read")
    assert find_processed(flat, "Reddit") == flat / "processed" / "other.pt"
    with pytest.raises(DatasetError, match="never downloads or processes") as exc:
        find_processed(tmp_path, "Cora")
    assert "\n" not in str(exc.value)
    (tmp_path / "Cora" / "raw").mkdir(parents=True)
    (tmp_path / "Cora" / "raw" / "ind.cora.x").write_bytes(b"")
    with pytest.raises(DatasetError, match="fleetgnn prepare planetoid --root .*Cora/raw"):
        find_processed(tmp_path, "cora")
    InMemoryDataset.save([_small()], str(flat / "processed" / "more.pt"))
    with pytest.raises(DatasetError, match="several processed files"):
        find_processed(flat, "Reddit")


def test_hostile_processed_files_are_refused_without_running_code(tmp_path):
    marker = tmp_path / "pwned"
    bad = tmp_path / "bad" / "processed"
    bad.mkdir(parents=True)
    torch.save((Payload(marker), None), bad / "data.pt")
    with pytest.raises(DatasetError, match="is refused.*weights_only=True") as exc:
        load_pyg_dataset(tmp_path, "bad")
    assert "\n" not in str(exc.value)
    # PyG's own Dataset constructor would unpickle pre_transform.pt with weights_only=False
    _save(tmp_path, "good", [_small()])
    torch.save(Payload(marker), tmp_path / "good" / "processed" / "pre_transform.pt")
    assert load_pyg_dataset(tmp_path, "good").num_nodes == 6
    assert not marker.exists()


def test_damaged_heterogeneous_multi_graph_and_oversized_files(tmp_path):
    (tmp_path / "junk" / "processed").mkdir(parents=True)
    (tmp_path / "junk" / "processed" / "data.pt").write_bytes(b"\x80\x02 not torch")
    hetero = pyg_data.HeteroData()
    hetero["a"].x = torch.zeros(2, 1)
    _save(tmp_path, "hetero", [hetero])
    _save(tmp_path, "many", [_small(), _small()])
    cases = {
        "junk": "cannot be read as a PyG processed file",
        "hetero": "heterogeneous graph",
        "many": "a dataset of 2 graphs",
    }
    for name, match in cases.items():
        with pytest.raises(DatasetError, match=match) as exc:
            load_pyg_dataset(tmp_path, name)
        assert "\n" not in str(exc.value)
    _save(tmp_path, "small", [_small()])
    with pytest.raises(DatasetError, match="over --max-memory"):
        load_pyg_dataset(tmp_path, "small", max_bytes=100)


def test_without_pyg_one_line_names_the_extra(tmp_path, monkeypatch, capsys):
    _save(tmp_path, "small", [_small()])
    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    monkeypatch.setitem(sys.modules, "torch_geometric.data", None)
    args = ["prepare", "pyg", "--root", str(tmp_path), "--name", "small"]
    assert main([*args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install fleetgnn[pyg]" in err[0]
