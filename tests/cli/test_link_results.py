"""A run's results where users look, for every task: the end-of-run table and its footnote,
and `fleetgnn report`'s table, loss axis and quality panel (node accuracy, link AUC/AP/MRR)."""

import io
import json
import sys

import pytest

from fleetgnn.cli.main import main
from fleetgnn.cli.plots import load_runs, plot_runs, render_table
from fleetgnn.graph import write_dataset
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train.results import LINK_NOTE, NODE_NOTE

LINK_ROWS = ["test_auc", "test_ap", "test_mrr", "val_auc", "val_ap", "val_mrr"]


def _rows(out):
    """``{metric: value}`` of the end-of-run table in ``out``."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 2 and cells[0] and not cells[0].startswith("metric"):
            rows[cells[0]] = cells[1]
    return rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A homogeneous link run, a typed (R-GCN) link run and a node run, 3 epochs each, with
    what each printed (stdout redirected, as in a log file)."""
    root = tmp_path_factory.mktemp("results")
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=2), root / "tiny")
    toy = write_dataset(
        toy_mag(num_papers=40, num_authors=20, num_fields=4, seed=1), root / "toy", source="test"
    )
    base = ["train", "--epochs", "3", "--no-progress", "--set", "train.device=cpu"]
    argvs = {
        "link": ["--dataset", str(data), "--task", "link", "--mode", "full"],
        "typed": ["--dataset", str(toy), "--model", "rgcn", "--task", "link",
                  "--set", "train.link_relation=cites"],
        "node": ["--dataset", str(data), "--mode", "full"],
    }  # fmt: skip
    printed = {}
    with pytest.MonkeyPatch.context() as mp:
        for name, argv in argvs.items():
            buf = io.StringIO()
            mp.setattr(sys, "stdout", buf)
            assert main([*base, *argv, "--run-dir", str(root / name)]) == 0
            printed[name] = buf.getvalue()
    return root, printed


@pytest.mark.parametrize("name", ["link", "typed"])
def test_link_run_table_shows_auc_ap_mrr_and_no_accuracy(runs, name):
    root, printed = runs
    out = printed[name]
    summary = json.loads((root / name / "summary.json").read_text())
    rows = _rows(out)
    assert list(rows)[: len(LINK_ROWS)] == LINK_ROWS
    for key in LINK_ROWS:
        assert rows[key] == f"{summary[key]:.4f}", key
    assert not any(k.endswith("_acc") for k in rows)
    # the link footnote, not the accuracy one
    flat = " ".join(out.split())
    assert LINK_NOTE in flat and "accuracies are of" not in flat


def test_node_run_table_keeps_accuracy_and_its_footnote_one_paragraph(runs):
    root, printed = runs
    out = printed["node"]
    summary = json.loads((root / "node" / "summary.json").read_text())
    rows = _rows(out)
    assert list(rows)[:3] == ["test_acc", "val_acc", "train_acc"]
    assert rows["test_acc"] == f"{summary['test_acc']:.4f}"
    assert not any("auc" in k for k in rows)
    # redirected: the footnote wraps at the console's 80 columns, not at the table's width
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("accuracies are of"))
    end = next(
        i for i, line in enumerate(lines) if line.startswith("run directory: ") and i > first
    )
    note = lines[first:end]
    assert " ".join(" ".join(note).split()) == NODE_NOTE
    assert len(note) <= 4 and all(len(line) > 60 for line in note[:-1]), note


def test_report_of_a_link_run_draws_bce_and_auc_ap_mrr(runs, capsys):
    pytest.importorskip("matplotlib")
    root, _ = runs
    for name in ("link", "typed"):
        (run,) = load_runs([root / name])
        assert run.task == "link" and run.link_loss == "bce"
        loss, quality = plot_runs([run]).axes[:2]
        ylabel = loss.get_ylabel()
        assert "binary cross-entropy" in ylabel and "per positive training pair" in ylabel
        # a link run has no validation loss: the title names only the curve drawn
        assert loss.get_title() == "loss per epoch (train: during the epoch)"
        assert [line.get_label() for line in loss.get_lines()] == ["train"]
        assert "AUC" in quality.get_ylabel() and "accuracy" not in quality.get_ylabel()
        lines = quality.get_lines()
        assert [line.get_label() for line in lines] == [
            "train (positive above its negatives)", "val AUC", "test AUC", "val AP", "test AP",
            "val MRR", "test MRR",
        ]  # fmt: skip
        # each series told apart by colour (metric) and dash (split); values from metrics.jsonl
        assert len({(line.get_color(), str(line.get_linestyle())) for line in lines}) == 7
        recs = run.epochs
        assert list(lines[2].get_ydata()) == [r["test_auc"] for r in recs]
        assert list(lines[3].get_ydata()) == [r["val_ap"] for r in recs]
        render_table([run])
        table = capsys.readouterr().out
        summary = run.summary
        for key in ("val_auc", "test_auc", "test_ap"):
            assert f"{summary[key]:.3f}" in table, key
        assert "auc" in table and "acc" not in table and "…" not in table


def test_report_of_node_and_link_runs_names_both_losses_and_metrics(runs, capsys):
    pytest.importorskip("matplotlib")
    root, _ = runs
    both = load_runs([root / "node", root / "link"])
    loss, quality = plot_runs(both).axes[:2]
    assert loss.get_ylabel() == (
        "cross-entropy loss (nats per labelled node)\n"
        "binary cross-entropy (nats per positive training pair)"
    )
    assert "accuracy" in quality.get_ylabel() and "AUC" in quality.get_ylabel()
    labels = [line.get_label() for line in quality.get_lines()]
    assert "node (reference) val" in labels and "link (reference) val AUC" in labels
    assert loss.get_title().endswith("val: evaluated after it)")  # the node run's val loss
    render_table(both)
    table = capsys.readouterr().out
    node = json.loads((root / "node" / "summary.json").read_text())
    link = json.loads((root / "link" / "summary.json").read_text())
    assert f"{node['test_acc']:.3f}" in table and f"{link['test_ap']:.3f}" in table
    assert "accuracy of node runs, AUC of link runs" in table and "task" in table
    assert max(len(line) for line in table.splitlines()) <= 80 and "…" not in table
