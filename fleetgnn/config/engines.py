"""Typed engine configs and the one engine registry.

Every engine is built from ``(model, graph, ctx, engine_config)``; ``engine_config`` is one of the
frozen dataclasses below. :data:`ENGINES` maps each engine name to its config class, the modes it
supports (the first is its default), whether it runs one process per device, and where its
implementation lives. The YAML/CLI config loader, the CLI's ``--engine`` choices and help, and
:func:`fleetgnn.engines.build_engine` are all derived from it, and a planner can output an engine
config as a typed object.

========== ============================== =============== ============ =========
engine     config                         modes           distributed  available
========== ============================== =============== ============ =========
reference  :class:`ReferenceEngineConfig`  minibatch, full  no           yes
minibatch  :class:`MinibatchEngineConfig`  minibatch        yes          yes
split      :class:`SplitEngineConfig`      minibatch        yes          yes
fullgraph  :class:`FullGraphEngineConfig`  full             yes          yes
offload    :class:`OffloadEngineConfig`    full             yes          yes
========== ============================== =============== ============ =========
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from fleetgnn.config.units import parse_bytes
from fleetgnn.errors import ConfigError

DTYPES: tuple[str, ...] = ("float32", "float64")
FEATURE_NORMS: tuple[str, ...] = ("none", "row")
PLACEMENTS: tuple[str, ...] = ("degree", "presample")
ORDERS: tuple[str, ...] = ("graph_first", "features_first")
GATHERS: tuple[str, ...] = ("auto", "one_sided", "two_sided")
PARTITIONS: tuple[str, ...] = ("range", "metis")
SPLIT_PARTITIONS: tuple[str, ...] = ("metis", "random", "range", "hash")
EVAL_NODES: tuple[str, ...] = ("all", "labelled")


def _check_choice(key: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        shown = ", ".join("null" if c is None else str(c) for c in choices)
        raise ConfigError(f"{key}={value!r} is not an allowed value; choose one of: {shown}")


def _check_fanouts(fanouts: tuple[int, ...]) -> None:
    if not fanouts or not all(isinstance(f, int) and (f >= 1 or f == -1) for f in fanouts):
        raise ConfigError(
            f"fanouts={list(fanouts)!r} is invalid: give one fanout per layer, each >= 1 or -1 "
            f"for all neighbours (e.g. fanouts=(15, 10))"
        )


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """What every engine shares.

    Attributes:
        seed: Seed of every random draw in training (batches, sampling, dropout), each keyed by
            ``(seed, epoch, step)``.
        device: ``"auto"`` (the default: CUDA where available), ``"cpu"``, ``"cuda"`` or
            ``"cuda:N"``. The distributed engines run on their rank's device (``ctx.device``:
            the rank's GPU for ``"cuda"``) and refuse a context on another device type;
            ``"auto"`` follows it.
        dtype: Floating-point type of features and parameters, ``"float32"`` or ``"float64"``.
        feature_norm: ``"row"`` scales each feature row to unit L1 norm, ``"none"`` keeps them.
    """

    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    feature_norm: str = "none"

    #: Fields that must match between a checkpoint and the engine resuming it.
    RESUME_KEYS: ClassVar[tuple[str, ...]] = ("seed", "dtype", "feature_norm")

    def __post_init__(self) -> None:
        _check_choice("dtype", self.dtype, DTYPES)
        _check_choice("feature_norm", self.feature_norm, FEATURE_NORMS)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of the fields (tuples become lists)."""
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }

    def replace(self, **changes: Any) -> EngineConfig:
        """A copy with ``changes`` applied (validated again).

        Raises:
            ConfigError: For a field the config does not have.
        """
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ConfigError(
                f"{type(self).__name__} has no field(s) {unknown}; fields: {sorted(names)}"
            )
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class SampledConfig(EngineConfig):
    """Fields of the sampled mini-batch engines.

    Attributes:
        batch_size: Seed (training) nodes per step, over all ranks for data-parallel engines'
            per-rank slots (>= 1).
        fanouts: Neighbours sampled per hop, the hop next to the seeds first; one per model
            layer, each >= 1 or -1 for all neighbours.
        eval_nodes: Destinations of evaluation's last layer (streaming layer-wise inference):
            ``"all"`` every node, ``"labelled"`` only the nodes of the train/val/test masks
            (the same metrics; each earlier layer covers only the nodes the next one reads).
        scratch_dir: Where evaluation keeps its per-layer ``[N, width]`` scratch files (in a
            temporary directory of its own, removed afterwards; ``None``: the system's temporary
            directory; ``fleetgnn train`` passes the run directory).
    """

    batch_size: int = 1024
    fanouts: tuple[int, ...] = (10, 10)
    eval_nodes: str = "all"
    scratch_dir: str | None = None

    RESUME_KEYS: ClassVar[tuple[str, ...]] = (*EngineConfig.RESUME_KEYS, "batch_size", "fanouts")

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "fanouts", tuple(self.fanouts))
        if self.batch_size < 1:
            raise ConfigError(f"batch_size={self.batch_size!r} is invalid: must be >= 1")
        _check_fanouts(self.fanouts)
        _check_choice("eval_nodes", self.eval_nodes, EVAL_NODES)


