"""Typed datasets on disk: round trip, memory maps, refusals, corrupted or edited files."""

import hashlib
import json

import numpy as np
import pytest

from fleetgnn.errors import DatasetError
from fleetgnn.graph import (
    DatasetWriter,
    Graph,
    HeteroGraph,
    dataset_fingerprint,
    from_edges,
    open_dataset,
    read_meta,
    write_dataset,
)
from fleetgnn.graph.hetero import HeteroSchema, from_typed_edges

CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")
TOPIC = ("paper", "has_topic", "field")


@pytest.fixture
def graph():
    rng = np.random.default_rng(0)
    schema = HeteroSchema(
        node_types=("paper", "author", "field"),
        num_nodes=(40, 25, 6),
        relations=(CITES, WRITES, TOPIC),
        target="paper",
    )
    edges = {
        CITES: (rng.integers(0, 40, 120), rng.integers(0, 40, 120)),
        WRITES: (rng.integers(0, 25, 90), rng.integers(0, 40, 90)),
        TOPIC: (rng.integers(0, 40, 50), rng.integers(0, 6, 50)),
    }
    y = rng.integers(0, 5, 40)
    y[-3:] = -1
    idx = np.arange(40)
    return from_typed_edges(
        schema,
        edges,
        x={
            "paper": rng.standard_normal((40, 8)).astype(np.float32),
            "field": rng.standard_normal((6, 3)),
        },
        y=y,
        train_mask=idx < 20,
        val_mask=(idx >= 20) & (idx < 30),
        test_mask=(idx >= 30) & (idx < 37),
        num_classes=5,
        name="toy-typed",
    )


def _one_line(err):
    assert "\n" not in str(err.value), str(err.value)
    return str(err.value)


def test_roundtrip_is_exact_and_memory_mapped(graph, tmp_path):
    out = write_dataset(graph, tmp_path / "ds", source="test")
    meta = read_meta(out, kind="typed")
    schema = HeteroSchema.from_dict(meta["schema"])
    assert schema == graph.schema and meta["kind"] == "typed" and meta["source"] == "test"
    assert (meta["num_nodes"], meta["num_edges"], meta["num_classes"]) == (71, 260, 5)
    g = open_dataset(out)
    assert g.schema == graph.schema and g.num_classes == 5 and g.name == "toy-typed"
    for rel in schema.relations:
        for got, want in zip(g.csc[rel], graph.csc[rel], strict=True):
            assert isinstance(got, np.memmap) and not got.flags.writeable
            assert got.dtype == want.dtype and np.array_equal(got, want)
    assert set(g.x) == {"paper", "field"} and g.feature_width("author") is None
    for t in g.x:
        assert isinstance(g.x[t], np.memmap) and np.array_equal(g.x[t], graph.x[t])
        assert g.x[t].dtype == graph.x[t].dtype
    for k in ("y", "train_mask", "val_mask", "test_mask"):
        assert isinstance(getattr(g, k), np.memmap) and np.array_equal(
            getattr(g, k), getattr(graph, k)
        )
    assert not list(tmp_path.glob(".ds.tmp-*")), "temporary directory left behind"
    assert (out / "rel" / "author.writes.paper" / "indices.npy").is_file()
    assert (out / "x" / "field.npy").is_file() and not (out / "x" / "author.npy").exists()


def test_homogeneous_readers_refuse_a_typed_dataset_in_one_line(graph, tmp_path):
    out = write_dataset(graph, tmp_path / "ds")
    for reader in (open_dataset, read_meta):
        with pytest.raises(DatasetError, match="typed .heterogeneous. dataset") as e:
            reader(out, kind="graph")
        assert "'fleetgnn info'" in _one_line(e) and "3 node types, 3 relations" in str(e.value)


def test_typed_reader_refuses_a_homogeneous_dataset(tmp_path):
    g = from_edges(np.array([0, 1]), np.array([1, 0]), 2)
    out = write_dataset(g, tmp_path / "h")
    for reader in (open_dataset, read_meta):
        with pytest.raises(DatasetError, match="homogeneous dataset") as e:
            reader(out, kind="typed")
        _one_line(e)
    with pytest.raises(DatasetError, match="kind = 'forest' is invalid"):
        open_dataset(out, kind="forest")


def test_one_opener_reads_either_kind_as_meta_json_says(graph, tmp_path):
    typed = write_dataset(graph, tmp_path / "t")
    plain = write_dataset(from_edges(np.array([0, 1]), np.array([1, 0]), 2), tmp_path / "h")
    assert isinstance(open_dataset(typed), HeteroGraph)
    assert isinstance(open_dataset(plain), Graph)
    assert read_meta(typed)["kind"] == "typed" and "kind" not in read_meta(plain)
    assert dataset_fingerprint(typed) != dataset_fingerprint(plain)


