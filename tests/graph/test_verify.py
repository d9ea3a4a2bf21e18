"""Streaming value checks (fleetgnn.graph.verify) and the verification stamp of datasets."""

import os
import shutil
import tracemalloc
import warnings

import numpy as np
import pytest

import fleetgnn.graph.dataset.reader as dataset_mod
from fleetgnn.errors import DatasetError, GraphError
from fleetgnn.graph import Graph, from_edges, open_dataset, write_dataset
from fleetgnn.graph import verify as verify_mod
from fleetgnn.graph.dataset import STAMP, stamp_problem
from fleetgnn.graph.verify import check_values, fingerprint


def _graph(n=400, e=3000, f=8, seed=0, weighted=True):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 5, n)
    y[::7] = -1
    labelled = y >= 0
    ids = np.arange(n)
    return from_edges(
        rng.integers(0, n, e),
        rng.integers(0, n, e),
        n,
        edge_weight=rng.random(e) if weighted else None,
        node_data={
            "x": rng.standard_normal((n, f)).astype(np.float32),
            "y": y,
            "train_mask": labelled & (ids % 3 == 0),
            "val_mask": labelled & (ids % 3 == 1),
            "test_mask": labelled & (ids % 3 == 2),
        },
        num_classes=5,
        name="verify",
    )


@pytest.fixture
def ds(tmp_path):
    return write_dataset(_graph(), tmp_path / "ds")


def _files(root):
    return {p.stem: p for p in root.glob("*.npy")}


def _edit(root, name, fn, keep_mtime=False):
    """Change one array file the way a user would (load, edit, save)."""
    path = root / f"{name}.npy"
    st = path.stat()
    arr = np.load(path)
    fn(arr)
    np.save(path, arr)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


# one corruption per check; (array, edit, message fragment)
CORRUPTIONS = [
    ("indptr", lambda a: a.__setitem__(200, a[199] - 1), r"non-decreasing; indptr\[199\]"),
    ("indices", lambda a: a.__setitem__(2500, 400), r"node ID 400 at edge 2500, outside"),
    ("indices", lambda a: a.__setitem__(17, -3), r"node ID -3 at edge 17"),
    ("y", lambda a: a.__setitem__(301, 999), r"label 999 at node 301, outside the valid interval"),
    ("y", lambda a: a.__setitem__(3, -2), r"label -2 at node 3"),
    (
        "x",
        lambda a: a.__setitem__((350, 6), np.nan),
        r"non-finite value nan at node 350, feature 6",
    ),
    ("edge_weight", lambda a: a.__setitem__(2999, np.inf), r"non-finite value inf at edge 2999"),
    ("val_mask", lambda a: a.__setitem__(3, True), r"'train_mask' and 'val_mask' overlap"),
    ("test_mask", lambda a: a.__setitem__(7, True), r"'test_mask' contains unlabelled nodes"),
    ("train_mask", lambda a: a.view(np.uint8).__setitem__(9, 2), r"byte 2 at node 9, not a bool"),
]


@pytest.mark.parametrize("name, edit, message", CORRUPTIONS)
@pytest.mark.parametrize("block_bytes", [1000, 64 << 20])
def test_streaming_check_finds_each_corruption_where_it_is(ds, name, edit, message, block_bytes):
    check_values(_files(ds), num_classes=5, block_bytes=block_bytes)  # clean: passes
    _edit(ds, name, edit)
    with pytest.raises(GraphError, match=message):
        check_values(_files(ds), num_classes=5, block_bytes=block_bytes)


@pytest.mark.parametrize("name, edit, message", CORRUPTIONS[:-1])  # Graph reads bools as bools
def test_streaming_check_agrees_with_the_in_memory_check(ds, name, edit, message):
    _edit(ds, name, edit)
    arrays = {k: np.load(p) for k, p in _files(ds).items()}
    with pytest.raises(GraphError):
        Graph(**arrays, num_classes=5, validate="full")


def test_streaming_check_memory_is_bounded(tmp_path):
    g = _graph(n=20_000, e=200_000, f=32)  # 2.5 MB of features, 2.4 MB of edges
    out = write_dataset(g, tmp_path / "big")
    block = 64 << 10
    tracemalloc.start()
    try:
        checked = check_values(_files(out), num_classes=5, block_bytes=block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert checked == sum(np.load(p, mmap_mode="r").nbytes for p in _files(out).values())
    assert peak < 3 * block, peak  # a block and its temporaries, not the arrays


def test_progress_reaches_the_total(ds):
    calls = []
    total = check_values(
        _files(ds), num_classes=5, block_bytes=4096, progress=lambda d, t: calls.append((d, t))
    )
    assert len(calls) > 3 and calls[-1] == (total, total)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))


# ---------------------------------------------------------------------------------- the stamp
def _count_checks(monkeypatch):
    calls = []
    real = dataset_mod.check_values

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(dataset_mod, "check_values", counted)
    return calls


def test_writing_records_a_stamp_and_opening_trusts_it(ds, monkeypatch):
    assert (ds / STAMP).is_file()
    names = list(dataset_mod.read_meta(ds)["arrays"])
    assert stamp_problem(ds, names) is None
    checks = _count_checks(monkeypatch)
    open_dataset(ds)
    assert checks == []  # the fingerprints matched: layout only


