"""Issue 30, finding 3: data edited after ``prepare`` behind a stamp that still vouches for it.

``verified.json`` turns the full value check off at open; an edit that keeps each file's size and
modification time (or comes with a recomputed stamp, as here) passes it. Values are checked again
where they are used, cheaply: node IDs when a structure is built from ``indices``, labels at the
loss, the loss itself after every step. Each case ends in one line (exit 2), never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fleetgnn.cli.main import main
from fleetgnn.graph import open_dataset, write_dataset
from fleetgnn.graph.dataset import reader as dataset_mod
from fleetgnn.graph.synthetic import generate_graph, spec_for

TRAIN = ["--quiet", "--set", "model.hidden=8", "--epochs", "1"]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    open_dataset(root)  # checked and stamped
    return root


def _edit(root: Path, name: str, pos: int | tuple[int, int], value: float) -> None:
    """Write ``value`` at ``pos`` of ``name.npy`` in place, then stamp the files again."""
    arr = np.load(root / f"{name}.npy", mmap_mode="r+")
    arr[pos] = value
    arr.flush()
    del arr
    names = [p.stem for p in root.glob("*.npy")]
    prints = dataset_mod._fingerprints(root, names)
    dataset_mod.write_json_atomic(root / dataset_mod.STAMP, dataset_mod._stamp(prints, 0.0))
    assert dataset_mod.stamp_problem(root, names) is None  # the stamp vouches for the edit


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"fleetgnn {argv[0]}: error: "), lines
    return lines[0]


@pytest.mark.parametrize("value", [300, -1])
def test_out_of_range_index_is_one_line_in_train_and_partition(data, tmp_path, capsys, value):
    _edit(data, "indices", 100, value)
    says = f"'indices' holds node ID {value} at edge 100, outside the valid interval [0, 300)"
    train = ["train", "--dataset", str(data), "--run-dir", str(tmp_path / "r"), *TRAIN]
    for argv in (
        train,
        ["partition", str(data), "--method", "metis", "--parts", "2", "--no-save"],
        ["partition", str(data), "--method", "ldg", "--parts", "2", "--no-save"],
    ):
        line = _one_line(capsys, argv)
        assert says in line and "--verify" in line, line


def test_out_of_range_label_is_one_line_at_the_loss(data, tmp_path, capsys):
    y = np.load(data / "y.npy")
    train_node = int(np.flatnonzero(np.load(data / "train_mask.npy"))[0])
    assert y.max() < 99
    _edit(data, "y", train_node, 99)
    line = _one_line(
        capsys, ["train", "--dataset", str(data), "--run-dir", str(tmp_path / "r"), *TRAIN]
    )
    assert "'y' holds label 99" in line and "4 classes [0, 4)" in line, line


def test_nan_feature_stops_the_run_at_the_first_non_finite_loss(data, tmp_path, capsys):
    _edit(data, "x", (7, 2), np.nan)
    run = tmp_path / "r"
    line = _one_line(capsys, ["train", "--dataset", str(data), "--run-dir", str(run), *TRAIN])
    assert "the training loss is nan at epoch 0, step 0" in line, line
    assert f"fleetgnn info {data} --verify" in line, line
    # issue 42: the stop is recorded (no epoch ended, so there is no checkpoint to keep)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == "non_finite" and summary["epochs"] == 0, summary
    assert line.endswith(summary["stop_reason"]), (line, summary)
    assert not (run / "checkpoints").exists()


def test_out_of_range_index_under_nproc_2_is_one_line(data, tmp_path, capsys):
    _edit(data, "indices", 100, 300)
    argv = ["train", "--dataset", str(data), "--run-dir", str(tmp_path / "r"), *TRAIN]
    line = _one_line(capsys, [*argv, "--nproc", "2", "--engine", "minibatch"])
    assert "worker failed on rank" in line and "'indices' holds node ID 300" in line, line
