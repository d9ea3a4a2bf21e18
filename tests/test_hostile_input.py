"""Issue 13, defects 6 and 8: hostile or damaged input ends in one line (exit status 2), never a
traceback, and the messages say what happened.

- ``meta.json`` is checked against a schema before any field is used (a hypothesis fuzz over its
  fields and their types, and the cases the issue lists), big-endian arrays are refused, rich
  markup in a dataset's name is shown, not parsed;
- a config file or ``--set`` value that is not UTF-8 or nests too deep, a damaged
  ``metrics.jsonl`` on ``--resume``;
- a ``last.pt`` that loads but holds the wrong things falls back to ``prev.pt`` with a warning; a
  hostile checkpoint's error never suggests ``weights_only=False``;
- a SIGKILLed worker is "rank 1 was killed by SIGKILL (exit -9)" and why; ``--resume``
  without a checkpoint says so; ``config.yaml`` records the dataset's absolute path.
"""

from __future__ import annotations

import copy
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from fleetgnn.cli.main import main
from fleetgnn.cli.report import dataset_info, render_info
from fleetgnn.errors import FleetgnnError
from fleetgnn.graph import write_dataset
from fleetgnn.graph.dataset import dataset_feature_norm
from fleetgnn.graph.synthetic import generate_graph, spec_for