def test_an_edited_array_is_checked_again_at_open(ds, monkeypatch):
    _edit(ds, "y", lambda a: a.__setitem__(5, 999))
    assert "y.npy" in stamp_problem(ds, list(dataset_mod.read_meta(ds)["arrays"]))
    with pytest.raises(DatasetError, match=r"is invalid: 'y' holds label 999 at node 5"):
        open_dataset(ds)


def test_an_edit_that_keeps_the_modified_time_is_caught_by_the_content_sample(ds, monkeypatch):
    monkeypatch.setattr(verify_mod, "WHOLE_HASH_BYTES", 1024)  # sample pages, like a big file
    write_dataset(_graph(), ds, overwrite=True)
    # x.npy is 12.9 KB: its first page (header and rows 0..) is always sampled
    _edit(ds, "x", lambda a: a.__setitem__((1, 0), np.nan), keep_mtime=True)
    problem = stamp_problem(ds, list(dataset_mod.read_meta(ds)["arrays"]))
    assert problem == "the contents of x.npy differ from those checked"
    with pytest.raises(DatasetError, match="non-finite value nan at node 1"):
        open_dataset(ds)


def test_edited_meta_json_invalidates_the_stamp(ds):
    meta = (ds / "meta.json").read_text().replace('"num_classes": 5', '"num_classes": 3')
    (ds / "meta.json").write_text(meta)
    with pytest.raises(
        DatasetError, match=r"label 3 at node \d+, outside the valid interval \[0, 3\)"
    ):
        open_dataset(ds)


def test_copies_keep_the_stamp_only_with_their_times(ds, tmp_path, monkeypatch):
    names = list(dataset_mod.read_meta(ds)["arrays"])
    kept = shutil.copytree(ds, tmp_path / "cp-a")  # copy2: times kept, like cp -a / rsync -a
    assert stamp_problem(kept, names) is None
    plain = shutil.copytree(ds, tmp_path / "cp", copy_function=shutil.copyfile)
    os.utime(plain / "x.npy", ns=(0, (plain / "x.npy").stat().st_mtime_ns + 10**9))
    assert "modified since" in stamp_problem(plain, names)
    checks = _count_checks(monkeypatch)
    open_dataset(plain)  # checked once, stamp recorded again
    open_dataset(plain)
    assert len(checks) == 1 and stamp_problem(plain, names) is None


def test_a_truncated_copy_is_refused(ds):
    data = (ds / "indices.npy").read_bytes()
    (ds / "indices.npy").write_bytes(data[:-400])
    with pytest.raises(DatasetError, match="truncated or corrupt"):
        open_dataset(ds)


def test_an_unstamped_large_dataset_is_checked_once_with_a_warning(ds, monkeypatch):
    monkeypatch.setattr(dataset_mod, "_FULL_CHECK_LIMIT", 100)
    (ds / STAMP).unlink()  # written by an older fleetgnn
    checks = _count_checks(monkeypatch)
    seen = []
    with pytest.warns(
        UserWarning,
        match=r"checking every value of dataset .* once, because it has no verified.json",
    ):
        open_dataset(ds, progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        open_dataset(ds)
    assert len(checks) == 1 and (ds / STAMP).is_file()


def test_a_stamp_that_cannot_be_written_is_one_warning(ds, monkeypatch):
    monkeypatch.setattr(dataset_mod, "_FULL_CHECK_LIMIT", 100)
    (ds / STAMP).unlink()

    def refuse(path, obj):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(dataset_mod, "write_json_atomic", refuse)
    with pytest.warns(UserWarning) as seen:
        open_dataset(ds)
    texts = [str(w.message) for w in seen]
    assert any("cannot be recorded" in t and "Permission denied" in t for t in texts), texts
    assert not (ds / STAMP).exists()


def test_verify_true_checks_even_a_valid_stamp(ds, monkeypatch):
    checks = _count_checks(monkeypatch)
    open_dataset(ds, validate="full")
    assert len(checks) == 1


def test_fingerprint_is_cheap_and_content_sensitive(tmp_path, monkeypatch):
    p = tmp_path / "a.bin"
    p.write_bytes(bytes(range(256)) * 40_000)  # 10 MB: sampled
    a = fingerprint(p)
    with open(p, "r+b") as f:  # the last page is always sampled
        f.seek(-10, os.SEEK_END)
        f.write(b"x")
    assert fingerprint(p)["sample"] != a["sample"]
    assert fingerprint(p)["bytes"] == a["bytes"]


def test_writer_refuses_invalid_values(tmp_path):
    g = _graph()
    from fleetgnn.graph import DatasetWriter

    with pytest.raises(DatasetError, match="written to .* is invalid: 'y' holds label 7"):
        with DatasetWriter(tmp_path / "w", name="w") as w:
            w.put("indptr", g.indptr)
            w.put("indices", g.indices)
            y = np.array(g.y)
            y[0] = 7
            w.put("y", y)
            w.commit(num_classes=5)
    assert list(tmp_path.iterdir()) == []
