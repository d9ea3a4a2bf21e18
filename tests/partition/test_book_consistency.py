"""Issue 30, finding 6: a book rewritten while a run starts. ``book.json`` records a checksum of
the arrays, a load that reads a mix of two books refuses (after reading again), and the ranks of a
split run compare the checksums of the books they loaded and refuse in one line when they differ."""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def books(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    graph = generate_graph(spec_for("tiny", 0.3), seed=1)
    root = tmp_path_factory.mktemp("books")
    a = partition(graph, "random", 2, seed=1).save_to(root / "a")
    b = partition(graph, "random", 2, seed=2).save_to(root / "b")
    return a, b


def test_a_torn_read_of_two_books_is_refused(books, tmp_path):
    a, b = books
    assert PartitionBook.load(a).checksum() != PartitionBook.load(b).checksum()
    mixed = shutil.copytree(a, tmp_path / "mixed")
    for name in ("part_of", "offsets", "perm"):  # the new arrays under the old book.json
        assert np.load(b / f"{name}.npy").shape == np.load(a / f"{name}.npy").shape
        shutil.copy(b / f"{name}.npy", mixed / f"{name}.npy")
    with pytest.raises(PartitionError, match="does not match the checksum in its book.json"):
        PartitionBook.load(mixed)
    shutil.copy(a / "perm.npy", mixed / "perm.npy")  # a mix of both: inconsistent
    with pytest.raises(PartitionError, match="is invalid"):
        PartitionBook.load(mixed)


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
