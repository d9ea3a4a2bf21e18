import numpy as np
import pytest
import scipy.sparse as sp

from fleetgnn.errors import DatasetError
from fleetgnn.graph.loaders import load_npz, load_planetoid
from fleetgnn.graph.loaders.bundled import DATA_DIR

SHARED = DATA_DIR  # the Cora that ships with fleetgnn
CORA_NPZ = SHARED / "npz" / "cora.npz"


def _scipy_csc(adj: sp.csr_matrix, undirected: bool):
    """Reference CSC (in-neighbours) of the adjacency A[src, dst], built with scipy alone."""
    a = adj.copy().tocsr()
    a.eliminate_zeros()
    if undirected:
        a = ((a != 0) + (a != 0).T).astype(np.int8).tolil()
        a.setdiag(0)
        a = a.tocsr()
        a.eliminate_zeros()
    c = a.tocsc()
    c.sort_indices()
    return c


def _masks_ok(g, per_class, n_val, n_test):
    tr, va, te = g.train_mask, g.val_mask, g.test_mask
    assert not (tr & va).any() and not (tr & te).any() and not (va & te).any()
    assert (g.y[tr | va | te] >= 0).all()
    assert np.bincount(g.y[tr], minlength=g.num_classes).tolist() == [per_class] * g.num_classes
    assert (int(va.sum()), int(te.sum())) == (n_val, n_test)


def test_real_cora_npz_counts_and_reference():
    g = load_npz(CORA_NPZ)
    assert (g.num_nodes, g.num_features, g.num_classes, g.num_edges) == (2708, 1433, 7, 10556)
    _masks_ok(g, 20, 500, 1000)
    with np.load(CORA_NPZ) as z:
        adj = sp.csr_matrix((z["adj_data"], z["adj_indices"], z["adj_indptr"]), z["adj_shape"])
        attr = sp.csr_matrix(
            (z["attr_data"], z["attr_indices"], z["attr_indptr"]), z["attr_shape"]
        ).toarray()
        labels = z["labels"]
    ref = _scipy_csc(adj, undirected=True)
    np.testing.assert_array_equal(g.indptr, ref.indptr)
    np.testing.assert_array_equal(g.indices, ref.indices)
    np.testing.assert_array_equal(g.x, attr.astype(np.float32))
    np.testing.assert_array_equal(g.y, labels)
    d = load_npz(CORA_NPZ, undirected=False)
    assert d.num_edges == 5429 and d.edge_weight is None
    ref = _scipy_csc(adj, undirected=False)
    np.testing.assert_array_equal(d.indptr, ref.indptr)
    np.testing.assert_array_equal(np.sort(d.indices), np.sort(ref.indices))


def test_npz_cora_is_planetoid_cora_up_to_relabelling():
    a = load_npz(CORA_NPZ)
    b = load_planetoid(SHARED / "planetoid", "cora")
    assert sorted(a.in_degrees().tolist()) == sorted(b.in_degrees().tolist())
    assert sorted(np.bincount(a.y).tolist()) == sorted(np.bincount(b.y).tolist())
    assert sorted(a.x.sum(1).tolist()) == sorted(b.x.sum(1).tolist())


def _write(path, n=40, f=5, c=3, seed=0, weighted=False, dense=False, **extra):
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=0.1, random_state=seed, format="csr")
    a.data[:] = rng.integers(1, 4, a.nnz) if weighted else 1.0
    a.setdiag(1.0)  # self loops to be dropped
    a = a.tocsr()
    x = rng.random((n, f)) * (rng.random((n, f)) < 0.5)
    arrays = {
        "adj_data": a.data.astype(np.float32),
        "adj_indices": a.indices,
        "adj_indptr": a.indptr,
        "adj_shape": np.array(a.shape),
        "labels": np.arange(n) % c,
        "class_names": np.array([f"c{i}" for i in range(c)]),
    }
    if dense:
        arrays["attr_matrix"] = x
    else:
        xs = sp.csr_matrix(x)
        arrays.update(
            attr_data=xs.data,
            attr_indices=xs.indices,
            attr_indptr=xs.indptr,
            attr_shape=np.array(xs.shape),
        )
    arrays.update(extra)
    np.savez(path, **arrays)
    return a, x, arrays


