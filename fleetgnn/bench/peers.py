"""The implementations fleetgnn is measured against: PyG (when it imports) and plain torch.

PyG is optional everywhere: every function here that needs it returns ``None`` (or raises
``ImportError``, where documented) when ``torch_geometric`` does not import, and its samplers
need ``pyg-lib`` or ``torch-sparse`` on top (:func:`neighbor_loader_missing` says which).

- models: :class:`PygGCN` (``GCNConv(cached=True)``, as in PyG's full-graph examples),
  :class:`PygSAGE` (``SAGEConv`` over bipartite blocks) and :class:`PygSAGEFull` (over the
  sub-graphs ``NeighborLoader`` yields), loaded with fleetgnn's weights by :func:`copy_weights`;
- graph formats: :func:`csc_to_pyg` (``edge_index [2, E]``, or a ``torch.sparse_csr`` ``adj_t``,
  PyG's fused sparse-matrix path);
- kernels: :func:`torch_gspmm` (chunked gather + ``index_add_``), :func:`pyg_gspmm`
  (``SimpleConv``);
- samplers: :func:`pyg_sampler` (pyg-lib's ``neighbor_sample`` or torch-sparse's
  ``sample_adj``), :func:`python_sampler` (a per-seed loop, the naive reference).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fleetgnn.graph import Graph
from fleetgnn.ops import Adjacency
from fleetgnn.sampling import Block

#: Why PyG's peers are absent when ``torch_geometric`` does not import.
NO_PYG = "torch_geometric does not import (pip install torch_geometric)"


def has_pyg() -> bool:
    """Whether ``torch_geometric`` imports."""
    try:
        import torch_geometric  # noqa: F401
    except ImportError:
        return False
    return True


def neighbor_loader_missing() -> str | None:
    """Why PyG's ``NeighborLoader`` cannot sample here, or None when it can."""
    if not has_pyg():
        return NO_PYG
    import torch_geometric.typing as pyg_typing

    if pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE:
        return None
    return "needs pyg-lib or torch-sparse; neither imports (see benchmarks/README.md to build them)"


# ------------------------------------------------------------------------------------ models


def _conv_stack(model: nn.Module, x: Tensor, graph: Tensor) -> Tensor:
    """``dropout -> conv -> ReLU`` over ``model.convs`` on one graph (no ReLU after the last)."""
    last = len(model.convs) - 1  # type: ignore[arg-type]
    for i, conv in enumerate(model.convs):  # type: ignore[arg-type]
        x = F.dropout(x, model.dropout, model.training)  # type: ignore[arg-type]
        x = conv(x, graph)
        if i < last:
            x = x.relu()
    return x


