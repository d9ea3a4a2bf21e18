"""Training driver: configs, the Trainer loop, checkpoints and metrics."""

from fleetgnn.train.checkpoint import (
    CheckpointDir,
    CheckpointError,
    capture_rng,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from fleetgnn.train.config import (
    Config,
    DataConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    apply_overrides,
    load_config,
    save_config,
)
from fleetgnn.train.metrics import MetricsWriter, read_metrics
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
    "aggregate_steps",
    "apply_overrides",
    "capture_rng",
    "load_checkpoint",
    "load_config",
    "read_metrics",
    "restore_rng",
    "save_checkpoint",
    "save_config",
]
