"""OGB's heterogeneous raw layout (ogbn-mag's file names and CSV layout) to a typed dataset."""

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from fleetgnn.errors import DatasetError
from fleetgnn.graph import open_dataset, read_meta
from fleetgnn.graph.hetero import HeteroSchema, add_reverse_relations, from_typed_edges
from fleetgnn.graph.loaders import is_hetero_layout, prepare_ogb_hetero

COUNTS = {"paper": 30, "author": 17, "institution": 4, "field_of_study": 9}
RELS = [
    ("author", "affiliated_with", "institution"),
    ("author", "writes", "paper"),
    ("paper", "cites", "paper"),
    ("paper", "has_topic", "field_of_study"),
]


def _gz(path: Path, lines) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(f"{line}\n" for line in lines))


def _write_mag(root: Path, seed=0, years=True):
    """A small ogbn-mag-like raw folder, as OGB lays it out; returns the in-memory graph.

    With ``years`` the papers have ``node_year.csv.gz`` (their node times), as in ogbn-mag.
    """
    rng = np.random.default_rng(seed)
    raw = root / "raw"
    types = sorted(COUNTS)
    _gz(raw / "num-node-dict.csv.gz", [",".join(types), ",".join(str(COUNTS[t]) for t in types)])
    _gz(raw / "triplet-type-list.csv.gz", [",".join(r) for r in reversed(RELS)])  # OGB sorts
    edges = {}
    for k, (s, r, d) in enumerate(RELS):
        e = 20 + 7 * k
        src, dst = rng.integers(0, COUNTS[s], e), rng.integers(0, COUNTS[d], e)
        src[:2], dst[:2] = src[0], dst[0]  # a duplicate edge, kept
        edges[(s, r, d)] = (src, dst)
        rel_dir = raw / "relations" / f"{s}___{r}___{d}"
        _gz(rel_dir / "edge.csv.gz", [f"{a},{b}" for a, b in zip(src, dst, strict=True)])
        _gz(rel_dir / "num-edge-list.csv.gz", [e])
        _gz(rel_dir / "edge_reltype.csv.gz", [k] * e)  # ignored, as in ogbn-mag
    x = rng.standard_normal((COUNTS["paper"], 5)).astype(np.float32)
    _gz(
        raw / "node-feat" / "paper" / "node-feat.csv.gz",
        [",".join(map(repr, r.tolist())) for r in x],
    )
    year = rng.integers(2010, 2020, COUNTS["paper"])
    if years:  # where OGB's read_csv_heterograph_raw reads additional node files
        _gz(raw / "node-feat" / "paper" / "node_year.csv.gz", year)
    _gz(
        raw / "nodetype-has-label.csv.gz",
        [",".join(types), ",".join(str(t == "paper") for t in types)],
    )
    y = rng.integers(0, 4, COUNTS["paper"])
    _gz(raw / "node-label" / "paper" / "node-label.csv.gz", y)
    split = root / "split" / "time"
    _gz(
        split / "nodetype-has-split.csv.gz",
        [",".join(types), ",".join(str(t == "paper") for t in types)],
    )
    perm = rng.permutation(COUNTS["paper"])
    parts = {"train": perm[:12], "valid": perm[12:18], "test": perm[18:25]}
    masks = {}
    for key, stem in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        _gz(split / "paper" / f"{stem}.csv.gz", parts[stem])
        masks[key] = np.zeros(COUNTS["paper"], bool)
        masks[key][parts[stem]] = True
    schema = HeteroSchema(tuple(types), tuple(COUNTS[t] for t in types), tuple(RELS), "paper")
    node_time = {"paper": year} if years else None
    return from_typed_edges(
        schema, edges, x={"paper": x}, y=y, num_classes=4, node_time=node_time, **masks
    )


