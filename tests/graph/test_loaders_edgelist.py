import gzip

import numpy as np
import pytest

from fleetgnn.errors import DatasetError
from fleetgnn.graph import from_edges
from fleetgnn.graph.loaders import load_edgelist

SMALL = {"num_train_per_class": 2, "num_val": 3, "num_test": 4}


def _naive(text: str, comments="#"):
    """Independent line-by-line parse."""
    src, dst, w = [], [], []
    for line in text.splitlines():
        data = line.split(comments, 1)[0] if comments else line
        toks = data.replace(",", " ").split()
        if not toks:
            continue
        src.append(int(toks[0]))
        dst.append(int(toks[1]))
        if len(toks) == 3:
            w.append(float(toks[2]))
    return np.array(src, np.int64), np.array(dst, np.int64), (np.array(w) if w else None)


TEXT = """# a comment line
0 1
1 2   # trailing comment

2\t0
3 3
0 1
5 4
"""


def test_whitespace_list_with_comments_and_blanks(tmp_path, same_graph):
    p = tmp_path / "g.txt"
    p.write_text(TEXT)
    g = load_edgelist(p)
    s, d, _ = _naive(TEXT)
    same_graph(g, from_edges(s, d, 6))
    assert g.num_nodes == 6 and g.num_edges == 6 and g.name == "g"
    assert g.train_mask is None and g.y is None


def test_comma_separated_weighted_and_gzip(tmp_path, same_graph):
    text = "0,1,0.5\n1, 2 ,2\n# c\n2,0,1e-3\n"
    p = tmp_path / "w.csv.gz"
    with gzip.open(p, "wt") as f:
        f.write(text)
    g = load_edgelist(p)
    s, d, w = _naive(text)
    same_graph(g, from_edges(s, d, 3, edge_weight=w))


def test_undirected_equals_to_undirected(tmp_path, same_graph):
    p = tmp_path / "g.txt"
    p.write_text(TEXT)
    s, d, _ = _naive(TEXT)
    same_graph(load_edgelist(p, undirected=True), from_edges(s, d, 6).to_undirected())


def test_features_labels_and_deterministic_split(tmp_path, same_graph):
    rng = np.random.default_rng(0)
    n = 20
    s, d = rng.integers(0, 12, 50), rng.integers(0, 12, 50)  # nodes 12..19 only in features
    p = tmp_path / "g.txt"
    p.write_text("".join(f"{a} {b}\n" for a, b in zip(s, d, strict=True)))
    x = rng.random((n, 4))
    y = np.arange(n) % 3
    y[0] = -1
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    g = load_edgelist(p, tmp_path / "x.npy", tmp_path / "y.npy", split_seed=7, **SMALL)
    assert g.num_nodes == n and g.num_classes == 3
    np.testing.assert_array_equal(g.x, x)
    np.testing.assert_array_equal(g.y, y)
    tr, va, te = g.train_mask, g.val_mask, g.test_mask
    assert np.bincount(y[tr], minlength=3).tolist() == [2, 2, 2]
    assert (int(va.sum()), int(te.sum())) == (3, 4) and not tr[0] | va[0] | te[0]
    again = load_edgelist(p, tmp_path / "x.npy", tmp_path / "y.npy", split_seed=7, **SMALL)
    same_graph(g, again)
    other = load_edgelist(p, tmp_path / "x.npy", tmp_path / "y.npy", split_seed=8, **SMALL)
    assert (other.train_mask != tr).any() or (other.val_mask != va).any()
    # integer features are cast to float32, [N, 1] labels are accepted
    np.save(tmp_path / "xi.npy", np.ones((n, 2), np.int64))
    np.save(tmp_path / "y1.npy", y[:, None])
    h = load_edgelist(p, tmp_path / "xi.npy", tmp_path / "y1.npy", **SMALL)
    assert h.x.dtype == np.float32
    np.testing.assert_array_equal(h.y, y)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("0 1\n1 2\n2 x\n", r"line 3, column 2: cannot parse 'x' as an integer"),
        ("0 1\n\n1.5 2\n", r"line 3, column 1: cannot parse '1.5'"),
        ("# h\n0 1\n1 2 3\n", r"line 3: expected 2 column\(s\)"),
        ("0 1 1.0\n1 2\n", r"line 2: expected 3 column\(s\)"),
        ("0 1\n1\n", r"line 2: expected 2 column\(s\)"),
        ("0 1\n\n# c\n-1 2\n", r"line 4: source node ID -1 is outside"),
        ("0 1\n2 -7\n", r"line 2: destination node ID -7"),
        ("0 1\n99999999999999999999 2\n", r"line 2, column 1: cannot parse '99999999999999999999'"),
        ("0,1\n1 2\n", r"line 2: expected 2 column\(s\)"),
        ("0 1 nan\n", r"line 1: edge weight nan is not finite"),
        ("0 1 2 3\n", r"line 1: expected 2 columns 'src dst' or 3"),
        ("0 1\n1 1e3\n", r"line 2, column 2: cannot parse '1e3'"),
        ("0 1\n5 1000000000000\n", "such sparse IDs"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, text, match):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(DatasetError, match=match) as exc:
        load_edgelist(p)
    assert "bad.txt" in str(exc.value)


