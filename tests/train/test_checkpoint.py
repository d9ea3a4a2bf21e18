import random
from pathlib import Path

import numpy as np
import pytest
import torch

import fleetgnn.train.checkpoint as ckmod
from fleetgnn.errors import FleetgnnError
from fleetgnn.train.checkpoint import (
    CheckpointDir,
    CheckpointError,
    capture_rng,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)


def _state(v: float) -> dict:
    return {
        "w": torch.full((3, 2), v, dtype=torch.float64),
        "step": 7,
        "nested": {"lr": 0.1, "names": ["a", "b"], "none": None, "pair": (1, 2.5)},
    }


def _assert_state(s: dict, v: float) -> None:
    assert torch.equal(s["w"], torch.full((3, 2), v, dtype=torch.float64))
    assert s["step"] == 7 and s["nested"]["names"] == ["a", "b"] and s["nested"]["none"] is None


def test_save_load_round_trip(tmp_path: Path) -> None:
    p = save_checkpoint(tmp_path / "a" / "c.pt", _state(1.5))
    assert p == tmp_path / "a" / "c.pt"
    _assert_state(load_checkpoint(p), 1.5)
    assert [f.name for f in p.parent.iterdir()] == ["c.pt"]  # no temp files left


class _Custom:
    pass


def test_load_is_weights_only(tmp_path: Path) -> None:
    p = tmp_path / "evil.pt"
    torch.save({"obj": _Custom()}, p)  # loadable only with full unpickling
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(p)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_checkpoint_clear_error(tmp_path: Path, damage: str) -> None:
    p = save_checkpoint(tmp_path / "c.pt", _state(2.0))
    data = p.read_bytes()
    if damage == "truncate":
        p.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        p.write_bytes(b"\x00not a checkpoint" * 10)
    else:
        p.write_bytes(b"")
    with pytest.raises(FleetgnnError) as e:
        load_checkpoint(p)
    assert isinstance(e.value, CheckpointError)
    assert str(p) in str(e.value) and "truncated or corrupt" in str(e.value)


def test_missing_and_non_dict(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="holds a list, expected a dict"):
        load_checkpoint(tmp_path / "list.pt")


def _failing_torch_save(monkeypatch: pytest.MonkeyPatch) -> None:
    real = torch.save

    def boom(obj: object, f: object, *a: object, **k: object) -> None:
        real({"partial": torch.zeros(1000)}, f)  # some bytes reach the temp file first
        raise OSError("No space left on device")

    monkeypatch.setattr(ckmod.torch, "save", boom)


def test_failed_save_keeps_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = save_checkpoint(tmp_path / "c.pt", _state(1.0))
    _failing_torch_save(monkeypatch)
    with pytest.raises(OSError, match="No space"):
        save_checkpoint(p, _state(2.0))
    monkeypatch.undo()
    _assert_state(load_checkpoint(p), 1.0)
    assert [f.name for f in tmp_path.iterdir()] == ["c.pt"]


def test_checkpoint_dir_retention(tmp_path: Path) -> None:
    d = CheckpointDir(tmp_path / "checkpoints")
    assert d.load_latest() is None
    for v in (1.0, 2.0, 3.0):
        d.save(_state(v))
    _assert_state(load_checkpoint(d.last), 3.0)
    _assert_state(load_checkpoint(d.prev), 2.0)
    _assert_state(d.load_latest(), 3.0)
    assert sorted(f.name for f in d.directory.iterdir()) == ["last.pt", "prev.pt"]


def test_checkpoint_dir_failed_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = CheckpointDir(tmp_path)
    d.save(_state(1.0))
    d.save(_state(2.0))
    _failing_torch_save(monkeypatch)
    with pytest.raises(OSError):
        d.save(_state(3.0))
    monkeypatch.undo()
    _assert_state(load_checkpoint(d.last), 2.0)
    _assert_state(load_checkpoint(d.prev), 1.0)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["last.pt", "prev.pt"]


