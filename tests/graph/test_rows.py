import numpy as np
import pytest

from fleetgnn.graph.rows import RowReader, file_rows


def test_row_reader_reads_a_view_of_a_map_through_the_view(tmp_path):
    """A row slice of a memory map keeps its parent's ``offset``: reading it from the file would
    return the parent's first rows, so a view is indexed as it is (only whole-file maps pread)."""
    a = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=np.float32, shape=(100, 4))
    a[:] = np.arange(400, dtype=np.float32).reshape(100, 4)
    a.flush()
    m = np.load(tmp_path / "a.npy", mmap_mode="r")
    view = m[10:20]
    assert file_rows(m) and not file_rows(view) and not file_rows(np.asarray(m))
    ids = np.array([0, 9, 3, 3])
    reader = RowReader(view)
    assert not reader.reads_file
    np.testing.assert_array_equal(reader.take(ids), m[10 + ids])
    whole = RowReader(tmp_path / "a.npy")  # a path: opened as a map, read with pread
    assert whole.reads_file
    np.testing.assert_array_equal(whole.take(ids + 50), m[ids + 50])
    with pytest.raises(IndexError):
        whole.take(np.array([-1]))
    whole.close()
    whole.close()  # idempotent
    assert not whole.reads_file
