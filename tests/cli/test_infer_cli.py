"""fleetgnn predict / embed on Cora: the trained model's classes and layer outputs for every node
(equal to the in-memory forward pass), one process and --nproc 2, the Python API, checkpoints of
any engine (DDP-prefixed weights), and one-line refusals of bad input."""

import functools
import json
import re
import shlex
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import fleetgnn
import fleetgnn.graph.dataset.writer as dataset_mod
import fleetgnn.train.export as export_mod
from fleetgnn.cli.main import build_parser, main
from fleetgnn.engines.chunks import Chunking
from fleetgnn.engines.common import node_features
from fleetgnn.graph import open_dataset, write_dataset
from fleetgnn.graph.files import exchange_dirs
from fleetgnn.graph.loaders.bundled import DATA_DIR
from fleetgnn.graph.loaders.planetoid import load_planetoid
from fleetgnn.nn import LocalAggregator
from fleetgnn.train import load_checkpoint, load_config, model_from_config, save_checkpoint
from fleetgnn.train.rundir import LOCK_FILE

ROOT = Path(__file__).resolve().parents[2]
PLANETOID = DATA_DIR / "planetoid"  # the Cora that ships with fleetgnn


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A short reference run (mini-batch mode, GCN, 2 layers) on Cora."""
    root = tmp_path_factory.mktemp("infer")
    data = write_dataset(load_planetoid(PLANETOID, "cora"), root / "cora")
    run_dir = root / "run"
    argv = ["train", "--dataset", str(data), "--model", "gcn", "--epochs", "2", "--quiet"]
    argv += ["--mode", "minibatch", "--run-dir", str(run_dir), "--set", "train.batch_size=64"]
    assert main(argv) == 0
    return run_dir


def _layers(run_dir, checkpoint="best.pt"):
    """Every layer's output over the whole graph at once (in memory): the ground truth."""
    cfg = load_config(run_dir / "config.yaml")
    graph = open_dataset(cfg.data.dataset)
    model = model_from_config(cfg, graph)
    state = load_checkpoint(run_dir / "checkpoints" / checkpoint)["engine"]["model"]
    model.load_state_dict(state)
    model.eval()
    agg = LocalAggregator.from_graph(graph)
    h = node_features(graph, torch.float32, cfg.data.feature_norm)
    out = []
    with torch.no_grad():
        for i in range(model.num_layers):
            h = model.layer_forward(i, agg, h)
            out.append(h.numpy())
    return out


