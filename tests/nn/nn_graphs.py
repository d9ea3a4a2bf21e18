"""Small random graphs, dense references and hand-built blocks for the nn tests."""

from dataclasses import dataclass

import numpy as np
import torch

from fleetgnn.graph import from_edges

try:
    from fleetgnn.sampling import Block
except ImportError:  # pragma: no cover - sampling not importable: an equivalent stand-in

    @dataclass(frozen=True, eq=False)
    class Block:  # type: ignore[no-redef]
        indptr: torch.Tensor
        indices: torch.Tensor
        src_ids: torch.Tensor
        num_dst: int
        src_degree: torch.Tensor | None = None
        edge_weight: torch.Tensor | None = None

        @property
        def num_src(self) -> int:
            return int(self.src_ids.numel())


def random_graph(n=12, p=0.25, seed=0, isolated=(0,)):
    """Simple directed graph (no self loops, no duplicates); `isolated` nodes get no in-edges."""
    rng = np.random.default_rng(seed)
    adj = rng.random((n, n)) < p  # adj[dst, src]
    np.fill_diagonal(adj, False)
    adj[list(isolated)] = False
    dst, src = np.nonzero(adj)
    return from_edges(src, dst, num_nodes=n)


def dense_adjacency(graph):
    """A[dst, src] = 1 for every edge, float64."""
    a = torch.zeros(graph.num_nodes, graph.num_nodes, dtype=torch.float64)
    src, dst = graph.edges()
    a[torch.from_numpy(dst.astype(np.int64)), torch.from_numpy(src.astype(np.int64))] = 1.0
    return a


def full_block(graph, dst_ids, seed=0):
    """A Block with the FULL in-neighbourhood of `dst_ids`, sources in a shuffled order."""
    rng = np.random.default_rng(seed)
    dst_ids = [int(v) for v in dst_ids]
    nbrs = [graph.indices[graph.indptr[v] : graph.indptr[v + 1]] for v in dst_ids]
    extra = sorted({int(u) for nb in nbrs for u in nb} - set(dst_ids))
    rng.shuffle(extra)
    src_ids = dst_ids + extra
    pos = {g: i for i, g in enumerate(src_ids)}
    indptr, indices = [0], []
    for nb in nbrs:
        nb = list(nb)
        rng.shuffle(nb)
        indices += [pos[int(u)] for u in nb]
        indptr.append(len(indices))
    deg = torch.from_numpy(graph.in_degrees()).float()
    src_ids_t = torch.tensor(src_ids, dtype=torch.int64)
    return Block(
        indptr=torch.tensor(indptr, dtype=torch.int64),
        indices=torch.tensor(indices, dtype=torch.int64),
        src_ids=src_ids_t,
        num_dst=len(dst_ids),
        src_degree=deg[src_ids_t],
    )
