import json
import os
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgnn.errors import FleetgnnError, PartitionError
from fleetgnn.graph import csc as csc_module
from fleetgnn.graph.dataset import open_dataset, write_dataset
from fleetgnn.partition import PartitionBook, book_dir
from fleetgnn.partition import book as book_module


def _naive_book(part_of: np.ndarray, p: int):
    """Independent construction: walk the parts in order, list their nodes in ID order."""
    perm = [v for q in range(p) for v in range(part_of.size) if part_of[v] == q]
    offsets = [0]
    for q in range(p):
        offsets.append(offsets[-1] + sum(1 for v in part_of if v == q))
    return np.array(perm, dtype=np.int64), np.array(offsets, dtype=np.int64)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 40), p=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_from_part_of_matches_naive_and_owner_is_correct(n, p, seed):
    part_of = np.random.default_rng(seed).integers(0, p, n)
    book = PartitionBook.from_part_of(part_of, p, "test")
    perm, offsets = _naive_book(part_of, p)
    assert np.array_equal(book.perm, perm)
    assert np.array_equal(book.offsets, offsets)
    assert book.offsets[0] == 0 and book.offsets[-1] == n
    assert (np.diff(book.offsets) >= 0).all()
    assert np.array_equal(book.inv_perm[book.perm], np.arange(n))
    assert book.part_of.dtype == np.int32 and book.offsets.dtype == np.int64
    # one owner per node; owner() of each new ID is the part of the original node
    for i in range(n):
        q = int(part_of[perm[i]])
        assert offsets[q] <= i < offsets[q + 1]
    new_ids = np.arange(n)
    assert np.array_equal(book.owner(new_ids), part_of[book.perm])
    assert np.array_equal(book.owner_of_original(np.arange(n)), part_of)
    t = book.owner(torch.arange(n, dtype=torch.int32))
    assert isinstance(t, torch.Tensor) and t.tolist() == part_of[book.perm].tolist()
    assert np.array_equal(book.part_sizes(), np.bincount(part_of, minlength=p))
    for q in range(p):
        lo, hi = book.local_range(q)
        assert (part_of[book.perm[lo:hi]] == q).all()
        assert (np.diff(book.perm[lo:hi]) > 0).all()  # stable inside a part
    assert np.array_equal(book.to_new(book.perm), np.arange(n))
    assert np.array_equal(book.to_original(book.inv_perm), np.arange(n))


def test_empty_parts_and_owner_skips_them():
    part_of = np.array([3, 0, 3, 3, 0])
    book = PartitionBook.from_part_of(part_of, 6, "test")
    assert book.part_sizes().tolist() == [2, 0, 0, 3, 0, 0]
    assert book.offsets.tolist() == [0, 2, 2, 2, 5, 5, 5]
    assert book.owner(np.arange(5)).tolist() == [0, 0, 3, 3, 3]
    assert book.local_range(1) == (2, 2)
    assert book.perm.tolist() == [1, 4, 0, 2, 3]


def test_from_offsets_is_contiguous_identity():
    book = PartitionBook.from_offsets(np.array([0, 3, 3, 7]), "range")
    assert book.perm.tolist() == list(range(7))
    assert book.part_of.tolist() == [0, 0, 0, 2, 2, 2, 2]
    with pytest.raises(PartitionError, match="non-decreasing"):
        PartitionBook.from_offsets(np.array([0, 4, 3]), "range")


def test_relabel_is_an_isomorphism(graphs):
    g = graphs.random(5, 30, 150, hub=True)
    part_of = np.random.default_rng(1).integers(0, 4, 30)
    book = PartitionBook.from_part_of(part_of, 4, "test")
    h = book.relabel(g)
    inv = book.inv_perm
    src, dst = g.edges()
    hs, hd = h.edges()
    old = Counter(zip(inv[src].tolist(), inv[dst].tolist(), g.edge_weight.tolist(), strict=True))
    new = Counter(zip(hs.tolist(), hd.tolist(), h.edge_weight.tolist(), strict=True))
    assert old == new
    v = np.arange(30)
    assert np.array_equal(h.x[inv[v]], g.x[v])
    assert np.array_equal(h.y[inv[v]], g.y[v])
    assert np.array_equal(h.train_mask[inv[v]], g.train_mask[v])
    # every part's nodes are a contiguous range in the relabelled graph
    assert np.array_equal(book.owner(v), np.sort(part_of))


