import collections
import io
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from fleetgnn.errors import DatasetError
from fleetgnn.graph.loaders import SafeUnpickler, load_planetoid
from fleetgnn.graph.loaders.bundled import DATA_DIR
from fleetgnn.graph.loaders.planetoid import PARTS, safe_load

DATA = DATA_DIR / "planetoid"  # the Cora that ships with fleetgnn


def _kipf_reference(root: Path, name: str, load=None):
    """Kipf's gcn/utils.py load_data, with scipy, written independently of the loader."""
    load = load or (lambda p: pickle.load(open(p, "rb"), encoding="latin1"))  # noqa: SIM115
    objs = {k: load(root / f"ind.{name}.{k}") for k in ("x", "y", "tx", "ty", "allx", "ally")}
    graph = load(root / f"ind.{name}.graph")
    test_idx_reorder = [int(line.strip()) for line in open(root / f"ind.{name}.test.index")]  # noqa: SIM115
    test_idx_range = np.sort(test_idx_reorder)
    tx, ty = objs["tx"], objs["ty"]
    full = range(min(test_idx_reorder), max(test_idx_reorder) + 1)
    tx_ext = sp.lil_matrix((len(full), tx.shape[1]))
    tx_ext[test_idx_range - min(test_idx_range), :] = tx
    ty_ext = np.zeros((len(full), ty.shape[1]))
    ty_ext[test_idx_range - min(test_idx_range), :] = ty
    features = sp.vstack((objs["allx"], tx_ext)).tolil()
    features[test_idx_reorder, :] = features[test_idx_range, :]
    labels = np.vstack((objs["ally"], ty_ext))
    labels[test_idx_reorder, :] = labels[test_idx_range, :]
    n = features.shape[0]
    rows = [k for k, vs in graph.items() for _ in vs]
    cols = [v for vs in graph.values() for v in vs]
    adj = sp.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n)).tocsr()
    adj = ((adj + adj.T) > 0).astype(np.int8).tolil()
    adj.setdiag(0)
    adj = sp.csc_matrix(adj)
    adj.eliminate_zeros()
    adj.sort_indices()
    n_train = objs["y"].shape[0]
    return {
        "x": np.asarray(features.todense(), dtype=np.float32),
        "y": np.where(labels.sum(1) > 0, labels.argmax(1), -1),
        "indptr": adj.indptr,
        "indices": adj.indices,
        "train": np.arange(n_train),
        "val": np.arange(n_train, n_train + 500),
        "test": np.sort(test_idx_reorder),
    }


def _check_against(g, ref):
    np.testing.assert_array_equal(g.indptr, ref["indptr"])
    np.testing.assert_array_equal(g.indices, ref["indices"])
    np.testing.assert_array_equal(g.x, ref["x"])
    np.testing.assert_array_equal(g.y, ref["y"])
    for mask, key in (("train_mask", "train"), ("val_mask", "val"), ("test_mask", "test")):
        np.testing.assert_array_equal(np.flatnonzero(getattr(g, mask)), ref[key])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the reference's plain scipy unpickle
def test_real_cora_matches_standard_split_and_reference():
    g = load_planetoid(DATA, "cora")
    assert (g.num_nodes, g.num_features, g.num_classes, g.num_edges) == (2708, 1433, 7, 10556)
    assert [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)] == [140, 500, 1000]
    assert g.x.dtype == np.float32 and g.y.dtype == np.int64
    assert (g.y >= 0).all()
    src, dst = g.edges()
    assert not (src == dst).any()
    key = set(zip(src.tolist(), dst.tolist(), strict=True))
    assert len(key) == g.num_edges  # no duplicates
    assert all((d, s) in key for s, d in key)  # symmetric
    _check_against(g, _kipf_reference(DATA, "cora"))


def _dump(obj, path: Path) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def _write_citeseer_like(root: Path, name: str = "toy", seed: int = 0) -> dict:
    """A Planetoid fixture whose test.index has gaps (like CiteSeer)."""
    rng = np.random.default_rng(seed)
    n_train, n_all, f, c = 4, 510, 6, 3
    # 18 test nodes over the range 510..529 with gaps at 513 and 517
    test_idx = rng.permutation(np.setdiff1d(np.arange(n_all, n_all + 20), [n_all + 3, n_all + 7]))
    n_test = test_idx.size

    def feats(rows):
        return sp.csr_matrix(rng.random((rows, f)) * (rng.random((rows, f)) < 0.4))

    def onehot(rows):
        return np.eye(c, dtype=np.int32)[rng.integers(0, c, rows)]

    allx, ally = feats(n_all), onehot(n_all)
    objs = {
        "x": allx[:n_train],
        "y": ally[:n_train],
        "allx": allx,
        "ally": ally,
        "tx": feats(n_test),
        "ty": onehot(n_test),
    }
    n = int(test_idx.max()) + 1
    graph = collections.defaultdict(list)
    src, dst = rng.integers(0, n, 400), rng.integers(0, n, 400)
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        graph[s].append(d)  # one direction only, self loops and duplicates included
    objs["graph"] = graph
    for k, v in objs.items():
        _dump(v, root / f"ind.{name}.{k}")
    (root / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_idx))
    return {"n": n, "test_idx": test_idx, "missing": np.setdiff1d(np.arange(n_all, n), test_idx)}