class PygGCN(nn.Module):
    """``dropout -> GCNConv -> ReLU`` stack with PyG layers (the peer of fleetgnn's GCN)."""

    def __init__(self, dims: Sequence[int], dropout: float) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.dropout = dropout
        self.convs = nn.ModuleList(
            GCNConv(a, b, cached=True) for a, b in zip(dims[:-1], dims[1:], strict=True)
        )

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Logits of every node: ``x [N, F]`` -> ``[N, C]`` (``edge_index`` or sparse ``adj_t``)."""
        return _conv_stack(self, x, edge_index)


class PygSAGE(nn.Module):
    """``dropout -> SAGEConv(mean) -> ReLU`` stack over bipartite blocks (PyG layers)."""

    def __init__(self, dims: Sequence[int], dropout: float) -> None:
        super().__init__()
        from torch_geometric.nn import SAGEConv

        self.dropout = dropout
        self.convs = nn.ModuleList(
            SAGEConv(a, b, aggr="mean") for a, b in zip(dims[:-1], dims[1:], strict=True)
        )

    def forward(self, x: Tensor, blocks: Sequence[tuple[Tensor, int, int]]) -> Tensor:
        """Logits of the seeds.

        ``blocks[i] = (graph, num_src, num_dst)``, input layer first; ``graph`` is an
        ``edge_index [2, E]`` or a sparse ``adj_t [num_dst, num_src]``.
        """
        last = len(self.convs) - 1
        for i, (conv, (graph, n_src, n_dst)) in enumerate(zip(self.convs, blocks, strict=True)):
            x = F.dropout(x, self.dropout, self.training)
            size = None if graph.is_sparse_csr else (n_src, n_dst)
            x = conv((x, x[:n_dst]), graph, size=size)
            if i < last:
                x = x.relu()
        return x


class PygSAGEFull(PygSAGE):
    """The same layers over a ``NeighborLoader`` sub-graph (PyG's mini-batch example).

    Every layer runs on all the sampled nodes (``x [n, F]``, ``edge_index`` of the sub-graph);
    the seeds are the first ``batch_size`` rows of the output.
    """

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:  # type: ignore[override]
        """Logits of every sampled node."""
        return _conv_stack(self, x, edge_index)


def copy_weights(fleet: nn.Module, pyg: nn.Module, kind: str) -> None:
    """Load fleetgnn's GCN / SAGE parameters into the PyG model (same layout, other names)."""
    with torch.no_grad():
        for fc, pc in zip(fleet.convs, pyg.convs, strict=True):  # type: ignore[attr-defined]
            if kind == "gcn":
                pc.lin.weight.copy_(fc.lin.weight)
                pc.bias.copy_(fc.bias)
            else:
                pc.lin_l.weight.copy_(fc.lin_l.weight)
                pc.lin_l.bias.copy_(fc.lin_l.bias)
                pc.lin_r.weight.copy_(fc.lin_r.weight)


# ------------------------------------------------------------------------------------ formats


def csc_to_pyg(
    indptr: Tensor, indices: Tensor, num_src: int, fmt: str, dtype: torch.dtype
) -> Tensor:
    """CSC in-neighbour lists as PyG's ``edge_index [2, E]`` (src, dst) or sparse CSR ``adj_t``.

    ``adj_t`` (``fmt="csr"``) has shape ``[num_dst, num_src]`` with row ``i`` holding ``i``'s
    in-neighbours: the CSC arrays as they are (no copy of the structure).
    """
    num_dst = indptr.numel() - 1
    if fmt == "csr":
        ones = torch.ones(indices.numel(), dtype=dtype, device=indices.device)
        return torch.sparse_csr_tensor(
            indptr, indices, ones, size=(num_dst, num_src), check_invariants=False
        )
    counts = indptr[1:] - indptr[:-1]
    dst = torch.repeat_interleave(torch.arange(num_dst, device=indptr.device), counts)
    return torch.stack([indices.to(torch.int64), dst])


def graph_to_pyg(graph: Graph, fmt: str, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A whole graph in PyG's format ``fmt`` (``"edge_index"`` or ``"csr"``) on ``device``."""
    indptr = torch.from_numpy(np.array(graph.indptr, dtype=np.int64)).to(device)
    indices = torch.from_numpy(np.array(graph.indices, dtype=np.int64)).to(device)
    return csc_to_pyg(indptr, indices, graph.num_nodes, fmt, dtype)


def block_to_pyg(
    block: Block, fmt: str, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, int, int]:
    """A sampled block as ``(edge_index or adj_t, num_src, num_dst)`` on ``device``."""
    b = block.to(device)
    return csc_to_pyg(b.indptr, b.indices, b.num_src, fmt, dtype), b.num_src, b.num_dst


# ------------------------------------------------------------------------------------ kernels


def torch_gspmm(adj: Adjacency, chunk: int = 1 << 20) -> Callable[[Tensor, str], Tensor]:
    """Plain torch ``gspmm``: chunked gather + ``index_add`` (autograd backward)."""
    counts = adj.indptr[1:] - adj.indptr[:-1]
    dst = torch.repeat_interleave(torch.arange(adj.num_dst, device=counts.device), counts)
    deg = counts.clamp(min=1)

    def run(x: Tensor, reduce: str) -> Tensor:
        out = x.new_zeros((adj.num_dst, x.shape[1]))
        for s in range(0, adj.num_edges, chunk):
            rows = x.index_select(0, adj.indices[s : s + chunk].long())
            out = out.index_add(0, dst[s : s + chunk], rows)
        return out / deg[:, None].to(x.dtype) if reduce == "mean" else out

    return run


def pyg_gspmm(adj: Adjacency) -> Callable[[Tensor, str], Tensor] | None:
    """PyG's message passing (``SimpleConv``, sum or mean), or None without PyG."""
    if not has_pyg():
        return None
    from torch_geometric.nn import SimpleConv

    counts = adj.indptr[1:] - adj.indptr[:-1]
    dst = torch.repeat_interleave(torch.arange(adj.num_dst, device=counts.device), counts)
    edge_index = torch.stack([adj.indices.long(), dst])
    convs = {r: SimpleConv(aggr=r) for r in ("sum", "mean")}

    def run(x: Tensor, reduce: str) -> Tensor:
        return convs[reduce](x, edge_index)

    return run


# ------------------------------------------------------------------------------------ samplers


def pyg_sampler(graph: Graph, fanouts: Sequence[int]) -> tuple[str, Callable[[Tensor], int]] | None:
    """PyG's sampling core as ``seeds -> sampled edges``, with its backend's name; or None.

    pyg-lib's ``neighbor_sample`` (what ``NeighborLoader`` calls), else torch-sparse's
    ``sample_adj``; None when neither imports.
    """
    rowptr = torch.from_numpy(np.array(graph.indptr, dtype=np.int64))
    col = torch.from_numpy(np.array(graph.indices, dtype=np.int64))
    try:
        import pyg_lib  # noqa: F401

        def run(seeds: Tensor) -> int:
            out = torch.ops.pyg.neighbor_sample(
                rowptr, col, seeds, list(fanouts), None, None, None, None, True, False, True
            )
            return int(out[0].numel())

        return "pyg-lib", run
    except (ImportError, OSError, RuntimeError):
        pass
    try:
        from torch_sparse import SparseTensor
    except (ImportError, OSError, RuntimeError):
        return None
    adj = SparseTensor(rowptr=rowptr, col=col)

    def run_ts(seeds: Tensor) -> int:
        n_id, edges = seeds, 0
        for f in fanouts:
            adj_t, n_id = adj.sample_adj(n_id, f, replace=False)
            edges += adj_t.nnz()
        return edges

    return "torch-sparse", run_ts


def python_sampler(graph: Graph, fanouts: Sequence[int], seed: int = 0) -> Callable[[Tensor], int]:
    """A per-seed Python loop (``rng.choice`` without replacement per node, then a relabel).

    Returns:
        ``seeds -> sampled edges`` (the same output sizes as fleetgnn's sampler).
    """
    indptr = np.asarray(graph.indptr)
    indices = np.asarray(graph.indices)
    rng = np.random.default_rng(seed)

    def run(seeds: Tensor) -> int:
        frontier = seeds.numpy()
        edges = 0
        for fanout in fanouts:
            parts = []
            for v in frontier.tolist():
                lo, hi = int(indptr[v]), int(indptr[v + 1])
                deg = hi - lo
                if fanout < 0 or deg <= fanout:
                    parts.append(indices[lo:hi])
                else:
                    parts.append(indices[lo + rng.choice(deg, fanout, replace=False)])
            nbrs = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
            edges += nbrs.size
            uniq = np.unique(nbrs)
            frontier = np.concatenate([frontier, uniq[~np.isin(uniq, frontier)]])
        return edges

    return run
