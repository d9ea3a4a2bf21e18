"""Bounded link evaluation: each rank holds only its own nodes' embeddings, scores the
evaluation pairs whose source it owns and fetches each other endpoint's row once; the metrics
equal one process's on every node's embedding (W = 1..3, identity and permuted ownership)."""

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import run_world
from fleetgnn.engines.link import owned_link_metrics
from fleetgnn.graph.edge_split import split_edges
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.nn.decoders import DistMultDecoder
from fleetgnn.tasks import LinkPrediction

D = 6


def _setup():
    graph = generate_graph(spec_for("tiny", 0.3), seed=4).to_undirected()
    task = LinkPrediction(split_edges(graph, 0.1, 0.1, seed=0), negatives=1, seed=3)
    n = graph.num_nodes
    h = torch.randn(n, D, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    decoder = DistMultDecoder(D).double()  # row by row: equal bits in any batch shape
    with torch.no_grad():
        decoder.rel.copy_(torch.rand(1, D, generator=torch.Generator().manual_seed(1)))
    return task, h, decoder


class _Counting:
    """A communicator that counts the rows (2-D tensors) each all-to-all brings here."""

    def __init__(self, comm):
        self.comm, self.rows = comm, 0

    def __getattr__(self, name):
        return getattr(self.comm, name)

    def all_to_all(self, t, send, recv_counts=None):
        out = self.comm.all_to_all(t, send, recv_counts=recv_counts)
        if t.dim() == 2:
            self.rows += int(out[0].shape[0])
        return out


def _ownership(n, world, permuted):
    """Original -> new IDs and the ranks' new-ID ranges."""
    inv = torch.randperm(n, generator=torch.Generator().manual_seed(5)) if permuted else None
    offsets = torch.tensor([n * r // world for r in range(world + 1)], dtype=torch.int64)
    return inv, offsets


def _rank(comm, permuted):
    task, h, decoder = _setup()
    n, world, rank = h.shape[0], comm.world_size, comm.rank
    inv, offsets = _ownership(n, world, permuted)
    new_h = h.clone() if inv is None else torch.empty_like(h).index_copy_(0, inv, h)
    lo, hi = int(offsets[rank]), int(offsets[rank + 1])
    counting = _Counting(comm)
    with torch.no_grad():
        got = owned_link_metrics(task, decoder, counting, new_h[lo:hi].clone(), offsets, inv)
    return got, counting.rows


def _needed_remote_rows(task, n, world, permuted):
    """Per rank: distinct other endpoints its owned-source pairs need, summed over splits."""
    inv, offsets = _ownership(n, world, permuted)

    def new(a):
        t = torch.from_numpy(a).to(torch.int64)
        return t if inv is None else inv[t]

    out = [0] * world
    for s in ("val", "test"):
        pos, neg, nd = new(task.split.pos[s]), new(task.split.neg[s]), new(task.split.neg_dst[s])
        for r in range(world):
            own_p = torch.searchsorted(offsets[1:], pos[0], right=True) == r
            own_n = torch.searchsorted(offsets[1:], neg[0], right=True) == r
            ids = torch.unique(torch.cat([pos[1][own_p], neg[1][own_n], nd[own_p].reshape(-1)]))
            out[r] += int(ids.numel())  # rows of other ranks, and its own (sent to itself)
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("world", "permuted"), [(1, False), (2, False), (3, True)])
def test_owned_metrics_equal_one_process_and_fetch_each_row_once(world, permuted):
    task, h, decoder = _setup()
    with torch.no_grad():
        want = task.evaluate(h, decoder)
    results = run_world(_rank, world, permuted, timeout_s=300)
    for got, _ in results:
        assert got.keys() == want.keys()
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    if world > 1:  # each distinct endpoint once per split (a rank's own ones included)
        needed = _needed_remote_rows(task, h.shape[0], world, permuted)
        assert [rows for _, rows in results] == needed


def test_one_process_is_the_tasks_own_evaluation():
    task, h, decoder = _setup()
    offsets = torch.tensor([0, h.shape[0]])
    with torch.no_grad():
        got = owned_link_metrics(task, decoder, None, h, offsets)
        want = task.evaluate(h, decoder)
    assert got == pytest.approx(want, rel=1e-12)
    assert np.isfinite(list(got.values())).all()


def test_chunks_of_pairs_add_up_to_the_whole():
    """Chunked scoring (the offload engine's: host rows, a chunk on the device at once)."""
    task, h, decoder = _setup()
    offsets = torch.tensor([0, h.shape[0]])
    with torch.no_grad():
        want = owned_link_metrics(task, decoder, None, h, offsets)
        for chunks in (2, 7):
            got = owned_link_metrics(task, decoder, None, h, offsets, chunks=chunks, device="cpu")
            assert got == pytest.approx(want, rel=1e-12), chunks
