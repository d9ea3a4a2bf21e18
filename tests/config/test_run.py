import dataclasses
import errno
import os
from pathlib import Path

import pytest
import yaml

from fleetgnn import durable
from fleetgnn.config import (
    ENGINES,
    Config,
    ModelConfig,
    TrainConfig,
    apply_overrides,
    load_config,
    save_config,
)
from fleetgnn.errors import ConfigError, DiskFullError, FleetgnnError


def test_defaults_match_spec() -> None:
    cfg = load_config()
    assert cfg == Config()
    assert cfg.data.dataset is None and cfg.data.preset == "small" and cfg.data.scale == 1.0
    assert cfg.model.name == "sage" and cfg.model.num_layers == 2 and cfg.model.hidden is None
    assert cfg.optim.lr == 0.01 and cfg.optim.weight_decay == 5e-4 and cfg.optim.optimizer == "adam"
    t = cfg.train
    assert t.mode is None  # the engine's default mode
    assert (t.engine, cfg.mode, t.epochs, t.batch_size, t.fanouts) == (
        "reference",
        "minibatch",
        10,
        1024,
        (10, 10),
    )
    assert (t.eval_every, t.patience, t.checkpoint_every, t.nproc, t.max_restarts) == (
        1,
        None,
        50,
        1,
        0,
    )
    assert cfg.run_dir is None
    # sections are frozen: a change is a new config (Config.with_key, apply_overrides)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.epochs = 3  # type: ignore[misc]


def test_yaml_partial_sections(tmp_path: Path) -> None:
    p = tmp_path / "run.yaml"
    p.write_text(
        "model:\n  name: gat\n  heads: 4\n  num_layers: 3\n"
        "train:\n  fanouts: [15, 10, 5]\n  epochs: 3\n"
        "optim:\n  lr: 1\n"  # an int is accepted for a float field
        "data:\n"  # an empty section keeps its defaults
        "run_dir: runs/x\n"
    )
    cfg = load_config(p)
    assert cfg.model == ModelConfig(name="gat", heads=4, num_layers=3)
    assert cfg.train.fanouts == (15, 10, 5) and cfg.train.epochs == 3
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    assert cfg.data == Config().data
    assert cfg.run_dir == "runs/x"


@pytest.mark.parametrize(
    ("item", "section", "key", "expected"),
    [
        ("train.epochs=5", "train", "epochs", 5),
        ("model.name=gat", "model", "name", "gat"),
        ("train.fanouts=[15,10]", "train", "fanouts", (15, 10)),
        ("train.fanouts=15, 10", "train", "fanouts", (15, 10)),
        ("train.patience=null", "train", "patience", None),
        ("train.patience=4", "train", "patience", 4),
        ("model.residual=true", "model", "residual", True),
        ("model.norm=layer", "model", "norm", "layer"),
        ("model.dropout=0.5", "model", "dropout", 0.5),
        ("optim.lr=1e-3", "optim", "lr", 1e-3),  # PyYAML reads 1e-3 as a string
        ("optim.lr=2E-2", "optim", "lr", 2e-2),
        ("data.dataset=2024", "data", "dataset", "2024"),  # str field keeps the literal text
        ("train.device=cuda:1", "train", "device", "cuda:1"),
    ],
)
def test_overrides(item: str, section: str, key: str, expected: object) -> None:
    cfg = load_config(overrides=[item])
    assert getattr(getattr(cfg, section), key) == expected


def test_fanouts_override_with_layers_and_later_items_win() -> None:
    cfg = load_config(
        overrides=[
            "model.num_layers=3",
            "train.fanouts=15,10,5",
            "train.epochs=2",
            "train.epochs=7",
        ]
    )
    assert cfg.train.fanouts == (15, 10, 5) and cfg.train.epochs == 7
    cfg = load_config(overrides=["model.num_layers=1", "train.fanouts=4", "run_dir=out/r1"])
    assert cfg.train.fanouts == (4,) and cfg.run_dir == "out/r1"


