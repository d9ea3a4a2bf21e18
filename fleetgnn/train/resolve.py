"""Values a run config leaves open, resolved for this run: model, threads, device, features.

The model's defaults, the thread count, the device check and the dataset's feature transform.
``fleetgnn train`` resolves them once, before any torch work, and records the values used in
``config.yaml`` (``model.hidden: 16`` for ``gcn`` rather than ``null``, ``train.threads: 1`` for two
processes on a 2-core machine, ``data.feature_norm: row`` for a Planetoid dataset).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from fleetgnn.config import Config, ModelConfig
from fleetgnn.config.run import HETERO_MODEL_DEFAULTS, MODEL_DEFAULTS
from fleetgnn.distributed.context import auto_device_type
from fleetgnn.distributed.launch import usable_cores
from fleetgnn.engines.common import resolve_device
from fleetgnn.graph import dataset_feature_norm

#: ModelConfig fields that ``None`` leaves to the model's defaults -> their build_model argument.
_DEFAULTED_FIELDS: dict[str, str] = {"hidden": "hidden_dim", "dropout": "dropout", "heads": "heads"}


def model_section_resolved(model: Mapping[str, Any]) -> dict[str, Any]:
    """A ``model`` config section (as a dict) with ``null`` fields replaced by the values used.

    ``hidden``, ``dropout`` and ``heads`` left ``None`` take the model's defaults from
    :data:`fleetgnn.config.run.MODEL_DEFAULTS` (typed models: ``HETERO_MODEL_DEFAULTS``;
    ``heads`` only for models that have heads); other fields and unknown model names are
    returned unchanged. Building a model from the result gives the same model as building it
    from the input.
    """
    out = dict(model)
    defaults = {**MODEL_DEFAULTS, **HETERO_MODEL_DEFAULTS}.get(str(out.get("name")), {})
    for key, arg in _DEFAULTED_FIELDS.items():
        if out.get(key) is None and arg in defaults:
            out[key] = defaults[arg]
    return out


def resolve_model_defaults(cfg: Config) -> Config:
    """``cfg`` with the model fields left ``None`` set to the values the model uses.

    What ``fleetgnn train`` records in ``config.yaml`` (e.g. ``hidden: 16`` for ``gcn``), so the
    file says what was trained; see :func:`model_section_resolved`.
    """
    resolved = model_section_resolved(dataclasses.asdict(cfg.model))
    return dataclasses.replace(cfg, model=ModelConfig(**resolved))


#: The GAE defaults ``train.task=link`` gives the keys that keep their defaults.
LINK_DEFAULTS: dict[str, Any] = {
    "train.epochs": 200,
    "model.hidden": 32,
    "model.dropout": 0.0,
    "optim.weight_decay": 0.0,
    "data.feature_norm": "none",  # GAE trains on Cora's raw binary features
}


def resolve_task_defaults(cfg: Config) -> Config:
    """``cfg`` with ``train.task=link``'s GAE defaults where its keys keep their defaults.

    A key set to another value (a flag, ``--set`` or the YAML) keeps it; one set to exactly its
    default (e.g. ``--epochs 10``) cannot be told apart from an unset one and takes the GAE
    value. Node classification is returned unchanged.
    """
    if cfg.train.task != "link":
        return cfg
    plain = Config()
    for key, value in LINK_DEFAULTS.items():
        if cfg.get(key) == plain.get(key):
            cfg = cfg.with_key(key, value)
    return cfg


def resolve_threads(
    threads: int | None, local_processes: int, omp_num_threads: str | None = None
) -> int:
    """The intra-op thread count of one training process (``train.threads``).

    Args:
        threads: ``train.threads``; used as is when set.
        local_processes: Training processes on this host (``--nproc``, or torchrun's
            ``LOCAL_WORLD_SIZE``).
        omp_num_threads: The ``OMP_NUM_THREADS`` environment variable, if set: an explicit
            choice that wins over the default (as under torchrun).

    Returns:
        ``threads``, else a positive integer ``omp_num_threads``, else
        ``usable_cores() // local_processes``, at least 1. (``fleetgnn train`` then lowers a
        defaulted count to 1 for a :func:`small_graph`.)
    """
    if threads is not None:
        return int(threads)
    if omp_num_threads is not None and omp_num_threads.strip().isdigit():
        if int(omp_num_threads) >= 1:
            return int(omp_num_threads)
    return max(1, usable_cores() // max(1, int(local_processes)))


#: A graph whose widest node matrix (``N x max(F, hidden)``) is smaller than this trains on one
#: intra-op thread unless told otherwise: its ops are too small for a second thread to pay for
#: its wake-ups, and on a shared machine each parallel region waits for a busy core (Cora GCN,
#: 2 threads with another process on the second core: 153 ms per epoch, 1 thread: 17 ms).
SMALL_GRAPH_ELEMENTS = 1 << 22


def small_graph(num_nodes: int, num_features: int | None, hidden: int | None) -> bool:
    """Whether ``N x max(F, hidden)`` is below :data:`SMALL_GRAPH_ELEMENTS`."""
    width = max(int(num_features or 0), int(hidden or 0), 1)
    return int(num_nodes) * width < SMALL_GRAPH_ELEMENTS


def check_device(cfg: Config) -> None:
    """Refuse a ``train.device`` this machine cannot run on (e.g. ``cuda`` without CUDA).

    Raises:
        ConfigError: One line naming ``train.device`` and what is wrong.
    """
    resolve_device(cfg.train.device, key="train.device")


def resolve_device_name(cfg: Config) -> Config:
    """``cfg`` with ``train.device="auto"`` replaced by what runs here (``"cuda"`` or ``"cpu"``).

    ``config.yaml`` then records the device that ran, and ``--resume`` on another machine
    refuses or follows it explicitly. Other values are checked (:func:`check_device`) and kept.
    """
    if cfg.train.device == "auto":
        name = auto_device_type()
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, device=name))
    check_device(cfg)
    return cfg


def resolve_feature_norm(cfg: Config) -> Config:
    """``cfg`` with ``data.feature_norm`` left ``None`` set to the dataset's transform.

    The dataset's transform is the ``feature_norm`` its ``meta.json`` records (``"row"`` for
    Planetoid and gnn-benchmark ``.npz`` datasets written by ``fleetgnn prepare``; ``"none"``
    when absent, and for the embedded synthetic default, ``data.dataset: null``). An explicit
    ``data.feature_norm`` (``"none"`` or ``"row"``) is kept as given. Reads ``meta.json`` only.

    Raises:
        DatasetError: ``data.dataset`` is not a dataset directory, or records an unknown value.
    """
    if cfg.data.feature_norm is not None:
        return cfg
    norm = dataset_feature_norm(cfg.data.dataset) if cfg.data.dataset else "none"
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, feature_norm=norm))