def test_checkpoint_dir_crash_between_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = CheckpointDir(tmp_path)
    d.save(_state(1.0))
    d.save(_state(2.0))
    real = ckmod.os.replace
    calls = []

    def replace(src: object, dst: object) -> None:
        calls.append(dst)
        if len(calls) == 2:  # last -> prev done, tmp -> last "crashes"
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(ckmod.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        d.save(_state(3.0))
    monkeypatch.undo()
    assert not d.last.exists()
    _assert_state(d.load_latest(), 2.0)  # the newest complete checkpoint survives


def test_checkpoint_dir_falls_back_to_prev(tmp_path: Path) -> None:
    d = CheckpointDir(tmp_path)
    d.save(_state(1.0))
    d.save(_state(2.0))
    d.last.write_bytes(d.last.read_bytes()[:50])
    with pytest.warns(UserWarning, match="previous checkpoint"):
        _assert_state(d.load_latest(), 1.0)
    d.prev.write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="no loadable checkpoint"):
        d.load_latest()
    d.clear()
    assert d.load_latest() is None


def _draws() -> tuple:
    return (
        [random.random() for _ in range(3)],
        random.gauss(0, 1),
        np.random.rand(4).tolist(),  # noqa: NPY002
        np.random.standard_normal(),  # noqa: NPY002
        torch.rand(5, dtype=torch.float64).tolist(),
        torch.randint(0, 1 << 30, (3,)).tolist(),
    )


def test_rng_round_trip_through_weights_only_file(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)  # noqa: NPY002
    torch.manual_seed(3)
    random.gauss(0, 1)  # leaves a cached gaussian in python's state
    np.random.standard_normal()  # noqa: NPY002 (and in numpy's)
    st = capture_rng()
    save_checkpoint(tmp_path / "rng.pt", {"rng": st})
    expected = _draws()
    _draws()  # move every generator on
    restore_rng(load_checkpoint(tmp_path / "rng.pt")["rng"])
    assert _draws() == expected
    restore_rng(st)
    assert _draws() == expected


def test_rng_restore_malformed() -> None:
    st = capture_rng()
    del st["numpy"]
    with pytest.raises(CheckpointError, match="RNG state.*malformed"):
        restore_rng(st)


def test_best_is_the_same_checkpoint_and_survives_later_saves(tmp_path: Path) -> None:
    d = CheckpointDir(tmp_path / "ck")
    d.save(_state(1.0))
    assert not d.best.exists()
    d.save(_state(2.0), best=True)
    _assert_state(load_checkpoint(d.best), 2.0)
    _assert_state(load_checkpoint(d.last), 2.0)
    d.save(_state(3.0))  # not a better epoch: best.pt keeps the state it had
    d.save(_state(4.0))
    _assert_state(load_checkpoint(d.best), 2.0)
    _assert_state(d.load_latest(), 4.0)
    assert sorted(p.name for p in d.directory.iterdir()) == ["best.pt", "last.pt", "prev.pt"]
    d.clear()
    assert list(d.directory.iterdir()) == []


def test_best_without_hard_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(src: object, dst: object) -> None:
        raise OSError("hard links not supported")

    monkeypatch.setattr(ckmod.os, "link", no_links)
    d = CheckpointDir(tmp_path)
    d.save(_state(5.0), best=True)
    _assert_state(load_checkpoint(d.best), 5.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]


def test_failed_best_save_keeps_previous_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = CheckpointDir(tmp_path)
    d.save(_state(1.0), best=True)
    real = ckmod.os.replace

    def failing(src: object, dst: object) -> None:
        if Path(dst).name == "best.pt":
            raise OSError("disk full")
        real(src, dst)

    monkeypatch.setattr(ckmod.os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        d.save(_state(2.0), best=True)
    monkeypatch.undo()
    _assert_state(load_checkpoint(d.best), 1.0)
    _assert_state(d.load_latest(), 1.0)  # best.pt goes first: last.pt is not ahead of it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]
