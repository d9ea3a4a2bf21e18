"""Run configuration: typed dataclasses, loadable from YAML, with ``key=value`` overrides.

A :class:`Config` has four sections and a run directory::

    data:   {dataset, preset, scale, seed, cache_dir}
    model:  {name, hidden, num_layers, dropout, heads, norm, residual}
    optim:  {lr, weight_decay, optimizer}
    train:  {engine, mode, epochs, batch_size, fanouts, eval_every, patience, seed,
             checkpoint_every, checkpoint_interval, max_steps, device, dtype, nproc,
             max_restarts, threads, eval_nodes}
    run_dir: str | null

:func:`load_config` reads an optional YAML file (any subset of the keys; missing keys keep their
defaults), applies overrides such as ``train.epochs=5``, ``model.name=gat``,
``train.fanouts=[15,10,5]`` or ``train.fanouts=15,10,5`` (values are parsed as YAML, with the
bounds of :mod:`fleetgnn.config.textfile`), type-checks every value against the dataclass
annotations and runs :meth:`Config.validate` for the cross-field rules. Enumerated choices are
class-level constants (e.g. :attr:`ModelConfig.NAMES`). Configs never read environment variables.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Union

import yaml

from fleetgnn.config.engines import (
    DTYPES,
    ENGINES,
    EVAL_NODES,
    FEATURE_NORMS,
    GATHERS,
    ORDERS,
    PARTITIONS,
    PLACEMENTS,
    SPLIT_PARTITIONS,
    EngineConfig,
    engine_spec,
)
from fleetgnn.config.textfile import decode_utf8, load_yaml_file, parse_yaml
from fleetgnn.config.units import parse_bytes
from fleetgnn.errors import ConfigError
from fleetgnn.types import PathLikeStr

_DEVICE_RE = re.compile(r"^(cpu|auto|cuda(:\d+)?)$")
_FLOAT_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


@dataclasses.dataclass
class DataConfig:
    """Where the graph comes from.

    Attributes:
        dataset: Dataset directory written by ``fleetgnn prepare``; ``None`` uses the embedded
            synthetic generator with ``preset``.
        preset: Synthetic preset name (used when ``dataset`` is ``None``).
        scale: Size multiplier of the synthetic preset (> 0).
        seed: Seed of the synthetic generator.
        cache_dir: Directory where generated datasets are cached (``None``: the CLI's default,
            ``$XDG_CACHE_HOME/fleetgnn``).
        feature_norm: ``"row"`` scales each feature row to sum 1 (as in the GCN paper's
            preprocessing of bag-of-words features), ``"none"`` keeps features as stored;
            ``None`` (default): the dataset's customary transform, the ``feature_norm`` its
            ``meta.json`` records (``"row"`` for ``prepare planetoid`` / ``prepare npz``; absent
            means ``"none"``). ``fleetgnn train`` resolves ``None`` before it starts
            (:func:`fleetgnn.train.resolve_feature_norm`) and records the value used in
            ``config.yaml``.
    """

    dataset: str | None = None
    preset: str = "small"
    scale: float = 1.0
    seed: int = 0
    cache_dir: str | None = None
    feature_norm: str | None = None

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"feature_norm": (*FEATURE_NORMS, None)}


@dataclasses.dataclass
class ModelConfig:
    """The GNN.

    Attributes:
        name: Layer type, one of :attr:`NAMES`.
        hidden: Hidden width (``None``: the model's default).
        num_layers: Number of message-passing layers (>= 1).
        dropout: Dropout probability in [0, 1) (``None``: the model's default).
        heads: Attention heads (GAT; ``None``: the model's default).
        norm: Normalisation between layers, one of :attr:`NORMS`.
        residual: Add residual connections between layers of equal width.
    """

    NAMES: ClassVar[tuple[str, ...]] = ("gcn", "sage", "gat", "gin")
    NORMS: ClassVar[tuple[str | None, ...]] = (None, "layer")

    name: str = "sage"
    hidden: int | None = None
    num_layers: int = 2
    dropout: float | None = None
    heads: int | None = None
    norm: str | None = None
    residual: bool = False

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"name": NAMES, "norm": NORMS}


@dataclasses.dataclass
class OptimConfig:
    """The optimiser.

    Attributes:
        lr: Learning rate (> 0).
        weight_decay: L2 penalty (>= 0).
        optimizer: One of :attr:`OPTIMIZERS`.
    """

    OPTIMIZERS: ClassVar[tuple[str, ...]] = ("adam", "adamw", "sgd")

    lr: float = 0.01
    weight_decay: float = 5e-4
    optimizer: str = "adam"

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"optimizer": OPTIMIZERS}


@dataclasses.dataclass
class TrainConfig:
    """The training loop.

    Attributes:
        engine: Training strategy, a name of :data:`fleetgnn.config.ENGINES`.
        mode: ``"full"`` (full-graph) or ``"minibatch"`` (sampled); ``None``: the engine's
            default (its first mode in the registry: ``fullgraph`` implies ``full``).
        epochs: Number of epochs (>= 1).
        batch_size: Seed nodes per mini-batch (>= 1; minibatch mode).
        fanouts: Neighbours sampled per hop, the hop next to the seeds first (PyG's order; one
            per model layer in minibatch mode; each >= 1, or -1 for all neighbours).
        eval_every: Evaluate every this many epochs (and always after the last one).
        patience: Stop when ``val_acc`` has not improved for this many epochs (``None``: never).
        seed: Seed of everything random in training (batches, sampling, dropout, init).
        checkpoint_every: Save a checkpoint every this many optimisation steps, counted over the
            whole run (``0``: no step cadence, see ``checkpoint_interval``).
        checkpoint_interval: Also save one at the first epoch end after this many seconds since
            the last save (``0``: at every epoch end). The run's end and an interrupt (Ctrl-C,
            SIGTERM) always save one.
        max_steps: Stop after this many optimisation steps over the whole run (a resumed run's
            earlier steps count; every rank stops at the same step), mid-epoch if need be, with
            a checkpoint and one evaluation at the end (``None``: no limit).
        device: ``"auto"`` (the default: CUDA where available, else the CPU), ``"cpu"`` (also
            where CUDA exists; gloo collectives), ``"cuda"`` (requires CUDA; each rank its local
            GPU, or ranks sharing GPUs when there are fewer GPUs than ranks) or ``"cuda:N"`` (one
            process). The same for every engine; ``config.yaml`` records the device that ran.
        dtype: Floating-point type of features and parameters, one of :attr:`DTYPES`.
        nproc: Processes to launch on this host (one per device; distributed engines only).
        max_restarts: Times the launcher restarts failed workers (they resume from checkpoints).
        threads: Intra-op CPU threads of each process (``torch.set_num_threads``). ``None``: the
            ``fleetgnn train`` command resolves it (``$OMP_NUM_THREADS`` when set, else the usable
            cores divided by the processes on this host, at least 1; 1 for a small graph, see
            :func:`~fleetgnn.train.resolve.small_graph`) and records the value used.
        eval_nodes: Which nodes evaluation's last layer computes in the sampled engines'
            streaming layer-wise inference (``reference`` in minibatch mode, ``minibatch``,
            ``split``): ``"all"`` (default) every node, ``"labelled"`` only the nodes in the
            train/val/test masks. The metrics are the same (only masked nodes count); each
            earlier layer computes (and keeps in scratch) only the nodes the next one reads, so
            ``labelled`` saves work and disk on graphs where few nodes are labelled (see
            :mod:`fleetgnn.engines.inference`). ``fullgraph`` and ``offload`` evaluate the whole
            graph in their own forward pass and ignore it.
    """

    MODES: ClassVar[tuple[str | None, ...]] = ("full", "minibatch", None)
    DTYPES: ClassVar[tuple[str, ...]] = DTYPES

    engine: str = "reference"
    mode: str | None = None
    epochs: int = 10
    batch_size: int = 1024
    fanouts: list[int] = dataclasses.field(default_factory=lambda: [10, 10])
    eval_every: int = 1
    patience: int | None = None
    seed: int = 0
    checkpoint_every: int = 50
    checkpoint_interval: float = 60.0
    max_steps: int | None = None
    device: str = "auto"
    dtype: str = "float32"
    nproc: int = 1
    max_restarts: int = 0
    threads: int | None = None
    eval_nodes: str = "all"

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "engine": tuple(ENGINES),
        "mode": MODES,
        "dtype": DTYPES,
        "eval_nodes": EVAL_NODES,
    }


@dataclasses.dataclass
class StoreConfig:
    """The unified feature/topology store of the distributed mini-batch engines.

    Attributes:
        device_budget: Bytes of device memory per rank for hot rows (e.g. ``"64MB"``,
            ``"1.5GiB"``; ``None``: unlimited). On a CPU machine this is process memory, so
            tiering decisions happen there too.
        host_budget: Bytes of host memory per host (machine) for the next-hottest rows: one
            copy shared by all the ranks on the host, never more than this (``None``:
            unlimited); the rest is read from the dataset's memory map on disk.
        placement: Hotness ranking, one of :attr:`PLACEMENTS` (``presample`` counts accesses
            over sampled batches).
        order: Which gets the device budget first, one of :attr:`ORDERS` (XGNN: graph first).
        gather: ``one_sided`` reads peers' shards in shared memory directly (every rank on
            one host); ``two_sided`` exchanges requests and rows with all-to-all (what ranks on
            different hosts do); ``auto`` (default) is one-sided on one host and two-sided when
            the ranks span hosts (the engine says which it picked).
        topology: Device link bandwidths for XGNN's placement solver (which device each rank
            reads each hot-row partition from): ``null`` (equally connected), ``dgx1-v100``, or
            a YAML/JSON file with an ``N x N`` matrix.
        prefetch: Sample and gather the next batch in a background thread during training.
        debug_collectives: Verify shapes and counts across ranks before every collective and
            report every rank's view instead of hanging on a mismatch.
    """

    PLACEMENTS: ClassVar[tuple[str, ...]] = PLACEMENTS
    ORDERS: ClassVar[tuple[str, ...]] = ORDERS
    GATHERS: ClassVar[tuple[str, ...]] = GATHERS

    device_budget: str | None = None
    host_budget: str | None = None
    placement: str = "degree"
    order: str = "graph_first"
    gather: str = "auto"
    topology: str | None = None
    prefetch: bool = True
    debug_collectives: bool = False

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "placement": PLACEMENTS,
        "order": ORDERS,
        "gather": GATHERS,
    }


@dataclasses.dataclass
class FullGraphConfig:
    """The ``fullgraph`` engine's partitioning and halo-exchange pipeline (MGG).

    Attributes:
        partition: ``range`` (MGG's edge-balanced contiguous ranges) or ``metis`` (the graph is
            relabelled so each METIS part is a contiguous range), see :attr:`PARTITIONS`.
        num_chunks: Chunks K the halo rows of each layer are exchanged in (``None``: tuned, or
            1 without tuning).
        depth: Chunks in flight at once, MGG's interleave distance; 0 exchanges everything
            before aggregating (``None``: tuned, or 1 without tuning).
        tune: Search ``(num_chunks, depth)`` online, one epoch per trial (MGG's greedy search),
            over the knobs left ``None``.
    """

    PARTITIONS: ClassVar[tuple[str, ...]] = PARTITIONS

    partition: str = "range"
    num_chunks: int | None = None
    depth: int | None = None
    tune: bool = True

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"partition": PARTITIONS}


@dataclasses.dataclass
class OffloadConfig:
    """The ``offload`` engine's chunking, device budget and caching (HongTu).

    Attributes:
        partition: First-level partition, one part per rank (``metis`` or ``range``).
        chunks: Chunks per part (``null``: the smallest power of two that fits the budget).
        device_budget: Live device bytes per rank, e.g. ``256MB`` (``null``: 90% of the free
            device memory on CUDA, unbounded on CPU).
        reorganize: Reorder chunks greedily (HongTu Alg. 4) when its cost model says it pays.
        cache_aggregates: Cache aggregation outputs of parameter-free aggregations in host
            memory (``null``: where the model allows, ``true``: every layer, ``false``: never).
    """

    PARTITIONS: ClassVar[tuple[str, ...]] = PARTITIONS

    partition: str = "metis"
    chunks: int | None = None
    device_budget: str | None = None
    reorganize: bool = True
    cache_aggregates: bool | None = None

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"partition": PARTITIONS}


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """The :class:`~fleetgnn.train.Trainer`'s own settings (the engine has its own config).

    Attributes:
        epochs: Number of epochs (>= 1).
        eval_every: Evaluate every this many epochs (and always after the last one; >= 1).
        patience: Stop when ``val_acc`` has not improved for this many epochs (``None``: never).
        checkpoint_every: Checkpoint every this many optimisation steps over the run (``0``: no
            step cadence).
        checkpoint_interval: Also checkpoint at the first epoch end after this many seconds since
            the last checkpoint (``0``: at every epoch end; >= 0). The run's end and an
            interrupt always checkpoint.
        max_steps: Stop after this many optimisation steps over the run, resumed steps included
            (``None``: no limit; >= 1).
        seed: Seeds Python's, NumPy's and torch's global generators at the start of a fresh run.
        run_dir: Where checkpoints, metrics and the summary go (``None``: the caller chooses).
    """

    epochs: int = 10
    eval_every: int = 1
    patience: int | None = None
    checkpoint_every: int = 50
    checkpoint_interval: float = 60.0
    max_steps: int | None = None
    seed: int = 0
    run_dir: str | None = None

    def __post_init__(self) -> None:
        _check(self.epochs >= 1, "epochs", self.epochs, "must be >= 1")
        _check(self.eval_every >= 1, "eval_every", self.eval_every, "must be >= 1")
        _check(self.patience is None or self.patience >= 1, "patience", self.patience, ">= 1")
        _check(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every, ">= 0")
        _check(
            0 <= self.checkpoint_interval < float("inf"),
            "checkpoint_interval",
            self.checkpoint_interval,
            "must be >= 0 seconds",
        )
        _check(self.max_steps is None or self.max_steps >= 1, "max_steps", self.max_steps, ">= 1")


@dataclasses.dataclass
class SplitConfig:
    """The ``split`` engine's partition and reporting (GSplit).

    Attributes:
        partition: Offline partition deciding vertex ownership, see :attr:`PARTITIONS`.
        book: A saved partition book directory (``null``: the dataset's
            ``partitions/<partition>-<W>`` if present, else computed once on rank 0).
        report_dp: Report the data-parallel counterfactual (redundant edges, host bytes); off by
            default (W extra samplings per step on rank 0; the planner's replay counts it
            offline).
    """

    PARTITIONS: ClassVar[tuple[str, ...]] = SPLIT_PARTITIONS

    partition: str = "metis"
    book: str | None = None
    report_dp: bool = False

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"partition": PARTITIONS}


_SECTIONS: dict[str, type] = {
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


@dataclasses.dataclass
class Config:
    """A whole run's configuration.

    Attributes:
        data: Dataset section.
        model: Model section.
        optim: Optimiser section.
        train: Training-loop section.
        store: Unified-store section (distributed mini-batch engines).
        fullgraph: Partitioning and exchange pipeline of the ``fullgraph`` engine.
        split: Partition and reporting of the ``split`` engine.
        offload: Chunking, device budget and caching of the ``offload`` engine.
        run_dir: Directory for checkpoints, metrics and the summary (``None``: chosen by the CLI).
    """

    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    store: StoreConfig = dataclasses.field(default_factory=StoreConfig)
    fullgraph: FullGraphConfig = dataclasses.field(default_factory=FullGraphConfig)
    split: SplitConfig = dataclasses.field(default_factory=SplitConfig)
    offload: OffloadConfig = dataclasses.field(default_factory=OffloadConfig)
    run_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict (YAML/JSON serialisable); :meth:`from_dict` inverts it."""
        return dataclasses.asdict(self)

    @property
    def mode(self) -> str:
        """``train.mode``, or the engine's default mode when it is ``None``."""
        return self.train.mode or engine_spec(self.train.engine).modes[0]

    def engine_config(self) -> EngineConfig:
        """The typed config of ``train.engine``, filled from this run config's sections.

        Each field of the engine's config class takes the value of the key of the same name in
        the first section (of the registry entry's ``sections``) that has it; ``feature_norm``
        comes from ``data``, ``mode`` is :attr:`mode`, ``scratch_dir`` (evaluation's scratch
        files, offload's relabelled topology) is :attr:`run_dir`. Fields no section has keep
        their defaults, and so does ``feature_norm`` while ``data.feature_norm`` is ``None``
        (the dataset's transform, which only the dataset knows: resolve it first with
        :func:`fleetgnn.train.resolve_feature_norm`, as ``fleetgnn train`` and
        :func:`fleetgnn.train.engine_from_config` do).
        """
        spec = engine_spec(self.train.engine)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(spec.config_cls):
            if f.name == "mode":
                values["mode"] = self.mode
                continue
            if f.name == "scratch_dir":
                values["scratch_dir"] = self.run_dir
                continue
            for section in spec.sections:
                sec = getattr(self, section)
                if hasattr(sec, f.name):
                    if f.name == "feature_norm" and sec.feature_norm is None:
                        break  # unresolved: the engine config's default
                    values[f.name] = getattr(sec, f.name)
                    break
        return spec.config_cls(**values)

    def trainer_config(self) -> TrainerConfig:
        """The Trainer's own settings from the ``train`` section and ``run_dir``."""
        names = [f.name for f in dataclasses.fields(TrainerConfig) if f.name != "run_dir"]
        return TrainerConfig(**{n: getattr(self.train, n) for n in names}, run_dir=self.run_dir)

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
        """Check the cross-field and range rules; returns ``self`` for chaining.

        Raises:
            ConfigError: The first violated rule, naming the keys and the valid range.
        """
        d, m, o, t = self.data, self.model, self.optim, self.train
        _check(d.scale > 0, "data.scale", d.scale, "must be > 0")
        _check(m.num_layers >= 1, "model.num_layers", m.num_layers, "must be >= 1")
        _check(m.hidden is None or m.hidden >= 1, "model.hidden", m.hidden, "must be >= 1 or null")
        _check(
            m.dropout is None or 0.0 <= m.dropout < 1.0,
            "model.dropout",
            m.dropout,
            "must be in [0, 1) or null",
        )
        _check(m.heads is None or m.heads >= 1, "model.heads", m.heads, "must be >= 1 or null")
        _check(o.lr > 0, "optim.lr", o.lr, "must be > 0 (e.g. optim.lr=0.01)")
        _check(o.weight_decay >= 0, "optim.weight_decay", o.weight_decay, "must be >= 0")
        _check(t.epochs >= 1, "train.epochs", t.epochs, "must be >= 1")
        _check(t.batch_size >= 1, "train.batch_size", t.batch_size, "must be >= 1")
        _check(t.eval_every >= 1, "train.eval_every", t.eval_every, "must be >= 1")
        _check(t.patience is None or t.patience >= 1, "train.patience", t.patience, "must be >= 1")
        _check(
            t.checkpoint_every >= 0, "train.checkpoint_every", t.checkpoint_every, "must be >= 0"
        )
        _check(
            0 <= t.checkpoint_interval < float("inf"),
            "train.checkpoint_interval",
            t.checkpoint_interval,
            "must be >= 0 seconds (0: at every epoch end)",
        )
        _check(
            t.max_steps is None or t.max_steps >= 1,
            "train.max_steps",
            t.max_steps,
            "must be >= 1, or null for no limit",
        )
        _check(t.nproc >= 1, "train.nproc", t.nproc, "must be >= 1")
        _check(t.max_restarts >= 0, "train.max_restarts", t.max_restarts, "must be >= 0")
        _check(
            t.threads is None or t.threads >= 1,
            "train.threads",
            t.threads,
            "must be >= 1, or null for the usable cores divided by the processes on this host",
        )
        spec = engine_spec(t.engine)
        if t.nproc > 1 and not spec.distributed:
            distributed = ", ".join(n for n, s in ENGINES.items() if s.distributed and s.available)
            raise ConfigError(
                f"train.nproc={t.nproc} but train.engine={t.engine!r} runs in a single process; "
                f"drop --nproc (train.nproc=1), or pick a distributed engine: {distributed}"
            )
        for name in ("device_budget", "host_budget"):
            value = getattr(self.store, name)
            if value is not None:
                parse_bytes(value, f"store.{name}")
        _check(
            bool(_DEVICE_RE.match(t.device)),
            "train.device",
            t.device,
            "must be 'cpu', 'cuda', 'cuda:N' or 'auto'",
        )
        _check(
            all(f >= 1 or f == -1 for f in t.fanouts),
            "train.fanouts",
            t.fanouts,
            "every fanout must be >= 1, or -1 for all neighbours",
        )
        fg = self.fullgraph
        _check(
            fg.num_chunks is None or fg.num_chunks >= 1,
            "fullgraph.num_chunks",
            fg.num_chunks,
            "must be >= 1 (or null to tune)",
        )
        _check(
            fg.depth is None or fg.depth >= 0,
            "fullgraph.depth",
            fg.depth,
            "must be >= 0 (or null to tune)",
        )
        allowed_modes = spec.modes
        if t.mode is not None and t.mode not in allowed_modes:
            raise ConfigError(
                f"train.engine={t.engine!r} does not support train.mode={t.mode!r}; it supports "
                f"{', '.join(allowed_modes)}. Set train.mode={allowed_modes[0]} or pick another "
                f"engine"
            )
        if self.mode == "minibatch" and len(t.fanouts) != m.num_layers:
            raise ConfigError(
                f"train.fanouts={t.fanouts} has {len(t.fanouts)} entries but model.num_layers="
                f"{m.num_layers}; in minibatch mode give one fanout per layer, e.g. "
                f"train.fanouts={','.join(['10'] * m.num_layers)}"
            )
        self.engine_config()  # the typed config checks its own fields
        return self


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
        decode_utf8(text.encode("utf-8", "surrogateescape"), f"--set {key}")  # argv bytes
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
        coerced = _coerce_override(value, text, hints[name], key)
        _check_choice(section_cls, name, coerced, key)
        new_section = dataclasses.replace(getattr(cfg, section), **{name: coerced})
        cfg = dataclasses.replace(cfg, **{section: new_section})
    return cfg


def _override_value(text: str, where: str) -> Any:
    """The YAML value of an override's text, bounded as config files are.

    Text that is not YAML (e.g. an unbalanced bracket) is kept as a plain string; anchors,
    aliases, tags and deep nesting are refused (:mod:`fleetgnn.config.textfile`).
    """
    return parse_yaml(text, where, invalid_as_text=True) if text.strip() else None


def save_config(cfg: Config, path: PathLikeStr) -> Path:
    """Write ``cfg`` as YAML (loadable by :func:`load_config`); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(text)
    tmp.replace(p)
    return p


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
        key = f"{section}.{name}"
        kwargs[name] = _coerce(value, hints[name], key)
        _check_choice(cls, name, kwargs[name], key)
    return cls(**kwargs)


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        (arg,) = typing.get_args(tp)
        return f"list of {_type_name(arg)}"
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
    if origin is list:
        (arg,) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise _type_error(key, value, tp)
        try:
            return [_coerce(v, arg, key) for v in value]
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
    if typing.get_origin(tp) is list:
        return tp
    if typing.get_origin(tp) in (Union, types.UnionType):
        for a in typing.get_args(tp):
            if typing.get_origin(a) is list:
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


def _check_choice(cls: type, name: str, value: Any, key: str) -> None:
    choices = getattr(cls, "CHOICES", {}).get(name)
    if choices is None or value in choices:
        return
    shown = ", ".join("null" if c is None else str(c) for c in choices)
    msg = f"{key}={value!r} is not an allowed value; choose one of: {shown}"
    if isinstance(value, str):
        close = difflib.get_close_matches(value, [c for c in choices if isinstance(c, str)], n=1)
        if close:
            msg += f". Did you mean {key}={close[0]}?"
    raise ConfigError(msg)


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
    close = difflib.get_close_matches(name, valid, n=1)
    if close:
        msg += f". Did you mean '{section + '.' if section else ''}{close[0]}'?"
    return msg


def _check(ok: bool, key: str, value: Any, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: {rule}")
