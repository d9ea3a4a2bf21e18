from collections.abc import Callable

import numpy as np
import pytest

from fleetgnn.graph import Graph

_OPTIONAL = (
    "x",
    "y",
    "train_mask",
    "val_mask",
    "test_mask",
    "edge_weight",
    "edge_attr",
    "edge_time",
    "node_time",
)


def assert_same_graph(a: Graph, b: Graph) -> None:
    """Assert two graphs hold the same structure, index dtype, optional arrays and metadata."""
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert a.indices.dtype == b.indices.dtype
    for k in _OPTIONAL:
        va, vb = getattr(a, k), getattr(b, k)
        assert (va is None) == (vb is None), k
        if va is not None:
            np.testing.assert_array_equal(va, vb)
    assert a.num_nodes == b.num_nodes and a.num_classes == b.num_classes


@pytest.fixture
def same_graph() -> Callable[[Graph, Graph], None]:
    """:func:`assert_same_graph`, for loader tests comparing against an independent reference."""
    return assert_same_graph
