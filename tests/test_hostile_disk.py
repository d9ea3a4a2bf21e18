"""Issue 13, defects 1 and 9: a full disk is one line, and files get the user's umask.

A full disk cannot be made without root (no tmpfs mount), so ENOSPC is simulated where the space
is reserved (``os.posix_fallocate``) or written (``os.pwrite``, ``np.save``). Before the fix,
arrays were written through sparse memory maps with nothing reserved (SIGBUS on a real full
disk, and these tests' simulated ENOSPC never happened), checkpoint and partition saves ended in
tracebacks, and datasets were created 0700/0600.
"""

from __future__ import annotations

import errno
import os
import pickle
import re
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from packaging.requirements import Requirement

from fleetgnn.cli.main import main
from fleetgnn.errors import DiskFullError
from fleetgnn.graph import open_dataset, write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train.checkpoint import CheckpointDir, load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
DISK_FULL = re.compile(
    r"no space left on '.+'.*: writing '.+' \(\d+ bytes\) failed; \d+ bytes free"
)


def _enospc(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _unsupported(*args: object, **kwargs: object) -> None:
    raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))


def _one_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"fleetgnn {command}: error: "), err
    return err[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(
        generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path_factory.mktemp("d") / "tiny"
    )


def _prepare(out: Path) -> int:
    return main(["prepare", "synthetic", "--preset", "tiny", "--scale", "0.3", "--out", str(out)])


def test_prepare_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "posix_fallocate", _enospc, raising=False)
    assert _prepare(tmp_path / "d") == 2
    line = _one_line(capsys, "prepare")
    assert DISK_FULL.search(line), line
    assert "--out" in line
    assert list(tmp_path.iterdir()) == []  # no dataset, no temporary directory


def test_edgelist_prepare_on_a_full_disk(tmp_path, monkeypatch, capsys):
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 0\n")
    monkeypatch.setattr(os, "posix_fallocate", _enospc, raising=False)
    out = tmp_path / "out" / "d"
    assert main(["prepare", "edgelist", "--edges", str(edges), "--out", str(out)]) == 2
    assert DISK_FULL.search(_one_line(capsys, "prepare"))
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("how", ["absent", "unsupported"])
def test_without_fallocate_space_is_written_not_sparse(tmp_path, monkeypatch, capsys, how):
    if how == "absent":
        monkeypatch.delattr(os, "posix_fallocate", raising=False)
    else:
        monkeypatch.setattr(os, "posix_fallocate", _unsupported, raising=False)
    assert _prepare(tmp_path / "d") == 0
    g = open_dataset(tmp_path / "d")
    assert g.num_nodes > 0
    x = tmp_path / "d" / "x.npy"
    if hasattr(os.stat(x), "st_blocks"):  # every byte has its block: no hole to fault on
        assert os.stat(x).st_blocks * 512 >= os.stat(x).st_size
    # and when those writes find the disk full, it is the same one line
    monkeypatch.setattr(os, "pwrite", _enospc)
    assert _prepare(tmp_path / "e") == 2
    capsys.readouterr()
    assert not [p for p in tmp_path.iterdir() if p.name != "d"]


def test_checkpoint_save_on_a_full_disk_keeps_the_previous_one(tmp_path, monkeypatch):
    d = CheckpointDir(tmp_path / "checkpoints")
    d.save({"w": torch.ones(3), "step": 1})
    monkeypatch.setattr(os, "posix_fallocate", _enospc, raising=False)
    with pytest.raises(DiskFullError) as info:
        d.save({"w": torch.zeros(1000), "step": 2}, best=True)
    msg = str(info.value)
    assert DISK_FULL.search(msg) and "\n" not in msg
    need = int(re.search(r"' \((\d+) bytes\) failed", msg).group(1))
    assert need > 4000  # the serialized checkpoint's size
    monkeypatch.undo()
    assert load_checkpoint(d.last)["step"] == 1
    assert sorted(p.name for p in d.directory.iterdir()) == ["last.pt"]  # no .tmp left


def test_train_on_a_full_disk_is_one_line(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "posix_fallocate", _enospc, raising=False)
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(tiny), "--epochs", "1", "--run-dir", str(run)]
    assert main([*argv, "--quiet", "--set", "model.hidden=8"]) == 2
    line = _one_line(capsys, "train")
    assert DISK_FULL.search(line) and "--resume" in line
    assert [p.name for p in (run / "checkpoints").iterdir()] == []


def _short_write(*args: object, **kwargs: object) -> None:
    raise OSError("2708 requested and 2016 written")  # numpy's tofile on a full disk: no errno


@pytest.mark.parametrize("method", ["range", "metis", "ldg"])
def test_partition_on_a_full_disk_is_one_line(tiny, monkeypatch, capsys, method):
    """Issue 30, finding 5: a full disk (a short write, or ENOSPC) is one line for every method."""
    monkeypatch.setattr(np, "save", _short_write)
    monkeypatch.setattr(os, "posix_fallocate", _enospc, raising=False)
    argv = ["partition", str(tiny), "--method", method, "--parts", "2", "--json"]
    assert main(argv) == 2
    line = _one_line(capsys, "partition")
    assert DISK_FULL.search(line) and "--no-save" in line
    parts = tiny / "partitions"
    assert not parts.exists() or list(parts.iterdir()) == []


def test_datasets_get_the_users_umask(tmp_path, capsys):
    old = os.umask(0o027)
    try:
        assert _prepare(tmp_path / "d") == 0
        assert main(["partition", str(tmp_path / "d"), "--method", "hash", "--parts", "2"]) == 0
    finally:
        os.umask(old)
    capsys.readouterr()
    d = tmp_path / "d"
    book = d / "partitions" / "hash-2"
    for path in (d, book):
        assert stat.S_IMODE(path.stat().st_mode) == 0o750, path
    for path in [*d.glob("*.npy"), d / "meta.json", *book.iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o640, path


def test_torch_requirement_excludes_the_weights_only_bypass():
    text = (ROOT / "pyproject.toml").read_text()
    (req,) = [Requirement(r) for r in re.findall(r'^\s*"(torch[<>=!~, .0-9]*)"', text, re.M)]
    assert not req.specifier.contains("2.5.1")  # CVE-2025-32434
    assert req.specifier.contains("2.6.0") and req.specifier.contains("2.13.0")


def test_disk_full_message_never_contradicts_itself():
    """Issue 30, finding 9: "needs 4.9 MB, 20.9 MB free" after the partial files were removed."""
    err = DiskFullError("'/data' (/dev/sdb ext4)", 4_900_000, 1_000, "free some space", "/d/x.npy")
    assert str(err) == (
        "no space left on '/data' (/dev/sdb ext4): writing '/d/x.npy' (4900000 bytes) failed; "
        "1000 bytes free; free some space"
    )
    err.update_free(20_900_000)
    msg = str(err)
    assert (
        "20900000 bytes free now that the partial files are removed (enough for this write " in msg
    )
    assert "took the space while it ran); free some space" in msg and "\n" not in msg
    assert str(pickle.loads(pickle.dumps(err))) == msg  # as a worker reports it
