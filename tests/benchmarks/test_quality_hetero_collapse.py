"""Issue 28's quality check, small: R-GCN and R-GAT on a ``mag-like`` graph beat the same model
on its homogeneous collapse (one node type, one relation), same epochs, seed and inputs
(benchmarks/quality_hetero_collapse.py, whose numbers docs/heterogeneous.md reports)."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _script():
    path = REPO / "benchmarks" / "quality_hetero_collapse.py"
    spec = importlib.util.spec_from_file_location("_quality_hetero_collapse", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_collapse_keeps_edges_labels_and_inputs(tmp_path):
    from fleetgnn.graph import open_dataset
    from fleetgnn.graph.hetero import add_reverse_relations
    from fleetgnn.graph.synthetic import prepare_synthetic

    mod = _script()
    g = add_reverse_relations(
        open_dataset(prepare_synthetic(tmp_path / "m", "mag-like", scale=1e-4))
    )
    flat = mod.collapse(g)
    assert flat.schema.node_types == ("node",) and len(flat.schema.relations) == 1
    assert flat.num_nodes == g.num_nodes and flat.num_edges == g.num_edges
    paper = g.schema.type_range("paper")
    assert (flat.y[paper[0] : paper[1]] == g.y).all() and int(flat.train_mask.sum()) == int(
        g.train_mask.sum()
    )
    x = flat.x["node"]
    assert (x[paper[0] : paper[1]] == g.x["paper"]).all()
    assert not x[: paper[0]].any() and not x[paper[1] :].any()  # zero rows for featureless types
    typed = mod.with_zero_inputs(g)
    assert set(typed.x) == set(g.schema.node_types)


@pytest.mark.slow
def test_typed_models_beat_the_collapse_on_mag_like(tmp_path):
    """Seed 0, scale 0.003, 20 epochs, zeros for featureless types in both graphs. Measured (see
    docs/heterogeneous.md): R-GCN 0.854 against 0.455, R-GAT 0.894 against 0.878 (123 test
    papers; one paper is 0.008). The margins are about half of R-GCN's gap and one paper for
    R-GAT, whose attention learns to skip the zero rows on the collapse."""
    rows = _script().main(["--scale", "0.003", "--epochs", "20", "--out", str(tmp_path)])
    acc = {r["model"]: (r["typed"]["test"], r["collapse"]["test"]) for r in rows}
    assert acc["rgcn"][0] > acc["rgcn"][1] + 0.2, acc
    assert acc["rgat"][0] > acc["rgat"][1] + 0.005, acc
