"""Cost layer: hardware profiles, per-engine cost models and the planner that ranks engines.

Sits between ``exchange`` and ``engines``: it reads configs and counts, never runs an engine and
never imports ``torch.distributed``.
"""

from fleetgnn.cost.calibration import local_profile
from fleetgnn.cost.hardware import LINK_KINDS, HardwareProfile
from fleetgnn.cost.models import MODELS
from fleetgnn.cost.planner import Plan, make_plan, predict_engine, workload_from_config
from fleetgnn.cost.profiles import PROFILES, load_profile
from fleetgnn.cost.store_model import DegreeModel, StoreCachePlan, plan_feature_cache
from fleetgnn.cost.target import (
    TARGET_MODES,
    EpochsToTarget,
    check_target_acc,
    epochs_from_records,
    merge_estimates,
)
from fleetgnn.cost.workload import ModelShape, Prediction, Workload

__all__ = [
    "LINK_KINDS",
    "MODELS",
    "PROFILES",
    "TARGET_MODES",
    "DegreeModel",
    "EpochsToTarget",
    "HardwareProfile",
    "ModelShape",
    "StoreCachePlan",
    "Plan",
    "Prediction",
    "Workload",
    "check_target_acc",
    "epochs_from_records",
    "load_profile",
    "local_profile",
    "make_plan",
    "merge_estimates",
    "plan_feature_cache",
    "predict_engine",
    "workload_from_config",
]