# a checkpoint at every epoch end (not only when train.checkpoint_interval has passed), so a
# finished run holds last.pt and prev.pt
TRAIN = ["--quiet", "--set", "model.hidden=8", "--set", "train.checkpoint_interval=0"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(
        generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path_factory.mktemp("d") / "tiny"
    )


@pytest.fixture(scope="module")
def run(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-epoch run: last.pt = epoch 2, prev.pt = epoch 1."""
    out = tmp_path_factory.mktemp("runs") / "run"
    argv = ["train", "--dataset", str(tiny), "--epochs", "2", "--run-dir", str(out)]
    assert main([*argv, *TRAIN]) == 0
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _one_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"fleetgnn {command}: error: "), err
    return err[0]


# ----------------------------------------------------------------------------------- meta.json
def _set(meta: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node: Any = meta
    for key in parents:
        if not isinstance(node, dict):
            return
        node = node.setdefault(key, {})
    if isinstance(node, dict):
        if value is _DELETE:
            node.pop(last, None)
        else:
            node[last] = value


_DELETE = object()
_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, 4, 7, 300, 1000, 1001, 2**31, 10**9]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["[/]", "[bold red]x", "foo", ">f4", "<f8", "|b1", "O", "<U3", "V8", "<c8"]),
)
_JSON = st.recursive(
    _LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
_KEYS = st.sampled_from(
    [
        "format_version",
        "name",
        "num_nodes",
        "num_edges",
        "num_features",
        "num_classes",
        "feature_norm",
        "source",
        "arrays",
        "arrays.x",
        "arrays.x.dtype",
        "arrays.x.shape",
        "arrays.y.dtype",
        "arrays.indptr",
        "arrays.indptr.dtype",
        "arrays.indices.shape",
        "arrays.train_mask.dtype",
        "arrays.bogus",
    ]
)


@pytest.fixture(scope="module")
def fuzz_dir(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy(tiny, tmp_path_factory.mktemp("fuzz") / "ds")


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.tuples(_KEYS, st.one_of(_JSON, st.just(_DELETE))), min_size=1, max_size=3))
def test_fuzzed_meta_json_gives_only_one_line_fleetgnn_errors(fuzz_dir, tiny, mutations):
    meta = json.loads((tiny / "meta.json").read_text())
    for key, value in mutations:
        _set(meta, key, value if value is _DELETE else copy.deepcopy(value))
    (fuzz_dir / "meta.json").write_text(json.dumps(meta))
    try:
        info = dataset_info(fuzz_dir)
        render_info(info, Console(file=io.StringIO(), width=120))
        json.dumps(info)  # what `info --json` prints
        dataset_feature_norm(fuzz_dir)  # what `train` reads
    except FleetgnnError as e:
        message = str(e)
        assert message and "\n" not in message, message
    # anything else (TypeError, ValueError, MarkupError, RecursionError, ...) fails the test


def _meta_case(root: Path, case: str) -> None:
    meta_path = root / "meta.json"
    if case == "deep":
        deep = "[" * 100_000 + "]" * 100_000
        meta_path.write_text(meta_path.read_text().replace('"name":', f'"deep": {deep}, "name":'))
        return
    if case == "big-endian":
        x = np.load(root / "x.npy")
        np.save(root / "x.npy", x.astype(">f4"))
    meta = json.loads(meta_path.read_text())
    key, value = {
        "dtype": ("arrays.x.dtype", "foo"),
        "nodes-null": ("num_nodes", None),
        "edges-str": ("num_edges", "abc"),
        "classes-str": ("num_classes", "abc"),
        "classes-float": ("num_classes", 7.9),
        "classes-huge": ("num_classes", 10**9),
        "array-str": ("arrays.x", "x"),
        "big-endian": ("arrays.x.dtype", ">f4"),
    }[case]
    _set(meta, key, value)
    meta_path.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "case",
    [
        "dtype",
        "nodes-null",
        "edges-str",
        "classes-str",
        "classes-float",
        "classes-huge",
        "array-str",
        "deep",
        "big-endian",
    ],
)
def test_bad_meta_json_is_one_line_in_info_and_train(tiny, tmp_path, capsys, case):
    root = _copy(tiny, tmp_path / "ds")
    _meta_case(root, case)
    assert main(["info", str(root)]) == 2
    line = _one_line(capsys, "info")
    if case == "big-endian":
        assert "big-endian" in line
    argv = ["train", "--dataset", str(root), "--epochs", "1", "--run-dir", str(tmp_path / "r")]
    assert main([*argv, *TRAIN]) == 2
    _one_line(capsys, "train")


def test_big_endian_file_with_a_native_meta_is_one_line(tiny, tmp_path, capsys):
    root = _copy(tiny, tmp_path / "ds")
    np.save(root / "x.npy", np.load(root / "x.npy").astype(">f4"))
    assert main(["info", str(root)]) == 2
    assert "x.npy" in _one_line(capsys, "info")


def test_markup_in_a_dataset_name_is_shown_not_parsed(tiny, tmp_path, capsys):
    root = _copy(tiny, tmp_path / "ds")
    meta = json.loads((root / "meta.json").read_text())
    meta["name"] = "[/] [bold]x[/bold] [link=file:///etc]y"
    (root / "meta.json").write_text(json.dumps(meta))
    assert main(["info", str(root)]) == 0
    assert "[/] [bold]x[/bold] [link=file:///etc]y" in " ".join(capsys.readouterr().out.split())


# ------------------------------------------------------------------------ config and metrics
@pytest.mark.parametrize("case", ["not-utf8", "deep"])
def test_bad_config_file_is_one_line(tmp_path, capsys, case):
    cfg = tmp_path / "c.yaml"
    if case == "not-utf8":
        cfg.write_bytes(b"train:\n  epochs: \xff\xfe\n")
    else:
        cfg.write_text("train: " + "[" * 50_000 + "]" * 50_000 + "\n")
    assert main(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "r")]) == 2
    line = _one_line(capsys, "train")
    assert ("UTF-8" in line) if case == "not-utf8" else ("levels deep" in line)


def test_deep_set_value_is_one_line(tmp_path, capsys):
    deep = "[" * 20_000 + "]" * 20_000
    argv = ["train", "--set", f"train.fanouts={deep}", "--run-dir", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "--set train.fanouts" in _one_line(capsys, "train")


_DAMAGE_SAYS = {
    "config-not-utf8": "is not UTF-8",
    "config-deep": "levels deep",
    "metrics-not-utf8": "metrics file",
    "metrics-deep": "nests too deeply",
    "metrics-epoch": "'epoch' is 'abc'",
}


@pytest.mark.parametrize("case", list(_DAMAGE_SAYS))
def test_damaged_run_files_on_resume_are_one_line(run, tmp_path, capsys, case):
    r = _copy(run, tmp_path / "r")
    if case == "config-not-utf8":
        (r / "config.yaml").write_bytes((r / "config.yaml").read_bytes() + b"# \xc3\x28\n")
    elif case == "config-deep":
        (r / "config.yaml").write_text("data: " + "{a: " * 40_000 + "1" + "}" * 40_000 + "\n")
    elif case == "metrics-not-utf8":
        (r / "metrics.jsonl").write_bytes(b'{"epoch": 0}\n\xff\xfe\n{"epoch": 1}\n')
    elif case == "metrics-deep":
        deep = "[" * 100_000 + "]" * 100_000
        (r / "metrics.jsonl").write_text(f'{{"epoch": 0, "x": {deep}}}\n{{"epoch": 1}}\n')
    else:
        (r / "metrics.jsonl").write_text('{"epoch": "abc"}\n{"epoch": 1}\n')
    assert main(["train", "--resume", str(r), "--epochs", "3", "--quiet"]) == 2
    assert _DAMAGE_SAYS[case] in _one_line(capsys, "train")


# ---------------------------------------------------------------------------------- checkpoints
def _damage(ckpt: dict[str, Any], kind: str) -> None:
    if kind == "config":
        ckpt["config"] = 5
    elif kind == "engine-empty":
        ckpt["engine"] = {}
    elif kind == "weights-shape":
        model = ckpt["engine"]["model"]
        name = next(iter(model))
        model[name] = torch.zeros(3, 3)
    elif kind == "trainer":
        ckpt["trainer"] = {"epoch": "x"}
    else:
        ckpt["rng"] = {"python": 1}


@pytest.mark.parametrize("kind", ["config", "engine-empty", "weights-shape", "trainer", "rng"])
def test_last_pt_with_the_wrong_contents_falls_back_to_prev(run, tmp_path, capsys, kind):
    r = _copy(run, tmp_path / "r")
    last = r / "checkpoints" / "last.pt"
    ckpt = torch.load(last, weights_only=True)
    _damage(ckpt, kind)
    torch.save(ckpt, last)
    with pytest.warns(UserWarning, match="resuming from the previous checkpoint") as seen:
        assert main(["train", "--resume", str(r), "--epochs", "3", "--quiet"]) == 0
    assert all("\n" not in str(w.message) for w in seen)
    assert any("last.pt" in str(w.message) for w in seen)
    assert capsys.readouterr().err == ""
    assert json.loads((r / "summary.json").read_text())["epochs"] == 3


_CKPT_KEYS = st.sampled_from(
    [
        "format",
        "trainer",
        "trainer.epoch",
        "trainer.next_step",
        "trainer.partial",
        "trainer.best",
        "config",
        "config.train",
        "config.model",
        "config.data.dataset",
        "engine",
        "rng",
        "partials",
        "engine_config",
        "engine_name",
        "world_size",
        "steps_per_epoch",
    ]
)


@pytest.fixture(scope="module")
def fuzz_run(run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Any]:
    from fleetgnn.train import load_config

    r = _copy(run, tmp_path_factory.mktemp("fuzz") / "run")
    (r / "checkpoints" / "prev.pt").unlink()  # no fallback: every problem must surface
    base = torch.load(r / "checkpoints" / "last.pt", weights_only=True)
    base["engine"] = {"model": {}, "optimizer": {}}  # the fuzz is about the other entries
    return r, base, load_config(r / "config.yaml", [])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.tuples(_CKPT_KEYS, st.one_of(_JSON, st.just(_DELETE))), min_size=1, max_size=3))
def test_fuzzed_checkpoint_contents_give_only_fleetgnn_errors(fuzz_run, mutations):
    from fleetgnn.train import check_resumable, resume_point

    root, base, cfg = fuzz_run
    ckpt = copy.deepcopy(base)
    for key, value in mutations:
        _set(ckpt, key, value if value is _DELETE else copy.deepcopy(value))
    torch.save(ckpt, root / "checkpoints" / "last.pt")
    try:
        check_resumable(root, cfg)
    except FleetgnnError as e:
        assert str(e) and "\n" not in str(e), str(e)
    point = resume_point(root)
    assert point is None or all(isinstance(v, int) and v >= 0 for v in point)


class _Evil:
    def __reduce__(self) -> tuple:
        return (os.system, ("echo pwned > /dev/null",))


def test_hostile_checkpoints_never_suggest_weights_only_false(run, tmp_path, capsys):
    r = _copy(run, tmp_path / "r")
    torch.save({"evil": _Evil()}, r / "checkpoints" / "last.pt")
    (r / "checkpoints" / "prev.pt").write_bytes(b"PK\x03\x04 not a zip")
    assert main(["train", "--resume", str(r), "--epochs", "3", "--quiet"]) == 2
    line = _one_line(capsys, "train")
    assert "no loadable checkpoint" in line and "could run code" in line
    assert "weights_only" not in line and "\x1b" not in line


# ------------------------------------------------------------------------------------ messages
def test_a_killed_worker_is_one_plain_line():
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from fleetgnn.distributed.launch import _failure_message, _failure_text, _worker_failed

    dead = ProcessFailure(local_rank=1, pid=4242, exitcode=-9, error_file="/nonexistent")
    err = _worker_failed({1: _failure_text(dead)}, {1: _failure_message(dead)})
    assert str(err) == "rank 1 was killed by SIGKILL (exit -9)"  # the cause: test_oom_message
    assert "SIGKILL" in err.failures[1]


def test_resume_without_a_checkpoint_says_so(run, tmp_path, capsys):
    r = _copy(run, tmp_path / "r")
    shutil.rmtree(r / "checkpoints")
    assert main(["train", "--resume", str(r), "--epochs", "1", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"no checkpoint in '{r / 'checkpoints'}'; starting the run from the beginning" in err


def test_config_records_the_absolute_dataset_path(tiny, tmp_path, monkeypatch):
    r = tmp_path / "r"
    monkeypatch.chdir(tiny.parent)
    argv = ["train", "--dataset", tiny.name, "--epochs", "1", "--run-dir", str(r)]
    assert main([*argv, *TRAIN]) == 0
    cfg = yaml.safe_load((r / "config.yaml").read_text())
    assert cfg["data"]["dataset"] == str(tiny.absolute())  # given as a relative path
    monkeypatch.chdir(tmp_path)  # elsewhere: the relative path would not resolve
    assert main(["train", "--resume", str(r), "--epochs", "2", "--quiet"]) == 0


def test_big_endian_inputs_are_converted_by_prepare(tmp_path, capsys):
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 0\n")
    np.save(tmp_path / "x.npy", np.arange(6, dtype=">f4").reshape(3, 2))
    out = tmp_path / "d"
    argv = ["prepare", "edgelist", "--edges", str(edges), "--features", str(tmp_path / "x.npy")]
    assert main([*argv, "--out", str(out)]) == 0
    x = np.load(out / "x.npy")
    assert x.dtype == np.dtype("=f4") and x.tolist() == [[0, 1], [2, 3], [4, 5]]
    assert main(["info", str(out)]) == 0
