"""Edge and node times of typed graphs: the in-memory format, the typed dataset, ``info``."""

import json

import numpy as np
import pytest

from fleetgnn.cli.main import main
from fleetgnn.errors import DatasetError, GraphError
from fleetgnn.graph.dataset import open_dataset, write_dataset
from fleetgnn.graph.hetero import (
    HeteroGraph,
    HeteroSchema,
    add_reverse_relations,
    from_typed_edges,
)

CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")
SCHEMA = HeteroSchema(("paper", "author"), (4, 3), (CITES, WRITES), target="paper")
EDGES = {CITES: ([0, 1, 2, 3, 0], [1, 1, 1, 2, 3]), WRITES: ([0, 1, 2, 2], [1, 1, 0, 1])}
TIMES = {CITES: [9, 2, 5, 1, 4], WRITES: [7, 3, 6, 3]}


def timed(**kw):
    return from_typed_edges(
        SCHEMA,
        EDGES,
        y=np.array([0, 1, 0, 1]),
        train_mask=np.array([True, True, False, False]),
        edge_time=TIMES,
        node_time={"paper": [10, 11, 12, 13]},
        name="toy",
        **kw,
    )


def test_each_relation_is_sorted_by_time_within_each_destination_and_times_move_with_edges():
    g = timed()
    for rel in SCHEMA.relations:
        indptr, indices = g.csc[rel]
        t = g.edge_time[rel]
        for v in range(indptr.size - 1):
            seg = t[indptr[v] : indptr[v + 1]]
            assert (np.diff(seg) >= 0).all()
        src, dst = g.relation_edges(rel)  # each (src, dst, time) of the input is there once
        want = sorted(zip(*EDGES[rel], TIMES[rel], strict=True))
        assert sorted(zip(src.tolist(), dst.tolist(), t.tolist(), strict=True)) == want
    assert g.node_time["paper"].dtype == np.int64 and "author" not in g.node_time


def test_times_of_some_relations_only_are_refused_in_one_line():
    with pytest.raises(GraphError, match=r"every relation or of none \(missing \[\('author'"):
        from_typed_edges(SCHEMA, EDGES, edge_time={CITES: TIMES[CITES]})


def test_an_unsorted_segment_names_the_relation_node_and_edges():
    g = timed()
    bad = {r: np.array(t) for r, t in g.edge_time.items()}
    bad[CITES][[1, 2]] = bad[CITES][[2, 1]]  # node 1's segment is [0, 3)
    with pytest.raises(GraphError) as e:
        HeteroGraph(SCHEMA, g.csc, edge_time=bad)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("relation ('paper', 'cites', 'paper'):")
    assert "node 1 has edge_time[1]" in msg and "from_typed_edges(..., edge_time=...)" in msg


def test_bad_node_times_name_the_type_and_node():
    with pytest.raises(GraphError, match=r"node type 'author': .* negative time -1 at node 2"):
        from_typed_edges(SCHEMA, EDGES, node_time={"author": [0, 1, -1]})
    with pytest.raises(GraphError, match="node type 'paper'.*one time per node"):
        timed().__class__(SCHEMA, timed().csc, node_time={"paper": np.zeros(3, np.int64)})


def test_reverse_relations_carry_their_edges_times():
    g = add_reverse_relations(timed())
    rev = ("paper", "rev_writes", "author")
    src, dst = g.relation_edges(rev)
    got = sorted(zip(dst.tolist(), src.tolist(), g.edge_time[rev].tolist(), strict=True))
    assert got == sorted(zip(*EDGES[WRITES], TIMES[WRITES], strict=True))
    assert g.node_time["paper"].tolist() == [10, 11, 12, 13]


def test_dataset_round_trip_and_meta_keys(tmp_path):
    out = write_dataset(timed(), tmp_path / "t")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["has_edge_time"] and meta["edge_time_range"] == [1, 9]
    assert meta["has_node_time"] and meta["node_time_range"] == [10, 13]
    assert (
        "rel/paper.cites.paper/edge_time" in meta["arrays"] and "node_time/paper" in meta["arrays"]
    )
    h = open_dataset(out, validate="full")
    g = timed()
    for rel in SCHEMA.relations:
        assert np.array_equal(h.edge_time[rel], g.edge_time[rel])
    assert np.array_equal(h.node_time["paper"], g.node_time["paper"]) and h.has_edge_time


def test_an_untimed_typed_dataset_opens_unchanged(tmp_path):
    g = from_typed_edges(SCHEMA, EDGES, y=np.array([0, 1, 0, 1]))
    out = write_dataset(g, tmp_path / "u")
    meta = json.loads((out / "meta.json").read_text())
    assert not any("time" in k for k in meta) and not any("time" in a for a in meta["arrays"])
    h = open_dataset(out, validate="full")
    assert h.edge_time == {} and h.node_time == {} and not h.has_edge_time


def _rewrite(path, edit):
    a = np.load(path)
    edit(a)
    np.save(path, a)


def test_a_corrupted_edge_time_file_names_relation_and_edge(tmp_path):
    out = write_dataset(timed(), tmp_path / "t")
    _rewrite(out / "rel/paper.cites.paper/edge_time.npy", lambda a: a.__setitem__(2, 0))
    with pytest.raises(DatasetError) as e:
        open_dataset(out)
    msg = str(e.value)
    assert "\n" not in msg and "relation ('paper', 'cites', 'paper')" in msg
    assert "edge_time[1] = 5 > edge_time[2] = 0" in msg


def test_a_negative_node_time_on_disk_names_type_and_node(tmp_path):
    out = write_dataset(timed(), tmp_path / "t")
    _rewrite(out / "node_time/paper.npy", lambda a: a.__setitem__(3, -5))
    with pytest.raises(DatasetError, match=r"node type 'paper'.*negative time -5 at node 3"):
        open_dataset(out)


def test_meta_that_disagrees_with_the_arrays_is_one_line(tmp_path):
    out = write_dataset(timed(), tmp_path / "t")
    meta = json.loads((out / "meta.json").read_text())
    meta["has_edge_time"] = False
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="has_edge_time = False is invalid: expected true"):
        open_dataset(out)
    del meta["arrays"]["rel/author.writes.paper/edge_time"]
    meta["has_edge_time"] = True
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match=r"edge times of some relations but not of \[\('author"):
        open_dataset(out)


def test_info_shows_times_per_relation_and_type(tmp_path, capsys):
    out = write_dataset(timed(), tmp_path / "t")
    assert main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["edge_time"] == {"min": 1, "max": 9} and info["node_time"] == {"min": 10, "max": 13}
    assert [r["edge_time"] for r in info["relations"]] == [
        {"min": 1, "max": 9},
        {"min": 3, "max": 7},
    ]
    assert [t["node_time"] for t in info["node_types"]] == [{"min": 10, "max": 13}, None]
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "edge times: yes, 1 .. 9" in text and "node times: yes, 10 .. 13" in text