def _same(got, want):
    assert got.schema == want.schema and got.num_classes == want.num_classes
    for rel in want.schema.relations:
        for a, b in zip(got.csc[rel], want.csc[rel], strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b), rel
    assert set(got.x) == set(want.x)
    for t in want.x:
        np.testing.assert_array_equal(got.x[t], want.x[t])
    for k in ("y", "train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(got, k), getattr(want, k))
    assert set(got.node_time) == set(want.node_time) and not got.edge_time
    for t in want.node_time:
        assert got.node_time[t].dtype == np.int64
        np.testing.assert_array_equal(got.node_time[t], want.node_time[t])


@pytest.mark.parametrize("chunk_rows", [3, 10**6])
def test_matches_the_in_memory_typed_graph(tmp_path, chunk_rows):
    want = _write_mag(tmp_path / "ogbn_mag")
    assert is_hetero_layout(tmp_path / "ogbn_mag")
    out = prepare_ogb_hetero(tmp_path / "ogbn_mag", tmp_path / "ds", chunk_rows=chunk_rows)
    _same(open_dataset(out), want)
    meta = read_meta(out)
    assert (meta["source"], meta["split"], meta["reverse_relations"]) == ("ogb", "time", [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "ogbn_mag"]  # no temp leftovers


@pytest.mark.parametrize("chunk_rows", [4, 10**6])
def test_add_reverse_equals_add_reverse_relations(tmp_path, chunk_rows):
    want = add_reverse_relations(_write_mag(tmp_path / "ogbn_mag"))
    out = prepare_ogb_hetero(
        tmp_path / "ogbn_mag", tmp_path / "ds", chunk_rows=chunk_rows, add_reverse=True
    )
    got = open_dataset(out)
    assert ("paper", "rev_writes", "author") in got.schema.relations
    assert ("paper", "rev_cites", "paper") in got.schema.relations
    _same(got, want)


def test_node_year_gives_the_type_node_times(tmp_path):
    """ogbn-mag's paper years become ``node_time/paper``, recorded in ``meta.json``."""
    want = _write_mag(tmp_path / "ogbn_mag")
    out = prepare_ogb_hetero(tmp_path / "ogbn_mag", tmp_path / "ds", chunk_rows=4)
    got = open_dataset(out)
    assert set(got.node_time) == {"paper"}
    np.testing.assert_array_equal(got.node_time["paper"], want.node_time["paper"])
    meta = read_meta(out)
    year = want.node_time["paper"]
    assert meta["has_node_time"] is True and "has_edge_time" not in meta
    assert meta["node_time_range"] == [int(year.min()), int(year.max())]
    _write_mag(tmp_path / "plain", years=False)  # without the file: no node times, no keys
    plain = prepare_ogb_hetero(tmp_path / "plain", tmp_path / "ds2")
    assert not open_dataset(plain).node_time
    assert "has_node_time" not in read_meta(plain)


def _break(root: Path, what: str) -> str:
    raw = root / "raw"
    writes = raw / "relations" / "author___writes___paper"
    if what == "missing":
        (writes / "edge.csv.gz").unlink()
        return "does not exist"
    if what == "columns":
        _gz(writes / "edge.csv.gz", ["0,1"] * 5 + ["2,3,4"] + ["0,1"] * 21)
        return "line 6"
    if what == "range":
        _gz(writes / "edge.csv.gz", ["0,1"] * 26 + ["17,0"])
        return r"line 27: src ID 17 is outside \[0, 17\) .*'author'"
    if what == "type_dir":
        (raw / "relations" / "author___writes___venue").mkdir()
        return "unknown type 'venue'"
    if what == "type_list":
        _gz(raw / "triplet-type-list.csv.gz", ["paper,cites,paper", "paper,in,venue"])
        return "node type 'venue' is not one of"
    if what == "count_row":
        _gz(raw / "num-node-dict.csv.gz", ["author,paper", "3"])
        return "1 columns under a header of 2"
    if what == "edge_count":
        _gz(writes / "num-edge-list.csv.gz", [40])
        return "has 27 lines but num-edge-list.csv.gz says 40"
    years = raw / "node-feat" / "paper" / "node_year.csv.gz"
    if what == "year_negative":
        _gz(years, [2019] * 7 + [-1] + [2019] * 22)
        return r"node_year\.csv\.gz', line 8: node time -1 is negative"
    if what == "year_fraction":
        _gz(years, [2019] * 3 + ["2019.5"] + [2019] * 26)
        return r"node_year\.csv\.gz', line 4, column 1: cannot parse '2019\.5' as an integer"
    if what == "year_count":
        _gz(years, [2019] * 29)
        return r"has 29 lines but num-node-dict\.csv\.gz \('paper'\) says 30 nodes"
    if what == "split_type":
        _gz(root / "split" / "time" / "nodetype-has-split.csv.gz", ["author,paper", "True,False"])
        return "no split of the target type 'paper'"
    raise AssertionError(what)


@pytest.mark.parametrize(
    "what",
    [
        "missing",
        "columns",
        "range",
        "type_dir",
        "type_list",
        "count_row",
        "edge_count",
        "year_negative",
        "year_fraction",
        "year_count",
        "split_type",
    ],
)
def test_bad_inputs_are_one_line(tmp_path, what):
    _write_mag(tmp_path / "ogbn_mag")
    words = _break(tmp_path / "ogbn_mag", what)
    with pytest.raises(DatasetError, match=words) as e:
        prepare_ogb_hetero(tmp_path / "ogbn_mag", tmp_path / "ds", chunk_rows=4)
    assert "\n" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ogbn_mag"]  # nothing left behind


def test_feature_dtype_writes_the_tables_compact(tmp_path):
    """``prepare ogb --feature-dtype`` on a typed layout: each table as its round trip."""
    from fleetgnn.graph.compact import feature_codec
    from fleetgnn.graph.compact_rows import CompactRows

    _write_mag(tmp_path / "ogbn_mag")
    plain = open_dataset(prepare_ogb_hetero(tmp_path / "ogbn_mag", tmp_path / "f32"))
    out = prepare_ogb_hetero(
        tmp_path / "ogbn_mag", tmp_path / "bf", chunk_rows=4, feature_dtype="paper=bf16"
    )
    g = open_dataset(out)
    assert isinstance(g.x["paper"], CompactRows) and g.x["paper"].codec.name == "bfloat16"
    want = feature_codec("bf16").round_trip(torch.from_numpy(np.asarray(plain.x["paper"])))
    assert np.array_equal(np.asarray(g.x["paper"]), want.numpy())
    for t in plain.x:  # the other tables as their source holds them
        if t != "paper":
            assert np.array_equal(g.x[t], plain.x[t])