@dataclasses.dataclass(frozen=True)
class ReferenceEngineConfig(SampledConfig):
    """The single-process ground truth.

    Attributes:
        mode: ``"minibatch"`` (sampled batches) or ``"full"`` (one full-graph step per epoch;
            ``batch_size`` and ``fanouts`` are unused).
    """

    mode: str = "minibatch"

    RESUME_KEYS: ClassVar[tuple[str, ...]] = (*SampledConfig.RESUME_KEYS, "mode")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_choice("mode", self.mode, ENGINES["reference"].modes)


@dataclasses.dataclass(frozen=True)
class MinibatchEngineConfig(SampledConfig):
    """Data-parallel sampled training over the unified store (WholeGraph, XGNN).

    Attributes:
        device_budget: Device bytes per rank for hot rows (``"64MB"``, an int, or ``None``:
            unlimited).
        host_budget: Host bytes per host (machine) for the next-hottest rows, one copy shared
            by the host's ranks (``None``: unlimited).
        placement: Hotness ranking, ``"degree"`` or ``"presample"``.
        order: ``"graph_first"`` or ``"features_first"``: which gets the device budget first.
        gather: How ranks read each other's device shards: ``"one_sided"`` (shared memory,
            every rank on one host), ``"two_sided"`` (all-to-all, works across hosts) or
            ``"auto"`` (one-sided on one host, two-sided when the ranks span hosts).
        topology: Device link bandwidths for XGNN's placement solver: ``None`` (all devices
            equally connected), a built-in name (``"dgx1-v100"``), or a YAML/JSON file holding
            an ``N x N`` matrix.
        prefetch: Sample and gather the next batch in a background thread.
        debug_collectives: Verify every collective's shapes across ranks before it runs.
    """

    device_budget: str | int | None = None
    host_budget: str | int | None = None
    placement: str = "degree"
    order: str = "graph_first"
    gather: str = "auto"
    topology: str | None = None
    prefetch: bool = True
    debug_collectives: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_choice("placement", self.placement, PLACEMENTS)
        _check_choice("order", self.order, ORDERS)
        _check_choice("gather", self.gather, GATHERS)


@dataclasses.dataclass(frozen=True)
class SplitEngineConfig(SampledConfig):
    """Split-parallel sampled training (GSplit): one mini-batch per step, split across ranks.

    ``batch_size`` is the GLOBAL batch (one mini-batch per step for all ranks), as in the
    reference engine, whose steps this engine reproduces.

    Attributes:
        partition: Offline partition that decides which rank owns each vertex at every layer:
            ``"metis"`` (GSplit), ``"random"``, ``"range"`` or ``"hash"``.
        book: Directory of a saved partition book (``fleetgnn partition``) to use; ``None``:
            ``DATASET/partitions/<partition>-<W>`` when the run's dataset has one, else computed
            once on rank 0 and shared.
        device_budget: Bytes per rank for the cache of the highest-degree rows of its OWN part
            (``"64MB"``, an int, or ``None``: the whole part). Caches are disjoint, so capacity
            grows with ranks; uncached rows are loaded from host memory (the dataset's map).
        prefetch: Sample, split and load the next step's rows in a background thread.
        report_dp: Also sample the data-parallel counterfactual of every step (W micro-batches
            of the same targets, on rank 0) to report the redundancy and host bytes split
            parallelism saved. Off by default: it costs W extra samplings per step on rank 0,
            and the planner's replay (:mod:`fleetgnn.cost.replay`) computes the same counts
            offline.
        debug_collectives: Verify every collective's shapes across ranks before it runs.
    """

    partition: str = "metis"
    book: str | None = None
    device_budget: str | int | None = None
    prefetch: bool = True
    report_dp: bool = False
    debug_collectives: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_choice("partition", self.partition, SPLIT_PARTITIONS)


@dataclasses.dataclass(frozen=True)
class FullGraphEngineConfig(EngineConfig):
    """Distributed full-graph training with MGG's pipelined halo exchange.

    Attributes:
        partition: ``"range"`` (MGG's edge-balanced contiguous ranges) or ``"metis"``.
        num_chunks: Halo chunks ``K`` per exchange (``None``: tuned, or 1 without tuning).
        depth: Chunks in flight (0: exchange everything first; ``None``: tuned, or 1).
        tune: Search the knobs left ``None`` online, one epoch per trial (MGG's greedy search).
        tuner_chunks: Candidate ``K`` values of the tuner, ascending.
        tuner_depths: Candidate depths of the tuner, ascending.
        overlap_backward: Pipeline the backward halo exchange too (same gradients).
        debug_collectives: Verify every collective's shapes across ranks before it runs.
    """

    partition: str = "range"
    num_chunks: int | None = None
    depth: int | None = None
    tune: bool = True
    tuner_chunks: tuple[int, ...] = (1, 2, 4, 8, 16)
    tuner_depths: tuple[int, ...] = (1, 2, 3, 4)
    overlap_backward: bool = True
    debug_collectives: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_choice("partition", self.partition, PARTITIONS)
        if self.num_chunks is not None and self.num_chunks < 1:
            raise ConfigError(f"num_chunks={self.num_chunks!r} is invalid: must be >= 1 or None")
        if self.depth is not None and self.depth < 0:
            raise ConfigError(f"depth={self.depth!r} is invalid: must be >= 0 or None")
        object.__setattr__(self, "tuner_chunks", tuple(self.tuner_chunks))
        object.__setattr__(self, "tuner_depths", tuple(self.tuner_depths))


