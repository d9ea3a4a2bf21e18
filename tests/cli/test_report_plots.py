"""fleetgnn report: one figure of one or several runs (loss, accuracy, time per phase, bytes per
link), a table of final metrics, and one-line errors."""

import json
import sys

import pytest

from fleetgnn.cli.main import main
from fleetgnn.cli.plots import PHASES, load_runs, plot_runs, render_table, report
from fleetgnn.errors import FleetgnnError
from fleetgnn.graph import write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny trained runs (reference engine, sage and gcn) and a hand-written distributed one
    with a restart event, an unevaluated epoch and a partial last epoch, and no summary."""
    root = tmp_path_factory.mktemp("runs")
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=2), root / "data")
    base = ["train", "--dataset", str(data), "--quiet", "--epochs", "2"]
    small = ["--set", "train.batch_size=32", "--set", "model.hidden=16"]
    for name, model in (("sage", "sage"), ("gcn", "gcn")):
        assert main([*base, "--model", model, *small, "--run-dir", str(root / name)]) == 0
    dist = root / "dist"
    dist.mkdir()
    traffic = {"local": 100, "peer": 2000, "h2d": 0, "d2h": 0, "net": 500, "disk": 0}
    times = dict.fromkeys(PHASES, 0.01) | {"communication": 0.05}
    recs = [
        {"epoch": 0, "loss": 1.9, "train_acc": 0.3, "val_acc": 0.4, "test_acc": 0.35,
         "epoch_time_s": 0.2, "times": times, "traffic": traffic, "engine": "fullgraph",
         "world_size": 2},
        {"event": "restart", "attempt": 1, "failed_ranks": [1], "at_epoch": 1, "at_step": 0},
        {"epoch": 1, "loss": 1.5, "train_acc": 0.5, "val_acc": None, "test_acc": None,
         "epoch_time_s": 0.2, "times": times, "traffic": traffic, "engine": "fullgraph",
         "world_size": 2},
        {"epoch": 2, "loss": 1.2, "train_acc": 0.6, "val_acc": 0.6, "test_acc": 0.55,
         "epoch_time_s": 0.05, "times": times, "traffic": traffic, "engine": "fullgraph",
         "world_size": 2, "partial": True},
    ]  # fmt: skip
    (dist / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return root


def _labels(ax):
    return [line.get_label() for line in ax.get_lines()]


def test_one_run_writes_its_report_png_and_table(runs, capsys):
    assert main(["report", str(runs / "sage")]) == 0
    png = runs / "sage" / "report.png"
    data = png.read_bytes()
    assert data.startswith(PNG) and len(data) > 10_000
    import matplotlib.image

    assert matplotlib.image.imread(png).shape[:2] == (950, 1400)
    out = capsys.readouterr().out
    assert "sage" in out and "reference" in out and "report.png" in out
    summary = json.loads((runs / "sage" / "summary.json").read_text())
    assert f"{summary['test_acc']:.3f}" in out


def test_one_run_figure_per_epoch(runs):
    (run,) = load_runs([runs / "sage"])
    fig = plot_runs([run])
    loss, acc, times, traffic = fig.axes[:4]
    assert _labels(loss) == ["train", "val"]  # the title names the one run
    assert _labels(acc) == ["train", "val", "test"]
    assert all(len(line.get_xdata()) == 2 for line in loss.get_lines())
    # stacked areas: one per phase that took time
    phases = [c.get_label() for c in times.collections]
    assert phases and set(phases) <= set(PHASES) and "forward" in phases
    assert _labels(traffic) == ["local"]


def test_several_runs_overlay_with_engines_side_by_side(runs, tmp_path, capsys):
    out = tmp_path / "all.png"
    dirs = [runs / "sage", runs / "gcn", runs / "dist"]
    path, fig = report(dirs, out)
    assert path == out and out.read_bytes().startswith(PNG)
    loss, acc, times, traffic = fig.axes[:4]
    labels = ["sage (reference)", "gcn (reference)", "dist (fullgraph, 2 ranks)"]
    assert _labels(loss) == [
        f"{labels[0]} train", f"{labels[0]} val", f"{labels[1]} train", f"{labels[1]} val",
        f"{labels[2]} train", "restart",
    ]  # fmt: skip
    assert [line.get_xdata()[0] for line in loss.get_lines() if line.get_label() == "restart"] == [
        1.0
    ]
    assert len(_labels(acc)) == 3 * 3
    # one stacked bar per run, in the given order; the partial epoch is left out of the mean
    ticks = [t.get_text() for t in times.get_xticklabels()]
    assert [t.replace("\n", " ") for t in ticks] == labels
    assert all(len(c) == 3 for c in times.containers)
    comm = next(c for c in times.containers if c.get_label() == "communication")
    assert [round(b.get_height(), 6) for b in comm] == [0.0, 0.0, 0.05]
    # bytes: one group per link kind any run used, one bar per run that used it
    groups = [t.get_text().split("\n")[0] for t in traffic.get_xticklabels()]
    assert groups == ["local", "peer", "net"]
    dist = next(c for c in traffic.containers if c.get_label() == labels[2])
    assert [b.get_height() for b in dist] == [100, 2000, 500]
    table = capsys.readouterr().out
    assert "fullgraph x2" in table and "3*" in table and "* unfinished" in table


def test_several_runs_need_out_and_errors_are_one_line(runs, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.jsonl").write_text('{"epoch": 0, "loss": 1}\nnot json\n{"epoch": 1}\n')
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "metrics.jsonl").write_text('{"epoch": "zero", "loss": 1}\n')
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text('{"event": "restart", "at_epoch": 0}\n')
    binary = tmp_path / "binary"
    binary.mkdir()
    (binary / "metrics.jsonl").write_bytes(b'{"epoch": 0}\n\xff\xfe\n')
    cases = [
        ([str(runs / "sage"), str(runs / "gcn")], "--out FILE.png is required with 2 run"),
        ([str(binary)], "is not UTF-8 text"),
        ([str(tmp_path / "none")], "does not exist"),
        ([str(tmp_path)], "has no metrics.jsonl"),
        ([str(empty)], "has no finished epoch yet"),
        ([str(bad)], "line 2 is not valid JSON"),
        ([str(wrong)], "'epoch' must be an integer"),
        ([str(runs / "sage"), "--out", str(tmp_path / "x.txt")], "must end in an image suffix"),
        ([str(runs / "sage"), "--out", str(tmp_path / "no" / "x.png")], "does not exist"),
    ]
    for args, match in cases:
        capsys.readouterr()
        assert main(["report", *args]) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("fleetgnn report: error:"), err
        assert match in err[0], err[0]


def test_without_matplotlib_one_line_names_the_extra(runs, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(FleetgnnError, match=r"pip install 'fleetgnn\[plot\]'"):
        plot_runs(load_runs([runs / "sage"]))
    assert main(["report", str(runs / "sage"), "--out", str(runs / "x.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'fleetgnn[plot]'" in err[0]
    assert not (runs / "x.png").exists()


def _fake_run(path, epochs, engine, traffic, world_size=1):
    path.mkdir()
    times = dict.fromkeys(PHASES, 0.002)
    recs = [
        {"epoch": e, "loss": 2 - e / epochs, "val_loss": 2.1 - e / epochs,
         "train_acc": 0.5 + e / (3 * epochs), "val_acc": 0.5 + e / (4 * epochs),
         "test_acc": 0.49 + e / (4 * epochs), "epoch_time_s": 0.012, "times": times,
         "traffic": traffic, "engine": engine, "world_size": world_size}
        for e in range(epochs)
    ]  # fmt: skip
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_200_epochs_read_without_markers_and_ticks_stay_few(tmp_path):
    run = _fake_run(tmp_path / "long", 200, "reference", {"local": 7_500_000})
    fig = plot_runs(load_runs([run]))
    loss, acc, times, traffic = fig.axes[:4]
    for ax in (loss, acc):
        lines = ax.get_lines()
        # each split its own dash pattern and colour, no markers hiding the dashes
        assert all(line.get_marker() in ("None", "", None) for line in lines)
        assert len({line.get_linestyle() for line in lines}) == len(lines)
        assert len({line.get_color() for line in lines}) == len(lines)
    fig.canvas.draw()
    for ax in (loss, acc, times, traffic):
        shown = [t for t in ax.get_xticklabels() if t.get_text()]
        assert 2 <= len(shown) <= 12, (ax.get_title(), len(shown))
        # every axis says what it counts, with its unit where it has one
        assert ax.get_xlabel() and ax.get_ylabel(), ax.get_title()
    assert "nats" in loss.get_ylabel() and "fraction" in acc.get_ylabel()
    assert "seconds" in times.get_ylabel() and "bytes" in traffic.get_ylabel()
    assert times.yaxis.get_major_formatter().unit == "s"
    assert traffic.yaxis.get_major_formatter().unit == "B"


def test_runs_compare_bytes_per_link_kind_only(tmp_path):
    ref = _fake_run(tmp_path / "ref", 30, "reference", {"local": 15_500_000})
    fg = _fake_run(tmp_path / "fg", 30, "fullgraph", {"peer": 592_000}, world_size=2)
    fig = plot_runs(load_runs([ref, fg]))
    loss, acc, _, traffic = fig.axes[:4]
    # no bar of reference's local bytes beside a bar of fullgraph's peer bytes
    kinds = [t.get_text().split("\n")[0] for t in traffic.get_xticklabels()]
    assert kinds == ["local", "peer"]
    bars = {c.get_label(): [(round(b.get_x() + b.get_width() / 2), b.get_height()) for b in c]
            for c in traffic.containers}  # fmt: skip
    assert bars == {"ref (reference)": [(0, 15_500_000)], "fg (fullgraph, 2 ranks)": [(1, 592_000)]}
    assert sorted(t.get_text() for t in traffic.texts) == ["15.5 MB", "592.0 KB", "none", "none"]
    assert traffic.get_xlabel() == "link kind"
    # several runs: one colour per run, the split still told by its line style
    styles = {(line.get_color(), line.get_linestyle()) for line in acc.get_lines()}
    assert len(styles) == 6 and len({c for c, _ in styles}) == 2


def test_the_table_names_each_runs_link_kind_when_they_differ(tmp_path, capsys):
    ref = _fake_run(tmp_path / "ref", 3, "reference", {"local": 15_500_000, "peer": 0})
    fg = _fake_run(tmp_path / "fg", 3, "fullgraph", {"peer": 592_000, "local": 0}, world_size=2)
    render_table(load_runs([ref, fg]))
    table = capsys.readouterr().out
    assert "15.5 MB local" in table and "592.0 KB peer" in table
    assert "fullgraph: its halo exchange only" in " ".join(table.split())
    # runs whose bytes are of one kind: bare numbers, no note
    render_table(load_runs([ref]))
    table = capsys.readouterr().out
    assert "15.5 MB" in table and "local" not in table and "bytes/ep:" not in table