def test_not_utf8_names_the_line(tmp_path):
    p = tmp_path / "bin.txt"
    p.write_bytes(b"0 1\n1 2\n\xff\xfe 3\n")
    with pytest.raises(DatasetError, match="line 3: not UTF-8"):
        load_edgelist(p)


def test_num_nodes_checks_ids_and_rows(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("0 1\n1 4\n")
    assert load_edgelist(p, num_nodes=9).num_nodes == 9
    with pytest.raises(DatasetError, match=r"line 2: destination node ID 4 is outside \[0, 4\)"):
        load_edgelist(p, num_nodes=4)
    np.save(tmp_path / "x.npy", np.zeros((3, 2)))
    with pytest.raises(DatasetError, match="has 3 rows but the graph has 5 nodes"):
        load_edgelist(p, features=tmp_path / "x.npy")
    np.save(tmp_path / "y.npy", np.zeros(5))
    with pytest.raises(DatasetError, match="must be an integer"):
        load_edgelist(p, labels=tmp_path / "y.npy")
    np.save(tmp_path / "o.npy", np.array([None] * 5, dtype=object), allow_pickle=True)
    with pytest.raises(DatasetError, match="pickle is disabled"):
        load_edgelist(p, labels=tmp_path / "o.npy")
    with pytest.raises(DatasetError, match="num_nodes"):
        load_edgelist(p, num_nodes=-1)
    with pytest.raises(DatasetError, match="does not exist"):
        load_edgelist(tmp_path / "missing.txt")


def test_empty_file_gives_empty_graph(tmp_path):
    p = tmp_path / "e.txt"
    p.write_text("# nothing\n\n")
    g = load_edgelist(p)
    assert g.num_nodes == 0 and g.num_edges == 0
    assert load_edgelist(p, num_nodes=3).num_nodes == 3


def test_chunk_boundaries_keep_line_numbers(tmp_path, monkeypatch, same_graph):
    from fleetgnn.graph.loaders import edgelist

    monkeypatch.setattr(edgelist, "_CHUNK_LINES", 4)
    lines = [f"{i} {i + 1}" for i in range(10)]
    lines.insert(3, "")
    lines.insert(6, "# c")
    lines[9] = "9 -2"
    p = tmp_path / "g.txt"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match="line 10: destination node ID -2"):
        load_edgelist(p)
    lines[9] = "9 10"
    p.write_text("\n".join(lines) + "\n")
    s, d, _ = _naive(p.read_text())
    same_graph(load_edgelist(p), from_edges(s, d))


def _labelled(tmp_path, n=12):
    """An edge list over ``n`` nodes with labels ``i % 3`` (node 0 unlabelled)."""
    p = tmp_path / "g.txt"
    p.write_text("".join(f"{i} {(i + 1) % n}\n" for i in range(n)))
    y = np.arange(n) % 3
    y[0] = -1
    np.save(tmp_path / "y.npy", y)
    return p, tmp_path / "y.npy", y