def test_relabel_rejects_other_graph(graphs):
    book = PartitionBook.from_part_of(np.zeros(5, np.int32), 1, "test")
    with pytest.raises(PartitionError, match="covers 5 nodes"):
        book.relabel(graphs.random(0, 6, 10))


def test_validation_errors():
    with pytest.raises(PartitionError, match=r"outside the valid interval \[0, 3\)"):
        PartitionBook.from_part_of(np.array([0, 3, 1]), 3, "test")
    with pytest.raises(PartitionError, match="num_parts"):
        PartitionBook.from_part_of(np.array([0]), 0, "test")
    with pytest.raises(PartitionError, match="method"):
        PartitionBook.from_part_of(np.array([0]), 1, "../evil")
    with pytest.raises(PartitionError, match="integer"):
        PartitionBook.from_part_of(np.array([0.5]), 1, "test")
    good = PartitionBook.from_part_of(np.array([1, 0, 1]), 2, "test")
    kw = dict(num_parts=2, part_of=good.part_of, method="test")
    with pytest.raises(PartitionError, match="permutation"):
        PartitionBook(**kw, offsets=good.offsets, perm=np.array([1, 1, 2]), inv_perm=good.inv_perm)
    with pytest.raises(PartitionError, match="disagree"):
        PartitionBook(**kw, offsets=np.array([0, 2, 3]), perm=good.perm, inv_perm=good.inv_perm)
    with pytest.raises(PartitionError, match="lies in the range of part"):
        ident = np.arange(3)
        PartitionBook(**kw, offsets=good.offsets, perm=ident, inv_perm=ident)
    with pytest.raises(PartitionError, match=r"outside the valid interval \[0, 3\)"):
        good.owner(np.array([3]))
    with pytest.raises(PartitionError, match=r"outside the valid interval \[0, 3\)"):
        good.owner(torch.tensor([-1]))
    with pytest.raises(PartitionError, match=r"\[0, 2\)"):
        good.local_range(2)
    assert issubclass(PartitionError, FleetgnnError)


def test_repr_shows_sizes():
    book = PartitionBook.from_part_of(np.array([1, 0, 1]), 2, "metis")
    assert repr(book) == "PartitionBook(method='metis', num_parts=2, num_nodes=3, sizes=[1, 2])"
    big = PartitionBook.from_part_of(np.arange(20) % 10, 10, "hash")
    assert "sizes(min/mean/max)=2/2.0/2" in repr(big)


def _book(seed=0, n=50, p=4):
    part_of = np.random.default_rng(seed).integers(0, p, n)
    return PartitionBook.from_part_of(part_of, p, "metis", params={"seed": seed})


def test_save_load_round_trip(tmp_path):
    book = _book()
    path = book.save(tmp_path / "ds")
    assert (
        path == tmp_path / "ds" / "partitions" / "metis-4" == book_dir(tmp_path / "ds", "metis", 4)
    )
    assert sorted(p.name for p in path.iterdir()) == [
        "book.json",
        "offsets.npy",
        "part_of.npy",
        "perm.npy",
    ]
    for loaded in (
        PartitionBook.load(path),
        PartitionBook.load(tmp_path / "ds", method="metis", num_parts=4),
    ):
        assert loaded.num_parts == 4 and loaded.method == "metis"
        assert loaded.params == {"seed": 0}
        for name in ("part_of", "offsets", "perm", "inv_perm"):
            a, b = getattr(loaded, name), getattr(book, name)
            assert a.dtype == b.dtype and np.array_equal(a, b)
    # no temporary directories next to the book: its link and the one version it points at
    assert path.is_symlink() and sorted(p.name for p in path.parent.iterdir()) == sorted(
        ["metis-4", os.readlink(path)]
    )
    with pytest.raises(PartitionError, match="already exists"):
        book.save(tmp_path / "ds")
    other = _book(seed=1)
    other.save(tmp_path / "ds", overwrite=True)
    assert np.array_equal(PartitionBook.load(path).part_of, other.part_of)
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(["metis-4", os.readlink(path)])