def test_overrides_apply_on_top_of_yaml(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("train: {epochs: 3, batch_size: 64}\n")
    cfg = load_config(p, ["train.epochs=9"])
    assert cfg.train.epochs == 9 and cfg.train.batch_size == 64


def test_unknown_key_lists_valid_keys_and_suggests() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(overrides=["train.epoch=3"])
    msg = str(e.value)
    assert "'train.epoch'" in msg and "Did you mean 'train.epochs'" in msg
    for k in ("epochs", "batch_size", "fanouts", "checkpoint_every"):
        assert k in msg


def test_unknown_section_suggests() -> None:
    pattern = r"'trian'.*data, model, optim, train.*Did you mean 'train'"
    with pytest.raises(ConfigError, match=pattern):
        load_config(overrides=["trian.epochs=3"])


def test_unknown_key_in_yaml(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("model:\n  hiden: 64\n")
    with pytest.raises(ConfigError, match=r"'model\.hiden'.*Did you mean 'model\.hidden'"):
        load_config(p)


def test_bad_choice_names_value_and_choices() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(overrides=["model.name=gta"])
    msg = str(e.value)
    assert "model.name='gta'" in msg and "gcn, sage, gat, gin" in msg and "model.name=gat" in msg
    with pytest.raises(ConfigError, match=r"train\.engine='spilt'.*reference, minibatch, split"):
        load_config(overrides=["train.engine=spilt"])
    with pytest.raises(ConfigError, match=r"model\.norm='batch'.*null, layer"):
        load_config(overrides=["model.norm=batch"])
    assert set(TrainConfig.CHOICES["engine"]) == set(ENGINES)  # derived from the registry


@pytest.mark.parametrize(
    ("item", "pattern"),
    [
        ("train.epochs=1.5", r"train\.epochs=1\.5 has type float, expected int"),
        ("train.epochs=true", r"train\.epochs=True has type bool, expected int"),
        ("model.residual=2", r"model\.residual=2 has type int, expected bool"),
        ("train.fanouts=[10,x]", r"train\.fanouts=\[10, 'x'\] has an element 'x'.*list of int"),
        ("model.hidden=big", r"model\.hidden='big'.*expected int or null"),
        ("optim.lr=fast", r"optim\.lr='fast' has type str, expected float"),
        ("train.epochs", r"not of the form key=value"),
        ("model=3", r"names a section.*model\.<key>=value"),
    ],
)
def test_bad_values(item: str, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        load_config(overrides=[item])


@pytest.mark.parametrize(
    ("items", "pattern"),
    [
        (["optim.lr=0"], r"optim\.lr=0\.0 is invalid: must be a finite number > 0"),
        (["optim.weight_decay=-1"], r"optim\.weight_decay=-1\.0.*>= 0"),
        (["train.epochs=0"], r"train\.epochs=0.*>= 1"),
        (["train.patience=0"], r"train\.patience=0"),
        (["train.checkpoint_every=-1"], r"train\.checkpoint_every=-1.*>= 0"),
        (["model.dropout=1.0"], r"model\.dropout=1\.0.*\[0, 1\)"),
        (["train.device=gpu"], r"train\.device='gpu'.*'cuda:N'"),
        (["train.fanouts=10,0"], r"train\.fanouts=\[10, 0\].*\[1, 2147483647\]"),
        (["model.num_layers=3"], r"fanouts=\[10, 10\] has 2 entries but model\.num_layers=3"),
        (
            ["train.engine=offload", "train.mode=minibatch"],
            r"'offload' does not support train\.mode='minibatch'",
        ),
        (["train.engine=split", "train.mode=full"], r"'split' does not support train\.mode='full'"),
    ],
)
def test_validate_rules(items: list[str], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        load_config(overrides=items)


def test_validate_full_mode_ignores_fanouts() -> None:
    cfg = load_config(overrides=["train.engine=fullgraph", "train.mode=full", "model.num_layers=3"])
    assert cfg.train.mode == "full" and len(cfg.train.fanouts) == 2


def test_config_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        load_config(overrides=["train.epochs=abc"])
    assert issubclass(ConfigError, FleetgnnError)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file .*missing.yaml.* cannot be read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(lst)
    sec = tmp_path / "sec.yaml"
    sec.write_text("train: 5\n")
    with pytest.raises(ConfigError, match="section 'train' must be a mapping"):
        load_config(sec)
    num = tmp_path / "num.yaml"
    num.write_text("data: {dataset: 123}\n")
    with pytest.raises(ConfigError, match=r"data\.dataset=123 has type int, expected str or null"):
        load_config(num)


def test_yaml_round_trip(tmp_path: Path) -> None:
    cfg = load_config(
        overrides=[
            "data.dataset=/data/products",
            "data.scale=0.25",
            "model.name=gat",
            "model.hidden=64",
            "model.heads=4",
            "model.num_layers=3",
            "model.norm=layer",
            "model.residual=true",
            "model.dropout=0.1",
            "optim.optimizer=adamw",
            "train.fanouts=15,10,5",
            "train.patience=5",
            "train.dtype=float64",
            "run_dir=runs/a",
        ]
    )
    path = save_config(cfg, tmp_path / "sub" / "config.yaml")
    back = load_config(path)
    assert back == cfg
    assert back.to_dict() == cfg.to_dict()
    assert yaml.safe_load(path.read_text()) == cfg.to_dict()
    assert Config.from_dict(cfg.to_dict()) == cfg
    # defaults round-trip too (None values included)
    save_config(Config(), tmp_path / "d.yaml")
    assert load_config(tmp_path / "d.yaml") == Config()


def test_save_config_on_a_full_disk_is_one_line_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``save_config`` writes durably (fsynced: a full disk can surface there) and a full disk is
    one line naming the file, with the old file intact and no temporary file left."""
    path = save_config(Config(), tmp_path / "config.yaml")
    before = path.read_text()

    def enospc(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(durable.os, "fsync", enospc)
    with pytest.raises(DiskFullError) as err:
        save_config(apply_overrides(Config(), ["train.epochs=3"]), path)
    line = str(err.value)
    assert "\n" not in line and line.startswith("no space left on "), line
    assert f"free some space to write '{path}'" in line and "bytes free" in line, line
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_overrides_do_not_mutate_their_input() -> None:
    base = Config()
    new = apply_overrides(base, ["train.epochs=3", "train.fanouts=[4,4]"])
    assert base.train.epochs == 10 and new.train.epochs == 3
    assert base.train.fanouts == (10, 10) and new.train.fanouts == (4, 4)
    assert base.model is new.model or base.model == new.model


@pytest.mark.parametrize(
    ("engine", "mode"),
    [("reference", "minibatch"), ("minibatch", "minibatch"), ("fullgraph", "full")],
)
def test_engine_implies_its_default_mode(engine: str, mode: str) -> None:
    cfg = load_config(
        overrides=[f"train.engine={engine}", "model.num_layers=3"]
        if mode == "full"
        else [f"train.engine={engine}"]
    )
    assert cfg.mode == mode
    ec = cfg.engine_config()
    assert type(ec).__name__.lower().startswith(engine.replace("fullgraph", "fullgraph"))
    assert getattr(ec, "mode", mode) == mode


def test_engine_config_takes_its_sections() -> None:
    cfg = load_config(
        overrides=[
            "train.engine=fullgraph",
            "fullgraph.num_chunks=4",
            "fullgraph.partition=metis",
            "store.debug_collectives=true",
            "data.feature_norm=row",
            "train.seed=3",
        ]
    )
    ec = cfg.engine_config()
    assert (ec.num_chunks, ec.partition, ec.debug_collectives) == (4, "metis", True)
    assert (ec.feature_norm, ec.seed) == ("row", 3)
    mb = load_config(overrides=["train.engine=minibatch", "store.device_budget=64MB"])
    assert mb.engine_config().device_budget == "64MB"
    assert mb.engine_config().fanouts == (10, 10)


def test_feature_norm_defaults_to_the_datasets() -> None:
    """data.feature_norm is None (the dataset's transform) until resolved; explicit values stay."""
    cfg = load_config()
    assert cfg.data.feature_norm is None
    assert cfg.engine_config().feature_norm == "none"  # unresolved: the engine default
    for value in ("none", "row"):
        set_ = load_config(overrides=[f"data.feature_norm={value}"])
        assert set_.data.feature_norm == value and set_.engine_config().feature_norm == value
    assert load_config(overrides=["data.feature_norm=null"]).data.feature_norm is None
    with pytest.raises(ConfigError, match="data.feature_norm='l2'.*none, row, null"):
        load_config(overrides=["data.feature_norm=l2"])
