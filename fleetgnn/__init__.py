"""fleetgnn: train graph neural networks on graphs too large for one GPU.

The Python API for scripts (run them plainly, or under ``torchrun`` for several processes)::

    import fleetgnn
    from fleetgnn.nn import LayerwiseModule, SAGEConv, KeyedDropout

    graph = fleetgnn.open_dataset("data/cora")
    ctx = fleetgnn.distributed.init()                # CUDA where available, else CPU; 1 rank alone
    model = MyModel(graph.num_features, 64, graph.num_classes)   # any layer-wise nn.Module
    engine = fleetgnn.build_engine(
        model, graph, fleetgnn.MinibatchEngineConfig(fanouts=(10, 10)), ctx,
        optimizer=torch.optim.Adam(model.parameters(), lr=0.01),
    )
    with engine:
        summary = fleetgnn.Trainer(engine, fleetgnn.TrainerConfig(epochs=20), "runs/x").fit()

Names are imported on first use, so ``import fleetgnn`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from fleetgnn.errors import FleetgnnError
from fleetgnn.graph import Graph, open_dataset, write_dataset

__version__ = "0.1.0"

#: Public name -> module that defines it (imported lazily by ``__getattr__``).
_LAZY: dict[str, str] = {
    "distributed": "fleetgnn.distributed",
    "nn": "fleetgnn.nn",
    "ENGINES": "fleetgnn.config",
    "EngineConfig": "fleetgnn.config",
    "ReferenceEngineConfig": "fleetgnn.config",
    "MinibatchEngineConfig": "fleetgnn.config",
    "SplitEngineConfig": "fleetgnn.config",
    "FullGraphEngineConfig": "fleetgnn.config",
    "OffloadEngineConfig": "fleetgnn.config",
    "TrainerConfig": "fleetgnn.config",
    "Config": "fleetgnn.config",
    "load_config": "fleetgnn.config",
    "build_engine": "fleetgnn.engines",
    "Engine": "fleetgnn.engines",
    "EpochStats": "fleetgnn.engines",
    "StepStats": "fleetgnn.engines",
    "Trainer": "fleetgnn.train",
    "engine_from_config": "fleetgnn.train",
    "read_metrics": "fleetgnn.train",
    "predict": "fleetgnn.train.export",
    "embed": "fleetgnn.train.export",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fleetgnn' has no attribute {name!r}")
    mod = importlib.import_module(module)
    value = mod if module.endswith("." + name) else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["FleetgnnError", "Graph", "__version__", "open_dataset", "write_dataset", *_LAZY]
