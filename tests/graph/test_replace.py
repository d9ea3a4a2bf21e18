"""Replacing a dataset (``prepare --overwrite``, ``export --overwrite``) while it is read.

``replace_dir`` exchanges the old and new directories in one rename where the file system can
(Linux ``renameat2``), and elsewhere moves the old one aside for a moment; a reader sees the old
dataset or the new one, whole, at every step of the swap. The steps are driven by the writer's
``step`` hook, so each interleaving is exercised exactly, without timing.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pytest

import fleetgnn.graph.dataset.reader as reader_mod
import fleetgnn.graph.dataset.writer as writer_mod
from fleetgnn.errors import DatasetError
from fleetgnn.graph import open_dataset, write_dataset
from fleetgnn.graph.files import exchange_dirs, owner_tag, sweep_stale
from fleetgnn.graph.synthetic import generate_graph, spec_for


def _graphs():
    return [generate_graph(spec_for("tiny", 0.3), seed=s) for s in (1, 2)]


def _same(got, want) -> bool:
    return all(
        np.array_equal(np.asarray(getattr(got, k)), np.asarray(getattr(want, k)))
        for k in ("indptr", "indices", "x", "y")
    )


@pytest.mark.parametrize("how", ["exchange", "aside"])
def test_a_reader_sees_the_old_or_the_new_dataset_at_every_step(how, tmp_path, monkeypatch):
    if how == "exchange":
        a, b = tmp_path / "a", tmp_path / "b"
        a.mkdir(), b.mkdir()
        if not exchange_dirs(a, b):
            pytest.skip("this file system cannot exchange two directories in one rename")
    else:
        monkeypatch.setattr(writer_mod, "exchange_dirs", lambda a, b: False)
    old, new = _graphs()
    out = write_dataset(old, tmp_path / "d")
    seen: dict[str, bool] = {}

    def step(name: str) -> None:
        got = open_dataset(out)
        seen[name] = _same(got, old) if name == "aside" else _same(got, new)

    replace = writer_mod.replace_dir
    monkeypatch.setattr(writer_mod, "replace_dir", functools.partial(replace, step=step))
    write_dataset(new, out, overwrite=True)
    want = {"swapped": True} if how == "exchange" else {"aside": True, "swapped": True}
    assert seen == want
    assert _same(open_dataset(out), new)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "a" and p.name != "b") == ["d"]


def test_a_dataset_replaced_mid_open_is_read_again_whole(tmp_path, monkeypatch):
    """Replaced between reading ``meta.json``/``indptr`` and the other arrays: the first read
    mixes two datasets; the directory's identity changed, so the open starts again."""
    old, new = _graphs()
    out = write_dataset(old, tmp_path / "d")
    load, replaced = reader_mod._load_array, []

    def load_then_replace(root: Path, name: str, spec, mmap: bool):
        arr = load(root, name, spec, mmap)
        if not replaced:
            replaced.append(name)
            write_dataset(new, out, overwrite=True)
        return arr

    monkeypatch.setattr(reader_mod, "_load_array", load_then_replace)
    assert _same(open_dataset(out), new)
    assert len(replaced) == 1  # the first array read came from the old dataset


def test_a_dead_writers_set_aside_dataset_is_no_swap_and_is_swept(tmp_path):
    """A writer killed while the old directory was aside leaves it under its owner's name: a
    reader does not take it for a swap in progress, and the sweep removes it."""
    out = tmp_path / "d"
    aside = tmp_path / f".d.old-999999999-{owner_tag()}-abc"  # above any pid_max: no such process
    write_dataset(_graphs()[0], aside / "old")
    with pytest.raises(DatasetError, match="does not exist"):
        open_dataset(out)
    assert [r.path for r in sweep_stale(tmp_path)] == [aside]
    assert not aside.exists()


def test_a_live_writers_set_aside_dataset_is_read(tmp_path):
    old = _graphs()[0]
    write_dataset(old, tmp_path / f".d.old-{os.getpid()}-{owner_tag()}-abc" / "old")
    assert _same(open_dataset(tmp_path / "d"), old)