def _check_predictions(out, logits):
    pred = np.load(out / "predictions.npy", mmap_mode="r")
    prob = np.load(out / "probabilities.npy", mmap_mode="r")
    assert pred.dtype == np.int64 and prob.dtype == np.float32 and prob.shape == logits.shape
    top2 = np.sort(logits, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-4  # ties within float32 noise may go either way
    np.testing.assert_array_equal(pred[clear], logits.argmax(1)[clear])
    np.testing.assert_allclose(prob, torch.softmax(torch.from_numpy(logits), 1), atol=1e-5)


def test_predict_and_embed_equal_the_in_memory_model(run, tmp_path, capsys):
    layers = _layers(run)
    assert main(["predict", str(run), "--out", str(tmp_path / "p")]) == 0
    assert "predictions.npy (2708,) int64" in capsys.readouterr().out
    _check_predictions(tmp_path / "p", layers[-1])
    meta = json.loads((tmp_path / "p" / "meta.json").read_text())
    assert meta["checkpoint"] == "best" and meta["run_dir"] == str(run)
    assert meta["files"]["probabilities.npy"] == {"shape": [2708, 7], "dtype": "float32"}
    # the Python API, a hidden layer, tiny chunks
    chunks = Chunking(max_nodes=50, max_edges=300)
    out = fleetgnn.embed(run, tmp_path / "e", layer=1, checkpoint="last", chunking=chunks)
    emb = np.load(out / "embeddings.npy", mmap_mode="r")
    np.testing.assert_allclose(emb, _layers(run, "last.pt")[0], rtol=1e-5, atol=1e-5)
    assert json.loads((out / "meta.json").read_text())["layer"] == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    hidden = [p.name for p in run.iterdir() if p.name.startswith(".")]
    assert hidden == [LOCK_FILE]  # scratch removed; the run's lock file stays (train.rundir)


def test_weights_of_a_data_parallel_checkpoint(run, tmp_path):
    """A checkpoint whose weights carry DDP's ``module.`` prefix (engines wrapping the model)."""
    ck = load_checkpoint(run / "checkpoints" / "best.pt")
    ck["engine"]["model"] = {f"module.{k}": v for k, v in ck["engine"]["model"].items()}
    other = tmp_path / "run"
    (other / "checkpoints").mkdir(parents=True)
    (other / "config.yaml").write_text((run / "config.yaml").read_text())
    save_checkpoint(other / "checkpoints" / "best.pt", ck)
    out = fleetgnn.predict(other, tmp_path / "p")
    _check_predictions(out, _layers(run)[-1])


@pytest.mark.slow
def test_predict_with_two_processes_writes_the_same_files(run, tmp_path, capsys):
    assert main(["predict", str(run), "--out", str(tmp_path / "one")]) == 0
    assert main(["predict", str(run), "--out", str(tmp_path / "two"), "--nproc", "2"]) == 0
    for name in ("predictions.npy", "probabilities.npy"):
        a, b = np.load(tmp_path / "one" / name), np.load(tmp_path / "two" / name)
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert json.loads((tmp_path / "two" / "meta.json").read_text())["world_size"] == 2


def test_predict_reads_the_config_and_loads_the_checkpoint_once(run, tmp_path, monkeypatch):
    """A warning of the checkpoint's load (torch's pickle warnings, say) is shown once, and
    config.yaml is read once, not once per check."""
    from fleetgnn.config import textfile
    from fleetgnn.train import checkpoint

    loads, reads = [], []
    torch_load, read_bytes = checkpoint.torch.load, textfile.read_bytes

    def load(path, *args, **kwargs):
        loads.append(Path(getattr(path, "name", path)).name)  # a path, or the open file
        warnings.warn("torch pickle: a load warns", FutureWarning, stacklevel=2)
        return torch_load(path, *args, **kwargs)

    def read(path, *args, **kwargs):
        reads.append(Path(path).name)
        return read_bytes(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "load", load)
    monkeypatch.setattr(textfile, "read_bytes", read)
    for kind, extra in (("predict", []), ("embed", ["--layer", "1"])):
        loads.clear()
        reads.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # every warning recorded, repeats included
            assert main([kind, str(run), "--out", str(tmp_path / kind), *extra]) == 0
        said = [str(w.message) for w in caught if "torch pickle" in str(w.message)]
        assert loads == ["best.pt"] and len(said) == 1, (kind, loads, said)
        assert reads.count("config.yaml") == 1, (kind, reads)
    from fleetgnn.train import export

    with warnings.catch_warnings(record=True) as caught:  # a worker of --nproc N loads it again
        warnings.simplefilter("always")
        assert export._reload_weights(run / "checkpoints" / "best.pt")
    assert loads[-1] == "best.pt" and not [w for w in caught if "torch pickle" in str(w.message)]


def _error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_bad_input_is_one_line(run, tmp_path, capsys):
    out = str(tmp_path / "o")
    assert "does not exist" in _error(capsys, ["predict", str(tmp_path / "nope"), "--out", out])
    (tmp_path / "empty").mkdir()
    assert "no config.yaml" in _error(
        capsys, ["embed", str(tmp_path / "empty"), "--layer", "1", "--out", out]
    )
    assert "outside [1, 2]" in _error(capsys, ["embed", str(run), "--layer", "3", "--out", out])
    assert "outside [1, 2]" in _error(capsys, ["embed", str(run), "--layer", "0", "--out", out])
    (tmp_path / "o").mkdir()
    assert "--overwrite" in _error(capsys, ["predict", str(run), "--out", out])
    bare = tmp_path / "bare"
    (bare / "checkpoints").mkdir(parents=True)
    (bare / "config.yaml").write_text((run / "config.yaml").read_text())
    assert "--checkpoint last" in _error(capsys, ["predict", str(bare), "--out", out + "2"])
    assert "no checkpoint" in _error(
        capsys, ["predict", str(bare), "--out", out + "2", "--checkpoint", "last"]
    )
    assert "--nproc" in _error(capsys, ["predict", str(run), "--out", out + "3", "--nproc", "0"])
    # --overwrite replaces the output once the new one is complete
    assert main(["predict", str(run), "--out", out, "--overwrite"]) == 0
    assert (tmp_path / "o" / "predictions.npy").is_file()


def test_docs_commands_parse():
    """The inference guide's predict/embed commands parse as they are written."""
    section = (ROOT / "docs" / "inference.md").read_text()
    lines = re.findall(r"^fleetgnn (?:predict|embed) .*$", section, re.M)
    assert len(lines) >= 2
    for line in lines:
        args = build_parser().parse_args(shlex.split(line.split("#")[0])[1:])
        assert args.command in ("predict", "embed")


def test_an_api_run_needs_its_model_and_says_so(tmp_path, capsys):
    """A run of the Python API's Trainer records no model config: `fleetgnn predict` says that
    the model must be passed (not "unknown config section 'trainer'"), and fleetgnn.predict
    with the model writes the same predictions as the model itself computes."""
    import fleetgnn
    from fleetgnn.graph.synthetic import generate_graph, spec_for
    from fleetgnn.nn import build_model

    data = write_dataset(generate_graph(spec_for("tiny", 0.2), seed=3), tmp_path / "d")
    graph = open_dataset(data)
    torch.manual_seed(0)
    model = build_model("gcn", graph.num_features, graph.num_classes)
    config = fleetgnn.ReferenceEngineConfig(mode="full")
    with fleetgnn.build_engine(model, graph, config) as engine:
        fleetgnn.Trainer(engine, fleetgnn.TrainerConfig(epochs=2), tmp_path / "run").fit()
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "run"), "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model=" in err and "Python API" in err, err
    assert "unknown config section" not in err
    with pytest.raises(fleetgnn.FleetgnnError, match="dataset=DIR"):
        fleetgnn.predict(tmp_path / "run", tmp_path / "p", model=model)
    out = fleetgnn.predict(tmp_path / "run", tmp_path / "p", model=model, dataset=data)
    preds = np.load(out / "predictions.npy")
    probs = np.load(out / "probabilities.npy")
    assert preds.shape == (graph.num_nodes,) and (preds == probs.argmax(1)).all()
    # the checkpoint's weights are what predicts: another initialisation gives the same classes
    torch.manual_seed(123)
    other = build_model("gcn", graph.num_features, graph.num_classes)
    again = fleetgnn.predict(tmp_path / "run", tmp_path / "q", model=other, dataset=data)
    np.testing.assert_array_equal(np.load(again / "predictions.npy"), preds)
    assert not torch.equal(
        other.state_dict()[next(iter(other.state_dict()))], next(iter(model.state_dict().values()))
    )  # and the models passed in were not changed


