"""Typed datasets on the command line: ``prepare ogb`` on OGB's typed layout, ``info``."""

import json

import numpy as np
import pytest

from fleetgnn.cli.main import main
from fleetgnn.graph import open_typed_dataset, write_typed_dataset
from fleetgnn.graph.hetero import HeteroSchema, from_typed_edges
from tests.graph.test_loaders_ogb_hetero import _write_mag

CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")


@pytest.fixture
def typed(tmp_path):
    schema = HeteroSchema(("paper", "author"), (5, 3), (CITES, WRITES), target="paper")
    g = from_typed_edges(
        schema,
        {CITES: ([0, 1, 2, 3], [1, 2, 3, 4]), WRITES: ([0, 1, 2], [0, 0, 4])},
        x={"paper": np.ones((5, 4), np.float32)},
        y=np.array([0, 1, 2, 0, -1]),
        train_mask=np.array([True, True, False, False, False]),
        test_mask=np.array([False, False, True, True, False]),
        name="toy",
    )
    return write_typed_dataset(g, tmp_path / "typed", source="test")


def test_info_json_shows_the_schema(typed, capsys):
    assert main(["info", str(typed), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["kind"] == "typed" and info["target"] == "paper" and info["num_classes"] == 3
    assert info["node_types"] == [
        {"name": "paper", "num_nodes": 5, "features": 4, "feature_dtype": "float32"},
        {"name": "author", "num_nodes": 3, "features": None, "feature_dtype": None},
    ]
    assert [(r["name"], r["num_edges"]) for r in info["relations"]] == [("cites", 4), ("writes", 3)]
    assert (info["num_train"], info["num_val"], info["num_test"]) == (2, 0, 2)
    assert info["labelled_nodes"] == 4 and info["source"] == "test" and info["stamp_valid"]


def test_info_table_names_types_relations_and_embeddings(typed, capsys):
    assert main(["info", str(typed)]) == 0
    out = capsys.readouterr().out
    for words in ("paper (target)", "learnable embedding", "author -writes-> paper", "3 classes"):
        assert words in out


def test_homogeneous_command_refuses_typed_data_in_one_line(typed, capsys):
    assert main(["partition", str(typed), "--parts", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "typed (heterogeneous) dataset" in err and "'fleetgnn info'" in err


def test_prepare_ogb_reads_the_typed_layout(tmp_path, capsys):
    _write_mag(tmp_path / "ogbn_mag")
    argv = ["prepare", "ogb", "--root", str(tmp_path / "ogbn_mag"), "--out", str(tmp_path / "d")]
    assert main([*argv, "--add-reverse"]) == 0
    assert "rev_writes" in capsys.readouterr().out  # the schema, printed by info
    g = open_typed_dataset(tmp_path / "d")
    assert g.schema.target == "paper" and len(g.schema.relations) == 8
    assert main([*argv, "--overwrite", "--undirected"]) == 2
    assert "use --add-reverse instead of --undirected" in capsys.readouterr().err


def test_prepare_synthetic_typed_preset(tmp_path, capsys):
    out = tmp_path / "mag"
    argv = ["prepare", "synthetic", "--preset", "mag-like", "--scale", "0.001", "--out", str(out)]
    assert main(argv) == 0
    assert "learnable embedding" in capsys.readouterr().out
    assert open_typed_dataset(out).schema.count("paper") == 736
    assert main(["prepare", "synthetic", "--preset", "nope", "--out", str(tmp_path / "n")]) == 2
    assert "mag-like, igbh-like" in capsys.readouterr().err