def test_citeseer_like_gaps_match_reference(tmp_path):
    info = _write_citeseer_like(tmp_path)
    g = load_planetoid(tmp_path, "toy")
    assert g.num_nodes == info["n"] == 530
    missing = info["missing"]
    assert missing.size == 2
    assert (g.x[missing] == 0).all() and (g.y[missing] == -1).all()
    for m in (g.train_mask, g.val_mask, g.test_mask):
        assert not m[missing].any()
    assert [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)] == [4, 500, 18]
    ref = _kipf_reference(tmp_path, "toy")
    _check_against(g, ref)


def test_uppercase_name_falls_back_to_lowercase_files(tmp_path):
    _write_citeseer_like(tmp_path, name="toy")
    assert load_planetoid(tmp_path, "TOY").num_nodes == 530


class _Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [0, 2, 4])
def test_malicious_pickle_is_refused_and_never_executed(tmp_path, protocol):
    _write_citeseer_like(tmp_path)
    marker = tmp_path / "pwned"
    with open(tmp_path / "ind.toy.graph", "wb") as f:
        pickle.dump(_Evil(marker), f, protocol=protocol)
    with pytest.raises(DatasetError, match=r"refused global '(posix|os|nt)\.system'"):
        load_planetoid(tmp_path, "toy")
    assert not marker.exists()
    # sanity: the same file *would* run the command with a plain unpickler
    with open(tmp_path / "ind.toy.graph", "rb") as f:
        pickle.load(f)
    assert marker.exists()


@pytest.mark.parametrize(
    "payload",
    [
        ("builtins", "eval"),
        ("subprocess", "Popen"),
        ("numpy", "load"),
        ("numpy.testing._private.utils", "runstring"),
        ("scipy.sparse", "load_npz"),
        ("collections", "OrderedDict"),
        ("copyreg", "_reconstructor"),
    ],
)
def test_safe_unpickler_refuses_other_globals(payload):
    module, name = payload
    data = f"c{module}\n{name}\n(S'1'\ntR.".encode()
    with pytest.raises(pickle.UnpicklingError, match="refused global"):
        SafeUnpickler(io.BytesIO(data), encoding="latin1").load()


def test_object_arrays_and_codec_abuse_are_refused(tmp_path):
    _write_citeseer_like(tmp_path)
    _dump(np.array([{"a": 1}, None], dtype=object), tmp_path / "ind.toy.y")
    with pytest.raises(DatasetError, match="numeric numpy array"):
        load_planetoid(tmp_path, "toy")
    p = tmp_path / "codec"
    p.write_bytes(b"c_codecs\nencode\n(Vabc\nVzlib_codec\ntR.")
    with pytest.raises(DatasetError, match="not a valid Planetoid pickle"):
        safe_load(p)


def test_missing_and_inconsistent_files(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        load_planetoid(tmp_path / "nope", "toy")
    with pytest.raises(DatasetError, match="plain dataset name"):
        load_planetoid(tmp_path, "../etc")
    _write_citeseer_like(tmp_path)
    (tmp_path / "ind.toy.ally").unlink()
    with pytest.raises(DatasetError, match=r"lacks ind\.toy\.ally"):
        load_planetoid(tmp_path, "toy")
    _write_citeseer_like(tmp_path)
    _dump(np.zeros((3, 3), np.int32), tmp_path / "ind.toy.ty")
    with pytest.raises(DatasetError, match="test.index lists 18 nodes but tx has 18 and ty 3"):
        load_planetoid(tmp_path, "toy")
    _write_citeseer_like(tmp_path)
    _dump({0: [1, 10_000]}, tmp_path / "ind.toy.graph")
    with pytest.raises(DatasetError, match="entry 10000 is outside the valid node IDs"):
        load_planetoid(tmp_path, "toy")
    _write_citeseer_like(tmp_path)
    _dump({0: [1, 2.5]}, tmp_path / "ind.toy.graph")
    with pytest.raises(DatasetError, match="must be integer node IDs"):
        load_planetoid(tmp_path, "toy")


def test_test_index_errors_name_the_line(tmp_path):
    _write_citeseer_like(tmp_path)
    p = tmp_path / "ind.toy.test.index"
    lines = p.read_text().splitlines()
    lines[5] = "51x"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"test\.index', line 6, column 1: cannot parse '51x'"):
        load_planetoid(tmp_path, "toy")


def test_corrupt_csr_state_is_refused(tmp_path):
    _write_citeseer_like(tmp_path)
    m = sp.csr_matrix(np.eye(4, 6, dtype=np.float32))
    m.indices[0] = 99  # column outside the shape
    _dump(m, tmp_path / "ind.toy.x")
    with pytest.raises(DatasetError, match="CSR matrix of shape"):
        load_planetoid(tmp_path, "toy")


def test_huge_declared_shape_is_refused_before_allocation(tmp_path):
    _write_citeseer_like(tmp_path)
    m = sp.csr_matrix((4, 6), dtype=np.float32)
    m._shape = (4, 10**12)
    _dump(m, tmp_path / "ind.toy.x")
    with pytest.raises(DatasetError, match="--max-memory"):
        load_planetoid(tmp_path, "toy")


def test_every_part_is_needed():
    assert set(PARTS) == {"x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"}


def test_split_nodes_without_label_are_dropped_with_a_warning(tmp_path):
    info = _write_citeseer_like(tmp_path)
    ty = np.eye(3, dtype=np.int32)[np.zeros(18, int)]
    ty[4] = 0  # test node info["test_idx"][4] has no label
    _dump(ty, tmp_path / "ind.toy.ty")
    with pytest.warns(UserWarning, match="1 split nodes have an all-zero label row"):
        g = load_planetoid(tmp_path, "toy")
    node = int(info["test_idx"][4])
    assert g.y[node] == -1 and not g.test_mask[node] and int(g.test_mask.sum()) == 17
