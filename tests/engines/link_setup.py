"""What the link-prediction engine tests share: the graph and the float64 run they compare."""

from fleetgnn.graph.synthetic import generate_graph, spec_for
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
