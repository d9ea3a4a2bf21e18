"""What the link-prediction engine tests share: the graph and the float64 run they compare."""

import numpy as np

from fleetgnn.graph.csc import from_edges
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.graph.time_split import split_by_time
from fleetgnn.train import load_config

#: The settings every engine's link test runs with (float64, SGD, fixed split and seed); each
#: test adds its engine, mode, negatives and model.
LINK_FLOAT64 = (
    "train.task=link",
    "train.dtype=float64",
    "train.val_edges=0.1",
    "train.test_edges=0.1",
    "model.hidden=8",
    "model.dropout=0.3",
    "optim.optimizer=sgd",
    "optim.lr=0.5",
    "optim.weight_decay=0",
    "data.feature_norm=none",
    "train.seed=7",
)


def link_graph():
    """The small undirected graph the link tests split."""
    return generate_graph(spec_for("tiny", 0.3), seed=4).to_undirected()


def link_config(*sets):
    """:data:`LINK_FLOAT64` plus ``sets`` (later keys win)."""
    return load_config(None, [*LINK_FLOAT64, *sets])


def planted_temporal_graph():
    """The temporal-like graph plus one pair (a, b) that interacts once, at time ``plant``.

    ``plant`` is the latest training time, so the edge is a training positive and a training
    edge that every positive before it must not see, and every evaluation pair may.
    """
    g = generate_graph(spec_for("temporal-like", 0.002), seed=5)
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    src, time = np.asarray(g.indices, np.int64), np.asarray(g.edge_time)
    a, b = 3, 11
    pair = ((src == a) & (dst == b)) | ((src == b) & (dst == a))
    src, dst, time = src[~pair], dst[~pair], time[~pair]
    val_from = split_by_time(g, 0.1, 0.1).cuts[0]
    plant = val_from - 1
    src = np.concatenate([src, [a, b]])
    dst = np.concatenate([dst, [b, a]])
    time = np.concatenate([time, [plant, plant]])
    g = from_edges(src, dst, g.num_nodes, edge_time=time, node_data=g.node_data(), name="planted")
    return g, (a, b), plant
