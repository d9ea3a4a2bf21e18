"""Issue 42, findings 4 to 6: values past a machine's limits, and text inputs read unbounded.

A byte budget no machine holds, a run directory name or path longer than the file system takes,
a ``--pairs`` ID past int64 and ``--pairs`` lines that are not pairs: each one line (exit 2),
never a traceback. The text ``--pairs`` reader works in blocks: a 256 MB line is refused after
one block, in bounded memory.
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from fleetgnn.cli.main import main
from fleetgnn.errors import ConfigError
from fleetgnn.graph import write_dataset
from fleetgnn.graph.pairs import BLOCK_BYTES, MAX_LINE_BYTES, read_pairs
from fleetgnn.graph.synthetic import generate_graph, spec_for
from tests.test_hostile_config import _fleetgnn


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    graph = generate_graph(spec_for("tiny", 0.3), seed=1)
    return write_dataset(graph, tmp_path_factory.mktemp("d") / "tiny")


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    prefix = f"fleetgnn {argv[0]}: error: "
    assert lines[0].startswith(prefix), lines
    return lines[0].removeprefix(prefix)


@pytest.mark.parametrize(
    ("key", "value"), [("store.device_budget", "1e40"), ("store.host_budget", "1e30TB")]
)
def test_a_budget_past_any_machine_is_refused_at_validation(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str
):
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(tiny), "--run-dir", str(run), "--set", f"{key}={value}"]
    assert _one_line(capsys, argv) == (
        f"'{key}' is '{value}', more bytes than any machine holds (at most 2**60, 1 EiB); give "
        f"the memory to use, e.g. '16GB'"
    )
    assert not run.exists()


def test_a_run_directory_name_over_255_bytes_is_one_line(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    run = tmp_path / ("a" * 300)
    for argv in (
        ["train", "--dataset", str(tiny), "--run-dir", str(run), "--quiet"],
        ["train", "--resume", str(run), "--quiet"],
    ):
        assert _one_line(capsys, argv) == (
            f"run directory '{'a' * 32}...' has a name of 300 bytes, more than the 255 a file "
            f"name may have here; pick a shorter --run-dir"
        )


def test_a_run_directory_path_over_4096_bytes_is_one_line(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    run = tmp_path.joinpath(*["b" * 200] * 21)
    length = len(str(run.absolute()).encode())
    assert length > 4096
    argv = ["train", "--dataset", str(tiny), "--run-dir", str(run), "--quiet"]
    assert _one_line(capsys, argv) == (
        f"run directory path is {length} bytes long, and the files inside it would pass the "
        f"4096 bytes a path may have here (at most 4000 for the directory); pick a shorter "
        f"--run-dir"
    )


def _pairs_error(path: Path, num_nodes: int = 300) -> str:
    with pytest.raises(ConfigError) as caught:
        read_pairs(path, num_nodes)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_a_pairs_id_past_int64_is_one_line(tmp_path: Path):
    path = tmp_path / "p.csv"
    path.write_text(f"src,dst\n1,2\n3,{10**23}\n")
    assert _pairs_error(path) == (
        f"--pairs '{path}': node ID {10**23} (line 3) is outside [0, 300): the dataset has 300 "
        f"nodes; use its node IDs"
    )


def test_pairs_lines_that_are_not_pairs_are_refused_past_the_header(tmp_path: Path):
    """Every non-numeric line before the first pair used to be skipped as a header."""
    path = tmp_path / "p.csv"
    path.write_text("src,dst\nfrom,to\n1,2\n")
    assert _pairs_error(path) == (
        f"--pairs '{path}' line 2: 'from,to' is not two integer node IDs (only the first line "
        f"may be a header); give two columns of node IDs (source, destination), one pair per row"
    )
    path.write_text("src,dst\n# comment\n\n1,2\n")  # comments and blank lines are not lines
    np.testing.assert_array_equal(read_pairs(path, 300), [[1, 2]])


def test_a_256mb_pairs_line_is_refused_after_one_block_in_bounded_memory(tmp_path: Path):
    path = tmp_path / "long.csv"
    with open(path, "wb") as f:
        f.write(b"1,2\n")
        f.truncate(4 + (256 << 20))  # sparse: one 256 MB line of NUL bytes, no disk used
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        said = _pairs_error(path)
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert said == (
        f"--pairs '{path}' line 2 is longer than {MAX_LINE_BYTES} bytes, not a pair of node IDs; "
        f"give two columns of node IDs (source, destination), one pair per row"
    )
    assert seconds < 5 and peak < 4 * BLOCK_BYTES, (seconds, peak)


@pytest.mark.parametrize("where", ["line", "token"])
def test_a_1gb_edge_list_line_is_refused_fast_in_bounded_memory(tmp_path: Path, where: str):
    """Issue 42, finding 4: ``prepare edgelist --edge-attr`` on one 1 GB line reached 23.2 GB
    RSS (a 1 GB token 11.6 GB) before its refusal; the reader now stops after 16 MiB of it."""
    path = tmp_path / "edges.txt"
    head = b"0 1 0.5\n" if where == "line" else b"0 1 0.5\n1 2 "
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + (1 << 30))  # sparse: 1 GiB more of one line, no disk used
    args = ["prepare", "edgelist", "--edges", str(path), "--edge-attr"]
    rc, err, seconds, rss = _fleetgnn([*args, "--out", str(tmp_path / "out")], tmp_path)
    assert rc == 2 and err == [
        f"fleetgnn prepare: error: '{path}', line 2: longer than 16 MiB; the file is binary or "
        f"corrupt, or not the text table expected (one row per line)"
    ], err
    assert seconds < 5 and rss < 500_000_000, (seconds, rss)
    assert not (tmp_path / "out").exists()


def test_a_fanout_past_int32_is_refused_at_validation(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """It passed validation and died in the sampler with an OverflowError traceback."""
    argv = ["train", "--dataset", str(tiny), "--run-dir", str(tmp_path / "run"), "--quiet"]
    line = _one_line(capsys, [*argv, "--set", f"train.fanouts=[{10**23}, 5]"])
    assert line == (
        f"train.fanouts=[{10**23}, 5] is invalid: give one fanout per layer, each in [1, "
        f"2147483647] or -1 for all neighbours (e.g. train.fanouts=15,10)"
    )


def test_a_model_too_big_to_allocate_is_one_line(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """``model.hidden=10**12`` was torch's allocator paragraph in a traceback."""
    argv = ["train", "--dataset", str(tiny), "--run-dir", str(tmp_path / "run"), "--quiet"]
    line = _one_line(capsys, [*argv, "--set", f"model.hidden={10**12}"])
    assert line.startswith(
        f"the model (model.name=sage, model.hidden={10**12}, model.num_layers=2) does not fit in "
        f"memory: its parameters could not be allocated ("
    ), line
    assert line.endswith(" bytes at once); lower model.hidden"), line


