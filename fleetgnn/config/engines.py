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

from fleetgnn.config.knobs import (
    DebugCollectives,
    DeviceCache,
    FeatureNorm,
    FeatureStorage,
    FullGraphSection,
    GradClip,
    KnobError,
    Mode,
    OffloadSection,
    Precision,
    Prefetch,
    Sampling,
    ScratchDir,
    Seeded,
    SplitSection,
    TieredStore,
    check_choice,
)
from fleetgnn.errors import ConfigError

# Each engine config below is made of knob classes (:mod:`fleetgnn.config.knobs`), which declare
# its fields, defaults, allowed values, checks and help; the classes here declare no field. The
# run config's YAML sections are made of the same knob classes, so every field of every engine
# config is a YAML key (see :func:`fleetgnn.config.run.engine_keys`).


@dataclasses.dataclass(frozen=True)
class EngineConfig(GradClip, FeatureStorage, FeatureNorm, Precision, Seeded):
    """What every engine shares: seed, device, dtypes, feature transform, clipping.

    The fields: ``seed``, ``device``, ``dtype``, ``feature_norm``, ``feature_dtype``,
    ``edge_feature_dtype``, clipping.

    ``feature_norm=None`` (the run config's "the dataset's transform", unresolved) becomes
    ``"none"``.
    """

    #: Fields that must match between a checkpoint and the engine resuming it.
    RESUME_KEYS: ClassVar[tuple[str, ...]] = (
        "seed",
        "dtype",
        "feature_norm",
        "feature_dtype",
        "edge_feature_dtype",
    )

    def __post_init__(self) -> None:
        if self.feature_norm is None:
            object.__setattr__(self, "feature_norm", "none")
        super().__post_init__()

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
class SampledConfig(ScratchDir, Sampling, EngineConfig):
    """Fields of the sampled mini-batch engines.

    ``batch_size``, ``fanouts``, ``eval_nodes`` and ``scratch_dir`` (evaluation's per-layer files).
    """

    RESUME_KEYS: ClassVar[tuple[str, ...]] = (*EngineConfig.RESUME_KEYS, "batch_size", "fanouts")


@dataclasses.dataclass(frozen=True)
class ReferenceEngineConfig(Mode, SampledConfig):
    """The single-process ground truth; ``mode`` ``None`` becomes ``"minibatch"``."""

    RESUME_KEYS: ClassVar[tuple[str, ...]] = (*SampledConfig.RESUME_KEYS, "mode")

    def __post_init__(self) -> None:
        modes = ENGINES["reference"].modes
        if self.mode is None:
            object.__setattr__(self, "mode", modes[0])
        super().__post_init__()
        check_choice("mode", self.mode, modes)


@dataclasses.dataclass(frozen=True)
class MinibatchEngineConfig(DebugCollectives, Prefetch, TieredStore, DeviceCache, SampledConfig):
    """Data-parallel sampled training over the unified store (WholeGraph, XGNN)."""


@dataclasses.dataclass(frozen=True)
class SplitEngineConfig(
    DebugCollectives, Prefetch, TieredStore, DeviceCache, SplitSection, SampledConfig
):
    """Split-parallel sampled training (GSplit): one mini-batch per step, split across ranks.

    ``batch_size`` is the GLOBAL batch (one mini-batch per step for all ranks), as in the
    reference engine, whose steps this engine reproduces. Input rows are read through the
    unified store with a partition-aware placement: each rank's device shard holds the hottest
    rows of its own part (``device_budget``), the host tier the next-hottest rows
    (``host_budget``), the rest stays on disk. ``topology`` must stay ``None`` (the partition
    decides the placement) and ``order`` has no effect (the store holds features only).
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.topology is not None:  # named in full: the engine config has no sections
            raise KnobError(
                "topology",
                self.topology,
                f"store.topology={self.topology!r} does not apply to the split engine: each row "
                "sits on its owner's device shard (the partition decides the placement); leave "
                "store.topology unset",
                whole=True,
            )


@dataclasses.dataclass(frozen=True)
class FullGraphEngineConfig(DebugCollectives, FullGraphSection, EngineConfig):
    """Distributed full-graph training with MGG's pipelined halo exchange."""


@dataclasses.dataclass(frozen=True)
class OffloadEngineConfig(ScratchDir, DebugCollectives, OffloadSection, EngineConfig):
    """Full-graph training with vertex data in host memory, chunk by chunk (HongTu).

    ``scratch_dir`` holds the relabelled topology of a large graph under ``partition=metis``.
    """


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
        typed: Trains typed (heterogeneous) graphs (:mod:`fleetgnn.engines.typed`); the others
            refuse them and the planner leaves them out for a typed workload.
    """

    name: str
    config_cls: type[EngineConfig]
    modes: tuple[str, ...]
    distributed: bool
    impl: str
    summary: str
    typed: bool = False

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
            typed=True,
        ),
        EngineSpec(
            "minibatch",
            MinibatchEngineConfig,
            ("minibatch",),
            True,
            "fleetgnn.engines.minibatch:MinibatchEngine",
            "data-parallel sampled training over the unified store (WholeGraph, XGNN)",
            typed=True,
        ),
        EngineSpec(
            "split",
            SplitEngineConfig,
            ("minibatch",),
            True,
            "fleetgnn.engines.split:SplitEngine",
            "split-parallel sampled training: one mini-batch split across ranks (GSplit)",
            typed=True,
        ),
        EngineSpec(
            "fullgraph",
            FullGraphEngineConfig,
            ("full",),
            True,
            "fleetgnn.engines.fullgraph:FullGraphEngine",
            "distributed full-graph training, halo exchange overlapped with compute (MGG)",
        ),
        EngineSpec(
            "offload",
            OffloadEngineConfig,
            ("full",),
            True,
            "fleetgnn.engines.offload:OffloadEngine",
            "full-graph training with vertex data offloaded to host memory (HongTu)",
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
