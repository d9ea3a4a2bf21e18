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
from fleetgnn.train.callbacks import Callback
from fleetgnn.train.checkpoint import (
    CheckpointDir,
    CheckpointError,
    capture_rng,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from fleetgnn.train.metrics import MetricsWriter, is_event, read_metrics
from fleetgnn.train.resolve import (
    check_device,
    resolve_device_name,
    resolve_feature_norm,
    resolve_model_defaults,
    resolve_task_defaults,
    resolve_threads,
    small_graph,
    usable_cores,
)
from fleetgnn.train.resume import (
    TrainState,
    check_resumable,
    finished_note,
    finished_reason,
    resume_point,
)
from fleetgnn.train.setup import (
    engine_from_config,
    model_from_config,
    optimizer_from_config,
)
from fleetgnn.train.sums import StepSums, aggregate_steps
from fleetgnn.train.trainer import Trainer

__all__ = [
    "Callback",
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
    "check_device",
    "check_resumable",
    "engine_from_config",
    "is_event",
    "load_checkpoint",
    "load_config",
    "model_from_config",
    "optimizer_from_config",
    "read_metrics",
    "resolve_device_name",
    "resolve_feature_norm",
    "resolve_model_defaults",
    "resolve_task_defaults",
    "resolve_threads",
    "small_graph",
    "restore_rng",
    "finished_note",
    "finished_reason",
    "resume_point",
    "save_checkpoint",
    "save_config",
    "usable_cores",
]