def test_interrupted_write_leaves_nothing(graph, tmp_path):
    with pytest.raises(RuntimeError), DatasetWriter(tmp_path / "ds", "t", schema=graph.schema) as w:
        w.put_relation(CITES, *graph.csc[CITES])
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_writer_checks_values_and_layout(graph, tmp_path):
    s = graph.schema
    with pytest.raises(DatasetError, match=r"lists no indptr of relation") as e:
        with DatasetWriter(tmp_path / "a", "t", schema=s) as w:
            w.put_relation(CITES, *graph.csc[CITES])
            w.commit()
    _one_line(e)
    with pytest.raises(DatasetError, match=r"'writes', 'paper'\): 'indices' holds node ID 25") as e:
        with DatasetWriter(tmp_path / "b", "t", schema=s) as w:
            for rel in s.relations:
                indptr, indices = graph.csc[rel]
                if rel == WRITES:
                    indices = indices.copy()
                    indices[3] = 25  # an author ID past the 25 authors
                w.put_relation(rel, indptr, indices)
            w.commit()
    _one_line(e)
    with pytest.raises(DatasetError, match="unknown typed dataset array 'x/venue'"):
        with DatasetWriter(tmp_path / "c", "t", schema=s) as w:
            w.create("x/venue", np.float32, (3, 2))
    assert not any(p.name in "abc" for p in tmp_path.iterdir())


def test_edited_values_fail_in_one_line(graph, tmp_path):
    out = write_dataset(graph, tmp_path / "ds")
    path = out / "rel" / "paper.has_topic.field" / "indices.npy"
    bad = np.load(path)
    bad[7] = 40  # a paper ID past the 40 papers
    np.save(path, bad)
    with pytest.raises(
        DatasetError, match=r"'has_topic', 'field'\): 'indices' holds node ID 40"
    ) as e:
        open_dataset(out)
    assert "[0, 40)" in _one_line(e)

    out2 = write_dataset(graph, tmp_path / "ds2")
    x = np.load(out2 / "x" / "field.npy")
    x[2, 1] = np.nan
    np.save(out2 / "x" / "field.npy", x)
    with pytest.raises(DatasetError, match="features of node type 'field'.*non-finite") as e:
        open_dataset(out2)
    _one_line(e)


def test_truncated_and_missing_files_fail_in_one_line(graph, tmp_path):
    out = write_dataset(graph, tmp_path / "ds")
    path = out / "rel" / "paper.cites.paper" / "indices.npy"
    path.write_bytes(path.read_bytes()[:-16])
    with pytest.raises(DatasetError, match="truncated or corrupt") as e:
        open_dataset(out)
    _one_line(e)
    out2 = write_dataset(graph, tmp_path / "ds2")
    (out2 / "x" / "paper.npy").unlink()
    with pytest.raises(DatasetError, match="listed in meta.json but missing") as e:
        open_dataset(out2)
    _one_line(e)


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda m: m["schema"]["num_nodes"].__setitem__(1, 24), "num_edges|shape|num_nodes"),
        (lambda m: m["schema"]["relations"].append(["paper", "cites", "venue"]), "'venue'"),
        (lambda m: m["arrays"].pop("rel/paper.cites.paper/indptr"), "lists no indptr"),
        (lambda m: m["arrays"].__setitem__("x/venue", m["arrays"]["y"]), "not an array of"),
        (lambda m: m["arrays"]["y"].__setitem__("dtype", "<f4"), "arrays.y.dtype"),
        (lambda m: m["arrays"]["x/paper"].__setitem__("shape", [41, 8]), "arrays.x/paper.shape"),
        (lambda m: m.__setitem__("kind", "forest"), "kind"),
        (lambda m: m.__setitem__("schema", [1, 2]), "schema"),
    ],
)
def test_edited_meta_fails_in_one_line(graph, tmp_path, edit, words):
    out = write_dataset(graph, tmp_path / "ds")
    meta = json.loads((out / "meta.json").read_text())
    edit(meta)
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match=words) as e:
        open_dataset(out)
    _one_line(e)


def test_featureless_unlabelled_graph_round_trips(tmp_path):
    schema = HeteroSchema(("a", "b"), (3, 2), (("a", "to", "b"),))
    g = from_typed_edges(schema, {("a", "to", "b"): ([0, 2], [1, 1])})
    h = open_dataset(write_dataset(g, tmp_path / "ds"), validate="full")
    assert h.x == {} and h.y is None and h.num_edges == 2
    src, dst = h.relation_edges("to")
    assert sorted(zip(src.tolist(), dst.tolist(), strict=True)) == [(0, 1), (2, 1)]


def test_typed_files_are_pinned(tmp_path):
    """Every byte a typed dataset's writer puts on disk (but the stamp's times): the format."""
    from fleetgnn.graph.synthetic import prepare_synthetic

    out = prepare_synthetic(
        tmp_path / "m", "mag-temporal-like", 0.001, seed=2, feature_dtype="paper=bf16,author=fp8"
    )
    h = hashlib.sha256()
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "verified.json")
    for p in files:
        h.update(f"{p.relative_to(out)}:".encode() + p.read_bytes())
    assert (out / "verified.json").is_file() and len(files) == 22
    assert h.hexdigest()[:16] == "5b1bc4b96c59c503"
