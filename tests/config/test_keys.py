"""Every setting is declared once and is a run-config key.

Each field of every typed engine config and of the Trainer's config must be reachable from
YAML and ``--set`` (setting its key changes the typed config), be declared by exactly one class,
and be the very declaration its YAML key reads; ``--list-keys`` shows each key's help.
"""

import dataclasses

import pytest

from fleetgnn.config import ENGINES, Config, TrainerConfig, apply_overrides, load_config
from fleetgnn.config.run import _SECTIONS, config_keys, declaring_class, engine_keys
from fleetgnn.errors import ConfigError

TYPED = [spec.config_cls for spec in ENGINES.values()] + [TrainerConfig]
KEYS = {k.key: k for k in config_keys()}

#: A non-default value for a key, as typed after --set (choices and booleans are derived).
OTHER = {
    "int": "3",
    "int or null": "3",
    "float": "7.5",
    "list of int": "2,3",
    "str": "cpu",  # train.device is the only free-form str an engine reads
    "str or null": "some/dir",
    "str or int or null": "1MB",
    "bool or null": "true",
    "float or null": "0.5",
    "mapping": "{step_size: 2}",
    "list of str": "mypkg.logs:MyLogger",
}


#: Keys whose type's value above breaks their own rule (fractions of the edges).
OTHER_BY_KEY = {
    "train.val_edges": "0.2",
    "train.test_edges": "0.3",
    "train.relation_fanouts": "{cites: [2, 3]}",
}


#: Fields an engine refuses whatever their value (the shared store section's keys that do not
#: apply to it): setting them must fail in one line naming the key.
REFUSED = {("SplitEngineConfig", "topology")}


def _other(key: str, typed_default: object) -> str:
    if key in OTHER_BY_KEY:
        return OTHER_BY_KEY[key]
    k = KEYS[key]
    if k.choices:
        choice = next(c for c in k.choices if c not in (k.default, typed_default, None))
        return str(choice)
    if k.type == "bool":
        return "false" if k.default else "true"
    return OTHER[k.type]


def _typed(cfg: Config, cls: type) -> object:
    return cfg.trainer_config() if cls is TrainerConfig else cfg.engine_config()


@pytest.mark.parametrize("cls", TYPED, ids=lambda c: c.__name__)
def test_every_field_is_set_by_its_yaml_key(cls: type) -> None:
    engine = next((n for n, s in ENGINES.items() if s.config_cls is cls), "reference")
    base = apply_overrides(Config(), [f"train.engine={engine}"])
    keys = engine_keys(cls)
    assert list(keys) == [f.name for f in dataclasses.fields(cls)]
    for name, key in keys.items():
        assert key in KEYS, f"{cls.__name__}.{name}: {key} is not a config key"
        before = getattr(_typed(base, cls), name)
        cfg = apply_overrides(base, [f"{key}={_other(key, before)}"])
        if (cls.__name__, name) in REFUSED:
            with pytest.raises(ConfigError, match=rf"^{key}=.* does not apply"):
                _typed(cfg, cls)
            continue
        after = getattr(_typed(cfg, cls), name)
        assert after != before, f"--set {key} does not reach {cls.__name__}.{name}"
        value = cfg.get(key)
        assert after == (tuple(value) if isinstance(value, list) else value)


@pytest.mark.parametrize("cls", [*TYPED, *_SECTIONS.values()], ids=lambda c: c.__name__)
def test_no_field_is_declared_twice(cls: type) -> None:
    for f in dataclasses.fields(cls):
        owners = [c for c in cls.__mro__ if f.name in c.__dict__.get("__annotations__", {})]
        assert len(owners) == 1, f"{cls.__name__}.{f.name} is declared in {owners}"


@pytest.mark.parametrize("cls", TYPED, ids=lambda c: c.__name__)
def test_a_typed_field_is_the_declaration_its_key_reads(cls: type) -> None:
    for name, key in engine_keys(cls).items():
        section, _, field = key.partition(".")
        home = _SECTIONS[section] if field else Config
        if key == "run_dir" and name == "scratch_dir":
            continue  # the engines' scratch directory is the run directory
        assert declaring_class(home, field or key) is declaring_class(cls, name), (cls, name)


def test_each_knob_class_is_in_one_section() -> None:
    seen: dict[type, str] = {}
    for section, cls in _SECTIONS.items():
        fields = {f.name for f in dataclasses.fields(cls)}
        for base in cls.__mro__:
            if fields & set(base.__dict__.get("__annotations__", {})):
                assert base not in seen, f"{base.__name__} in {seen[base]} and {section}"
                seen[base] = section


def test_every_key_has_help_from_its_docstring() -> None:
    missing = [k.key for k in config_keys() if not k.help]
    assert not missing, missing
    assert KEYS["fullgraph.overlap_backward"].help.startswith("Pipeline the backward halo")
    assert KEYS["train.epochs"].help == "Number of epochs (>= 1)."


def test_the_fullgraph_tuner_is_settable() -> None:
    cfg = load_config(
        overrides=[
            "train.engine=fullgraph",
            "fullgraph.tuner_chunks=1,4",
            "fullgraph.tuner_depths=[0, 2]",
            "fullgraph.overlap_backward=false",
            "store.debug_collectives=true",
        ]
    )
    ec = cfg.engine_config()
    assert (ec.tuner_chunks, ec.tuner_depths, ec.overlap_backward) == ((1, 4), (0, 2), False)
    assert ec.debug_collectives


#: config.yaml as ``fleetgnn train`` wrote it before the settings were declared once.
OLD_CONFIG_YAML = """\
data: {dataset: data/cora, cache_dir: null, feature_norm: row}
model: {name: gcn, hidden: 16, num_layers: 2, dropout: 0.5, heads: null, norm: null,
  residual: false}
optim: {lr: 0.01, weight_decay: 0.0005, optimizer: adam}
train:
  engine: fullgraph
  mode: full
  epochs: 20
  batch_size: 1024
  fanouts: [10, 10]
  eval_every: 1
  patience: null
  seed: 0
  checkpoint_every: 50
  checkpoint_interval: 60.0
  max_steps: null
  device: cpu
  dtype: float32
  nproc: 2
  max_restarts: 0
  threads: 1
  eval_nodes: all
store: {device_budget: null, host_budget: null, placement: degree, order: graph_first,
  gather: auto, topology: null, prefetch: true, debug_collectives: false}
fullgraph: {partition: range, num_chunks: null, depth: null, tune: false}
split: {partition: metis, book: null, report_dp: true}
offload: {partition: metis, chunks: null, device_budget: null, reorganize: true,
  cache_aggregates: null}
run_dir: runs/fg2
"""


def test_a_config_yaml_written_before_loads(tmp_path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(OLD_CONFIG_YAML)
    cfg = load_config(path)
    ec = cfg.engine_config()
    assert (ec.tune, ec.feature_norm, ec.device, ec.tuner_chunks) == (
        False,
        "row",
        "cpu",
        (1, 2, 4, 8, 16),
    )
    assert cfg.split.report_dp and cfg.trainer_config().epochs == 20
