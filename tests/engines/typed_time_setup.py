"""A small typed graph with times for the typed temporal node tests, and a planted future edge.

``timed_mag``: :func:`~fleetgnn.graph.hetero_toy.toy_mag` (featureless fields) with every edge
of every relation given a time in ``[0, 60)`` and every paper a node time in ``[10, 70)``, from
one generator (the labels do not depend on them). ``planted``: the same with two extra
``cites`` edges into one training paper ``b``, at ``b``'s own time and after it, from papers no
other ``cites`` edge joins to ``b``: a sampler that keeps only edges before a seed's time never
puts them in ``b``'s subtree.
"""

import numpy as np
import torch

from fleetgnn.graph.hetero import from_typed_edges
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.tasks import TypedTemporalNodeClassification

CITES = ("paper", "cites", "paper")
REV_CITES = ("paper", "rev_cites", "paper")


def timed_mag(plant=False, seed=4):
    """``(graph, planted)``: the typed graph with times, and ``(b, sources, times)`` planted."""
    g = toy_mag(num_papers=80, num_authors=40, num_fields=6, featureless_fields=True, seed=seed)
    rng = np.random.default_rng(seed)
    node_time = {"paper": rng.integers(10, 70, g.schema.count("paper"))}
    edges = {r: g.relation_edges(r) for r in g.schema.relations}
    times = {r: rng.integers(0, 60, edges[r][0].size) for r in g.schema.relations}
    planted = None
    if plant:
        train = np.flatnonzero(np.asarray(g.train_mask))
        b = int(train[np.argmax(node_time["paper"][train])])  # late: many earlier in-edges
        src, dst = edges[CITES]
        joined = set(src[dst == b].tolist()) | {b}
        a, c = [p for p in range(g.schema.count("paper")) if p not in joined][:2]
        t = int(node_time["paper"][b])
        planted = (b, (a, c), (t, t + 5))
        edges[CITES] = (np.append(src, [a, c]), np.append(dst, [b, b]))
        times[CITES] = np.append(times[CITES], [t, t + 5])
    graph = from_typed_edges(
        g.schema,
        edges,
        x=dict(g.x),
        y=np.asarray(g.y),
        train_mask=np.asarray(g.train_mask),
        val_mask=np.asarray(g.val_mask),
        test_mask=np.asarray(g.test_mask),
        num_classes=g.num_classes,
        name="timed-mag",
        edge_time=times,
        node_time=node_time,
    )
    return graph, planted


def task_of(graph, strategy="uniform"):
    """The typed temporal node task of ``graph``'s target type."""
    t = graph.schema.target
    return TypedTemporalNodeClassification(
        np.asarray(graph.node_time[t]), t, graph.schema.type_range(t)[0], strategy
    )


def planted_in_subtree(sample, graph, planted):
    """Planted ``cites`` edges (by their sources) inside the planted paper's own subtree."""
    b, sources, _ = planted
    b_global = graph.schema.type_range("paper")[0] + b
    seeds = sample.blocks[-1].dst_ids("paper").cpu()
    hits = 0
    for layer, block in enumerate(sample.blocks):
        indptr, src_pos = block.edges[CITES]
        dst_pos = torch.repeat_interleave(torch.arange(indptr.numel() - 1), torch.diff(indptr))
        src_ids = block.src_ids["paper"][src_pos] - graph.schema.type_range("paper")[0]
        dst_ids = block.src_ids["paper"][dst_pos]
        owner = sample.seed_index[layer]["paper"][dst_pos]
        mine = (dst_ids == b_global) & (seeds[owner] == b_global)
        hits += int(sum(int(((src_ids == s) & mine).sum()) for s in sources))
    return hits
