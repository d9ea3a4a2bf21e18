"""Run configuration: the YAML sections, loadable from a file, with ``key=value`` overrides.

A :class:`Config` has eight sections and a run directory (``fleetgnn train --list-keys`` lists
every key with its type, default and help)::

    data:      where the graph comes from, and its feature transform
    model:     the GNN
    optim:     the optimiser
    train:     the loop, the sampled batches, seed, device and dtype, the launcher
    store:     the unified store and the distributed engines' debug mode
    fullgraph: the fullgraph engine's partition and halo pipeline
    split:     the split engine's partition
    offload:   the offload engine's chunking and budget
    run_dir:   str | null

The sections are made of the knob classes of :mod:`fleetgnn.config.knobs`, which declare every
field once; the typed engine configs (:mod:`fleetgnn.config.engines`) and the Trainer's
(:class:`TrainerConfig`) are made of the same classes, so :meth:`Config.engine_config` and
:meth:`Config.trainer_config` copy nothing by hand: each field is read from the section whose
class declares it (:func:`engine_keys`).

:func:`load_config` reads an optional YAML file (any subset of the keys; missing keys keep their
defaults), applies overrides such as ``train.epochs=5``, ``model.name=gat``,
``train.fanouts=[15,10,5]`` or ``train.fanouts=15,10,5`` (values are parsed as YAML, with the
bounds of :mod:`fleetgnn.config.textfile`), type-checks every value against the dataclass
annotations, checks each field's rule as the section is built and runs :meth:`Config.validate`
for the cross-section rules. Configs never read environment variables.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Union

import yaml

from fleetgnn.config.engines import ENGINES, EngineConfig, engine_spec
from fleetgnn.config.knobs import (
    DebugCollectives,
    DeviceCache,
    FeatureNorm,
    FeatureStorage,
    FullGraphSection,
    GradClip,
    KnobError,
    Knobs,
    Logging,
    Loop,
    Mode,
    OffloadSection,
    Precision,
    Prefetch,
    RunDir,
    Sampling,
    Schedule,
    ScratchDir,
    Seeded,
    SplitSection,
    TaskKnobs,
    TieredStore,
    check,
)
from fleetgnn.config.suggest import nearest
from fleetgnn.config.textfile import decode_utf8, load_yaml_file, parse_yaml
from fleetgnn.durable import atomic_write_text
from fleetgnn.errors import ConfigError
from fleetgnn.types import PathLikeStr

#: The (engine, mode) pairs that train ``train.task=link`` so far.
LINK_ENGINES: tuple[tuple[str, str], ...] = (
    ("reference", "full"),
    ("reference", "minibatch"),
    ("minibatch", "minibatch"),
    ("fullgraph", "full"),
    ("split", "minibatch"),
    ("offload", "full"),
)
#: The engines that train ``train.task=link`` on typed graphs (one relation's links,
#: :mod:`fleetgnn.engines.typed_link`); a typed engine (the registry's ``typed``) off this list
#: trains typed node classification only (the planner and ``fleetgnn train`` refuse it).
TYPED_LINK_ENGINES: tuple[str, ...] = ("reference", "minibatch", "split")
#: Why each engine outside :data:`LINK_ENGINES` refuses ``train.task=link`` (one clause).
LINK_REFUSALS: dict[str, str] = {
    "split": "",
    "offload": "",
    "reference": "",
    "minibatch": "",
    "fullgraph": "",
}


def link_refusal(engine: str, mode: str | None, key: str = "mode") -> str:
    """The one-line refusal of ``train.task=link`` by ``engine`` in ``mode``, naming who can."""
    can = ", ".join(f"{e} ({key}={m})" for e, m in LINK_ENGINES)
    why = LINK_REFUSALS.get(engine) or "it trains node classification only"
    return (
        f"the {engine} engine ({key}={mode}) does not train link prediction: {why}; "
        f"link prediction runs on: {can}"
    )


_FLOAT_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


@dataclasses.dataclass(frozen=True)
class DataConfig(FeatureNorm):
    """Where the graph comes from, and its ``feature_norm`` (:class:`~.knobs.FeatureNorm`).

    Attributes:
        dataset: Dataset directory written by ``fleetgnn prepare``; ``None`` uses the embedded
            synthetic generator with ``preset``.
        preset: Synthetic preset name (used when ``dataset`` is ``None``).
        scale: Size multiplier of the synthetic preset (> 0).
        seed: Seed of the synthetic generator.
        cache_dir: Directory where generated datasets are cached (``None``: the CLI's default,
            ``$XDG_CACHE_HOME/fleetgnn``).
    """

    dataset: str | None = None
    preset: str = "small"
    scale: float = 1.0
    seed: int = 0
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.scale > 0, "scale", self.scale, "must be > 0")


#: Per-model defaults of :func:`fleetgnn.nn.build_model` (Cora-scale settings from the original
#: papers), keyed by the model names :class:`ModelConfig` accepts. Kept here, torch-free, so the
#: command line can show them without importing the models.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "gcn": {"hidden_dim": 16, "dropout": 0.5},
    "sage": {"hidden_dim": 256, "dropout": 0.5},
    "gat": {
        "hidden_dim": 8,
        "heads": 8,
        "out_heads": 1,
        "dropout": 0.6,
        "attn_dropout": 0.6,
        "activation": "elu",
    },
    "gin": {"hidden_dim": 64, "dropout": 0.5},
    "gine": {"hidden_dim": 64, "dropout": 0.5},
}

#: Per-model defaults of the typed models (:func:`fleetgnn.nn.hetero.build_hetero_model`), for
#: typed graphs only: R-GCN, R-GAT (MLPerf's GNN reference: 4 heads) and SAGE per relation.
HETERO_MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "rgcn": {"hidden_dim": 64, "dropout": 0.5},
    "rgat": {"hidden_dim": 64, "heads": 4, "dropout": 0.2},
    "hetero-sage": {"hidden_dim": 64, "dropout": 0.5},
}


@dataclasses.dataclass(frozen=True)
class ModelConfig(Knobs):
    """The GNN.

    Attributes:
        name: Layer type (``rgcn``, ``rgat`` and ``hetero-sage`` for typed graphs only).
        hidden: Hidden width (``None``: the model's default).
        num_layers: Number of message-passing layers (>= 1).
        dropout: Dropout probability in [0, 1) (``None``: the model's default).
        heads: Attention heads (GAT; ``None``: the model's default).
        norm: Normalisation between layers (``None``: none).
        residual: Add residual connections between layers of equal width.
        num_bases: R-GCN basis decomposition: each relation's weight is a learned combination
            of this many shared bases (``None``: one free weight per relation).
    """

    NAMES: ClassVar[tuple[str, ...]] = tuple(MODEL_DEFAULTS) + tuple(HETERO_MODEL_DEFAULTS)
    NORMS: ClassVar[tuple[str | None, ...]] = (None, "layer")

    name: str = "sage"
    hidden: int | None = None
    num_layers: int = 2
    dropout: float | None = None
    heads: int | None = None
    norm: str | None = None
    residual: bool = False
    num_bases: int | None = None

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"name": NAMES, "norm": NORMS}

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.num_layers >= 1, "num_layers", self.num_layers, "must be >= 1")
        check(
            self.hidden is None or self.hidden >= 1, "hidden", self.hidden, "must be >= 1 or null"
        )
        check(
            self.dropout is None or 0.0 <= self.dropout < 1.0,
            "dropout",
            self.dropout,
            "must be in [0, 1) or null",
        )
        check(self.heads is None or self.heads >= 1, "heads", self.heads, "must be >= 1 or null")
        check(
            self.num_bases is None or self.num_bases >= 1,
            "num_bases",
            self.num_bases,
            "must be >= 1 or null",
        )


@dataclasses.dataclass(frozen=True)
class OptimConfig(Knobs):
    """The optimiser.

    Attributes:
        lr: Learning rate (> 0).
        weight_decay: L2 penalty (>= 0).
        optimizer: The update rule.
    """

    OPTIMIZERS: ClassVar[tuple[str, ...]] = ("adam", "adamw", "sgd")

    lr: float = 0.01
    weight_decay: float = 5e-4
    optimizer: str = "adam"

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"optimizer": OPTIMIZERS}

    def __post_init__(self) -> None:
        super().__post_init__()
        lr, wd = self.lr, self.weight_decay
        check(0 < lr < math.inf, "lr", lr, "must be a finite number > 0 (e.g. {key}=0.01)")
        check(0 <= wd < math.inf, "weight_decay", wd, "must be a finite number >= 0 (e.g. {key}=0)")


@dataclasses.dataclass(frozen=True)
class TrainConfig(TaskKnobs, Logging, Schedule, GradClip, Mode, Loop, Sampling, Precision, Seeded):
    """The training loop, the sampled batches and the launcher.

    Made of :class:`~fleetgnn.config.knobs.Seeded`, :class:`~fleetgnn.config.knobs.Precision`,
    :class:`~fleetgnn.config.knobs.Sampling`, :class:`~fleetgnn.config.knobs.Loop`,
    :class:`~fleetgnn.config.knobs.Mode`, :class:`~fleetgnn.config.knobs.GradClip`,
    :class:`~fleetgnn.config.knobs.Schedule`, :class:`~fleetgnn.config.knobs.Logging` and
    :class:`~fleetgnn.config.knobs.TaskKnobs`, and the launcher's own keys:

    Attributes:
        engine: Training strategy, a name of :data:`fleetgnn.config.ENGINES`.
        nproc: Processes to launch on this host (one per device; distributed engines only).
        max_restarts: Times the launcher restarts failed workers (they resume from checkpoints).
        threads: Intra-op CPU threads of each process (``torch.set_num_threads``). ``None``: the
            ``fleetgnn train`` command resolves it (``$OMP_NUM_THREADS`` when set, else the usable
            cores divided by the processes on this host, at least 1; 1 for a small graph) and
            records the value used.
    """

    engine: str = "reference"
    nproc: int = 1
    max_restarts: int = 0
    threads: int | None = None

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"engine": tuple(ENGINES)}

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.nproc >= 1, "nproc", self.nproc, "must be >= 1")
        check(self.max_restarts >= 0, "max_restarts", self.max_restarts, "must be >= 0")
        check(
            self.threads is None or self.threads >= 1,
            "threads",
            self.threads,
            "must be >= 1, or null for the usable cores divided by the processes on this host",
        )


@dataclasses.dataclass(frozen=True)
class StoreConfig(DebugCollectives, Prefetch, TieredStore, DeviceCache, FeatureStorage):
    """The unified store, every distributed engine's debug, every engine's stored feature dtype.

    Made of :class:`~.knobs.FeatureStorage`, :class:`~.knobs.DeviceCache`,
    :class:`~.knobs.TieredStore`, :class:`~.knobs.Prefetch` and
    :class:`~.knobs.DebugCollectives`.
    """


#: The ``fullgraph``, ``split`` and ``offload`` sections are their engines' knob classes.
FullGraphConfig = FullGraphSection
SplitConfig = SplitSection
OffloadConfig = OffloadSection


@dataclasses.dataclass(frozen=True)
class TrainerConfig(TaskKnobs, Logging, Schedule, RunDir, Loop, Seeded):
    """The :class:`~fleetgnn.train.Trainer`'s own settings (the engine has its own config).

    ``train.seed``, the loop's keys (:class:`~.knobs.Loop`: ``train.epochs`` ...), the
    learning-rate schedule (:class:`~.knobs.Schedule`), TensorBoard and callbacks
    (:class:`~.knobs.Logging`), the task's (:class:`~.knobs.TaskKnobs`: ``train.task`` ...) and
    ``run_dir``.
    """


_SECTIONS: dict[str, type[Knobs]] = {
    "data": DataConfig,
    "model": ModelConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
    "store": StoreConfig,
    "fullgraph": FullGraphConfig,
    "split": SplitConfig,
    "offload": OffloadConfig,
}
_TOP_KEYS: tuple[str, ...] = (*_SECTIONS, "run_dir")

#: Knob classes filled from a top-level key rather than a section's.
_FROM_TOP: dict[type[Knobs], str] = {RunDir: "run_dir", ScratchDir: "run_dir"}


def declaring_class(cls: type, name: str) -> type:
    """The class of ``cls``'s MRO whose own annotations declare field ``name``."""
    for c in cls.__mro__:
        if name in c.__dict__.get("__annotations__", {}):
            return c
    raise TypeError(f"{cls.__name__} has no field {name!r}")  # a bug, not user input


def engine_keys(config_cls: type) -> dict[str, str]:
    """The run-config key of each field of a typed config (an engine's or :class:`TrainerConfig`).

    A field is read from the one section made of the knob class that declares it
    (``fullgraph.num_chunks``, ``store.debug_collectives``, ``train.seed``); ``scratch_dir`` and
    ``run_dir`` from the top-level ``run_dir``.
    """
    keys: dict[str, str] = {}
    for f in dataclasses.fields(config_cls):
        owner = declaring_class(config_cls, f.name)
        if owner in _FROM_TOP:
            keys[f.name] = _FROM_TOP[owner]
            continue
        homes = [s for s, sec in _SECTIONS.items() if issubclass(sec, owner)]
        if len(homes) != 1:  # a bug in the declarations, not user input
            raise TypeError(f"{config_cls.__name__}.{f.name}: declared in sections {homes}")
        keys[f.name] = f"{homes[0]}.{f.name}"
    return keys


class ConfigKey(NamedTuple):
    """One run-config key, for ``--list-keys`` and the docs."""

    key: str
    type: str
    default: Any
    help: str
    choices: tuple[Any, ...] | None


def config_keys() -> list[ConfigKey]:
    """Every run-config key with its type, default, allowed values and help, in order."""
    out: list[ConfigKey] = []
    for section, cls in _SECTIONS.items():
        hints, choices, default = _hints(cls), cls.choices(), cls()
        for f in dataclasses.fields(cls):
            out.append(
                ConfigKey(
                    f"{section}.{f.name}",
                    _type_name(hints[f.name]),
                    _plain(getattr(default, f.name)),
                    field_help(cls, f.name),
                    choices.get(f.name),
                )
            )
    out.append(ConfigKey("run_dir", "str or null", None, field_help(RunDir, "run_dir"), None))
    return out


_ROLE_RE = re.compile(r":\w+:`~?([^`]+)`")


def field_help(cls: type, name: str) -> str:
    """The ``Attributes`` entry of the docstring of the class declaring ``name``, as plain text."""
    doc = declaring_class(cls, name).__doc__ or ""
    lines = doc.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == "Attributes:")
    except StopIteration:
        return ""
    text: list[str] = []
    indent = None
    for ln in lines[start + 1 :]:
        if not ln.strip():
            if text:
                break
            continue
        stripped = ln.strip()
        level = len(ln) - len(ln.lstrip())
        if text and level <= (indent or 0):
            break
        if not text and stripped.startswith(f"{name}:"):
            indent = level
            text.append(stripped[len(name) + 1 :].strip())
        elif text:
            text.append(stripped)
    out = " ".join(text)
    out = _ROLE_RE.sub(lambda m: m.group(1).rsplit(".", 1)[-1], out)
    out = out.replace("``None``", "null")  # as YAML and --set spell it
    return out.replace("``", "")


@dataclasses.dataclass(frozen=True)
class Config(RunDir):
    """A whole run's configuration: its sections and ``run_dir``.

    Attributes:
        data: Dataset section.
        model: Model section.
        optim: Optimiser section.
        train: Training-loop section.
        store: Unified-store section (distributed mini-batch engines; debug mode of all).
        fullgraph: Partitioning and exchange pipeline of the ``fullgraph`` engine.
        split: Partition and reporting of the ``split`` engine.
        offload: Chunking, device budget and caching of the ``offload`` engine.
    """

    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    store: StoreConfig = dataclasses.field(default_factory=StoreConfig)
    fullgraph: FullGraphConfig = dataclasses.field(default_factory=FullGraphConfig)
    split: SplitConfig = dataclasses.field(default_factory=SplitConfig)
    offload: OffloadConfig = dataclasses.field(default_factory=OffloadConfig)

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict (YAML/JSON serialisable); :meth:`from_dict` inverts it."""
        out = {s: _plain(dataclasses.asdict(getattr(self, s))) for s in _SECTIONS}
        return {**out, "run_dir": self.run_dir}

    def get(self, key: str) -> Any:
        """The value of ``key`` (``section.name`` or ``run_dir``)."""
        section, _, name = key.partition(".")
        return getattr(getattr(self, section), name) if name else getattr(self, section)

    def with_key(self, key: str, value: Any) -> Config:
        """A copy with ``key`` (``section.name`` or ``run_dir``) set to ``value``, checked.

        Raises:
            ConfigError: A value its field's rule refuses, naming the key.
        """
        section, _, name = key.partition(".")
        if not name:
            return dataclasses.replace(self, **{section: value})
        try:
            new = dataclasses.replace(getattr(self, section), **{name: value})
        except KnobError as e:
            raise e.within(section) from None
        return dataclasses.replace(self, **{section: new})

    @property
    def mode(self) -> str:
        """``train.mode``, or the engine's default mode when it is ``None``."""
        return self.train.mode or engine_spec(self.train.engine).modes[0]

    def engine_config(self) -> EngineConfig:
        """The typed config of ``train.engine``: each field from its key (:func:`engine_keys`).

        ``feature_norm`` is ``"none"`` while ``data.feature_norm`` is ``None`` (the dataset's
        transform, which only the dataset knows: resolve it first with
        :func:`fleetgnn.train.resolve_feature_norm`, as ``fleetgnn train`` and
        :func:`fleetgnn.train.engine_from_config` do).
        """
        cls = engine_spec(self.train.engine).config_cls
        return cls(**{n: self.get(k) for n, k in engine_keys(cls).items()})

    def trainer_config(self) -> TrainerConfig:
        """The Trainer's own settings, each field from its key (:func:`engine_keys`)."""
        return TrainerConfig(**{n: self.get(k) for n, k in engine_keys(TrainerConfig).items()})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Config:
        """Build a config from a nested dict, type-checking every value.

        Missing sections and keys keep their defaults; ``None`` for a section means "defaults".

        Raises:
            ConfigError: An unknown section or key, or a value of the wrong type or not among the
                allowed choices.
        """
        if d is None:
            d = {}
        if not isinstance(d, Mapping):
            raise ConfigError(
                f"a config must be a mapping of sections {list(_TOP_KEYS)}, got "
                f"{type(d).__name__} {d!r}"
            )
        kwargs: dict[str, Any] = {}
        for top, value in d.items():
            top = str(top)
            if top not in _TOP_KEYS:
                raise ConfigError(_unknown_key_message("section", top, _TOP_KEYS))
            if top == "run_dir":
                kwargs[top] = _coerce(value, str | None, "run_dir")
                continue
            section_cls = _SECTIONS[top]
            if value is None:
                value = {}
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"config section '{top}' must be a mapping of keys "
                    f"{_field_names(section_cls)}, got {type(value).__name__} {value!r}"
                )
            kwargs[top] = _build_section(section_cls, top, value)
        return cls(**kwargs)

    def validate(self) -> Config:
        """Check the rules across sections (each section checked its own when built).

        Returns ``self`` for chaining.

        Raises:
            ConfigError: The first violated rule, naming the keys and the valid range.
        """
        t = self.train
        spec = engine_spec(t.engine)
        if t.nproc > 1 and not spec.distributed:
            distributed = ", ".join(n for n, s in ENGINES.items() if s.distributed and s.available)
            raise ConfigError(
                f"train.nproc={t.nproc} but train.engine={t.engine!r} runs in a single process; "
                f"drop --nproc (train.nproc=1), or pick a distributed engine: {distributed}"
            )
        allowed_modes = spec.modes
        if t.mode is not None and t.mode not in allowed_modes:
            raise ConfigError(
                f"train.engine={t.engine!r} does not support train.mode={t.mode!r}; it supports "
                f"{', '.join(allowed_modes)}. Set train.mode={allowed_modes[0]} or pick another "
                f"engine"
            )
        if t.task == "link" and (t.engine, self.mode) not in LINK_ENGINES:
            raise ConfigError(
                "train.task=link: " + link_refusal(t.engine, self.mode, key="train.mode")
            )
        layers = self.model.num_layers
        if self.mode == "minibatch" and len(t.fanouts) != layers:
            raise ConfigError(
                f"train.fanouts={list(t.fanouts)} has {len(t.fanouts)} entries but "
                f"model.num_layers={layers}; in minibatch mode give one fanout per layer, e.g. "
                f"train.fanouts={','.join(['10'] * min(layers, 8))}"
                + (f",... ({layers} entries)" if layers > 8 else "")
            )
        wrong = {k: v for k, v in t.relation_fanouts.items() if len(v) != layers}
        if self.mode == "minibatch" and wrong:
            raise ConfigError(
                f"train.relation_fanouts gives {wrong} but model.num_layers={layers}; in minibatch "
                f"mode give one fanout per layer for every relation"
            )
        self.engine_config()  # the typed config checks its own fields
        return self


def _plain(value: Any) -> Any:
    """``value`` with tuples as lists, recursively (YAML's safe dumper has no tuples)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def load_config(path: PathLikeStr | None = None, overrides: Sequence[str] = ()) -> Config:
    """Load a config from YAML (or defaults), apply ``key=value`` overrides, then validate.

    Args:
        path: YAML file with any subset of the keys (``None``: all defaults).
        overrides: Items ``section.key=value`` or ``run_dir=value``; ``value`` is parsed as
            YAML, bounded (no anchors, aliases or tags; :mod:`fleetgnn.config.textfile`):
            ``train.fanouts=[15,10,5]``, ``train.fanouts=15,10,5``, ``model.norm=null``,
            ``model.residual=true``. Later items win.

    Returns:
        The validated config.

    Raises:
        ConfigError: An unreadable or hostile file (not a regular file, too large, not UTF-8,
            anchors, tags, too deep), invalid YAML, an unknown key, a badly typed value or a
            violated rule.
    """
    raw: Any = {}
    if path is not None:
        raw = load_yaml_file(path, "config file", fix="check the path and the file")
    cfg = Config.from_dict(raw)
    cfg = apply_overrides(cfg, overrides)
    return cfg.validate()


def apply_overrides(cfg: Config, overrides: Sequence[str]) -> Config:
    """Return ``cfg`` with ``key=value`` overrides applied (type-checked, not validated).

    Raises:
        ConfigError: A malformed item, an unknown key or a badly typed value.
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(
                f"override {item!r} is not of the form key=value; e.g. train.epochs=5"
            )
        decode_utf8(  # argv bytes; a path given in other bytes cannot be recorded in config.yaml
            text.encode("utf-8", "surrogateescape"),
            f"--set {key}",
            fix="a path must have a UTF-8 name here: rename it, or link it under a UTF-8 name",
        )
        value = _override_value(text, f"--set {key}")
        if key == "run_dir":
            cfg = dataclasses.replace(cfg, run_dir=_coerce_override(value, text, str | None, key))
            continue
        section, dot, name = key.partition(".")
        if section not in _SECTIONS:
            raise ConfigError(_unknown_key_message("section", section, _TOP_KEYS, item))
        section_cls = _SECTIONS[section]
        if not dot or not name:
            raise ConfigError(
                f"override {item!r} names a section, not a key; use {section}.<key>=value with "
                f"<key> one of {_field_names(section_cls)}"
            )
        hints = _hints(section_cls)
        if name not in hints:
            raise ConfigError(_unknown_key_message("key", name, hints, item, section))
        cfg = cfg.with_key(key, _coerce_override(value, text, hints[name], key))
    return cfg


def _override_value(text: str, where: str) -> Any:
    """The YAML value of an override's text, bounded as config files are.

    Text that is not YAML (e.g. an unbalanced bracket) is kept as a plain string; anchors,
    aliases, tags and deep nesting are refused (:mod:`fleetgnn.config.textfile`).
    """
    return parse_yaml(text, where, invalid_as_text=True) if text.strip() else None


def config_yaml(cfg: Config, *, recorded: bool = False) -> str:
    """``cfg`` as YAML text (:func:`load_config` of it gives ``cfg`` back).

    Args:
        cfg: The config.
        recorded: Write what a run's ``config.yaml`` records: with ``data.dataset`` set, the
            synthetic generator's ``data.preset``/``scale``/``seed`` are left out while at their
            defaults (they played no part in the run, so a real dataset's ``config.yaml`` does
            not claim ``preset: small``; loading restores them unchanged).
    """
    d = cfg.to_dict()
    if recorded and cfg.data.dataset:
        synthetic = DataConfig()
        for key in ("preset", "scale", "seed"):
            if d["data"][key] == getattr(synthetic, key):
                del d["data"][key]
    return yaml.safe_dump(d, sort_keys=False, default_flow_style=None)


def save_config(cfg: Config, path: PathLikeStr, *, recorded: bool = False) -> Path:
    """Write ``cfg`` as YAML (loadable by :func:`load_config`); returns the path.

    ``recorded``: as a run's ``config.yaml`` records it (see :func:`config_yaml`). The write is
    durable (:func:`~fleetgnn.durable.atomic_write_text`: fsynced, renamed into place, the parent
    directory made if needed); a full disk is a one-line
    :class:`~fleetgnn.errors.DiskFullError` and leaves an existing file as it was.
    """
    return atomic_write_text(path, config_yaml(cfg, recorded=recorded))


# --------------------------------------------------------------------------------------------
# type checking


def _hints(cls: type) -> dict[str, Any]:
    fields = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in typing.get_type_hints(cls).items() if k in fields}


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _build_section(cls: type, section: str, values: Mapping[str, Any]) -> Any:
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        name = str(name)
        if name not in hints:
            raise ConfigError(_unknown_key_message("key", name, hints, section=section))
        kwargs[name] = _coerce(value, hints[name], f"{section}.{name}")
    try:
        return cls(**kwargs)
    except KnobError as e:
        raise e.within(section) from None


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against annotation ``tp``; returns it (ints widened to float)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                pass
        raise _type_error(key, value, tp)
    if origin is dict:  # dict[str, Any]: a mapping of names to plain YAML values
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ConfigError(
                f"{key}={value!r} has type {type(value).__name__}, expected a mapping of names "
                f"to values (e.g. {key}={{step_size: 10, gamma: 0.5}})"
            )
        return dict(value)
    if origin in (list, tuple):  # list[X] or tuple[X, ...]
        arg = typing.get_args(tp)[0]
        if not isinstance(value, (list, tuple)):
            raise _type_error(key, value, tp)
        try:
            return origin(_coerce(v, arg, key) for v in value)
        except ConfigError:
            bad = next(v for v in value if not _fits(v, arg, key))
            raise ConfigError(
                f"{key}={list(value)!r} has an element {bad!r} of type {type(bad).__name__}, "
                f"expected {_type_name(tp)} (e.g. {key}=[15,10,5] or {key}=15,10,5)"
            ) from None
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _type_error(key, value, tp)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _type_error(key, value, tp)
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _FLOAT_RE.match(value.strip()):
            return float(value)  # PyYAML reads "1e-3" (no dot) as a string
        raise _type_error(key, value, tp)
    if tp is str:
        if isinstance(value, str):
            return value
        raise _type_error(key, value, tp)
    raise TypeError(f"unsupported config annotation {tp!r} for {key}")  # a bug, not user input


