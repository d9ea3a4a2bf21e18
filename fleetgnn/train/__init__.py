"""Training driver: configs, the Trainer loop, checkpoints and metrics."""

from fleetgnn.config import (
    Config,
    DataConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    TrainerConfig,
    apply_overrides,
    load_config,
    save_config,
)
from fleetgnn.train.checkpoint import (
    CheckpointDir,
    CheckpointError,
    capture_rng,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from fleetgnn.train.metrics import MetricsWriter, read_metrics
from fleetgnn.train.setup import (
    engine_from_config,
    model_from_config,
    optimizer_from_config,
)
from fleetgnn.train.trainer import StepSums, Trainer, TrainState, aggregate_steps

__all__ = [
    "CheckpointDir",
    "CheckpointError",
    "Config",
    "DataConfig",
    "MetricsWriter",
    "ModelConfig",
    "OptimConfig",
    "StepSums",
    "TrainConfig",
    "TrainState",
    "Trainer",
    "TrainerConfig",
    "aggregate_steps",
    "apply_overrides",
    "capture_rng",
    "engine_from_config",
    "load_checkpoint",
    "load_config",
    "model_from_config",
    "optimizer_from_config",
    "read_metrics",
    "restore_rng",
    "save_checkpoint",
    "save_config",
]
