"""Issue 13, defect 3: small files must not blow up memory past the size guard.

Each hostile input is a few KB (the dense ``.npz`` about 1 MB) and declares gigabytes: a
Planetoid graph dict whose keys share one list, a Planetoid feature pickle that asks numpy for a
50000 x 10000 array, a CSR pickle declaring that shape, a gnn-benchmark ``.npz`` whose
compressed zeros or header declare GBs of features, OGB counts of 10^12. Each is refused from
what it declares, before anything of that size is allocated, with one line that names
``--max-memory``. The peak is measured as ``ru_maxrss`` of a fresh ``python -c`` process, over
its own baseline after the imports (the inputs of the issue), or with ``tracemalloc``, which
numpy reports its array allocations to (the other inputs, in this process). Before the fix these
inputs were accepted or failed only after allocating the declared size (5.7 GB, 2.0 GB and
11.4 GB in the issue), there was no ``--max-memory``, and OGB counts ended in a numpy
``MemoryError`` traceback.
"""

from __future__ import annotations

import collections
import functools
import gzip
import io
import json
import pickle
import re
import struct
import subprocess
import sys
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from fleetgnn.cli.main import main
from fleetgnn.errors import DatasetError
from fleetgnn.graph.loaders import load_npz, load_planetoid

sys.path.insert(0, str(Path(__file__).resolve().parent / "graph"))
from test_loaders_npz import _write as _write_npz  # noqa: E402
from test_loaders_ogb import _write_ogb  # noqa: E402
from test_loaders_planetoid import _write_citeseer_like  # noqa: E402

PEAK_MB = 300  # allowed peak RSS over the process's own baseline, in MB
MB = 1 << 20

_RUN = """
import json, resource, sys
import numpy, scipy.sparse
from fleetgnn.errors import FleetgnnError
from fleetgnn.graph import loaders
name, args, kwargs = json.loads(sys.argv[1])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    getattr(loaders, name)(*args, **kwargs)
    msg = None
except FleetgnnError as e:
    msg = str(e)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"msg": msg, "base_kb": base, "peak_kb": peak}))
"""


def _peak(loader: str, *args: object, **kwargs: object) -> tuple[str | None, float]:
    """Run ``loaders.LOADER(*args, **kwargs)`` in a fresh process: its error and peak MB."""
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps([loader, [str(a) for a in args], kwargs])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["msg"], (out["peak_kb"] - out["base_kb"]) / 1024


def _refused(loader: str, *args: object, needles: tuple[str, ...], **kwargs: object) -> float:
    """Assert the loader refuses in one line naming --max-memory and ``needles``; the peak."""
    msg, peak = _peak(loader, *args, **kwargs)
    assert msg is not None and "\n" not in msg, msg
    for needle in ("--max-memory", *needles):
        assert needle in msg, msg
    assert peak < PEAK_MB, f"peak {peak:.0f} MB over baseline: {msg}"
    print(f"peak RSS over baseline: {peak:.1f} MB ({msg})")
    return peak


def _refused_here(call: Callable[[], object], *needles: str) -> None:
    """As :func:`_refused`, in this process, the peak measured by ``tracemalloc``."""
    tracemalloc.start()
    try:
        with pytest.raises(DatasetError) as info:
            call()
        peak = tracemalloc.get_traced_memory()[1] / MB
    finally:
        tracemalloc.stop()
    msg = str(info.value)
    assert "\n" not in msg
    for needle in ("--max-memory", *needles):
        assert needle in msg, msg
    assert peak < PEAK_MB, f"traced peak {peak:.0f} MB: {msg}"


def _dump(obj: object, path: Path) -> None:
    path.write_bytes(pickle.dumps(obj, protocol=2))