def _fits(value: Any, tp: Any, key: str) -> bool:
    try:
        _coerce(value, tp, key)
    except ConfigError:
        return False
    return True


def _accepts(tp: Any, target: type) -> bool:
    if tp is target:
        return True
    if typing.get_origin(tp) in (Union, types.UnionType):
        return target in typing.get_args(tp)
    return False


def _list_type(tp: Any) -> Any | None:
    if typing.get_origin(tp) in (list, tuple):
        return tp
    if typing.get_origin(tp) in (Union, types.UnionType):
        for a in typing.get_args(tp):
            if typing.get_origin(a) in (list, tuple):
                return a
    return None


def _coerce_override(value: Any, text: str, tp: Any, key: str) -> Any:
    """Like :func:`_coerce`, with command-line conveniences.

    A string field keeps the literal text when YAML read a number or a boolean
    (``data.dataset=2024``); a list field accepts ``a,b,c`` and a single scalar.
    """
    if _accepts(tp, str) and value is not None and not isinstance(value, (str, list, dict)):
        return text.strip()
    list_tp = _list_type(tp)
    if list_tp is not None:
        if isinstance(value, str) and "," in value:
            parts = [p.strip() for p in value.split(",")]
            parsed: list[Any] = []
            for part in parts:
                parsed.append(_override_value(part, f"--set {key}") if part else part)
            value = parsed
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
            value = [value]
    return _coerce(value, tp, key)


def _type_error(key: str, value: Any, tp: Any) -> ConfigError:
    example = {
        "int": "an integer such as 5",
        "float": "a number such as 0.01",
        "bool": "true or false",
        "str": "a string",
    }
    hint = example.get(_type_name(tp).split(" or ")[0], "")
    return ConfigError(
        f"{key}={value!r} has type {type(value).__name__}, expected {_type_name(tp)}"
        + (f" ({hint})" if hint else "")
    )


def _unknown_key_message(
    what: str,
    name: str,
    valid: Any,
    item: str | None = None,
    section: str | None = None,
) -> str:
    valid = list(valid)
    full = f"{section}.{name}" if section else name
    where = f" (in override {item!r})" if item is not None else ""
    msg = f"unknown config {what} {full!r}{where}; valid {what}s: {', '.join(valid)}"
    close = nearest(name, valid)
    if close is not None:
        msg += f". Did you mean '{section + '.' if section else ''}{close}'?"
    return msg
