"""fleetgnn train around the training itself: run directories are never clobbered, config errors
are refused before any worker starts, the values used are recorded, and the small flags
(--quiet, --version, --overwrite) do what they say."""

import json

import pytest
import torch
import yaml

from fleetgnn.cli.main import main
from fleetgnn.graph import open_dataset, write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.nn import MODEL_DEFAULTS
from fleetgnn.train import (
    Trainer,
    engine_from_config,
    load_checkpoint,
    load_config,
    read_metrics,
    resolve_threads,
    small_graph,
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_dataset(
        generate_graph(spec_for("tiny", 0.3), seed=2), tmp_path_factory.mktemp("d") / "data"
    )


def _train(data, *extra):
    return [
        "train",
        "--dataset",
        str(data),
        "--no-progress",
        "--set",
        "train.batch_size=32",
        *extra,
    ]


def _summary(run):
    return json.loads((run / "summary.json").read_text())


def _one_error_line(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_existing_run_directory_is_never_clobbered(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*_train(data, "--epochs", "2", "--run-dir", str(run))]) == 0
    before = {p: (run / p).read_bytes() for p in ("summary.json", "metrics.jsonl", "config.yaml")}
    last = (run / "checkpoints" / "last.pt").read_bytes()
    capsys.readouterr()

    assert main([*_train(data, "--epochs", "1", "--run-dir", str(run))]) == 2
    line = _one_error_line(capsys)
    assert f"fleetgnn train --resume {run}" in line and "--overwrite" in line
    assert "new --run-dir" in line
    assert {p: (run / p).read_bytes() for p in before} == before
    assert (run / "checkpoints" / "last.pt").read_bytes() == last

    # --resume still continues it; --overwrite replaces it
    assert main(["train", "--resume", str(run), "--epochs", "3", "--no-progress"]) == 0
    assert _summary(run)["epochs"] == 3
    assert main([*_train(data, "--epochs", "1", "--run-dir", str(run), "--overwrite")]) == 0
    assert _summary(run)["epochs"] == 1
    assert [r["epoch"] for r in read_metrics(run / "metrics.jsonl")] == [0]
    assert load_checkpoint(run / "checkpoints" / "best.pt")["trainer"]["epoch"] == 1

    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--overwrite", "--no-progress"]) == 2
    assert "only one of them" in _one_error_line(capsys)


def test_a_directory_without_a_run_is_used(data, tmp_path):
    run = tmp_path / "notes"
    run.mkdir()
    (run / "README.txt").write_text("my notes")
    assert main([*_train(data, "--epochs", "1", "--run-dir", str(run))]) == 0
    assert (run / "README.txt").read_text() == "my notes" and _summary(run)["epochs"] == 1


def test_automatic_run_directories_do_not_collide(data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("fleetgnn.cli.train.time.strftime", lambda fmt: "20240101-000000")
    assert main([*_train(data, "--epochs", "1")]) == 0
    assert main([*_train(data, "--epochs", "1")]) == 0
    names = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert names == ["20240101-000000-sage-reference", "20240101-000000-sage-reference-2"]


def test_run_directory_printed_at_start_and_end(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*_train(data, "--epochs", "1", "--run-dir", str(run))]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == f"run directory: {run}"
    assert out[-1].startswith(f"run directory: {run} ")


def test_quiet_prints_nothing_but_errors(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*_train(data, "--epochs", "2", "--run-dir", str(run), "--quiet")]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert _summary(run)["epochs"] == 2
    assert main([*_train(data, "--quiet", "--set", "model.nme=gcn")]) == 2
    assert "model.name" in _one_error_line(capsys)


def test_version(capsys):
    from fleetgnn import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"fleetgnn {__version__}"


def test_threads_resolved_applied_and_recorded(data, tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    saved = torch.get_num_threads()
    try:
        run = tmp_path / "auto"
        assert main([*_train(data, "--epochs", "1", "--run-dir", str(run))]) == 0
        # a small graph: one thread by default (a second one costs more than it gives)
        assert small_graph(*_graph_size(run))
        assert yaml.safe_load((run / "config.yaml").read_text())["train"]["threads"] == 1
        assert torch.get_num_threads() == 1
        run = tmp_path / "set"
        assert (
            main(
                [*_train(data, "--epochs", "1", "--run-dir", str(run), "--set", "train.threads=2")]
            )
            == 0
        )
        assert yaml.safe_load((run / "config.yaml").read_text())["train"]["threads"] == 2
        assert torch.get_num_threads() == 2
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # an explicit choice wins too
        run = tmp_path / "omp"
        assert main([*_train(data, "--epochs", "1", "--run-dir", str(run))]) == 0
        assert yaml.safe_load((run / "config.yaml").read_text())["train"]["threads"] == 2
    finally:
        torch.set_num_threads(saved)


def _graph_size(run):
    from fleetgnn.graph import open_dataset

    cfg = yaml.safe_load((run / "config.yaml").read_text())
    g = open_dataset(cfg["data"]["dataset"])
    return g.num_nodes, g.num_features, cfg["model"]["hidden"]


def test_small_graph_threshold():
    from fleetgnn.train import small_graph
    from fleetgnn.train.resolve import SMALL_GRAPH_ELEMENTS

    assert small_graph(2708, 1433, 16)  # Cora: 3.9M elements
    assert not small_graph(122_451, 100, 128)  # products-like 0.05: 15.7M
    assert small_graph(SMALL_GRAPH_ELEMENTS - 1, None, None)
    assert not small_graph(SMALL_GRAPH_ELEMENTS // 256, 64, 256)


def test_resolve_threads():
    from fleetgnn.train import usable_cores

    cores = usable_cores()
    assert resolve_threads(None, 1) == cores
    assert resolve_threads(None, 2) == max(1, cores // 2)
    assert resolve_threads(None, 10 * cores) == 1  # at least 1
    assert resolve_threads(3, 2) == 3  # an explicit value wins
    assert resolve_threads(None, 2, "5") == 5  # so does OMP_NUM_THREADS
    assert resolve_threads(None, 1, "zero") == cores  # an unusable one is ignored


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_config_records_the_model_values_used(data, tmp_path, model):
    run = tmp_path / model
    assert main([*_train(data, "--epochs", "1", "--run-dir", str(run), "--model", model)]) == 0
    recorded = yaml.safe_load((run / "config.yaml").read_text())["model"]
    defaults = MODEL_DEFAULTS[model]
    assert recorded["hidden"] == defaults["hidden_dim"]
    assert recorded["dropout"] == defaults["dropout"]
    assert recorded["heads"] == defaults.get("heads")  # gcn has no heads: stays null
    assert _summary(run)["config"]["model"] == recorded


def test_runs_recorded_with_null_model_fields_still_resume(data, tmp_path):
    """A run written before the values were recorded (hidden: null) resumes under the CLI."""
    run = tmp_path / "old"
    cfg = load_config(
        None, [f"data.dataset={data}", "model.name=gcn", "train.epochs=1", "train.batch_size=32"]
    )
    assert cfg.model.hidden is None
    with engine_from_config(cfg, open_dataset(data)) as engine:
        Trainer.from_config(engine, cfg, run, show_progress=False, quiet=True).fit()
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["hidden"] is None
    assert main(["train", "--resume", str(run), "--epochs", "2", "--quiet"]) == 0
    assert _summary(run)["epochs"] == 2
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["hidden"] == 16


def _no_launch(*args, **kwargs):
    raise AssertionError("workers were started")


@pytest.mark.parametrize(
    ("extra", "fragments"),
    [
        (["--set", "store.device_budget=64XB"], ["'store.device_budget'", "'64XB'"]),
        (["--set", "store.host_budget=-1MB"], ["'store.host_budget'"]),
        (["--set", "store.topology=dgx1-v100", "--nproc", "9"], ["store.topology", "9 ranks"]),
        (["--set", "store.topology=[[700,50],[50,700]]", "--nproc", "3"], ["store.topology"]),
    ],
)
def test_config_errors_are_refused_before_any_worker_starts(
    data, tmp_path, capsys, monkeypatch, extra, fragments
):
    monkeypatch.setattr("fleetgnn.distributed.launch", _no_launch)
    run = tmp_path / "run"
    argv = _train(data, "--engine", "minibatch", "--nproc", "2", "--run-dir", str(run), *extra)
    assert main(argv) == 2
    line = _one_error_line(capsys)
    assert all(f in line for f in fragments), line
    assert "'device'" not in line and ".failures" not in line
    assert not run.exists()


def test_resume_mismatch_refused_before_any_worker_starts(data, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    argv = _train(data, "--engine", "minibatch", "--nproc", "2", "--run-dir", str(run))
    assert main([*argv, "--epochs", "1", "--quiet"]) == 0
    monkeypatch.setattr("fleetgnn.distributed.launch", _no_launch)
    assert main(["train", "--resume", str(run), "--set", "train.seed=7", "--quiet"]) == 2
    line = _one_error_line(capsys)
    assert "cannot resume" in line and "train.seed" in line


def test_nproc_with_a_single_process_engine_is_refused(data, capsys):
    assert main([*_train(data, "--nproc", "2")]) == 2
    line = _one_error_line(capsys)
    assert "train.nproc=2" in line and "'reference' runs in a single process" in line
    assert "minibatch" in line  # the engines that do use --nproc


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda_is_one_line(data, tmp_path, capsys):
    assert (
        main([*_train(data, "--set", "train.device=cuda", "--run-dir", str(tmp_path / "r"))]) == 2
    )
    line = _one_error_line(capsys)
    assert "train.device='cuda'" in line and "CUDA is not available" in line
    assert "AssertionError" not in line and not (tmp_path / "r").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="fakes CUDA on a machine without it")
def test_cpu_device_runs_on_the_cpu_where_cuda_exists(data, tmp_path, monkeypatch):
    """``--set train.device=cpu`` on a machine with CUDA: nothing touches CUDA (faked here, so
    any real CUDA call would fail), and ``config.yaml`` records ``cpu``; ``auto`` records what
    it resolved to."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    run = tmp_path / "cpu"
    argv = _train(data, "--set", "train.device=cpu", "--epochs", "2", "--run-dir", str(run))
    assert main([*argv, "--quiet"]) == 0
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["device"] == "cpu"
    records = [r for r in read_metrics(run / "metrics.jsonl") if "epoch" in r]
    assert len(records) == 2
    assert not any(k.startswith("allocator") for r in records for k in r["memory"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    auto = tmp_path / "auto"
    argv = _train(data, "--set", "train.device=auto", "--epochs", "1", "--run-dir", str(auto))
    assert main([*argv, "--quiet"]) == 0
    assert yaml.safe_load((auto / "config.yaml").read_text())["train"]["device"] == "cpu"


@pytest.fixture(scope="module")
def bag_of_words(tmp_path_factory):
    """A dataset recording "feature_norm": "row", as `prepare planetoid` / `prepare npz` do."""
    return write_dataset(
        generate_graph(spec_for("tiny", 0.3), seed=2),
        tmp_path_factory.mktemp("d") / "bow",
        feature_norm="row",
    )


def test_dataset_feature_norm_is_the_default_and_recorded(data, bag_of_words, tmp_path):
    """The dataset's recorded transform is applied unless data.feature_norm says otherwise."""
    from fleetgnn.graph import dataset_feature_norm

    assert dataset_feature_norm(bag_of_words) == "row"
    assert dataset_feature_norm(data) == "none"  # no key (e.g. an older dataset): none
    cases = [
        (bag_of_words, [], "row"),
        (bag_of_words, ["--set", "data.feature_norm=none"], "none"),
        (data, [], "none"),
        (data, ["--set", "data.feature_norm=row"], "row"),
    ]
    for i, (ds, extra, expect) in enumerate(cases):
        run = tmp_path / f"r{i}"
        assert main([*_train(ds, "--epochs", "1", "--run-dir", str(run), "--quiet", *extra)]) == 0
        recorded = yaml.safe_load((run / "config.yaml").read_text())
        assert recorded["data"]["feature_norm"] == expect, (ds, extra)
        ckpt = load_checkpoint(run / "checkpoints" / "last.pt")
        assert ckpt["engine_config"]["feature_norm"] == expect
    # a resumed run keeps the value recorded, whatever the dataset says now
    assert main(["train", "--resume", str(tmp_path / "r1"), "--epochs", "2", "--quiet"]) == 0
    recorded = yaml.safe_load((tmp_path / "r1" / "config.yaml").read_text())
    assert recorded["data"]["feature_norm"] == "none"


def test_engine_from_config_applies_the_dataset_feature_norm(bag_of_words):
    graph = open_dataset(bag_of_words)
    base = ["train.batch_size=32", f"data.dataset={bag_of_words}"]
    with engine_from_config(load_config(None, base), graph) as engine:
        assert engine.config.feature_norm == "row"
        x = torch.from_numpy(graph.x.astype("float32"))
        expect = x / x.abs().sum(1, keepdim=True).clamp_min(1e-12)
        torch.testing.assert_close(engine.x.float(), expect, rtol=1e-5, atol=1e-7)
    explicit = load_config(None, [*base, "data.feature_norm=none"])
    with engine_from_config(explicit, graph) as engine:
        assert engine.config.feature_norm == "none"


def test_prepare_records_the_customary_feature_norm(tmp_path, capsys):

    from fleetgnn.graph import read_meta

    out = tmp_path / "cora"  # the bundled files: no --file, no --root
    assert main(["prepare", "npz", "--name", "cora", "--out", str(out)]) == 0
    assert read_meta(out)["feature_norm"] == "row"
    pl = tmp_path / "cora-pl"
    assert main(["prepare", "planetoid", "--name", "cora", "--out", str(pl)]) == 0
    assert read_meta(pl)["feature_norm"] == "row"
    assert main(["info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["feature_norm"] == "row"