# ------------------------------------------------------------------------------------ Planetoid
@pytest.mark.slow
def test_planetoid_graph_sharing_one_list_is_counted_before_building_edges(tmp_path, capsys):
    _write_citeseer_like(tmp_path)  # 530 nodes
    shared = [1] * 10_000  # one list object under every key: 530 x 10000 = 5.3M edges
    graph = collections.defaultdict(list, dict.fromkeys(range(530), shared))
    _dump(graph, tmp_path / "ind.toy.graph")
    assert (tmp_path / "ind.toy.graph").stat().st_size < 30_000
    needles = ("ind.toy.graph", "declares 5300000 edges")
    _refused("load_planetoid", tmp_path, "toy", max_bytes=100 * 10**6, needles=needles)
    # the CLI: one line naming the flag, nothing written
    argv = ["prepare", "planetoid", "--root", str(tmp_path), "--name", "toy"]
    assert main([*argv, "--max-memory", "100MB", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "over --max-memory 100.0 MB" in err[0], err
    assert not (tmp_path / "o").exists()


def _reconstruct_pickle(shape: tuple[int, ...], dtype: str) -> bytes:
    """A protocol-0 pickle calling ``_reconstruct(ndarray, shape, dtype)``: numpy allocates."""
    dims = "".join(f"I{d}\n" for d in shape)
    return (
        f"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n({dims}tS'{dtype}'\ntR."
    ).encode()


@pytest.mark.slow
def test_planetoid_feature_pickle_declaring_a_huge_array_is_refused_while_unpickling(tmp_path):
    _write_citeseer_like(tmp_path)
    data = _reconstruct_pickle((50_000, 10_000), "f4")  # 2.0 GB
    assert len(data) < 100
    (tmp_path / "ind.toy.x").write_bytes(data)
    needles = ("ind.toy.x", "50000 x 10000 float32", "2.0 GB")
    _refused("load_planetoid", tmp_path, "toy", max_bytes=10**9, needles=needles)


def test_planetoid_sparse_features_declaring_a_huge_shape_are_refused_from_it(tmp_path):
    _write_citeseer_like(tmp_path)
    m = sp.csr_matrix((5000, 6), dtype=np.float32)
    m._shape = (5000, 100_000)  # 2.0 GB dense; indptr of 5001 int8 zeros
    m.indptr = m.indptr.astype(np.int8)
    m.indices = m.indices.astype(np.int8)
    _dump(m, tmp_path / "ind.toy.allx")
    assert (tmp_path / "ind.toy.allx").stat().st_size < 10_000
    call = functools.partial(load_planetoid, tmp_path, "toy", max_bytes=10**9)
    _refused_here(call, "ind.toy.allx", "5000 x 100000 features")


def test_planetoid_test_index_declaring_billions_of_nodes_is_refused(tmp_path):
    _write_citeseer_like(tmp_path)
    p = tmp_path / "ind.toy.test.index"
    lines = p.read_text().splitlines()
    lines[0] = str(10**10)  # n = 10^10 + 1 nodes: labels, masks, features
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"declares 10000000001 nodes.*over --max-memory"):
        load_planetoid(tmp_path, "toy", max_bytes=10**9)


def test_planetoid_graph_entries_must_still_be_integers(tmp_path):
    _write_citeseer_like(tmp_path)
    shared = [1, 2.5]
    _dump(dict.fromkeys(range(3), shared), tmp_path / "ind.toy.graph")
    with pytest.raises(DatasetError, match="must be integer node IDs"):
        load_planetoid(tmp_path, "toy")
    _dump({0: [1, True]}, tmp_path / "ind.toy.graph")
    with pytest.raises(DatasetError, match="must be integer node IDs"):
        load_planetoid(tmp_path, "toy")


# ---------------------------------------------------------------------------------------- npz
def _zip(path: Path, members: dict[str, tuple[bytes, int, int]]) -> None:
    """Write a zip of raw-deflate ``members``: name -> (compressed, crc32, uncompressed size)."""
    out = io.BytesIO()
    central = b""
    for name, (comp, crc, usize) in members.items():
        offset = out.tell()
        raw = name.encode()
        out.write(
            struct.pack(
                "<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0x21, crc, len(comp), usize, len(raw), 0
            )
        )
        out.write(raw + comp)
        central += struct.pack(
            "<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 8, 0, 0x21, crc, len(comp), usize,
            len(raw), 0, 0, 0, 0, 0, offset,
        ) + raw  # fmt: skip
    start = out.tell()
    out.write(central)
    n = len(members)
    out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, n, n, len(central), start, 0))
    path.write_bytes(out.getvalue())


def _npy_member(arr: np.ndarray) -> tuple[bytes, int, int]:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    data = buf.getvalue()
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(), zlib.crc32(data), len(data)


