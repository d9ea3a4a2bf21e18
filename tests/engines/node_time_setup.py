"""What the temporal node-classification tests share: a graph with a planted future edge, the
config they train with, and the check that no block holds an edge of its seed's time or later."""

import dataclasses

import numpy as np
import torch

from fleetgnn.graph.csc import from_edges
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import load_config

#: The settings every temporal node test runs with (float64, SGD, fixed seed); each test adds
#: its engine and fanouts.
NODE_TIME_FLOAT64 = (
    "train.dtype=float64",
    "train.batch_size=64",
    "train.fanouts=[4,3]",
    "model.name=sage",
    "model.hidden=8",
    "model.dropout=0.3",
    "optim.optimizer=sgd",
    "optim.lr=0.5",
    "optim.weight_decay=0",
    "data.feature_norm=none",
    "train.seed=7",
    "train.device=cpu",
)


def node_time_config(*sets):
    """:data:`NODE_TIME_FLOAT64` plus ``sets`` (later keys win)."""
    return load_config(None, [*NODE_TIME_FLOAT64, *sets])


@dataclasses.dataclass(frozen=True)
class Planted:
    """The planted edges ``src -> dst`` at times ``time``: each at or after ``dst``'s time."""

    src: tuple[int, ...]
    dst: tuple[int, ...]
    time: tuple[int, ...]


def planted_graph(scale=0.002, seed=5):
    """The temporal-like graph (node times: the switch times) with two planted future edges.

    A training node ``b`` that moves (node time ``T`` inside the edge times) gets the in-edge
    ``a -> b`` at time ``T`` (its own time: strict ``<`` keeps it out) and ``c -> b`` at
    ``T + 40``; no other edge joins those pairs. The plain sampler with every in-edge of the
    seeds (fanout -1 at the first hop) would put both in ``b``'s block.
    """
    g = generate_graph(spec_for("temporal-like", scale), seed=seed)
    nt = np.asarray(g.node_time)
    train = np.flatnonzero(np.asarray(g.train_mask) & (nt > 100) & (nt < 800))
    b = int(train[0])
    a, c = (b + 1) % g.num_nodes, (b + 2) % g.num_nodes
    src, dst = np.asarray(g.indices, np.int64), g.dst_of_edges().astype(np.int64)
    t = np.asarray(g.edge_time)
    pairs = {(a, b), (c, b)}
    keep = np.array([(int(s), int(d)) not in pairs for s, d in zip(src, dst)])
    times = (int(nt[b]), int(nt[b]) + 40)
    src = np.concatenate([src[keep], [a, c]])
    dst = np.concatenate([dst[keep], [b, b]])
    t = np.concatenate([t[keep], times])
    graph = from_edges(
        src,
        dst,
        g.num_nodes,
        edge_time=t,
        node_data=g.node_data(),
        name="planted",
        num_classes=g.num_classes,
    )
    return graph, Planted((a, c), (b, b), times)


class PairTimes:
    """The earliest time of every edge ``s -> d`` of a graph (pairs may repeat at other times)."""

    def __init__(self, graph):
        n = graph.num_nodes
        keys = np.asarray(graph.indices, np.int64) * n + graph.dst_of_edges().astype(np.int64)
        order = np.lexsort((np.asarray(graph.edge_time), keys))
        keys, times = keys[order], np.asarray(graph.edge_time)[order]
        first = np.ones(keys.size, dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        self.n, self.keys, self.first_time = n, keys[first], times[first]

    def earliest(self, src, dst):
        """The earliest time of each edge ``src[i] -> dst[i]`` (every pair must be an edge)."""
        k = src.astype(np.int64) * self.n + dst.astype(np.int64)
        at = np.searchsorted(self.keys, k)
        assert (self.keys[np.minimum(at, self.keys.size - 1)] == k).all(), "not an edge"
        return self.first_time[at]


def block_edges(block):
    """``(src, dst)`` global IDs and the destination's local position of every block edge."""
    local_dst = torch.repeat_interleave(torch.arange(block.num_dst), block.indptr.diff().cpu())
    ids = block.src_ids.cpu()
    return ids[block.indices.cpu()].numpy(), ids[local_dst].numpy(), local_dst


def future_edges(sample, pair_times, planted, node_time):
    """``(edges of a time >= their subtree's, planted edges inside a subtree at or before it)``.

    A subtree's time is its seed's node time (``node_time``, not what the sample says). An edge
    is "of a time >= the subtree's" when no edge joins its pair before it (the pair's earliest
    time is not earlier), so a sampler that keeps only edges before the seed's time gives
    ``(0, 0)``.
    """
    bad = hit = 0
    seeds = sample.blocks[-1].dst_ids.cpu().numpy()
    for layer, block in enumerate(sample.blocks):
        s, d, local_dst = block_edges(block)
        owner = sample.seed_index[layer].cpu()[local_dst].numpy()
        t = np.asarray(node_time)[seeds[owner]]
        bad += int((pair_times.earliest(s, d) >= t).sum())
        for a, b, pt in zip(planted.src, planted.dst, planted.time, strict=True):
            hit += int(((s == a) & (d == b) & (t <= pt)).sum())
    return bad, hit


class Recording:
    """A sampler that records every sample of the sampler it wraps."""

    def __init__(self, inner):
        self.inner, self.samples = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def sample_from_nodes(self, *args, **kwargs):
        out = self.inner.sample_from_nodes(*args, **kwargs)
        self.samples.append(out)
        return out
