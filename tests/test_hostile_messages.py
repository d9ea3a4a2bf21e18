"""Issue 42, finding 6: messages that misled, each now naming what it found.

A ``--dataset`` that exists but is not a directory, an array file that is a FIFO, a directory or a
link to ``/dev/zero``, an array file numpy could read only as a pickle (its advice to load it with
``allow_pickle`` is never passed on), and a bad ``FLEETGNN_KERNELS`` entry said once per run, not
once per process.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from fleetgnn import kernels
from fleetgnn.cli.main import main
from fleetgnn.graph import write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for

DATASET_FIX = "give the directory 'fleetgnn prepare' wrote"
ARRAY_FIX = "the dataset's arrays are files 'fleetgnn prepare' writes: re-create the dataset"


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "tiny")


def _train_error(capsys: pytest.CaptureFixture[str], data: Path, run: Path) -> str:
    assert main(["train", "--dataset", str(data), "--run-dir", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("fleetgnn train: error: "), lines
    return lines[0].removeprefix("fleetgnn train: error: ")


@pytest.mark.parametrize("kind", ["device", "fifo", "file"])
def test_a_dataset_that_is_not_a_directory_says_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
):
    path = tmp_path / "data"
    if kind == "device":
        path = Path("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("x")
    what = {"device": "a character device", "fifo": "a FIFO (named pipe)", "file": "a regular file"}
    line = _train_error(capsys, path, tmp_path / "run")
    assert line == f"dataset directory '{path}' is {what[kind]}, not a directory; {DATASET_FIX}"
    assert _train_error(capsys, tmp_path / "nothing", tmp_path / "run") == (
        f"dataset directory '{tmp_path / 'nothing'}' does not exist; create one with "
        f"'fleetgnn prepare'"
    )


@pytest.mark.parametrize("kind", ["fifo", "directory", "dev-zero"])
def test_an_array_file_that_is_not_a_file_says_what_it_is(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
):
    (tiny / "verified.json").unlink(missing_ok=True)
    y = tiny / "y.npy"
    y.unlink()
    if kind == "fifo":
        os.mkfifo(y)
        what = "a FIFO (named pipe)"
    elif kind == "directory":
        y.mkdir()
        what = "a directory"
    else:
        y.symlink_to("/dev/zero")
        what = "a character device (a symbolic link to '/dev/zero')"
    line = _train_error(capsys, tiny, tmp_path / "run")
    assert line == f"'{y}' is {what}, not a regular .npy file; {ARRAY_FIX}"


@pytest.mark.parametrize("target", ["pickle", "passwd"])
def test_an_array_file_numpy_would_unpickle_is_refused_without_its_advice(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
):
    """``x.npy`` linked to a pickle (or to any text file): numpy's error suggests loading it with
    ``allow_pickle``, which would run the code a pickle holds; docs/safety.md says never."""
    source = tmp_path / "other"
    if target == "pickle":
        source.write_bytes(pickle.dumps({"a": 1}))
    else:
        source.write_text("root:x:0:0:root:/root:/bin/bash\n")
    x = tiny / "x.npy"
    x.unlink()
    x.symlink_to(source)
    line = _train_error(capsys, tiny, tmp_path / "run")
    assert line == (
        f"'{x}' cannot be read (it is not a .npy array: numpy could read it only as a Python "
        f"pickle, which can run code and is refused); the file is truncated or corrupt, or not "
        f"the one 'fleetgnn prepare' wrote: re-create the dataset"
    )
    assert "allow_pickle" not in line


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, True),
        ({"RANK": "0"}, True),
        ({"RANK": "1"}, False),
        ({"FLEETGNN_READY_DIR": "/x"}, False),
    ],
)
def test_a_bad_kernels_entry_is_reported_by_one_process_of_a_run(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], says: bool
):
    for key in ("RANK", "FLEETGNN_READY_DIR"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        kernels._apply_env("garbage")
    assert [str(w.message) for w in seen] == (
        [
            "FLEETGNN_KERNELS entry 'garbage' ignored: write op:device=name "
            "(e.g. gather_rows:cuda=wide)"
        ]
        if says
        else []
    )


@pytest.mark.slow
def test_a_bad_kernels_entry_at_nproc_2_is_one_line(tiny: Path, tmp_path: Path):
    env = {**os.environ, "FLEETGNN_KERNELS": "garbage", "OMP_NUM_THREADS": "1"}
    argv = ["train", "--dataset", str(tiny), "--run-dir", str(tmp_path / "run"), "--quiet"]
    argv += ["--epochs", "1", "--nproc", "2", "--engine", "minibatch"]
    done = subprocess.run(
        [sys.executable, "-m", "fleetgnn", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = [ln for ln in done.stderr.splitlines() if "FLEETGNN_KERNELS" in ln]
    assert said == [
        "fleetgnn train: warning: FLEETGNN_KERNELS entry 'garbage' ignored: write op:device=name "
        "(e.g. gather_rows:cuda=wide)"
    ], done.stderr[-3000:]


def test_a_nan_under_bf16_names_the_mixed_precision_first(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """The NaN stop's advice under ``train.autocast=bf16`` pointed only at 'info --verify', which
    passes on finite features; a bfloat16 forward is named first."""
    import torch

    from fleetgnn.engines import common

    def poisoned(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, target, reduction="none") * float("nan")

    monkeypatch.setattr(common, "cross_entropy", poisoned)
    argv = ["train", "--dataset", str(tiny), "--run-dir", str(tmp_path / "run"), "--quiet"]
    assert main([*argv, "--set", "train.autocast=bf16", "--engine", "reference"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(
        "fleetgnn train: error: the training loss is nan at epoch 0, step 0; the run is stopped: "
        "likely the bfloat16 forward (train.autocast=bf16) overflowing or losing precision: try "
        "train.autocast=null; else non-finite values in the features or edge weights"
    ), line


def test_an_edited_typed_meta_says_what_num_nodes_should_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """It said 'num_nodes = 1940 is invalid: 1805'."""
    import json

    data = tmp_path / "mag"
    prepare = ["prepare", "synthetic", "--preset", "mag-like", "--scale", "0.005"]
    assert main([*prepare, "--out", str(data)]) == 0
    meta = json.loads((data / "meta.json").read_text())
    total = sum(meta["schema"]["num_nodes"])
    meta["num_nodes"] = total - 7
    (data / "meta.json").write_text(json.dumps(meta))
    capsys.readouterr()
    line = _train_error(capsys, data, tmp_path / "run")
    assert line == (
        f"'{data / 'meta.json'}': num_nodes = {total - 7} is invalid: expected {total}, the sum "
        f"of schema.num_nodes; the file is corrupt or was not written by fleetgnn, re-create the "
        f"dataset with 'fleetgnn prepare'"
    )


def test_node_classification_on_an_edge_list_without_labels_says_what_trains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """A label-less edge list said 'training needs both' (labels and a train_mask) for any
    task, link prediction included, which reads neither; node classification now says what it
    needs and that link prediction trains on the dataset, and link prediction trains."""
    import numpy as np

    rng = np.random.default_rng(0)
    np.savetxt(tmp_path / "e.txt", rng.integers(0, 200, size=(1000, 2)), fmt="%d")
    np.save(tmp_path / "x.npy", rng.normal(size=(200, 8)).astype(np.float32))
    prepare = ["prepare", "edgelist", "--edges", str(tmp_path / "e.txt")]
    prepare += ["--features", str(tmp_path / "x.npy")]
    assert main([*prepare, "--out", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    train = ["train", "--epochs", "1", "--quiet", "--dataset", str(tmp_path / "d")]
    assert main([*train, "--run-dir", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip() == (
        "fleetgnn train: error: dataset 'e' has no labels (y); node classification trains on "
        "labels and a train_mask: prepare it with them (e.g. 'fleetgnn prepare edgelist "
        "--labels FILE'), or train link prediction (--task link), which reads neither"
    )
    assert main([*train, "--task", "link", "--run-dir", str(tmp_path / "r2")]) == 0


def test_an_input_file_that_is_a_device_or_fifo_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """``prepare edgelist --edges`` and ``--pairs`` said 'does not exist or is not a file'."""
    from fleetgnn.errors import ConfigError
    from fleetgnn.graph.pairs import read_pairs

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((Path("/dev/zero"), "a character device"), (fifo, "a FIFO (named pipe)")):
        assert (
            main(["prepare", "edgelist", "--edges", str(path), "--out", str(tmp_path / "o")]) == 2
        )
        assert capsys.readouterr().err.strip() == (
            f"fleetgnn prepare: error: edge list '{path}' is {kind}, not a regular file; check "
            f"the path and the dataset layout"
        )
        with pytest.raises(ConfigError) as caught:
            read_pairs(path, 10)
        assert str(caught.value).startswith(f"--pairs '{path}' is {kind}, not a regular file; ")


def test_a_run_directory_that_is_a_file_says_so(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    run = tmp_path / "run"
    run.write_text("x")
    assert _train_error(capsys, tiny, run) == (
        f"run directory '{run}' cannot be created (it is a regular file, not a directory); "
        f"pick another --run-dir"
    )
    assert run.read_text() == "x"  # left as it was


def test_an_array_past_the_largest_file_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    """``prepare synthetic --scale 1e9`` reached the file system's largest file (EFBIG) and
    printed an OSError traceback; it is one line naming the size and what to do."""
    import errno

    def too_large(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    monkeypatch.setattr(os, "posix_fallocate", too_large)
    out = tmp_path / "big"
    argv = ["prepare", "synthetic", "--preset", "tiny", "--scale", "0.3", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "more than the file system" in lines[0] and "(File too large)" in lines[0]
    assert "a smaller size or scale" in lines[0]
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".big")]


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["train", "--set", "train.batch_size=0"], "train.batch_size=0 is invalid: must be an int"),
        (["train", "--set", "train.eval_every=0"], "train.eval_every=0 is invalid"),
        (["train", "--set", "train.checkpoint_every=-3"], "train.checkpoint_every=-3 is invalid"),
        (["train", "--set", "model.hidden=-5"], "model.hidden=-5 is invalid"),
        (["train", "--set", "optim.lr=abc"], "optim.lr='abc' has type str, expected float"),
        (["train", "--nproc", "-2"], "train.nproc=-2 is invalid: must be >= 1"),
        (["train", "--resume", "runs/nowhere"], "no config.yaml there"),
        (["prepare", "synthetic", "--scale", "-1", "--out", "x"], "must be a finite number > 0"),
        (["plan", "--dataset", "/dev/zero"], "is a character device, not a directory"),
        (["bench", "--only", "nonsense"], "unknown section 'nonsense'"),
    ],
)
def test_careless_commands_are_one_line_each(
    argv: list[str],
    expect: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
):
    """Careless values and paths (tried while rerunning the safety list; they held): exit 2 and
    one line naming the key or path, before any data is read or any worker starts."""
    if argv[0] == "train" and "--resume" not in argv:
        argv = [*argv, "--run-dir", str(tmp_path / "run")]
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert expect in lines[0], lines[0]