def _zeros_member(shape: tuple[int, ...], descr: str) -> tuple[bytes, int, int]:
    """An ``.npy`` member of zeros, deflated without ever holding them: ~1 KB per MB."""
    buf = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    head = buf.getvalue()
    size = int(np.prod(shape)) * np.dtype(descr).itemsize
    assert size % MB == 0
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros = bytes(MB)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    chunk = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)  # the same bytes every time
    comp = first + chunk * (size // MB) + c.flush()
    crc = zlib.crc32(head)
    for _ in range(size // MB):
        crc = zlib.crc32(zeros, crc)
    return comp, crc, len(head) + size


def _graph_members(n: int) -> dict[str, tuple[bytes, int, int]]:
    return {
        "adj_data.npy": _npy_member(np.zeros(0, np.float32)),
        "adj_indices.npy": _npy_member(np.zeros(0, np.int32)),
        "adj_indptr.npy": _npy_member(np.zeros(n + 1, np.int32)),
        "adj_shape.npy": _npy_member(np.array([n, n])),
    }


@pytest.mark.slow
def test_npz_with_compressed_dense_features_is_refused_from_the_header(tmp_path):
    n, f = 16384, 16384  # 1.07 GB of float32 zeros in about 1 MB
    members = {**_graph_members(n), "attr_matrix.npy": _zeros_member((n, f), "<f4")}
    _zip(tmp_path / "bomb.npz", members)
    assert (tmp_path / "bomb.npz").stat().st_size < 1.2e6
    small = {**_graph_members(256), "attr_matrix.npy": _zeros_member((256, 1024), "<f4")}
    _zip(tmp_path / "small.npz", small)  # the same construction, small: a valid file
    assert load_npz(tmp_path / "small.npz", max_bytes=10**8).x.shape == (256, 1024)
    needles = ("bomb.npz", "attr_matrix", "1.1 GB")
    _refused("load_npz", tmp_path / "bomb.npz", max_bytes=500 * 10**6, needles=needles)


def test_npz_sparse_features_declaring_a_huge_shape_are_refused(tmp_path):
    n, f = 20_000, 25_000  # 2.0 GB dense
    members = {
        **_graph_members(n),
        "attr_data.npy": _npy_member(np.zeros(0, np.float32)),
        "attr_indices.npy": _npy_member(np.zeros(0, np.int32)),
        "attr_indptr.npy": _npy_member(np.zeros(n + 1, np.int32)),
        "attr_shape.npy": _npy_member(np.array([n, f])),
    }
    _zip(tmp_path / "s.npz", members)
    assert (tmp_path / "s.npz").stat().st_size < 5_000
    call = functools.partial(load_npz, tmp_path / "s.npz", max_bytes=10**9)
    _refused_here(call, "20000 x 25000 features", "2.0 GB")


def test_npz_array_header_declaring_gigabytes_is_refused_before_reading(tmp_path):
    buf = io.BytesIO()
    header = {"descr": "<i8", "fortran_order": False, "shape": (10**9,)}  # 8 GB, no data
    np.lib.format.write_array_header_1_0(buf, header)
    head = buf.getvalue()
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    members = {
        **_graph_members(4),
        "labels.npy": (c.compress(head) + c.flush(), zlib.crc32(head), len(head)),
    }
    _zip(tmp_path / "h.npz", members)
    with pytest.raises(
        DatasetError, match=r"'labels' declares 1000000000 int64: 8.0 GB.*--max-memory"
    ):
        load_npz(tmp_path / "h.npz", max_bytes=10**9)


def test_npz_dense_features_stream_into_float32(tmp_path):
    rng = np.random.default_rng(0)
    _, _, arrays = _write_npz(tmp_path / "g.npz", n=40, f=5, dense=True)
    for x in (rng.random((40, 5)), np.asfortranarray(rng.random((40, 5)))):
        np.savez_compressed(tmp_path / "d.npz", **{**arrays, "attr_matrix": x})
        g = load_npz(tmp_path / "d.npz", num_train_per_class=3, num_val=5, num_test=7)
        np.testing.assert_array_equal(g.x, x.astype(np.float32))


# ---------------------------------------------------------------------------------------- OGB
def _gz(path: Path, text: str) -> None:
    with gzip.open(path, "wt") as f:
        f.write(text)


@pytest.mark.parametrize(
    ("file", "value", "match"),
    [
        (
            "num-node-list",
            "1000000000000",
            r"num-node-list.csv.gz' declares 10{12} nodes.*--max-memory",
        ),
        ("num-edge-list", "1000000000000", r"num-edge-list.csv.gz' declares 10{12} edges, but"),
        ("num-node-list", "-5", r"num-node-list.csv.gz' must hold exactly one integer >= 0"),
        ("num-edge-list", "2.5", r"num-edge-list.csv.gz', line 1, column 1: cannot parse '2.5'"),
    ],
)
def test_ogb_counts_are_one_line_naming_the_file(tmp_path, capsys, file, value, match):
    _write_ogb(tmp_path / "ogbn_toy")
    _gz(tmp_path / "ogbn_toy" / "raw" / f"{file}.csv.gz", value + "\n")
    argv = ["prepare", "ogb", "--root", str(tmp_path / "ogbn_toy"), "--out", str(tmp_path / "o")]
    assert main([*argv, "--max-memory", "1GB"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fleetgnn prepare: error: "), err
    assert re.search(match, err[0]), err[0]
    assert not (tmp_path / "o").exists()


# -------------------------------------------------------------------------------- legitimate
def test_small_datasets_load_within_a_small_limit_and_are_refused_under_a_tiny_one(
    tmp_path, capsys
):
    (tmp_path / "p").mkdir()
    _write_citeseer_like(tmp_path / "p")
    base = ["planetoid", "--root", str(tmp_path / "p"), "--name", "toy"]
    assert main(["prepare", *base, "--max-memory", "20MB", "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert main(["prepare", *base, "--max-memory", "10KB", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "over --max-memory 10.0 KB" in err[0], err

    _write_npz(tmp_path / "g.npz")
    base = ["npz", "--file", str(tmp_path / "g.npz"), "--num-train-per-class", "3"]
    base += ["--num-val", "5", "--num-test", "7"]
    assert main(["prepare", *base, "--max-memory", "20MB", "--out", str(tmp_path / "c")]) == 0
    capsys.readouterr()
    assert main(["prepare", *base, "--max-memory", "2KB", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "over --max-memory 2.0 KB" in err[0], err

    assert main(["prepare", *base, "--max-memory", "lots", "--out", str(tmp_path / "e")]) == 2
    assert "'--max-memory' must be a byte count" in capsys.readouterr().err
