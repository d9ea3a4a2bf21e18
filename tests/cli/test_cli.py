import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fleetgnn.cli.main import main
from fleetgnn.graph import open_dataset
from fleetgnn.partition import PartitionBook


def _json_out(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.fixture
def tiny(tmp_path):
    out = tmp_path / "tiny"
    assert main(["prepare", "synthetic", "--preset", "tiny", "--seed", "3", "--out", str(out)]) == 0
    return out


def test_info_json_contract(tiny, capsys):
    capsys.readouterr()
    info = _json_out(capsys, ["info", str(tiny), "--json"])
    g = open_dataset(tiny)
    for key in ("num_nodes", "num_edges", "num_features", "num_classes"):
        assert info[key] == getattr(g, key)
    assert info["num_train"] == int(g.train_mask.sum())
    assert info["num_val"] == int(g.val_mask.sum())
    assert info["num_test"] == int(g.test_mask.sum())
    assert info["in_degree"]["max"] == int(g.in_degrees().max())
    assert info["preset"] == "tiny" and info["seed"] == 3


@pytest.mark.parametrize("method", ["range", "hash", "random", "metis"])
def test_partition_json_and_saved_book(tiny, capsys, method):
    capsys.readouterr()
    res = _json_out(capsys, ["partition", str(tiny), "--method", method, "--parts", "3", "--json"])
    for key in ("edge_cut", "local_edge_ratio", "replication_factor", "part_nodes", "part_edges"):
        assert key in res
    g = open_dataset(tiny)
    book = PartitionBook.load(Path(res["saved_to"]))
    assert book.num_parts == 3 and book.method == method
    assert sum(res["part_nodes"]) == g.num_nodes
    src, dst = g.edges()
    cut = int(np.count_nonzero(book.part_of[src] != book.part_of[dst]))
    assert res["edge_cut"] == cut
    assert res["local_edge_ratio"] == pytest.approx(1 - cut / g.num_edges)
    info = _json_out(capsys, ["info", str(tiny), "--json"])
    assert f"{method}-3" in info["partitions"]


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["info", "/nonexistent/dir"], "does not exist"),
        (["prepare", "synthetic", "--preset", "nope", "--out", "{tmp}/x"], "valid presets"),
        (["prepare", "npz", "--file", "{tmp}/missing.npz", "--out", "{tmp}/y"], "missing.npz"),
        (["partition", "{tiny}", "--method", "range", "--parts", "0"], "parts"),
        (["partition", "{tiny}", "--parts", "100000"], "choose --parts between 1 and "),
    ],
)
def test_user_errors_one_line_exit_2(argv, fragment, tmp_path, tiny, capsys):
    argv = [a.format(tmp=tmp_path, tiny=tiny) for a in argv]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_verbose_shows_traceback(capsys):
    assert main(["info", "/nonexistent/dir", "--verbose"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_prepare_refuses_existing_output(tiny, capsys):
    assert main(["prepare", "synthetic", "--preset", "tiny", "--out", str(tiny)]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_prepare_planetoid_cora_counts(tmp_path, capsys):
    out = tmp_path / "cora"
    argv = ["prepare", "planetoid", "--name", "cora"]  # no --root: the Cora that ships
    assert main([*argv, "--out", str(out)]) == 0
    capsys.readouterr()
    info = _json_out(capsys, ["info", str(out), "--json"])
    assert (info["num_nodes"], info["num_features"], info["num_classes"]) == (2708, 1433, 7)
    assert info["num_edges"] == 10556
    assert (info["num_train"], info["num_val"], info["num_test"]) == (140, 500, 1000)


@pytest.mark.slow
def test_console_script_entry_point(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fleetgnn.cli.main", "info", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("fleetgnn info: error:")


def test_prepare_edgelist_split_flags(tmp_path, capsys):
    """The flags the split errors refer to exist: the random split's knobs and own masks."""
    n = 12
    edges = tmp_path / "g.txt"
    edges.write_text("".join(f"{i} {(i + 1) % n}\n" for i in range(n)))
    np.save(tmp_path / "y.npy", np.arange(n) % 3)
    base = ["prepare", "edgelist", "--edges", str(edges), "--labels", str(tmp_path / "y.npy")]
    capsys.readouterr()
    assert main([*base, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "--num-train-per-class 4" in err and len(err.strip().splitlines()) == 1
    knobs = ["--num-train-per-class", "2", "--num-val", "3", "--num-test", "3"]
    assert main([*base, *knobs, "--split-seed", "1", "--out", str(tmp_path / "b")]) == 0
    g = open_dataset(tmp_path / "b")
    assert [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)] == [6, 3, 3]
    masks = {}
    for name, ids in (("train", [0, 1, 2]), ("val", [3, 4]), ("test", [5])):
        masks[name] = tmp_path / f"{name}.npy"
        np.save(masks[name], np.isin(np.arange(n), ids))
    own = [f"--{k}-mask={v}" for k, v in masks.items()]
    assert main([*base, *own, "--out", str(tmp_path / "c")]) == 0
    g = open_dataset(tmp_path / "c")
    assert [np.flatnonzero(m).tolist() for m in (g.train_mask, g.val_mask, g.test_mask)] == [
        [0, 1, 2],
        [3, 4],
        [5],
    ]
    capsys.readouterr()
    np.save(tmp_path / "bad.npy", np.ones(5, bool))
    assert main([*base, f"--train-mask={tmp_path / 'bad.npy'}", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "bad.npy" in err and "5 entries" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()


def test_info_degree_statistics_from_blocks_equal_numpy_on_the_degrees():
    """`info` summarises in-degrees from a histogram built in blocks (no per-node array): the
    figures equal NumPy's on the degree array itself, for odd and even counts and any block."""
    from fleetgnn.cli.report import _summary, degree_histogram

    rng = np.random.default_rng(0)
    for n, block in [(1, 1), (2, 1), (3, 2), (1000, 7), (4097, 4096)]:
        deg = rng.zipf(1.8, size=n) % 257
        indptr = np.concatenate([[0], np.cumsum(deg)])
        got = _summary(degree_histogram(indptr, block=block))
        assert got["min"] == deg.min() and got["max"] == deg.max()
        assert got["mean"] == pytest.approx(deg.mean(), abs=1e-12)
        assert got["median"] == pytest.approx(float(np.median(deg)), abs=1e-12)
        assert got["p99"] == pytest.approx(float(np.percentile(deg, 99)), abs=1e-12)
    assert _summary(degree_histogram(np.zeros(1, np.int64)))["max"] == 0  # no nodes


def test_prepare_names_what_ships_when_a_dataset_does_not(tmp_path, capsys):
    """Only Cora ships: another name without --root (or --file) is one line saying so."""
    argv = ["prepare", "planetoid", "--name", "citeseer", "--out", str(tmp_path / "c")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bundled: cora" in err and "--root" in err
    assert main(["prepare", "npz", "--name", "pubmed", "--out", str(tmp_path / "p")]) == 2
    assert "--file" in capsys.readouterr().err
    assert not (tmp_path / "c").exists() and not (tmp_path / "p").exists()


def test_partition_refuses_to_overwrite_a_saved_book(tmp_path, capsys):
    """Like prepare's --out: a saved book is replaced only with --overwrite."""
    from fleetgnn.graph import write_dataset
    from fleetgnn.graph.synthetic import generate_graph, spec_for

    data = write_dataset(generate_graph(spec_for("tiny", 0.2), seed=1), tmp_path / "d")
    argv = ["partition", str(data), "--method", "range", "--parts", "2", "--json"]
    assert main(argv) == 0
    book = data / "partitions" / "range-2"
    before = {p.name: p.stat().st_mtime_ns for p in book.iterdir()}
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--overwrite" in err and str(book) in err
    assert {p.name: p.stat().st_mtime_ns for p in book.iterdir()} == before
    assert main([*argv, "--overwrite"]) == 0
    assert main([*argv, "--no-save"]) == 0


def test_prepare_edgelist_edge_attr(tmp_path, capsys):
    """--edge-attr: the columns after 'src dst' become edge_attr, aligned with the CSC edges."""
    edges = tmp_path / "g.txt"
    rows = [(0, 1, 0.5, -1.0), (2, 1, 1.5, 2.0), (1, 2, 2.5, 3.25), (2, 0, 4.0, 0.0)]
    edges.write_text("# src dst a1 a2\n" + "".join(f"{s},{d},{a},{b}\n" for s, d, a, b in rows))
    assert (
        main(
            [
                "prepare",
                "edgelist",
                "--edges",
                str(edges),
                "--edge-attr",
                "--out",
                str(tmp_path / "a"),
            ]
        )
        == 0
    )
    g = open_dataset(tmp_path / "a")
    assert g.edge_attr.dtype == np.float32 and g.edge_attr.shape == (4, 2)
    src, dst = g.edges()
    want = {(s, d): (a, b) for s, d, a, b in rows}
    got = {(int(s), int(d)): tuple(r.tolist()) for s, d, r in zip(src, dst, g.edge_attr)}
    assert got == want


@pytest.mark.parametrize(
    "text, flag, fragment",
    [
        (
            "0 1 0.5 1\n1 2 0.5\n",
            True,
            "line 2: expected 4 column(s) 'src dst' and 2 edge features, found 3",
        ),
        ("0 1 0.5 1\n1 2 x 2\n", True, "line 2, column 3: cannot parse 'x' as a number"),
        ("0 1 0.5 1\n1 2 nan 2\n", True, "line 2: edge feature nan is not finite"),
        ("0 1\n1 2\n", True, "at least one edge feature column (found 2 columns)"),
        (
            "0 1 0.5 1\n",
            False,
            "edge features after 'src dst' need edge_attr (prepare --edge-attr)",
        ),
    ],
    ids=["columns", "non-numeric", "nan", "no-features", "flag-missing"],
)
def test_prepare_edgelist_edge_attr_errors_one_line(tmp_path, capsys, text, flag, fragment):
    edges = tmp_path / "g.txt"
    edges.write_text(text)
    argv = ["prepare", "edgelist", "--edges", str(edges), "--out", str(tmp_path / "o")]
    capsys.readouterr()
    assert main(argv + (["--edge-attr"] if flag else [])) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()