SMALL = {"num_train_per_class": 3, "num_val": 5, "num_test": 7}


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("undirected", [False, True])
def test_fixture_matches_scipy_reference(tmp_path, dense, undirected):
    a, x, _ = _write(tmp_path / "g.npz", dense=dense)
    g = load_npz(tmp_path / "g.npz", undirected=undirected, **SMALL)
    ref = _scipy_csc(a, undirected=undirected)
    np.testing.assert_array_equal(g.indptr, ref.indptr)
    np.testing.assert_array_equal(g.indices, ref.indices)
    np.testing.assert_array_equal(g.x, x.astype(np.float32))
    assert g.name == "g" and g.num_classes == 3
    _masks_ok(g, 3, 5, 7)


def test_weights_become_edge_weight_and_follow_their_edges(tmp_path):
    a, _, _ = _write(tmp_path / "w.npz", weighted=True)
    g = load_npz(tmp_path / "w.npz", undirected=False, **SMALL)
    src, dst = g.edges()
    np.testing.assert_array_equal(g.edge_weight, np.asarray(a[src, dst]).ravel())


def test_split_is_deterministic_per_seed(tmp_path):
    _write(tmp_path / "g.npz")
    g1 = load_npz(tmp_path / "g.npz", split_seed=3, **SMALL)
    g2 = load_npz(tmp_path / "g.npz", split_seed=3, **SMALL)
    g3 = load_npz(tmp_path / "g.npz", split_seed=4, **SMALL)
    for m in ("train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(g1, m), getattr(g2, m))
    assert any((getattr(g1, m) != getattr(g3, m)).any() for m in ("train_mask", "val_mask"))


def test_object_arrays_are_refused_only_where_needed(tmp_path):
    _write(tmp_path / "o.npz", labels=np.array([{"a": 1}] * 40, dtype=object))
    with pytest.raises(DatasetError, match="pickle is disabled"):
        load_npz(tmp_path / "o.npz", **SMALL)
    # an ignored metadata key holding pickled objects does not matter
    _write(tmp_path / "ok.npz", idx_to_node=np.array([{"a": 1}], dtype=object))
    assert load_npz(tmp_path / "ok.npz", **SMALL).num_nodes == 40


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"adj_indptr": None}, "lacks adj_indptr"),
        ({"adj_shape": np.array([40, 41])}, "must be square"),
        ({"adj_shape": np.array([39, 39])}, "has 41 entries but adj_shape says 39 rows"),
        ({"labels": np.arange(39)}, r"labels must be an integer array of shape \(40,\)"),
        ({"labels": np.linspace(0, 1, 40)}, "labels must be an integer array"),
        ({"attr_shape": np.array([39, 5])}, "attr_indptr' has 41 entries"),
        ({"attr_indptr": None}, "lacks attr_indptr"),
        ({"attr_shape": np.array([40, 2])}, r"column index \d+ is outside \[0, 2\)"),
        ({"adj_data": np.full(5, np.nan)}, "data must match indices"),
        ({"adj_shape": np.array([-1, 2])}, "two non-negative integers"),
    ],
)
def test_inconsistent_files_raise_dataset_error(tmp_path, change, match):
    _, _, arrays = _write(tmp_path / "base.npz")
    for k, v in change.items():
        if v is None:
            arrays.pop(k)
        else:
            arrays[k] = v
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DatasetError, match=match):
        load_npz(tmp_path / "bad.npz", **SMALL)


def test_unreadable_files(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        load_npz(tmp_path / "missing.npz")
    _write(tmp_path / "g.npz")
    data = (tmp_path / "g.npz").read_bytes()
    (tmp_path / "t.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match="truncated or corrupt"):
        load_npz(tmp_path / "t.npz")
    np.save(tmp_path / "a.npy", np.zeros(3))
    with pytest.raises(DatasetError, match="not an .npz archive"):
        load_npz(tmp_path / "a.npy")


def test_too_few_labelled_nodes_for_the_split(tmp_path):
    _write(tmp_path / "g.npz")
    with pytest.raises(DatasetError, match="fewer than num_train_per_class"):
        load_npz(tmp_path / "g.npz")  # 20 per class, but classes have 13-14 nodes
    with pytest.raises(DatasetError, match="fewer than num_val"):
        load_npz(tmp_path / "g.npz", num_train_per_class=3, num_val=500, num_test=1000)


def test_renamed_member_in_central_directory_is_detected(tmp_path):
    # a one-byte flip in the central directory renames 'labels' without touching its data: it
    # must not silently load as a graph without labels
    _write(tmp_path / "g.npz")
    data = bytearray((tmp_path / "g.npz").read_bytes())
    pos = data.rfind(b"labels.npy")
    data[pos + 1] ^= 0x20
    (tmp_path / "r.npz").write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="fails its CRC or header check"):
        load_npz(tmp_path / "r.npz", **SMALL)
