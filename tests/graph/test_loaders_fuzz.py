"""Fuzz tests: every loader either returns the graph an independent parse gives, or raises a
FleetgnnError; never another exception, never a hang."""

import collections
import gzip
import pickle
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetgnn.errors import FleetgnnError
from fleetgnn.graph import Graph, from_edges, open_dataset
from fleetgnn.graph.loaders import load_edgelist, load_npz, load_planetoid, prepare_ogb

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
NO_SPLIT = {"num_train_per_class": 0, "num_val": 0, "num_test": 0}
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


# ---------------------------------------------------------------------------------- edge lists
def _reference_edgelist(data: bytes):
    """Independent strict parse of the documented format; None where it must be refused."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    rows, delim, ncols = [], None, None
    for line in text.split("\n"):
        body = line.split("#", 1)[0]
        if not body.strip():
            continue
        if ncols is None:
            delim = "," if "," in body else None
        toks = [t.strip() for t in body.split(",")] if delim else body.split()
        if ncols is None:
            ncols = len(toks)
            if ncols not in (2, 3):
                return None
        if len(toks) != ncols or not all(_INT.fullmatch(t) for t in toks[:2]):
            return None
        s, d = int(toks[0]), int(toks[1])
        if not (-(2**63) <= s < 2**63 and -(2**63) <= d < 2**63) or s < 0 or d < 0:
            return None
        w = None
        if ncols == 3:
            if not _FLOAT.fullmatch(toks[2]) or not np.isfinite(float(toks[2])):
                return None
            w = float(toks[2])
        rows.append((s, d, w))
    src = np.array([r[0] for r in rows], dtype=np.int64)
    dst = np.array([r[1] for r in rows], dtype=np.int64)
    n = int(max(src.max(), dst.max())) + 1 if rows else 0
    if n > 64 * 2 * len(rows) + 2**24:  # the documented sparse-ID guard
        return None
    weight = np.array([r[2] for r in rows], dtype=np.float64) if ncols == 3 else None
    return from_edges(src, dst, n, edge_weight=weight)


TOKENS = st.one_of(
    st.integers(0, 40).map(str),
    st.sampled_from(
        [
            "-1",
            "-0",
            "+3",
            "007",
            "1.5",
            "2.",
            ".5",
            "1e3",
            "nan",
            "inf",
            "x",
            "",
            "0x1",
            "99999999999999999999",
            "9223372036854775807",
            "123456789012",
            "1_0",
            "\u0663",
        ]
    ),
)
SEP = st.sampled_from([" ", "\t", ",", " , ", "  ", ";", "\x0c"])
LINE = st.one_of(
    st.builds(
        lambda toks, sep, tail: sep.join(toks) + tail,
        st.lists(TOKENS, min_size=1, max_size=4),
        SEP,
        st.sampled_from(["", " ", "\r", " # note", "#", "\t"]),
    ),
    st.builds(  # mostly well-formed lines with odd separators, weights and IDs
        lambda s, d, w, sep: sep.join([s, d] + w),
        TOKENS,
        st.integers(0, 40).map(str),
        st.sampled_from([[], [], ["0.5"], ["nan"], ["-2e3"], ["inf"]]),
        SEP,
    ),
    st.sampled_from(["", "# comment", "   ", "\r"]),
    st.binary(max_size=6).map(lambda b: b.decode("latin-1")),
)


@FUZZ
@given(lines=st.lists(LINE, max_size=12), raw=st.binary(max_size=4), crlf=st.booleans())
def test_edgelist_text_fuzz(tmp_path, lines, raw, crlf, same_graph):
    data = ("\r\n" if crlf else "\n").join(lines).encode("utf-8", "surrogatepass") + raw
    p = tmp_path / "fuzz.txt"
    p.write_bytes(data)
    ref = _reference_edgelist(data)
    try:
        g = load_edgelist(p)
    except FleetgnnError:
        return
    assert ref is not None, f"accepted input the format refuses: {data!r}"
    same_graph(g, ref)


@FUZZ
@given(
    edges=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=40),
    weights=st.none() | st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False),
    sep=st.sampled_from([" ", "\t", ",", " , ", "   "]),
    junk=st.lists(st.sampled_from(["", "# c", "  ", "#1 2"]), max_size=5),
    crlf=st.booleans(),
)
def test_well_formed_edgelists_always_load(tmp_path, edges, weights, sep, junk, crlf, same_graph):
    body = [
        sep.join([str(s), str(d)] + ([repr(weights + i)] if weights is not None else []))
        for i, (s, d) in enumerate(edges)
    ]
    lines = junk + body if edges else junk
    data = ("\r\n" if crlf else "\n").join(lines).encode()
    p = tmp_path / "ok.txt"
    p.write_bytes(data)
    same_graph(load_edgelist(p), _reference_edgelist(data))


ARRAYS = st.builds(
    lambda shape, dtype: np.ones(shape, dtype=dtype) if dtype != "O" else np.full(shape, None),
    st.lists(st.integers(0, 6), max_size=3).map(tuple),
    st.sampled_from([np.float32, np.float64, np.int64, np.int8, np.bool_, np.complex64, "U2", "O"]),
)


@FUZZ
@given(x=st.none() | ARRAYS, y=st.none() | ARRAYS, nan=st.booleans())
def test_features_and_labels_of_any_shape(tmp_path, x, y, nan, same_graph):
    p = tmp_path / "e.txt"
    p.write_text("0 1\n1 2\n")
    kw = {}
    if x is not None:
        if nan and x.dtype.kind == "f" and x.size:
            x.flat[0] = np.nan
        np.save(tmp_path / "x.npy", x, allow_pickle=True)
        kw["features"] = tmp_path / "x.npy"
    if y is not None:
        np.save(tmp_path / "y.npy", y, allow_pickle=True)
        kw["labels"] = tmp_path / "y.npy"
    yy = y[:, 0] if y is not None and y.ndim == 2 and y.shape[1] == 1 else y
    n = max([3] + [a.shape[0] for a in (x, yy) if a is not None and a.ndim >= 1])
    ok = (x is None or (x.ndim == 2 and x.dtype.kind in "biuf" and x.shape[0] == n)) and (
        yy is None or (yy.ndim == 1 and yy.dtype.kind in "iu" and yy.shape[0] == n)
    )
    ok = ok and not (x is not None and x.dtype.kind == "f" and not np.isfinite(x).all())
    if not ok:
        with pytest.raises(FleetgnnError):
            load_edgelist(p, **kw, **NO_SPLIT)
        return
    g = load_edgelist(p, **kw, **NO_SPLIT)
    data = {}
    if x is not None:
        data["x"] = x if x.dtype.kind == "f" else x.astype(np.float32)
    if yy is not None:
        data["y"] = yy.astype(np.int64)
        data.update({k: np.zeros(n, bool) for k in ("train_mask", "val_mask", "test_mask")})
    same_graph(g, from_edges(np.array([0, 1]), np.array([1, 2]), n, node_data=data))


# ---------------------------------------------------------------------------------- damaged files
def _damage(data: bytes, cut: int, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data[: cut % (len(data) + 1)])
    for pos, val in flips:
        if out:
            out[pos % len(out)] ^= val
    return bytes(out)


DAMAGE = {
    "cut": st.integers(0, 10**6),
    "flips": st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=2),
}


@pytest.fixture(scope="module")
def ogb_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("ogb") / "ogbn_fuzz"
    rng = np.random.default_rng(0)
    n, e = 17, 300
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    files = {
        "raw/edge.csv.gz": [f"{a},{b}" for a, b in zip(src, dst, strict=True)],
        "raw/num-node-list.csv.gz": [n],
        "raw/num-edge-list.csv.gz": [e],
        "raw/node-label.csv.gz": (np.arange(n) % 3).tolist(),
        "split/s/train.csv.gz": [0, 1, 2],
        "split/s/valid.csv.gz": [3, 4],
        "split/s/test.csv.gz": [5, 6, 7],
    }
    for rel, lines in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(root / rel, "wt") as f:
            f.write("".join(f"{v}\n" for v in lines))
    masks = {
        k: np.isin(np.arange(n), ids)
        for k, ids in (("train_mask", [0, 1, 2]), ("val_mask", [3, 4]), ("test_mask", [5, 6, 7]))
    }
    ref = from_edges(src, dst, n, node_data={"y": np.arange(n) % 3, **masks})
    return root, ref


@FUZZ
@given(
    target=st.sampled_from(["raw/edge.csv.gz", "raw/node-label.csv.gz", "split/s/test.csv.gz"]),
    **DAMAGE,
)
def test_damaged_ogb_gzip(ogb_root, target, cut, flips, same_graph):
    root, ref = ogb_root
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "r"
        shutil.copytree(root, work)
        p = work / target
        p.write_bytes(_damage(p.read_bytes(), cut, flips))
        try:
            out = prepare_ogb(work, Path(tmp) / "ds", chunk_rows=64)
        except FleetgnnError:
            assert not (Path(tmp) / "ds").exists()
            return
        same_graph(open_dataset(out), ref)  # only header bytes were hit: the content is intact


@pytest.fixture(scope="module")
def npz_file(tmp_path_factory):
    rng = np.random.default_rng(1)
    n = 30
    a = sp.random(n, n, density=0.15, random_state=1, format="csr")
    a.data[:] = 1.0
    x = sp.csr_matrix(rng.random((n, 4)) * (rng.random((n, 4)) < 0.5))
    arrays = {
        "adj_data": a.data,
        "adj_indices": a.indices,
        "adj_indptr": a.indptr,
        "adj_shape": np.array(a.shape),
        "attr_data": x.data,
        "attr_indices": x.indices,
        "attr_indptr": x.indptr,
        "attr_shape": np.array(x.shape),
        "labels": np.arange(n) % 3,
    }
    path = tmp_path_factory.mktemp("npz") / "g.npz"
    np.savez(path, **arrays)
    return path, arrays


def _npz_reference(arrays):
    a = sp.csr_matrix(
        (arrays["adj_data"], arrays["adj_indices"], arrays["adj_indptr"]), arrays["adj_shape"]
    )
    sym = ((a != 0) + (a != 0).T).astype(np.int8).tolil()
    sym.setdiag(0)
    c = sym.tocsc()
    c.eliminate_zeros()
    c.sort_indices()
    data = {}
    if "attr_data" in arrays:
        data["x"] = (
            sp.csr_matrix(
                (arrays["attr_data"], arrays["attr_indices"], arrays["attr_indptr"]),
                arrays["attr_shape"],
            )
            .toarray()
            .astype(np.float32)
        )
    if "labels" in arrays:
        data["y"] = arrays["labels"].astype(np.int64)
        data.update(
            {k: np.zeros(c.shape[0], bool) for k in ("train_mask", "val_mask", "test_mask")}
        )
    return Graph(indptr=c.indptr.astype(np.int64), indices=c.indices.astype(np.int32), **data)


@FUZZ
@given(**DAMAGE)
def test_damaged_npz(npz_file, cut, flips, same_graph):
    path, arrays = npz_file
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "d.npz"
        p.write_bytes(_damage(path.read_bytes(), cut, flips))
        try:
            g = load_npz(p, **NO_SPLIT)
        except FleetgnnError:
            return
        same_graph(g, _npz_reference(arrays))  # zip CRCs guard the content


MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "adj_data",
                "adj_indices",
                "adj_indptr",
                "adj_shape",
                "attr_data",
                "attr_indices",
                "attr_indptr",
                "attr_shape",
                "labels",
            ]
        ),
        st.sampled_from(["drop", "longer", "shorter", "text", "2d"]),
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda m: m[0],
)


@FUZZ
@given(mutations=MUTATIONS)
def test_npz_missing_keys_and_inconsistent_shapes(npz_file, mutations, same_graph):
    _, base = npz_file
    arrays = dict(base)
    for key, how in mutations:
        v = arrays[key]
        if how == "drop":
            del arrays[key]
        elif how == "longer":
            arrays[key] = np.concatenate([v, v[-1:]])
        elif how == "shorter":
            arrays[key] = v[:-1]
        elif how == "text":
            arrays[key] = v.astype(str)
        else:
            arrays[key] = v.reshape(-1, 1)
    # only dropping 'labels' or the whole attr_* group leaves a consistent file
    attr = [k for k in base if k.startswith("attr_")]
    benign = (
        all(how == "drop" and not k.startswith("adj_") for k, how in mutations)
        and len({k in arrays for k in attr}) == 1
    )
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "m.npz"
        np.savez(p, **arrays)
        if not benign:
            with pytest.raises(FleetgnnError):
                load_npz(p, **NO_SPLIT)
            return
        same_graph(load_npz(p, **NO_SPLIT), _npz_reference(arrays))


@pytest.fixture(scope="module")
def planetoid_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("planetoid")
    rng = np.random.default_rng(2)
    n_train, n_all, n_test, f, c = 3, 505, 6, 4, 2
    objs = {
        "x": sp.csr_matrix(rng.random((n_train, f))),
        "y": np.eye(c, dtype=np.int32)[np.arange(n_train) % c],
        "allx": sp.csr_matrix(rng.random((n_all, f))),
        "ally": np.eye(c, dtype=np.int32)[np.arange(n_all) % c],
        "tx": sp.csr_matrix(rng.random((n_test, f))),
        "ty": np.eye(c, dtype=np.int32)[np.arange(n_test) % c],
        "graph": collections.defaultdict(list, {i: [(i + 1) % 511] for i in range(511)}),
    }
    for k, v in objs.items():
        with open(root / f"ind.fz.{k}", "wb") as fh:
            pickle.dump(v, fh, protocol=2)
    (root / "ind.fz.test.index").write_text("".join(f"{i}\n" for i in range(505, 511)))
    return root, load_planetoid(root, "fz")


@FUZZ
@given(
    part=st.sampled_from(["x", "tx", "allx", "ty", "graph", "test.index"]),
    cut=st.integers(0, 10**5),
    tail=st.binary(max_size=3),
)
def test_truncated_planetoid_pickles(planetoid_dir, part, cut, tail, same_graph):
    root, ref = planetoid_dir
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for f in root.iterdir():
            shutil.copy(f, work / f.name)
        p = work / f"ind.fz.{part}"
        data = p.read_bytes()
        full = cut % (len(data) + 1) == len(data)
        p.write_bytes(data[: cut % (len(data) + 1)] + (tail if full else b""))
        try:
            g = load_planetoid(work, "fz")
        except FleetgnnError:
            assert not full or part == "test.index"  # junk after a pickle's STOP is ignored
            return
        assert full or part == "test.index"  # a truncated pickle never loads
        same_graph(g, ref)  # and a cut test.index only loads if it kept every number intact
