"""Your own split for prepare npz / edgelist: mask files and one split file (.npz or .json)."""

import json
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from fleetgnn.cli.main import main
from fleetgnn.errors import DatasetError
from fleetgnn.graph import open_dataset
from fleetgnn.graph.loaders import load_edgelist, load_npz
from fleetgnn.graph.loaders.splits import load_split_file

N = 12
Y = np.arange(N) % 3
Y[0] = -1  # node 0 is unlabelled
TRAIN, VAL, TEST = [1, 2, 3], [4, 5], [6, 7, 8]


def _ids(g):
    return [np.flatnonzero(m).tolist() for m in (g.train_mask, g.val_mask, g.test_mask)]


@pytest.fixture
def npz_file(tmp_path):
    """A gnn-benchmark .npz: a ring of N nodes, 4 dense features, labels Y."""
    adj = sp.csr_matrix((np.ones(N), (np.arange(N), (np.arange(N) + 1) % N)), shape=(N, N))
    path = tmp_path / "ring.npz"
    np.savez(
        path,
        adj_data=adj.data,
        adj_indices=adj.indices,
        adj_indptr=adj.indptr,
        adj_shape=np.array(adj.shape),
        attr_matrix=np.eye(N, 4, dtype=np.float32),
        labels=Y,
    )
    return path


@pytest.fixture
def edgelist(tmp_path):
    edges = tmp_path / "ring.txt"
    edges.write_text("".join(f"{i} {(i + 1) % N}\n" for i in range(N)))
    np.save(tmp_path / "y.npy", Y)
    return edges, tmp_path / "y.npy"


def _mask(ids):
    return np.isin(np.arange(N), ids)


def test_npz_takes_mask_files(npz_file, tmp_path):
    for name, ids in (("train", TRAIN), ("val", VAL), ("test", TEST)):
        np.save(tmp_path / f"{name}.npy", _mask(ids))
    g = load_npz(
        npz_file,
        train_mask=tmp_path / "train.npy",
        val_mask=tmp_path / "val.npy",
        test_mask=tmp_path / "test.npy",
    )
    assert _ids(g) == [TRAIN, VAL, TEST]
    only = load_npz(npz_file, train_mask=tmp_path / "train.npy")
    assert _ids(only) == [TRAIN, [], []]
    # the random split is still the default, and its knobs still apply
    rand = load_npz(npz_file, num_train_per_class=1, num_val=2, num_test=2)
    assert [len(ids) for ids in _ids(rand)] == [3, 2, 2]
    with pytest.raises(DatasetError, match=r"num_val \(--num-val\) draws a random split"):
        load_npz(npz_file, train_mask=tmp_path / "train.npy", num_val=2)
    with pytest.raises(DatasetError, match=r"without train_mask \(--train-mask\)"):
        load_npz(npz_file, val_mask=tmp_path / "val.npy")
    np.save(tmp_path / "unlab.npy", _mask([0]))
    with pytest.raises(DatasetError, match="selects node 0, which is unlabelled"):
        load_npz(npz_file, train_mask=tmp_path / "unlab.npy")


@pytest.mark.parametrize("kind", ["npz-mask", "npz-ids", "json-ids", "json-mask"])
def test_split_file_forms(kind, npz_file, edgelist, tmp_path):
    path = tmp_path / ("split.npz" if kind.startswith("npz") else "split.json")
    sets = {"train": TRAIN, "val": VAL, "test": TEST}
    if kind == "npz-mask":
        np.savez(path, **{k: _mask(v) for k, v in sets.items()})
    elif kind == "npz-ids":
        np.savez(path, **{k: np.array(v, dtype=np.int32) for k, v in sets.items()})
    elif kind == "json-ids":
        path.write_text(json.dumps(sets))
    else:
        path.write_text(json.dumps({k: _mask(v).tolist() for k, v in sets.items()}))
    assert _ids(load_npz(npz_file, split=path)) == [TRAIN, VAL, TEST]
    edges, labels = edgelist
    assert _ids(load_edgelist(edges, labels=labels, split=path)) == [TRAIN, VAL, TEST]


def test_split_file_without_val_and_test(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"train": TRAIN, "test": []}))
    masks = load_split_file(path, Y)
    assert [np.flatnonzero(masks[k]).tolist() for k in masks] == [TRAIN, [], []]


BAD_JSON = {
    "unknown.json": ({"train": TRAIN, "valid": VAL}, "holds 'valid'; its keys are train, val"),
    "notrain.json": ({"val": VAL}, "has no 'train' set"),
    "range.json": ({"train": [1, N]}, f"'train' holds node ID {N}, outside \\[0, {N}\\)"),
    "neg.json": ({"train": [-1]}, "holds node ID -1"),
    "huge.json": ({"train": [2**70]}, "holds node ID"),
    "dup.json": ({"train": [1, 2, 1]}, "lists node 1 more than once"),
    "short.json": ({"train": [True] * 5}, "mask of 5 entries but the graph has 12 nodes"),
    "mixed.json": ({"train": [1, True]}, "mixes booleans and integers"),
    "str.json": ({"train": ["1"]}, "holds '1'"),
    "dict.json": ({"train": {"a": 1}}, "must be a list of node IDs"),
    "overlap.json": ({"train": [1, 2], "test": [2]}, "'test' and .*'train' both select node 2"),
    "unlab.json": ({"train": [0, 1]}, "selects node 0, which is unlabelled"),
    "list.json": ([1, 2], "must hold a JSON object"),
}