def test_a_layer_count_far_from_the_fanouts_gives_a_short_example(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """The example listed one fanout per layer: 100000 of them."""
    argv = ["train", "--dataset", str(tiny), "--run-dir", str(tmp_path / "run"), "--quiet"]
    assert _one_line(capsys, [*argv, "--set", "model.num_layers=100000"]) == (
        "train.fanouts=[10, 10] has 2 entries but model.num_layers=100000; in minibatch mode "
        "give one fanout per layer, e.g. train.fanouts=10,10,10,10,10,10,10,10,... (100000 "
        "entries)"
    )


def test_text_pairs_read_in_blocks_match_the_npy_and_name_a_bad_line_past_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Blocks of plain lines are parsed at once, others line by line: both give the pairs the
    ``.npy`` holds, and a bad line deep in the file is named by its number."""
    from fleetgnn.graph import pairs as pairs_mod

    monkeypatch.setattr(pairs_mod, "BLOCK_BYTES", 64)  # many blocks, lines across their edges
    want = np.random.default_rng(0).integers(0, 1000, size=(500, 2))
    lines = [
        "src,dst",
        *(f"{a},{b}" if i % 3 else f" {a}\t{b} # c" for i, (a, b) in enumerate(want)),
    ]
    path = tmp_path / "p.csv"
    path.write_text("\n".join(lines) + "\n")
    np.testing.assert_array_equal(read_pairs(path, 1000), want)
    lines[400] = "7,,8,9"
    path.write_text("\n".join(lines))
    assert _pairs_error(path, 1000) == (
        f"--pairs '{path}' line 401: '7,,8,9' is not two integer node IDs (only the first line "
        f"may be a header); give two columns of node IDs (source, destination), one pair per row"
    )
