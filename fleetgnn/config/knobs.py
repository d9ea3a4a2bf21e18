"""Every setting, declared once: small frozen dataclasses of related fields ("knobs").

Each knob class declares its fields, their defaults, their allowed values (``CHOICES``) and their
help (the ``Attributes`` section of its docstring), and checks them in ``__post_init__``. The
YAML sections of the run config (:mod:`fleetgnn.config.run`) and the typed configs built from it
(the engines' in :mod:`fleetgnn.config.engines`, the Trainer's) are composed of these classes
by inheritance and declare no field of their own that another class declares:

=================== ============ ====================================================
knob class          YAML section used by
=================== ============ ====================================================
:class:`Seeded`     ``train``    every engine, the Trainer
:class:`Precision`  ``train``    every engine
:class:`FeatureNorm` ``data``    every engine
:class:`Sampling`   ``train``    reference, minibatch, split
:class:`Mode`       ``train``    reference
:class:`Loop`       ``train``    the Trainer
:class:`GradClip`   ``train``    every engine (the step skeleton clips)
:class:`Schedule`   ``train``    the Trainer
:class:`Logging`    ``train``    the Trainer
:class:`TaskKnobs`  ``train``    the Trainer, ``fleetgnn train`` (the task object)
:class:`DeviceCache` ``store``   minibatch, split
:class:`TieredStore` ``store``   minibatch
:class:`Prefetch`   ``store``    minibatch, split
:class:`DebugCollectives` ``store`` minibatch, split, fullgraph, offload
:class:`SplitSection` ``split``  split
:class:`FullGraphSection` ``fullgraph`` fullgraph
:class:`OffloadSection` ``offload`` offload
:class:`RunDir`     ``run_dir``  the Trainer (``scratch_dir`` of the engines too)
=================== ============ ====================================================

Errors raised here name the bare field (``epochs=0 is invalid``); the run-config loader
qualifies them with their section (``train.epochs=0``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from fleetgnn.config.suggest import nearest
from fleetgnn.config.units import parse_bytes
from fleetgnn.errors import ConfigError

DTYPES: tuple[str, ...] = ("float32", "float64")
#: Largest fanout: more neighbours than int32 node IDs can name is a typo, not a sample size.
MAX_FANOUT = 2**31 - 1
AUTOCASTS: tuple[str | None, ...] = (None, "bf16")
FEATURE_NORMS: tuple[str, ...] = ("none", "row")
#: Stored feature dtypes (``store.feature_dtype``; :mod:`fleetgnn.graph.compact`).
FEATURE_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16", "float8_e4m3")
#: Short names accepted for :data:`FEATURE_DTYPES`.
FEATURE_DTYPE_ALIASES: Mapping[str, str] = {
    "fp32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp8": "float8_e4m3",
    "float8": "float8_e4m3",
}
PLACEMENTS: tuple[str, ...] = ("degree", "presample")
#: Where the ``minibatch`` engine samples (``store.sampling``).
SAMPLINGS: tuple[str, ...] = ("auto", "host", "device")
ORDERS: tuple[str, ...] = ("graph_first", "features_first")
GATHERS: tuple[str, ...] = ("auto", "one_sided", "two_sided")
PARTITIONS: tuple[str, ...] = ("range", "metis")
SPLIT_PARTITIONS: tuple[str, ...] = ("metis", "random", "range", "hash")
EVAL_NODES: tuple[str, ...] = ("all", "labelled")
MODES: tuple[str | None, ...] = ("full", "minibatch", None)
INTERVALS: tuple[str, ...] = ("step", "epoch")
TASKS: tuple[str, ...] = ("node", "link")
NEGATIVE_SAMPLERS: tuple[str, ...] = ("uniform", "degree")
DECODERS: tuple[str, ...] = ("dot", "mlp", "distmult")
LINK_LOSSES: tuple[str, ...] = ("bce", "bpr")
#: ``train.temporal``: use the edge (and node) times (see :class:`TaskKnobs`).
TEMPORAL_MODES: tuple[str, ...] = ("auto", "on", "off")
#: ``train.temporal_strategy``: which earlier in-edges the temporal sampler takes.
TEMPORAL_STRATEGIES: tuple[str, ...] = ("uniform", "last")

_DEVICE_RE = re.compile(r"^(cpu|auto|cuda(:\d+)?)$")


class KnobError(ConfigError):
    """A field's value breaks its rule; :meth:`within` names it with its section.

    Args:
        name: The field.
        value: The bad value.
        rule: What is wrong, a template in which ``{key}`` stands for the field's full key.
        whole: ``rule`` is the whole message, not what follows ``key=value``.
    """

    def __init__(self, name: str, value: Any, rule: str, whole: bool = False) -> None:
        self.name, self.value, self.rule, self.whole = name, value, rule, whole
        super().__init__(self._text(name))

    def _text(self, key: str) -> str:
        shown = list(self.value) if isinstance(self.value, tuple) else self.value
        rule = self.rule.replace("{key}", key)
        return rule if self.whole else f"{key}={shown!r} {rule}"

    def within(self, section: str) -> ConfigError:
        """The same error, the field named ``section.name``."""
        return ConfigError(self._text(f"{section}.{self.name}"))


def check(ok: bool, name: str, value: Any, rule: str) -> None:
    """Raise :class:`KnobError` ``name=value is invalid: rule`` unless ``ok``."""
    if not ok:
        raise KnobError(name, value, f"is invalid: {rule}")


def check_choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    """Raise :class:`KnobError` listing ``choices`` (and the nearest) unless ``value`` is one."""
    if value in choices:
        return
    shown = ", ".join("null" if c is None else str(c) for c in choices)
    rule = f"is not an allowed value; choose one of: {shown}"
    if isinstance(value, str):
        close = nearest(value, [c for c in choices if isinstance(c, str)])
        if close is not None:
            rule += f". Did you mean {{key}}={close}?"
    raise KnobError(name, value, rule)


def _check_int(name: str, value: Any, low: int, none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    check(ok, name, value, f"must be an int >= {low}" + (" or null" if none_ok else ""))


@dataclasses.dataclass(frozen=True)
class Knobs:
    """Root of the knob classes: checks every field listed in a ``CHOICES`` of the class."""

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    def __post_init__(self) -> None:
        for name, choices in self.choices().items():
            check_choice(name, getattr(self, name), choices)

    @classmethod
    def choices(cls) -> dict[str, tuple[Any, ...]]:
        """The allowed values of each enumerated field, over every knob class ``cls`` is made of."""
        out: dict[str, tuple[Any, ...]] = {}
        for c in reversed(cls.__mro__):
            out.update(c.__dict__.get("CHOICES", {}))
        return {k: v for k, v in out.items() if k in {f.name for f in dataclasses.fields(cls)}}


@dataclasses.dataclass(frozen=True)
class Seeded(Knobs):
    """The training seed.

    Attributes:
        seed: Seed of everything random in training (batches, sampling, dropout, initialisation),
            each draw keyed by ``(seed, epoch, step)``; the Trainer also seeds Python's, NumPy's
            and torch's global generators with it at the start of a fresh run.
    """

    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Precision(Knobs):
    """Where and in which floating-point type an engine computes.

    Attributes:
        device: ``"auto"`` (CUDA where available, else the CPU), ``"cpu"`` (also where CUDA
            exists; gloo collectives), ``"cuda"`` (each rank its local GPU, or ranks sharing GPUs
            when there are fewer GPUs than ranks) or ``"cuda:N"`` (one process). The distributed
            engines run on their rank's device and refuse a context on another device type;
            ``config.yaml`` records the device that ran.
        dtype: Floating-point type of features and parameters.
        autocast: ``"bf16"``: mixed precision. Every training step's forward (and the
            ``offload`` engine's recomputing backward) runs under ``torch.autocast`` in
            bfloat16 on the CPU and on CUDA; parameters, optimizer state, the loss and the
            graph reductions (``gspmm``, ``edge_softmax``) stay float32; rows that travel
            (halo and shuffle rows of ``fullgraph`` and ``split`` and their gradients,
            ``offload``'s host vertex rows) are bfloat16, half the bytes, in training and
            evaluation; ``minibatch`` reads its feature store as stored. Evaluation computes in
            float32. Needs ``dtype=float32``.
            ``null``: no autocast.
    """

    device: str = "auto"
    dtype: str = "float32"
    autocast: str | None = None

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"dtype": DTYPES, "autocast": AUTOCASTS}

    def __post_init__(self) -> None:
        super().__post_init__()
        check(
            isinstance(self.device, str) and bool(_DEVICE_RE.match(self.device)),
            "device",
            self.device,
            "must be 'cpu', 'cuda', 'cuda:N' or 'auto'",
        )
        if self.autocast is not None and self.dtype != "float32":
            raise KnobError(
                "autocast",
                self.autocast,
                f"needs float32 master weights (train.dtype={self.dtype!r}); set "
                "train.dtype=float32 or train.autocast=null",
            )


@dataclasses.dataclass(frozen=True)
class FeatureNorm(Knobs):
    """The feature transform.

    Attributes:
        feature_norm: ``"row"`` scales each feature row to sum 1 (the GCN paper's preprocessing
            of bag-of-words features), ``"none"`` keeps features as stored; ``None``: the
            dataset's customary transform, the ``feature_norm`` its ``meta.json`` records
            (``"row"`` for ``prepare planetoid`` / ``prepare npz``; absent means ``"none"``).
            ``fleetgnn train`` resolves ``None`` before it starts
            (:func:`fleetgnn.train.resolve_feature_norm`) and records the value used; an engine
            config given ``None`` uses ``"none"``.
    """

    feature_norm: str | None = None

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"feature_norm": (*FEATURE_NORMS, None)}


@dataclasses.dataclass(frozen=True)
class FeatureStorage(Knobs):
    """How the feature rows are stored (every engine).

    Attributes:
        feature_dtype: The dtype feature rows are stored in: ``float32``, ``bfloat16``,
            ``float16`` or ``float8_e4m3`` (with a float32 scale per row; short names ``fp32``,
            ``bf16``, ``fp16``, ``fp8``), converted once when the engine loads the graph;
            ``None``: as the dataset stores them. The unified store's tiers (``minibatch``,
            ``split``) hold the compact rows, so a ``device_budget`` holds 2x (16-bit) or about
            4x (float8) the rows, and read them back to the compute dtype in the gather; the
            other engines compute on the same read-back values (:mod:`fleetgnn.graph.compact`).
        edge_feature_dtype: The same for the edge feature rows (``edge_attr``, read by models
            with edge features): the store's edge table (``minibatch``) holds them compact, the
            other engines compute on the read-back values; ``None``: as the dataset stores them.
    """

    feature_dtype: str | None = None
    edge_feature_dtype: str | None = None

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "feature_dtype": (*FEATURE_DTYPES, None),
        "edge_feature_dtype": (*FEATURE_DTYPES, None),
    }

    def __post_init__(self) -> None:
        for key in ("feature_dtype", "edge_feature_dtype"):
            name = getattr(self, key)
            if isinstance(name, str) and name.lower() in FEATURE_DTYPE_ALIASES:
                object.__setattr__(self, key, FEATURE_DTYPE_ALIASES[name.lower()])
        super().__post_init__()


@dataclasses.dataclass(frozen=True)
class Sampling(Knobs):
    """The sampled mini-batches.

    Attributes:
        batch_size: Seed (training) nodes per mini-batch (>= 1): per step over all ranks for
            ``reference`` and ``split``, per rank for ``minibatch``.
        fanouts: Neighbours sampled per hop, the hop next to the seeds first (PyG's order); one
            per model layer in minibatch mode, each >= 1 or -1 for all neighbours.
        eval_nodes: Destinations of evaluation's last layer in the sampled engines' streaming
            layer-wise inference: ``"all"`` every node, ``"labelled"`` only the nodes of the
            train/val/test masks. The metrics are the same (only masked nodes count); each
            earlier layer covers only the nodes the next one reads, so ``labelled`` saves work
            and disk where few nodes are labelled. ``fullgraph`` and ``offload`` ignore it.
        relation_fanouts: Typed graphs only: neighbours sampled per hop for each relation,
            keyed by relation name (or ``src.name.dst`` where names repeat), every relation
            named, each list as long as ``fanouts`` (e.g. ``{cites: [15, 10], writes: [5,
            5], ...}``; ``0`` samples no edge of that relation at that hop). Empty: ``fanouts``
            for every relation.
    """

    batch_size: int = 1024
    fanouts: tuple[int, ...] = (10, 10)
    eval_nodes: str = "all"
    relation_fanouts: dict[str, Any] = dataclasses.field(default_factory=dict)

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"eval_nodes": EVAL_NODES}

    def __post_init__(self) -> None:
        object.__setattr__(self, "fanouts", tuple(self.fanouts))
        super().__post_init__()
        _check_int("batch_size", self.batch_size, 1)
        check(
            bool(self.fanouts)
            and all(
                isinstance(f, int) and not isinstance(f, bool) and (1 <= f <= MAX_FANOUT or f == -1)
                for f in self.fanouts
            ),
            "fanouts",
            self.fanouts,
            f"give one fanout per layer, each in [1, {MAX_FANOUT}] or -1 for all neighbours (e.g. "
            "{key}=15,10)",
        )
        rel = self.relation_fanouts
        check(
            isinstance(rel, Mapping)
            and all(
                isinstance(k, str)
                and isinstance(v, (list, tuple))
                and bool(v)
                and all(
                    isinstance(f, int) and not isinstance(f, bool) and -1 <= f <= MAX_FANOUT
                    for f in v
                )
                for k, v in rel.items()
            ),
            "relation_fanouts",
            rel,
            f"must map relation names to lists of fanouts per hop, each in [0, {MAX_FANOUT}] or -1 "
            "for all neighbours (e.g. {key}={cites: [15, 10], writes: [5, 5]})",
        )
        object.__setattr__(self, "relation_fanouts", {k: list(v) for k, v in rel.items()})


@dataclasses.dataclass(frozen=True)
class ScratchDir(Knobs):
    """Where an engine writes its scratch files.

    Attributes:
        scratch_dir: Directory under which an engine keeps large temporary files, each in a
            temporary directory of its own removed afterwards: evaluation's per-layer
            ``[N, width]`` files (sampled engines), the relabelled topology of a large graph
            under ``partition=metis`` (``offload``). ``None``: the system's temporary directory;
            filled from the run config's ``run_dir``.
    """

    scratch_dir: str | None = None


@dataclasses.dataclass(frozen=True)
class Mode(Knobs):
    """Full-graph or sampled training.

    Attributes:
        mode: ``"full"`` (one full-graph step per epoch; ``batch_size`` and ``fanouts`` unused)
            or ``"minibatch"`` (sampled); ``None``: the engine's default mode (its first in the
            registry: ``fullgraph`` and ``offload`` imply ``full``, the others ``minibatch``).
    """

    mode: str | None = None

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"mode": MODES}


@dataclasses.dataclass(frozen=True)
class Loop(Knobs):
    """The Trainer's loop: how long, how often to evaluate and to checkpoint.

    Attributes:
        epochs: Number of epochs (>= 1).
        eval_every: Evaluate every this many epochs (and always after the last one; >= 1).
        patience: Stop when ``val_acc`` has not improved for this many epochs (``None``: never).
        checkpoint_every: Save a checkpoint every this many optimisation steps, counted over the
            whole run (``0``: no step cadence, see ``checkpoint_interval``).
        checkpoint_interval: Also save one at the first epoch end after this many seconds since
            the last save (``0``: at every epoch end). The run's end and an interrupt (Ctrl-C,
            SIGTERM) always save one.
        max_steps: Stop after this many optimisation steps over the whole run (a resumed run's
            earlier steps count; every rank stops at the same step), mid-epoch if need be, with
            a checkpoint and one evaluation at the end (``None``: no limit).
    """

    epochs: int = 10
    eval_every: int = 1
    patience: int | None = None
    checkpoint_every: int = 50
    checkpoint_interval: float = 60.0
    max_steps: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_int("epochs", self.epochs, 1)
        _check_int("eval_every", self.eval_every, 1)
        _check_int("patience", self.patience, 1, none_ok=True)
        _check_int("checkpoint_every", self.checkpoint_every, 0)
        check(
            0 <= self.checkpoint_interval < float("inf"),
            "checkpoint_interval",
            self.checkpoint_interval,
            "must be >= 0 seconds (0: at every epoch end)",
        )
        check(
            self.max_steps is None or self.max_steps >= 1,
            "max_steps",
            self.max_steps,
            "must be >= 1, or null for no limit",
        )


@dataclasses.dataclass(frozen=True)
class GradClip(Knobs):
    """Gradient-norm clipping in every engine's step.

    Attributes:
        clip_grad_norm: Scale the gradients so that their global 2-norm (over every parameter,
            after the gradients are summed over ranks, so the same on every rank) is at most
            this (``torch.nn.utils.clip_grad_norm_``), before the optimizer step; ``None``: no
            clipping.
    """

    clip_grad_norm: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check(
            self.clip_grad_norm is None or 0 < self.clip_grad_norm < float("inf"),
            "clip_grad_norm",
            self.clip_grad_norm,
            "must be a number > 0, or null for no clipping (e.g. {key}=1.0)",
        )


@dataclasses.dataclass(frozen=True)
class Schedule(Knobs):
    """The learning-rate schedule (checkpointed: a resumed run continues it exactly).

    Attributes:
        lr_scheduler: A class name of ``torch.optim.lr_scheduler`` (``StepLR``,
            ``CosineAnnealingLR``, ``OneCycleLR``, ``ReduceLROnPlateau`` ...) built over the
            engine's optimizer;
            ``None``: a constant learning rate. ``ReduceLROnPlateau`` steps on ``val_loss`` at
            the epochs that evaluate.
        lr_scheduler_args: Keyword arguments of the scheduler's constructor besides the
            optimizer (e.g. ``{step_size: 10, gamma: 0.5}``).
        lr_scheduler_interval: Step the scheduler after every optimisation ``step`` or at every
            ``epoch`` end.
    """

    lr_scheduler: str | None = None
    lr_scheduler_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    lr_scheduler_interval: str = "epoch"

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"lr_scheduler_interval": INTERVALS}

    def __post_init__(self) -> None:
        super().__post_init__()
        args = self.lr_scheduler_args
        check(
            isinstance(args, Mapping) and all(isinstance(k, str) for k in args),
            "lr_scheduler_args",
            args,
            "must be a mapping of argument names to values (e.g. {key}={step_size: 10})",
        )
        object.__setattr__(self, "lr_scheduler_args", dict(args))


@dataclasses.dataclass(frozen=True)
class Logging(Knobs):
    """Where the Trainer reports besides ``metrics.jsonl``.

    Attributes:
        tensorboard: Also write the metrics as TensorBoard event files in
            ``RUN_DIR/tensorboard`` (rank 0): losses, accuracies, the learning rate, the phase
            times and the traffic per link kind, one point per epoch. Needs the ``tensorboard``
            package (``pip install 'fleetgnn[tensorboard]'``).
        callbacks: Callbacks for a user's own logging, each ``"module:Class"`` (or
            ``"module.Class"``), importable by every process and built with no arguments (see
            :class:`fleetgnn.train.Callback`).
    """

    tensorboard: bool = False
    callbacks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "callbacks", tuple(self.callbacks))
        super().__post_init__()
        check(
            all(isinstance(c, str) and c.strip(" .:") for c in self.callbacks),
            "callbacks",
            self.callbacks,
            "give each callback as 'module:Class' (e.g. {key}=[mypkg.logs:MyLogger])",
        )


@dataclasses.dataclass(frozen=True)
class TaskKnobs(Knobs):
    """What the run trains for: node classification or link prediction.

    Attributes:
        task: ``"node"`` (classify nodes; selected on ``val_acc``) or ``"link"`` (predict edges;
            selected on ``val_auc``). ``fleetgnn train`` gives ``link`` the GAE defaults where
            these keys keep their defaults: ``train.epochs=200``, ``model.hidden=32``,
            ``model.dropout=0``, ``optim.weight_decay=0``, ``data.feature_norm=none``.
        val_edges: Fraction of the edges (undirected pairs) held out for validation (link).
        test_edges: Fraction held out for testing (link); the rest trains and is the only
            message-passing graph.
        negatives: Negatives per positive edge in training (link; keyed by seed, step, edge).
        negative_sampler: ``"uniform"`` destinations, or ``"degree"`` (probability
            proportional to degree^0.75) (link).
        decoder: Pair score from the two embeddings (link): ``"dot"`` product, ``"mlp"`` on
            their Hadamard product, ``"distmult"``.
        link_loss: ``"bce"`` (binary cross-entropy on logits) or ``"bpr"`` (link).
        link_dim: Width of the node embeddings, the model's last layer (link).
        keep_target_edges: In edge mini-batches, keep a batch's target edges (and their
            reverses) in its own message passing (link; default ``false``: they are dropped
            from the batch's sampled blocks, so an edge cannot be read off its own
            neighbourhood).
        eval_edges: Evaluate link prediction on at most this many pairs of each of val and
            test, evenly spread over the split, with their fixed negatives (link; ``None``:
            every pair). Capped, evaluation computes the embeddings of those pairs' endpoints
            only, not ``[nodes, link_dim]`` on every rank: what a large graph needs.
        link_relation: Typed graphs: the relation whose edges are predicted (link), as
            ``src,name,dst`` (e.g. ``author,writes,paper``) or a name unique in the schema;
            its edges are split (train/val/test, saved with the dataset), negatives corrupt
            its destination within the destination type (``reference``, ``minibatch`` and
            ``split``).
        temporal: Whether link prediction uses the graph's edge times (link): ``"on"`` splits
            the edges by time (the latest ``test_edges`` test, the ``val_edges`` before them
            validate, the earlier ones train) and embeds every positive, its negatives and the
            evaluation pairs at the pair's time, sampling only edges before it
            (:mod:`fleetgnn.graph.time_split`; ``reference`` in mode ``minibatch``);
            ``"off"`` ignores the times (the random edge split and the plain sampler: the
            leakage baseline, whose message passing sees edges from the future); ``"auto"``
            is ``on`` when the graph has ``edge_time``, else ``off``. Node classification on a
            graph with node times (``node_time``): ``"on"`` samples every seed (training,
            evaluation, ``predict``/``embed``) at its node time, taking only edges before it
            (``reference`` in mode ``minibatch``, ``minibatch``; the graph needs edge times
            too); ``"off"`` ignores the times; ``"auto"`` is ``on`` when the graph has
            ``node_time``.
        temporal_strategy: Which of a node's in-edges older than the pair's (link) or the
            seed's (node) time the temporal sampler takes per hop (``train.temporal`` on):
            ``uniform`` (``fanout`` of them at random, keyed as the plain sampler) or ``last``
            (the ``fanout`` most recent), as PyG's ``temporal_strategy``.
    """

    task: str = "node"
    val_edges: float = 0.05
    test_edges: float = 0.1
    negatives: int = 1
    negative_sampler: str = "uniform"
    decoder: str = "dot"
    link_loss: str = "bce"
    link_dim: int = 16
    keep_target_edges: bool = False
    eval_edges: int | None = None
    link_relation: str | None = None
    temporal: str = "auto"
    temporal_strategy: str = "uniform"

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "task": TASKS,
        "temporal": TEMPORAL_MODES,
        "temporal_strategy": TEMPORAL_STRATEGIES,
        "negative_sampler": NEGATIVE_SAMPLERS,
        "decoder": DECODERS,
        "link_loss": LINK_LOSSES,
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("val_edges", "test_edges"):
            value = getattr(self, name)
            check(0.0 < value < 1.0, name, value, "must lie in (0, 1), e.g. {key}=0.05")
        check(
            self.val_edges + self.test_edges < 1.0,
            "test_edges",
            self.test_edges,
            f"plus val_edges={self.val_edges!r} must be < 1 (the rest trains)",
        )
        _check_int("negatives", self.negatives, 1)
        _check_int("link_dim", self.link_dim, 1)
        _check_int("eval_edges", self.eval_edges, 1, none_ok=True)


@dataclasses.dataclass(frozen=True)
class RunDir(Knobs):
    """The run's directory.

    Attributes:
        run_dir: Directory for checkpoints, metrics and the summary (``None``: chosen by the
            caller; ``fleetgnn train`` picks ``runs/<time>-<model>-<engine>``). The engines'
            ``scratch_dir`` is set to it.
    """

    run_dir: str | None = None


def _check_bytes(name: str, value: Any) -> None:
    if value is not None:
        try:
            parse_bytes(value, "{key}")
        except ConfigError as e:
            raise KnobError(name, value, str(e), whole=True) from None


@dataclasses.dataclass(frozen=True)
class DeviceCache(Knobs):
    """The device-memory budget of the sampled engines' feature cache.

    Attributes:
        device_budget: Bytes of device memory per rank for hot rows (``"64MB"``, ``"1.5GiB"``,
            an int; ``None``: unlimited). ``minibatch`` keeps the hottest rows of the unified
            store there; ``split`` the hottest rows of the rank's own part (its store's
            partition-aware placement: shards are disjoint, so capacity grows with ranks). On a
            CPU machine this is process memory, so tiering decisions happen there too.
    """

    device_budget: str | int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_bytes("device_budget", self.device_budget)


@dataclasses.dataclass(frozen=True)
class TieredStore(Knobs):
    """The unified store's host tier and placement (WholeGraph, XGNN; ``minibatch``, ``split``).

    Attributes:
        host_budget: Bytes of host memory per host (machine) for the next-hottest rows: one
            copy shared by all the ranks on the host (``None``: unlimited); the rest is read
            from the dataset's memory map on disk.
        placement: Hotness ranking (``presample`` counts accesses over sampled batches).
        order: Which gets the device budget first (XGNN: graph first; ``split`` keeps only
            features in its store, so there it has no effect).
        gather: How ranks read each other's device shards: ``one_sided`` (shared memory, every
            rank on one host), ``two_sided`` (all-to-all, works across hosts) or ``auto``
            (one-sided on one host, two-sided when the ranks span hosts; the engine says which
            it picked).
        topology: Device link bandwidths for XGNN's placement solver (which device each rank
            reads each hot-row partition from): ``None`` (equally connected), a built-in name
            (``dgx1-v100``), or a YAML/JSON file holding an ``N x N`` matrix. ``split``
            refuses one: its partition decides which shard holds a row.
        sampling: Where the ``minibatch`` engine samples: ``host`` (numpy, over the store's
            tiered topology), ``device`` (a replica of the graph's CSC on the rank's device,
            sampled there with the torch backend: the same blocks; its bytes come out of
            ``device_budget``), ``auto`` (``device`` on a GPU when the replica takes at most
            half of ``device_budget``, else ``host``).
        edge_share: Fraction of each tier's budget (device and host) that goes to the edge
            rows (``edge_attr`` by edge ID) when the model reads edge features; the node rows
            (topology and features) get the rest. ``None``: in proportion to the bytes of the
            two (each keeps the same fraction of its rows in a tier too small for both).
    """

    host_budget: str | int | None = None
    placement: str = "degree"
    order: str = "graph_first"
    gather: str = "auto"
    topology: str | None = None
    sampling: str = "auto"
    edge_share: float | None = None

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "placement": PLACEMENTS,
        "order": ORDERS,
        "gather": GATHERS,
        "sampling": SAMPLINGS,
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_bytes("host_budget", self.host_budget)
        share = self.edge_share
        number = isinstance(share, (int, float)) and not isinstance(share, bool)
        check(
            share is None or (number and 0 <= share <= 1),
            "edge_share",
            share,
            "must be a fraction in [0, 1] of each tier's budget, e.g. {key}=0.25, or null "
            "(split by bytes)",
        )


@dataclasses.dataclass(frozen=True)
class Prefetch(Knobs):
    """Overlap of data loading with training.

    Attributes:
        prefetch: Sample and gather the next step's rows in a background thread during training.
    """

    prefetch: bool = True


@dataclasses.dataclass(frozen=True)
class DebugCollectives(Knobs):
    """The distributed engines' debug mode.

    Attributes:
        debug_collectives: Verify shapes and counts across ranks before every collective and
            report every rank's view instead of hanging on a mismatch (every distributed
            engine).
    """

    debug_collectives: bool = False


@dataclasses.dataclass(frozen=True)
class SplitSection(Knobs):
    """The ``split`` engine's partition and reporting (GSplit).

    Attributes:
        partition: Offline partition that decides which rank owns each vertex at every layer:
            ``"metis"`` (GSplit), ``"random"``, ``"range"`` or ``"hash"``.
        book: Directory of a saved partition book (``fleetgnn partition``) to use; ``None``:
            ``DATASET/partitions/<partition>-<W>`` when the run's dataset has one, else computed
            once on rank 0 and shared.
        report_dp: Also sample the data-parallel counterfactual of every step (W micro-batches
            of the same targets, on rank 0) to report the redundancy and host bytes split
            parallelism saved. Off by default: it costs W extra samplings per step on rank 0,
            and the planner's replay (:mod:`fleetgnn.cost.replay`) computes the same counts
            offline.
    """

    partition: str = "metis"
    book: str | None = None
    report_dp: bool = False

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"partition": SPLIT_PARTITIONS}


@dataclasses.dataclass(frozen=True)
class FullGraphSection(Knobs):
    """The ``fullgraph`` engine's partitioning and halo-exchange pipeline (MGG).

    Attributes:
        partition: ``range`` (MGG's edge-balanced contiguous ranges) or ``metis`` (the graph is
            relabelled so each METIS part is a contiguous range).
        num_chunks: Chunks K the halo rows of each layer are exchanged in (``None``: tuned, or
            1 without tuning).
        depth: Chunks in flight at once, MGG's interleave distance; 0 exchanges everything
            before aggregating (``None``: tuned, or 1 without tuning).
        tune: Search the knobs left ``None`` online, one epoch per trial (MGG's greedy search).
        tuner_chunks: Candidate K values of the tuner, ascending.
        tuner_depths: Candidate depths of the tuner, ascending.
        overlap_backward: Pipeline the backward halo exchange too (same gradients).
    """

    partition: str = "range"
    num_chunks: int | None = None
    depth: int | None = None
    tune: bool = True
    tuner_chunks: tuple[int, ...] = (1, 2, 4, 8, 16)
    tuner_depths: tuple[int, ...] = (1, 2, 3, 4)
    overlap_backward: bool = True

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"partition": PARTITIONS}

    def __post_init__(self) -> None:
        object.__setattr__(self, "tuner_chunks", tuple(self.tuner_chunks))
        object.__setattr__(self, "tuner_depths", tuple(self.tuner_depths))
        super().__post_init__()
        _check_int("num_chunks", self.num_chunks, 1, none_ok=True)
        _check_int("depth", self.depth, 0, none_ok=True)
        for name, low in (("tuner_chunks", 1), ("tuner_depths", 0)):
            values = getattr(self, name)
            check(
                bool(values) and all(isinstance(v, int) and v >= low for v in values),
                name,
                values,
                f"give one or more candidates, each an int >= {low}",
            )


@dataclasses.dataclass(frozen=True)
class OffloadSection(Knobs):
    """The ``offload`` engine's chunking, device budget and caching (HongTu).

    Attributes:
        partition: First level, one part per rank: ``"metis"`` (relabelled contiguous) or
            ``"range"`` (edge-balanced contiguous ranges).
        chunks: Chunks ``M`` per part (``None``: the smallest power of two whose predicted peak
            fits ``device_budget``; 4 without a budget on CPU).
        device_budget: Live device bytes per rank (``"256MB"``, bytes; ``None``: 90% of the free
            device memory on CUDA, unbounded on CPU).
        reorganize: Reorder chunks with HongTu's greedy Alg. 4 when Eq. 4 models it cheaper.
        cache_aggregates: Cache aggregation outputs in host memory for layers whose aggregation
            has no parameters (``None``: where the model declares it, ``True``: require it for
            every layer, ``False``: always recompute).
        overlap_transfers: Double-buffer the chunks: load chunk ``j + 1``'s rows while chunk
            ``j`` computes and write chunk ``j``'s results back while ``j + 1`` computes (CUDA:
            pinned host vertex data, copies on a side stream with events; the CPU runs the same
            order synchronously). Results are identical either way; ``false``: blocking copies.
    """

    partition: str = "metis"
    chunks: int | None = None
    device_budget: str | int | None = None
    reorganize: bool = True
    cache_aggregates: bool | None = None
    overlap_transfers: bool = True

    CHOICES: ClassVar[Mapping[str, tuple[Any, ...]]] = {"partition": PARTITIONS}

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_int("chunks", self.chunks, 1, none_ok=True)
        _check_bytes("device_budget", self.device_budget)
