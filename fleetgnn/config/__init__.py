"""Typed configuration, the ground layer: engine configs, the engine registry, run configs.

Nothing here imports torch, so the command line builds its parser and reads and checks a config
(and its ``store.topology``, :mod:`fleetgnn.config.topology`) before torch is loaded.

Everything above imports its configuration from here (``cost`` outputs engine configs, engines
take them, ``train`` and ``cli`` load run configs from YAML and ``--set`` overrides).
"""

from fleetgnn.config.engines import (
    ENGINES,
    EngineConfig,
    EngineSpec,
    FullGraphEngineConfig,
    MinibatchEngineConfig,
    OffloadEngineConfig,
    ReferenceEngineConfig,
    SampledConfig,
    SplitEngineConfig,
    available_engines,
    engine_spec,
    spec_of,
)
from fleetgnn.config.run import (
    Config,
    DataConfig,
    FullGraphConfig,
    ModelConfig,
    OptimConfig,
    SplitConfig,
    StoreConfig,
    TrainConfig,
    TrainerConfig,
    apply_overrides,
    load_config,
    save_config,
)

__all__ = [
    "ENGINES",
    "Config",
    "DataConfig",
    "EngineConfig",
    "EngineSpec",
    "FullGraphConfig",
    "FullGraphEngineConfig",
    "MinibatchEngineConfig",
    "ModelConfig",
    "OffloadEngineConfig",
    "OptimConfig",
    "ReferenceEngineConfig",
    "SampledConfig",
    "SplitConfig",
    "SplitEngineConfig",
    "StoreConfig",
    "TrainConfig",
    "TrainerConfig",
    "apply_overrides",
    "available_engines",
    "engine_spec",
    "load_config",
    "save_config",
    "spec_of",
]
