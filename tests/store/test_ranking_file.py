import mmap

import numpy as np
import torch

from fleetgnn.graph.csc import from_edges
from fleetgnn.store import TierBudgets, UnifiedStore
from fleetgnn.store import hotness as P


def _graph(n=3000, e=20000, seed=0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    return from_edges(src, dst, num_nodes=n, node_data={"x": x})


def _mapped(a: np.ndarray) -> bool:
    """Whether ``a`` is a view of an ``mmap`` (``np.frombuffer`` holds it through a memoryview)."""
    base = a.base.obj if isinstance(a.base, memoryview) else a.base
    return isinstance(base, mmap.mmap)


def _ranking_maps() -> list[str]:
    """This process's mappings of (unlinked) ranking files, from ``/proc/self/maps``."""
    with open("/proc/self/maps") as f:
        return [line for line in f if ".ranking." in line and "(deleted)" in line]


def test_large_ranking_lives_in_an_unlinked_file_mapping(monkeypatch, tmp_path):
    """From RANKING_FILE_BYTES on, order, rank_of and the score are shared mappings of unlinked
    files in TMPDIR (no file left in it), equal to the in-memory ranking; the store reads
    through it."""
    g = _graph()
    small = P.hotness_order(g)
    assert not _mapped(small.order)  # below the threshold: memory
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(P.tempfile, "tempdir", None)  # re-read TMPDIR
    monkeypatch.setattr(P, "RANKING_FILE_BYTES", 1024)
    monkeypatch.setattr(P, "_PLAN_BLOCK", 700)  # ranked over several blocks
    before = len(_ranking_maps())
    big = P.hotness_order(g)
    assert _mapped(big.order) and _mapped(big.rank_of) and _mapped(big.score)
    assert len(_ranking_maps()) == before + 3 and not list(tmp_path.iterdir())
    assert big.order.dtype == np.int32 and big.rank_of.dtype == np.int32
    np.testing.assert_array_equal(big.order, small.order)
    np.testing.assert_array_equal(big.rank_of, small.rank_of)
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, g.num_nodes, 500))
    budgets = TierBudgets(device=4000, host=8000)
    with UnifiedStore.build(g, None, budgets, placement=big) as store:
        assert torch.equal(store.gather(ids), torch.from_numpy(g.x[ids.numpy()]))
    # too little free space for the file: an ordinary array, same ranking
    monkeypatch.setattr(P, "free_bytes", lambda path: 0)
    mem = P.hotness_order(g)
    assert not _mapped(mem.order)
    np.testing.assert_array_equal(mem.rank_of, small.rank_of)
