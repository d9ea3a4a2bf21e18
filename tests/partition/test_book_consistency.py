"""Issue 30, finding 6: a book rewritten while a run starts. A save swaps a link to a complete new
version, so a reader sees the old book or the new one, never neither (checked at each step of the
swap); a load whose version was replaced while it read reads the new one, and only then reads
again: a corrupt book or one whose arrays do not match the checksum in its ``book.json`` fails at
once. The ranks of a split run compare the checksums of the books they loaded and refuse in one
line when they differ."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from fleetgnn.distributed import Communicator
from fleetgnn.distributed.testing import run_world
from fleetgnn.engines.split import agree_on_book
from fleetgnn.errors import PartitionError
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.partition import PartitionBook, partition
from fleetgnn.partition import book as book_module


@pytest.fixture(scope="module")
def books(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    graph = generate_graph(spec_for("tiny", 0.3), seed=1)
    root = tmp_path_factory.mktemp("books")
    a = partition(graph, "random", 2, seed=1).save_to(root / "a")
    b = partition(graph, "random", 2, seed=2).save_to(root / "b")
    return a, b


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directories :meth:`PartitionBook.load` read, one per attempt."""
    seen: list[Path] = []
    once = PartitionBook._load_once.__func__

    def counted(cls, root: Path, where: Path) -> PartitionBook:
        seen.append(where)
        return once(cls, root, where)

    monkeypatch.setattr(PartitionBook, "_load_once", classmethod(counted))
    return seen


def test_a_torn_read_of_two_books_is_refused_at_once(books, tmp_path, reads):
    a, b = books
    assert PartitionBook.load(a).checksum() != PartitionBook.load(b).checksum()
    mixed = shutil.copytree(a, tmp_path / "mixed")
    for name in ("part_of", "offsets", "perm"):  # the new arrays under the old book.json
        assert np.load(b / f"{name}.npy").shape == np.load(a / f"{name}.npy").shape
        shutil.copy(b / f"{name}.npy", mixed / f"{name}.npy")
    reads.clear()
    with pytest.raises(PartitionError, match="does not match the checksum in its book.json"):
        PartitionBook.load(mixed)
    assert len(reads) == 1  # nothing replaced it while it was read: not read again
    shutil.copy(a / "perm.npy", mixed / "perm.npy")  # a mix of both: inconsistent
    with pytest.raises(PartitionError, match="is invalid"):
        PartitionBook.load(mixed)


def test_a_corrupt_saved_book_fails_without_reading_again(books, tmp_path, reads):
    book = PartitionBook.load(books[0])
    out = book.save_to(tmp_path / "random-2")
    version = out.parent / os.readlink(out)
    data = (version / "perm.npy").read_bytes()
    (version / "perm.npy").write_bytes(data[: len(data) // 2])
    reads.clear()
    with pytest.raises(PartitionError, match="truncated or corrupt") as err:
        PartitionBook.load(out)
    assert reads == [version] and str(out / "perm.npy") in str(err.value)
    assert "\n" not in str(err.value)


def test_a_reader_during_a_swap_sees_the_old_or_the_new_book(books, tmp_path):
    old, new = (PartitionBook.load(p) for p in books)
    out = old.save_to(tmp_path / "random-2")
    seen: dict[str, str] = {}

    def read(step: str) -> None:
        seen[step] = PartitionBook.load(out).checksum()

    new._save(out, True, read)
    assert seen == {"written": old.checksum(), "swapped": new.checksum(), "removed": new.checksum()}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["random-2", os.readlink(out)])


def test_a_version_replaced_while_read_is_read_again(books, tmp_path, reads, monkeypatch):
    """The reader resolved the old version; a whole save (its removal too) ran before it read."""
    old, new = (PartitionBook.load(p) for p in books)
    out = old.save_to(tmp_path / "random-2")
    first = out.parent / os.readlink(out)
    once = book_module.PartitionBook._load_once.__func__  # the counting one

    def swap_first(cls, root: Path, where: Path) -> PartitionBook:
        if where == first:
            new.save_to(out, overwrite=True)
        return once(cls, root, where)

    monkeypatch.setattr(PartitionBook, "_load_once", classmethod(swap_first))
    reads.clear()
    assert PartitionBook.load(out).checksum() == new.checksum()
    assert reads == [first, out.parent / os.readlink(out)] and not first.exists()


def test_a_book_saved_as_a_plain_directory_loads_and_is_replaced(books, tmp_path):
    old, new = (PartitionBook.load(p) for p in books)
    out = shutil.copytree(old.save_to(tmp_path / "v"), tmp_path / "random-2")  # older fleetgnn
    assert not out.is_symlink() and PartitionBook.load(out).checksum() == old.checksum()
    new.save_to(out, overwrite=True)
    assert out.is_symlink() and PartitionBook.load(out).checksum() == new.checksum()
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {"v", os.readlink(tmp_path / "v"), "random-2", os.readlink(out)}


def test_an_interrupted_save_keeps_the_old_book(books, tmp_path, monkeypatch):
    old, new = (PartitionBook.load(p) for p in books)
    out = old.save_to(tmp_path / "random-2")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(book_module, "write_reserved", interrupted)
    with pytest.raises(KeyboardInterrupt):
        new.save_to(out, overwrite=True)
    assert PartitionBook.load(out).checksum() == old.checksum()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["random-2", os.readlink(out)])


def _agree(comm: Communicator, cases: list[list[str]]) -> list[str]:
    said = []
    for paths in cases:
        path = paths[comm.rank]
        try:
            agree_on_book(comm, PartitionBook.load(path), path)
        except PartitionError as e:
            said.append(str(e))
        else:
            said.append("agreed")
    return said


@pytest.mark.slow
def test_ranks_that_loaded_different_books_refuse(books):
    a, b = map(str, books)
    same, different = zip(*run_world(_agree, 2, [[a, a], [a, b]]), strict=True)
    assert same == ("agreed", "agreed")
    for line in different:  # every rank refuses, naming which ranks read which book
        assert "the ranks loaded different partition books" in line, different
        assert "\n" not in line and "ranks [0]" in line and "ranks [1]" in line
