"""The typed graph: schema checks, per-relation CSC, global IDs, the homogeneous view."""

import numpy as np
import pytest

from fleetgnn.errors import GraphError
from fleetgnn.graph.hetero import HeteroSchema, add_reverse_relations, from_typed_edges

CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")


def _schema(**kw):
    base = {
        "node_types": ("paper", "author"),
        "num_nodes": (4, 3),
        "relations": (CITES, WRITES),
        "target": "paper",
    }
    return HeteroSchema(**{**base, **kw})


def _graph():
    edges = {CITES: ([0, 1, 2], [1, 2, 3]), WRITES: ([0, 0, 2, 1], [0, 1, 3, 3])}
    return from_typed_edges(
        _schema(),
        edges,
        x={"paper": np.arange(8, dtype=np.float32).reshape(4, 2)},
        y=np.array([0, 1, -1, 2]),
        train_mask=np.array([True, True, False, False]),
        test_mask=np.array([False, False, False, True]),
    )


def test_schema_ranges_and_lookup():
    s = _schema()
    assert s.offsets == (0, 4, 7) and s.total_nodes == 7
    assert s.type_range("author") == (4, 7)
    np.testing.assert_array_equal(s.type_of(np.array([0, 3, 4, 6])), [0, 0, 1, 1])
    assert s.relation_index("writes") == 1 and s.relation_index(CITES) == 0
    assert HeteroSchema.from_dict(s.to_dict()) == s


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"node_types": ("paper", "paper"), "num_nodes": (1, 1)}, "unique"),
        ({"relations": (("paper", "cites", "venue"),)}, "'venue'"),
        ({"relations": ()}, "at least one relation"),
        ({"target": "venue"}, "target type"),
        ({"num_nodes": (4,)}, "num_nodes"),
        ({"node_types": ("pa per", "author")}, "not valid"),
    ],
)
def test_bad_schemas_are_one_line(kw, words):
    with pytest.raises(GraphError, match=words) as e:
        _schema(**kw)
    assert "\n" not in str(e.value)


def test_per_relation_csc_and_edges():
    g = _graph()
    assert g.num_edges == 7 and g.num_relation_edges("writes") == 4
    src, dst = g.relation_edges(WRITES)
    assert sorted(zip(src.tolist(), dst.tolist(), strict=True)) == [(0, 0), (0, 1), (1, 3), (2, 3)]
    assert g.feature_width("paper") == 2 and g.feature_width("author") is None
    assert g.num_classes == 3


def test_out_of_range_source_is_refused():
    with pytest.raises(GraphError, match=r"source IDs must lie in \[0, 3\)"):
        from_typed_edges(_schema(), {CITES: ([0], [1]), WRITES: ([3], [0])})


def test_homogeneous_view_keeps_every_edge_with_its_relation():
    g = _graph()
    h, etype = g.to_homogeneous()
    assert h.num_nodes == 7 and h.num_edges == 7 and etype.shape == (7,)
    dst = np.repeat(np.arange(7), np.diff(h.indptr))
    got = sorted(zip(h.indices.tolist(), dst.tolist(), etype.tolist(), strict=True))
    want = sorted([(0, 1, 0), (1, 2, 0), (2, 3, 0)] + [(4, 0, 1), (4, 1, 1), (6, 3, 1), (5, 3, 1)])
    assert got == want
    np.testing.assert_array_equal(h.y, [0, 1, -1, 2, -1, -1, -1])
    assert h.train_mask.tolist() == [True, True] + [False] * 5
    assert h.x is None  # the author type has no features: no single table


def test_reverse_relations_are_added_once():
    g = add_reverse_relations(_graph())
    assert g.schema.relations[2:] == (
        ("paper", "rev_cites", "paper"),
        ("paper", "rev_writes", "author"),
    )
    src, dst = g.relation_edges(("paper", "rev_writes", "author"))
    assert sorted(zip(src.tolist(), dst.tolist(), strict=True)) == [(0, 0), (1, 0), (3, 1), (3, 2)]
    assert add_reverse_relations(g).schema == g.schema