@pytest.mark.parametrize("name", sorted(BAD_JSON))
def test_bad_json_split_files_are_one_line(name, tmp_path):
    obj, match = BAD_JSON[name]
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    with pytest.raises(DatasetError, match=match) as exc:
        load_split_file(path, Y)
    assert name in str(exc.value) and "\n" not in str(exc.value)


def test_damaged_and_hostile_split_files(tmp_path):
    cases = {}
    (tmp_path / "torn.json").write_text('{"train": [1, 2')
    cases["torn.json"] = "is not valid JSON"
    (tmp_path / "big.json").write_text(" " * (3 * N * 32 + (1 << 20) + 1) + "{}")
    cases["big.json"] = "more than a split of 12 nodes can take"
    (tmp_path / "s.txt").write_text("{}")
    cases["s.txt"] = "must be a .npz .* or a .json"
    np.savez(tmp_path / "obj.npz", train=np.array([1, "a"], dtype=object))
    cases["obj.npz"] = "cannot be read as an .npz of arrays"
    np.savez(tmp_path / "float.npz", train=np.ones(N))
    cases["float.npz"] = "must be a 1-D bool mask of 12 entries or an integer array"
    np.savez(tmp_path / "int01.npz", train=_mask(TRAIN).astype(np.int64))
    cases["int01.npz"] = "lists node 0 more than once.*must be stored as bool"
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not a zip")
    cases["junk.npz"] = "cannot be read as an .npz"
    for name, match in cases.items():
        with pytest.raises(DatasetError, match=match) as exc:
            load_split_file(tmp_path / name, Y)
        assert name in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(DatasetError, match="split file .* does not exist"):
        load_split_file(tmp_path / "none.npz", Y)


def test_npz_split_declaring_more_entries_than_nodes_is_refused_unread(tmp_path):
    """The header is checked before the data is read: a tiny member can declare a huge array."""
    path = tmp_path / "bomb.npz"
    header = {"descr": "|b1", "fortran_order": False, "shape": (10**12,)}
    member = tmp_path / "train.npy"
    with open(member, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(member, "train.npy")
    with pytest.raises(DatasetError, match="declares 1000000000000 entries"):
        load_split_file(path, Y)


def test_split_file_mixtures_are_refused(npz_file, edgelist, tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"train": TRAIN}))
    np.save(tmp_path / "train.npy", _mask(TRAIN))
    with pytest.raises(DatasetError, match="pass the split file or the mask files, not both"):
        load_npz(npz_file, split=path, train_mask=tmp_path / "train.npy")
    with pytest.raises(DatasetError, match=r"split_seed \(--split-seed\) draws a random split"):
        load_npz(npz_file, split=path, split_seed=1)
    edges, labels = edgelist
    with pytest.raises(DatasetError, match=r"split \(--split\) needs labels \(--labels\)"):
        load_edgelist(edges, split=path)
    nolabels = tmp_path / "nolabels.npz"
    with np.load(npz_file) as z:
        np.savez(nolabels, **{k: z[k] for k in z.files if k != "labels"})
    with pytest.raises(DatasetError, match="needs labels \\(a 'labels' array"):
        load_npz(nolabels, split=path)


def test_prepare_cli_split_flags(npz_file, edgelist, tmp_path, capsys):
    split = tmp_path / "s.json"
    split.write_text(json.dumps({"train": TRAIN, "val": VAL, "test": TEST}))
    np.save(tmp_path / "train.npy", _mask(TRAIN))
    np.save(tmp_path / "test.npy", _mask(TEST))
    npz = ["prepare", "npz", "--file", str(npz_file)]
    assert main([*npz, "--split", str(split), "--out", str(tmp_path / "a")]) == 0
    assert _ids(open_dataset(tmp_path / "a")) == [TRAIN, VAL, TEST]
    masks = ["--train-mask", str(tmp_path / "train.npy"), "--test-mask", str(tmp_path / "test.npy")]
    assert main([*npz, *masks, "--out", str(tmp_path / "b")]) == 0
    assert _ids(open_dataset(tmp_path / "b")) == [TRAIN, [], TEST]
    edges, labels = edgelist
    el = ["prepare", "edgelist", "--edges", str(edges), "--labels", str(labels)]
    assert main([*el, "--split", str(split), "--out", str(tmp_path / "c")]) == 0
    assert _ids(open_dataset(tmp_path / "c")) == [TRAIN, VAL, TEST]
    capsys.readouterr()
    split.write_text(json.dumps({"train": [1, 99]}))
    assert main([*npz, "--split", str(split), "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetgnn prepare: error: split file") and "node ID 99" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "d").exists()
