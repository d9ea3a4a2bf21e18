"""`fleetgnn bench`: a quick run writes the JSON (machine, every figure and ratio) and the tables;
`--readme` replaces only the marked section; bad options are one line."""

import json
import math
from pathlib import Path

import pytest

from fleetgnn.bench.report import BEGIN_MARK, END_MARK, markdown, measurement
from fleetgnn.cli.main import main


@pytest.fixture(scope="module")
def quick_ops(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    rc = main(["bench", "--quick", "--only", "ops", "--repeat", "1", "--out", str(out)])
    assert rc == 0
    return out


def test_quick_ops_run_writes_json_and_tables(quick_ops: Path) -> None:
    data = json.loads((quick_ops / "bench.json").read_text())
    m = data["machine"]
    for key in ("cpu_model", "cpu_count", "cpus_usable", "memory_bytes", "gpu", "python"):
        assert key in m, key
    for key in ("torch", "numpy", "torch_geometric", "torch_threads", "date"):
        assert key in m, key
    assert data["settings"]["threads"] == [1] and data["sections"] == ["ops"]
    rows = data["rows"]
    cases = {r["case"].split(",")[0] for r in rows}
    assert {"gspmm sum forward", "gspmm mean forward+backward"} <= cases
    assert {"keyed dropout forward", "keyed dropout forward+backward"} <= cases
    for r in rows:
        f = r["impls"]["fleetgnn"]
        assert f["median_s"] > 0 and len(f["all_s"]) == 1
        assert set(r["speedup"]) == set(r["impls"]) - {"fleetgnn"}
        assert "torch index_add" in r["speedup"] or "F.dropout" in r["speedup"]
        for name, x in r["speedup"].items():
            assert x > 0 and math.isfinite(x), (r["case"], name)
            peer = r["impls"][name]["median_s"]
            assert x == pytest.approx(peer / f["median_s"])
    md = (quick_ops / "bench.md").read_text()
    assert "#### ops" in md and "| gspmm sum forward, " in md and "F.dropout" in md
    assert md.count("\n| ") >= len(rows)


def test_readme_section_is_replaced_from_json(quick_ops: Path, tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nintro\n\n{BEGIN_MARK}\nold table\n{END_MARK}\n\nafter\n")
    rc = main(
        [
            "bench",
            "--from-json",
            str(quick_ops / "bench.json"),
            "--out",
            str(tmp_path / "again"),
            "--readme",
            str(readme),
        ]
    )
    assert rc == 0
    text = readme.read_text()
    assert text.startswith("# title\n\nintro\n\n" + BEGIN_MARK + "\n")
    assert text.endswith(END_MARK + "\n\nafter\n") and "old table" not in text
    assert (tmp_path / "again" / "bench.md").read_text() in text + "\n"
    assert json.loads((tmp_path / "again" / "bench.json").read_text()) == json.loads(
        (quick_ops / "bench.json").read_text()
    )


def test_readme_without_markers_is_one_line(
    quick_ops: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    argv = ["bench", "--from-json", str(quick_ops / "bench.json"), "--out", str(tmp_path)]
    assert main([*argv, "--readme", str(readme)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and BEGIN_MARK in err[0]
    assert readme.read_text() == "# no markers\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--only", "ops,nope"], "unknown section 'nope'; choose from ops, sampler"),
        (["--threads", "1,x"], "'x' is not a thread count"),
        (["--repeat", "0"], "--repeat 0: need at least 1"),
    ],
)
def test_bad_options_are_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "bench.json").exists()


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--quick" in out and "--readme" in out and "engines" in out


def test_speedups_of_rates_and_limits() -> None:
    row = measurement(
        "x",
        "case",
        1,
        {"fleetgnn": [2.0, 1.0, 3.0], "peer": [4.0]},
        work={"fleetgnn": 10.0, "peer": 5.0},
        unit="M edges/s",
        limits={"memcpy": 0.5},
        skipped={"other": "absent"},
    )
    assert row["impls"]["fleetgnn"]["rate"] == 5.0  # 10 / median 2
    assert row["speedup"]["peer"] == pytest.approx(5.0 / 1.25)  # rates, not times
    assert row["speedup"]["memcpy"] == pytest.approx(5.0 / 20.0)  # a fraction of the limit
    md = markdown({"rows": [row], "sections": ["x"], "machine": {}})
    assert "| case | 1 | 5 M edges/s | peer | 1.25 M edges/s | **4.00x** |" in md
    assert "0.25 of the limit" in md and "other | skipped: absent" in md
    with pytest.raises(ValueError, match="no 'fleetgnn' timing"):
        measurement("x", "case", 1, {"peer": [1.0]})


ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


@pytest.mark.parametrize(
    ("committed", "says"),
    [
        # the committed results of the scripts before they wrote bench.json format 1
        ("bench_epoch.json", "benchmarks/bench_epoch.py in layout 0"),
        ("bench_ops_d64.json", "benchmarks/bench_ops.py in layout 0"),
        ("bench_sampler.json", "benchmarks/bench_sampler.py in layout 0"),
        ("bench_dropout.json", "benchmarks/bench_dropout.py in layout 0"),
        ("bench_partition.json", "not a fleetgnn bench result (no 'format' key"),
    ],
)
def test_old_result_layouts_are_refused_in_one_line_saying_how_to_regenerate(
    committed: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = RESULTS / committed
    assert main(["bench", "--from-json", str(path), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fleetgnn bench: error: "), err
    assert says in err[0], err
    if "layout 0" in says:
        script = says.split()[0]
        assert f"run 'python {script} --out DIR'" in err[0] and (ROOT / script).is_file(), err
    assert list(tmp_path.iterdir()) == []


def test_a_result_of_another_format_names_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = tmp_path / "bench.json"
    committed = json.loads((RESULTS / "bench" / "bench.json").read_text())
    newer.write_text(json.dumps({**committed, "format": 2}))
    assert main(["bench", "--from-json", str(newer), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "of format 2; this fleetgnn reads format 1" in err[0], err
    # the committed suite result itself renders
    assert (
        main(
            [
                "bench",
                "--from-json",
                str(RESULTS / "bench" / "bench.json"),
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
    assert (tmp_path / "o" / "bench.md").is_file()