def test_own_split_from_mask_files(tmp_path):
    p, labels, y = _labelled(tmp_path)
    train = np.zeros(12, bool)
    train[[1, 2, 3]] = True
    val = np.zeros(12, np.int64)
    val[[4, 5]] = 1
    np.save(tmp_path / "train.npy", train)
    np.save(tmp_path / "val.npy", val)
    np.save(tmp_path / "test.npy", np.isin(np.arange(12), [6, 7, 8]).astype(np.uint8))
    g = load_edgelist(
        p,
        labels=labels,
        train_mask=tmp_path / "train.npy",
        val_mask=tmp_path / "val.npy",
        test_mask=tmp_path / "test.npy",
    )
    assert np.flatnonzero(g.train_mask).tolist() == [1, 2, 3]
    assert np.flatnonzero(g.val_mask).tolist() == [4, 5]
    assert np.flatnonzero(g.test_mask).tolist() == [6, 7, 8]
    assert g.train_mask.dtype == bool
    # masks not given are empty
    only = load_edgelist(p, labels=labels, train_mask=tmp_path / "train.npy")
    assert not only.val_mask.any() and not only.test_mask.any()


def test_mask_files_are_validated_in_one_line(tmp_path):
    p, labels, y = _labelled(tmp_path)
    ok = np.isin(np.arange(12), [1, 2])
    cases = {
        "short.npy": (np.ones(5, bool), "has 5 entries but the graph has 12 nodes"),
        "float.npy": (np.ones(12), "must be a 1-D bool or 0/1 integer array of length 12"),
        "two.npy": (np.full(12, 2), "holds 2 at node 0; a mask holds only 0/1"),
        "unlab.npy": (np.isin(np.arange(12), [0, 3]), "selects node 0, which is unlabelled"),
        "overlap.npy": (np.isin(np.arange(12), [2, 4]), "both select node 2"),
    }
    np.save(tmp_path / "ok.npy", ok)
    for name, (arr, match) in cases.items():
        np.save(tmp_path / name, arr)
        with pytest.raises(DatasetError, match=match) as exc:
            load_edgelist(
                p, labels=labels, train_mask=tmp_path / "ok.npy", val_mask=tmp_path / name
            )
        assert name in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(DatasetError, match=r"needs labels \(--labels\)"):
        load_edgelist(p, train_mask=tmp_path / "ok.npy")
    with pytest.raises(DatasetError, match=r"without train_mask \(--train-mask\)"):
        load_edgelist(p, labels=labels, test_mask=tmp_path / "ok.npy")
    with pytest.raises(
        DatasetError, match=r"num_train_per_class \(--num-train-per-class\).*one or"
    ):
        load_edgelist(p, labels=labels, train_mask=tmp_path / "ok.npy", num_train_per_class=1)
    with pytest.raises(DatasetError, match=r"num_val \(--num-val\) sets the random split"):
        load_edgelist(p, num_val=1)


def test_too_few_labels_names_the_flag(tmp_path):
    p, labels, _ = _labelled(tmp_path)
    with pytest.raises(DatasetError, match="--num-train-per-class 3") as exc:
        load_edgelist(p, labels=labels)  # 20 per class by default; the classes have 3-4 nodes
    assert "--train-mask" in str(exc.value)
    g = load_edgelist(p, labels=labels, num_train_per_class=2, num_val=2, num_test=3)
    assert np.bincount(g.y[g.train_mask]).tolist() == [2, 2, 2]


def test_edge_attr_columns(tmp_path):
    p = tmp_path / "e.csv"
    p.write_text("# src,dst,a,b\n2,0,0.5,1\n0,1,1.5,2\n1,0,-3,4e2\n")
    g = load_edgelist(p, edge_attr=True)
    want = from_edges(
        [2, 0, 1], [0, 1, 0], 3, edge_attr=np.array([[0.5, 1], [1.5, 2], [-3, 400]], np.float32)
    )
    np.testing.assert_array_equal(g.indices, want.indices)
    np.testing.assert_array_equal(g.edge_attr, want.edge_attr)
    assert g.edge_weight is None and g.edge_attr.dtype == np.float32
    und = load_edgelist(p, edge_attr=True, undirected=True)
    assert und.num_edges == 4 and und.edge_attr.shape == (4, 2)
    p.write_text("0 1 0.5 1\n1 2 nan 3\n")
    with pytest.raises(DatasetError, match="line 2: edge feature nan is not finite"):
        load_edgelist(p, edge_attr=True)
    p.write_text("0 1 0.5 1\n1 2 3\n")
    with pytest.raises(DatasetError, match="line 2"):
        load_edgelist(p, edge_attr=True)
    p.write_text("0 1\n")
    with pytest.raises(DatasetError, match="at least one edge feature column"):
        load_edgelist(p, edge_attr=True)