@pytest.mark.parametrize("how", ["exchange", "aside"])
def test_export_overwrite_keeps_a_whole_output_at_every_step(run, tmp_path, monkeypatch, how):
    """``--overwrite`` of an export: at each step of the swap the output directory holds one
    whole export (a reader of the files never finds the directory gone where the file system
    exchanges directories; elsewhere the old one is aside, whole, for ``open``'s retry)."""
    out = tmp_path / "o"
    assert main(["embed", str(run), "--layer", "1", "--out", str(out)]) == 0
    first = json.loads((out / "meta.json").read_text())["files"]
    if how == "aside":
        monkeypatch.setattr(dataset_mod, "exchange_dirs", lambda a, b: False)
    else:
        (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
        if not exchange_dirs(tmp_path / "a", tmp_path / "b"):
            pytest.skip("this file system cannot exchange two directories in one rename")
        (tmp_path / "a").rmdir(), (tmp_path / "b").rmdir()
    seen = {}

    def step(name):
        seen[name] = json.loads((out / "meta.json").read_text())["files"] if out.exists() else None

    replace = functools.partial(dataset_mod.replace_dir, step=step)
    monkeypatch.setattr(export_mod, "replace_dir", replace)
    assert main(["predict", str(run), "--out", str(out), "--overwrite"]) == 0
    assert set(seen["swapped"]) == {"predictions.npy", "probabilities.npy"} != set(first)
    if how == "aside":
        assert seen["aside"] is None  # the moment without the directory, covered by open's retry
    else:
        assert "aside" not in seen
    assert [p.name for p in tmp_path.iterdir()] == ["o"]
