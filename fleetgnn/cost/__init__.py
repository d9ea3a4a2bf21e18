"""Cost layer: hardware profiles, per-engine cost models and the planner that ranks engines.

Sits between ``exchange`` and ``engines``: it reads configs and counts, never runs an engine and
never imports ``torch.distributed``.
"""

from fleetgnn.cost.hardware import (
    LINK_KINDS,
    PROFILES,
    HardwareProfile,
    load_profile,
    local_profile,
)
from fleetgnn.cost.models import MODELS, ModelShape, Prediction, Workload
from fleetgnn.cost.planner import Plan, make_plan, predict_engine, workload_from_config

__all__ = [
    "LINK_KINDS",
    "MODELS",
    "PROFILES",
    "HardwareProfile",
    "ModelShape",
    "Plan",
    "Prediction",
    "Workload",
    "load_profile",
    "local_profile",
    "make_plan",
    "predict_engine",
    "workload_from_config",
]