def test_save_of_empty_graph(tmp_path):
    book = PartitionBook.from_part_of(np.zeros(0, np.int32), 3, "range")
    loaded = PartitionBook.load(book.save(tmp_path))
    assert loaded.num_nodes == 0 and loaded.offsets.tolist() == [0, 0, 0, 0]


def _corrupt(path, name):
    if name == "missing json":
        (path / "book.json").unlink()
        return "no book.json"
    if name == "bad json":
        (path / "book.json").write_text("{not json")
        return "not valid JSON"
    if name == "version":
        meta = json.loads((path / "book.json").read_text())
        meta["format_version"] = 99
        (path / "book.json").write_text(json.dumps(meta))
        return "format_version 99"
    if name == "missing array":
        (path / "perm.npy").unlink()
        return "lacks 'perm.npy'"
    if name == "truncated":
        data = (path / "part_of.npy").read_bytes()
        (path / "part_of.npy").write_bytes(data[: len(data) // 2])
        return "truncated or corrupt"
    if name == "dtype":
        np.save(path / "part_of.npy", np.load(path / "part_of.npy").astype(np.int64))
        return "int64"
    if name == "not a permutation":
        perm = np.load(path / "perm.npy")
        perm[0] = perm[1]
        np.save(path / "perm.npy", perm)
        return "invalid"
    if name == "perm out of range":
        perm = np.load(path / "perm.npy")
        perm[0] = 10**6
        np.save(path / "perm.npy", perm)
        return "outside"
    if name == "offsets":
        off = np.load(path / "offsets.npy")
        off[1] += 1
        np.save(path / "offsets.npy", off)
        return "disagree"
    if name == "part ids":
        part = np.load(path / "part_of.npy")
        part[0] = 7
        np.save(path / "part_of.npy", part)
        return "outside the valid interval"
    if name == "node count":
        meta = json.loads((path / "book.json").read_text())
        meta["num_nodes"] = 51
        (path / "book.json").write_text(json.dumps(meta))
        return "51 nodes"
    raise AssertionError(name)


@pytest.mark.parametrize(
    "name",
    [
        "missing json",
        "bad json",
        "version",
        "missing array",
        "truncated",
        "dtype",
        "not a permutation",
        "perm out of range",
        "offsets",
        "part ids",
        "node count",
    ],
)
def test_load_rejects_corrupted_books(tmp_path, name):
    path = _book().save(tmp_path)
    match = _corrupt(path, name)
    with pytest.raises(PartitionError, match=match):
        PartitionBook.load(path)


def test_load_arguments():
    with pytest.raises(PartitionError, match="both 'method' and 'num_parts'"):
        PartitionBook.load("somewhere", method="metis")


# ---------------------------------------------------------------------------------- int32 books
@pytest.mark.parametrize(
    ("n", "p", "block"), [(0, 3, 4), (1, 1, 4), (1000, 7, 64), (5000, 70000, 999)]
)
def test_counting_sort_equals_stable_argsort(monkeypatch, n, p, block):
    """The blocked counting sort gives np.argsort(kind="stable"), in int32 (both key widths)."""
    monkeypatch.setattr(book_module, "_SORT_BLOCK", block)
    rng = np.random.default_rng(n + p)
    part_of = rng.integers(0, p, n)
    part_of[: n // 3] = p - 1  # a run of the last part across blocks, and empty parts
    book = PartitionBook.from_part_of(part_of, p, "test")
    want = np.argsort(part_of, kind="stable")
    assert book.perm.dtype == np.int32 and book.inv_perm.dtype == np.int32
    assert np.array_equal(book.perm, want)
    assert np.array_equal(book.inv_perm[want], np.arange(n))
    ident = PartitionBook.from_offsets(np.array([0, n // 2, n]), "range")
    assert ident.perm.dtype == np.int32 and np.array_equal(ident.perm, np.arange(n))


def test_int32_book_on_disk_and_old_int64_books_load(tmp_path):
    book = _book(n=300)
    path = book.save(tmp_path / "ds")
    assert np.load(path / "perm.npy").dtype == np.int32
    assert json.loads((path / "book.json").read_text())["arrays"]["perm"]["dtype"] == "<i4"
    # a book saved before int32 permutations: int64 perm.npy, book.json saying so
    np.save(path / "perm.npy", np.asarray(book.perm, dtype=np.int64))
    meta = json.loads((path / "book.json").read_text())
    meta["arrays"]["perm"]["dtype"] = "<i8"
    (path / "book.json").write_text(json.dumps(meta))
    old = PartitionBook.load(path)
    assert old.perm.dtype == old.inv_perm.dtype == np.int32
    assert np.array_equal(old.perm, book.perm) and np.array_equal(old.inv_perm, book.inv_perm)
    meta["arrays"]["perm"]["dtype"] = "<i4"  # the file and book.json disagree
    (path / "book.json").write_text(json.dumps(meta))
    with pytest.raises(PartitionError, match="inconsistent"):
        PartitionBook.load(path)


@pytest.mark.parametrize("block", [1, 7, 1 << 22])
def test_part_graph_and_part_rows_are_the_relabelled_part(graphs, tmp_path, monkeypatch, block):
    """One part of relabel(g), read from the original graph (memory-mapped too), bit for bit."""
    monkeypatch.setattr(csc_module, "_PERMUTE_BLOCK_EDGES", block)
    monkeypatch.setattr(csc_module, "_PERMUTE_BLOCK_NODES", max(1, block // 2))
    g = graphs.random(3, 40, 300, hub=True)
    mapped = open_dataset(write_dataset(g, tmp_path / "ds"))
    book = PartitionBook.from_part_of(np.random.default_rng(2).integers(0, 3, 40), 3, "test")
    whole = book.relabel(g)
    topo = book.relabel(mapped, node_data=False)
    assert topo.x is None and topo.y is None and topo.train_mask is None
    for name in ("indptr", "indices", "edge_weight"):
        assert np.array_equal(getattr(topo, name), getattr(whole, name))
    for q in range(3):
        lo, hi = book.local_range(q)
        for source in (g, mapped):
            part = book.part_graph(source, q)
            assert part.num_nodes == 40 and part.x is None
            assert np.array_equal(
                part.indptr[lo : hi + 1] - part.indptr[lo],
                whole.indptr[lo : hi + 1] - whole.indptr[lo],
            )
            assert part.indptr[lo] == 0 and part.indptr[-1] == part.indptr[hi]
            e0, e1 = whole.indptr[lo], whole.indptr[hi]
            assert np.array_equal(part.indices, whole.indices[e0:e1])
            assert np.array_equal(part.edge_weight, whole.edge_weight[e0:e1])
            rows = book.part_rows(source, q)
            assert rows.num_nodes == hi - lo and rows.num_edges == 0
            for name in ("x", "y", "train_mask"):
                got, want = getattr(rows, name), getattr(whole, name)[lo:hi]
                assert got.dtype == want.dtype and np.array_equal(got, want)
                assert not isinstance(got, np.memmap)
    with pytest.raises(PartitionError, match=r"'part' must lie in \[0, 3\)"):
        book.part_graph(g, 3)
    with pytest.raises(PartitionError, match="covers 40 nodes"):
        book.part_rows(graphs.random(0, 6, 10), 0)