@dataclasses.dataclass(frozen=True)
class OffloadEngineConfig(EngineConfig):
    """Full-graph training with vertex data in host memory, chunk by chunk (HongTu).

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
        debug_collectives: Verify every collective's shapes across ranks before it runs.
        scratch_dir: Where ``partition=metis`` writes the relabelled topology of a large graph
            (one file per machine, in a temporary directory of its own removed at the end;
            ``None``: the system's temporary directory; ``fleetgnn train`` passes the run
            directory).
    """

    partition: str = "metis"
    chunks: int | None = None
    device_budget: str | int | None = None
    reorganize: bool = True
    cache_aggregates: bool | None = None
    debug_collectives: bool = False
    scratch_dir: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_choice("partition", self.partition, PARTITIONS)
        if self.chunks is not None and (
            isinstance(self.chunks, bool) or not isinstance(self.chunks, int) or self.chunks < 1
        ):
            raise ConfigError(f"chunks={self.chunks!r} is invalid: must be an int >= 1 or None")
        if self.device_budget is not None:
            parse_bytes(self.device_budget, "offload.device_budget")


@dataclasses.dataclass(frozen=True)
class EngineSpec:
    """One registry entry.

    Attributes:
        name: The engine's name (``train.engine``, ``--engine``).
        config_cls: Its typed config dataclass.
        modes: Modes it supports; the first is the default when none is given.
        distributed: Runs one process per device (launched with ``--nproc`` or torchrun).
        impl: ``"module:Class"`` of the implementation (``""``: planned, not in this build).
        summary: One line for ``--help``.
        sections: Run-config sections whose keys fill the typed config, searched in order.
    """

    name: str
    config_cls: type[EngineConfig]
    modes: tuple[str, ...]
    distributed: bool
    impl: str
    summary: str
    sections: tuple[str, ...] = ("train", "data")

    @property
    def available(self) -> bool:
        """Whether this build implements the engine."""
        return bool(self.impl)


#: The engine registry: name -> spec (insertion order is the order shown to users).
ENGINES: Mapping[str, EngineSpec] = {
    s.name: s
    for s in (
        EngineSpec(
            "reference",
            ReferenceEngineConfig,
            ("minibatch", "full"),
            False,
            "fleetgnn.engines.reference:ReferenceEngine",
            "single process, full-graph or sampled: the ground truth",
        ),
        EngineSpec(
            "minibatch",
            MinibatchEngineConfig,
            ("minibatch",),
            True,
            "fleetgnn.engines.minibatch:MinibatchEngine",
            "data-parallel sampled training over the unified store (WholeGraph, XGNN)",
            ("train", "data", "store"),
        ),
        EngineSpec(
            "split",
            SplitEngineConfig,
            ("minibatch",),
            True,
            "fleetgnn.engines.split:SplitEngine",
            "split-parallel sampled training: one mini-batch split across ranks (GSplit)",
            ("split", "train", "data", "store"),
        ),
        EngineSpec(
            "fullgraph",
            FullGraphEngineConfig,
            ("full",),
            True,
            "fleetgnn.engines.fullgraph:FullGraphEngine",
            "distributed full-graph training, halo exchange overlapped with compute (MGG)",
            ("fullgraph", "train", "data", "store"),
        ),
        EngineSpec(
            "offload",
            OffloadEngineConfig,
            ("full",),
            True,
            "fleetgnn.engines.offload:OffloadEngine",
            "full-graph training with vertex data offloaded to host memory (HongTu)",
            ("offload", "train", "data"),
        ),
    )
}


def engine_spec(name: str) -> EngineSpec:
    """The registry entry of ``name``.

    Raises:
        ConfigError: For an unknown engine, listing the known ones.
    """
    if name not in ENGINES:
        raise ConfigError(f"unknown engine {name!r}; choose one of: {', '.join(ENGINES)}")
    return ENGINES[name]


def spec_of(config: EngineConfig) -> EngineSpec:
    """The registry entry whose config class is ``type(config)``.

    Raises:
        ConfigError: If ``config`` is not a registered engine config.
    """
    for spec in ENGINES.values():
        if type(config) is spec.config_cls:
            return spec
    raise ConfigError(
        f"{type(config).__name__} is not an engine config; use one of "
        f"{', '.join(s.config_cls.__name__ for s in ENGINES.values())}"
    )


def available_engines() -> tuple[str, ...]:
    """Names of the engines this build implements."""
    return tuple(n for n, s in ENGINES.items() if s.available)
