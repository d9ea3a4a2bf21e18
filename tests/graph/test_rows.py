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


def _rss_file_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    pytest.skip("no RssFile in /proc/self/status")


@pytest.mark.parametrize("cached", ["auto", "map", "pread"])
def test_row_reader_ways_read_the_same_rows(tmp_path, cached):
    """Through the mapping or with pread, any order, repeats: exactly ``array[ids]``."""
    a = np.random.default_rng(0).standard_normal((5000, 7)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    reader = RowReader(tmp_path / "a.npy", cached=cached)
    ids = np.random.default_rng(1).integers(0, 5000, 20000)
    ids[:3] = [4999, 0, 4999]
    np.testing.assert_array_equal(reader.take(ids), a[ids])
    np.testing.assert_array_equal(reader.take(np.array([], dtype=np.int64)), a[:0])
    with pytest.raises(IndexError):
        reader.take(np.array([5000]))
    if cached == "map":
        assert (reader.mapped_calls, reader.pread_calls) == (1, 0)
    if cached == "pread":
        assert (reader.mapped_calls, reader.pread_calls) == (0, 1)
    reader.close()


def test_row_reader_maps_cached_rows_and_preads_the_rest(tmp_path, monkeypatch):
    """Per call: dense rows of a file just written (in the page cache) go through the mapping;
    sparse rows, a file large for the machine's memory, or rows the probe finds uncached are
    read with pread."""
    import fleetgnn.graph.rows as rows_mod

    a = np.arange(4096 * 16, dtype=np.int64).reshape(4096, 16)
    np.save(tmp_path / "a.npy", a)
    reader = RowReader(tmp_path / "a.npy")
    if rows_mod._RWF_NOWAIT is None:
        pytest.skip("no RWF_NOWAIT here")
    ids = np.arange(0, 4096, 3)
    assert reader.cached_fraction(np.sort(ids)) == 1.0
    np.testing.assert_array_equal(reader.take(ids), a[ids])
    assert (reader.mapped_calls, reader.pread_calls) == (1, 0)
    sparse = np.array([4095, 0, 2048])  # 3 rows over 128 pages: pread, cached or not
    np.testing.assert_array_equal(reader.take(sparse), a[sparse])
    assert (reader.mapped_calls, reader.pread_calls) == (1, 1)
    monkeypatch.setattr(rows_mod, "MAP_FRACTION", 1e-12)  # a file "near the memory": pread
    np.testing.assert_array_equal(reader.take(ids), a[ids])
    assert (reader.mapped_calls, reader.pread_calls) == (1, 2)
    monkeypatch.undo()
    monkeypatch.setattr(RowReader, "cached_fraction", lambda self, sid: 0.0)
    np.testing.assert_array_equal(reader.take(ids[::-1]), a[ids[::-1]])
    assert (reader.mapped_calls, reader.pread_calls) == (1, 3)
    reader.close()


def test_row_reader_mapping_leaves_no_rows_resident(tmp_path):
    """Rows copied through the mapping are unmapped after each block: reading every row of a
    64 MiB file (shuffled) leaves the process's file-backed RSS within one span (16 MiB) plus
    a 2 MiB extent at each end, not the file."""
    n = (64 << 20) // 512
    np.save(tmp_path / "a.npy", np.ones((n, 128), dtype=np.float32))
    reader = RowReader(tmp_path / "a.npy", cached="map")
    ids = np.random.default_rng(0).permutation(n)
    before = _rss_file_kib()
    out = reader.take(ids)
    grown = _rss_file_kib() - before
    assert out.shape == (n, 128) and float(out[ids[0], 0]) == 1.0
    assert grown < 20 << 10, f"file-backed RSS grew {grown} KiB"
    reader.close()
