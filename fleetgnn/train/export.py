"""Inference and export from a finished run: ``predict`` (classes, probabilities) and ``embed``.

For a link-prediction run ``predict`` scores given node pairs instead (below).

Both rebuild the run's model from ``RUN_DIR/config.yaml``, load its weights from a checkpoint
(``best``: ``checkpoints/best.pt``, the best-validation epoch; ``last``: ``checkpoints/last.pt``,
else ``prev.pt``) written by any engine, and run streaming layer-wise full-neighbour inference
(:func:`~fleetgnn.engines.inference.stream_inference`) over the dataset, so memory stays bounded
by one chunk's rows whatever the graph's size. The output directory holds ``.npy`` files (open
them with ``np.load(path, mmap_mode="r")``) and a ``meta.json``; row ``i`` is node ``i`` of the
dataset, in its original numbering (whatever partition the run trained with):

=================  ====================  =====================================================
file               shape, dtype          what
=================  ====================  =====================================================
predictions.npy    ``[N]`` int64         the predicted class (argmax of the logits)
probabilities.npy  ``[N, C]`` float32    softmax of the logits
embeddings.npy     ``[N, W_K]``          layer ``K``'s output (``embed``; the model's dtype)
=================  ====================  =====================================================

A node run on a graph with node times that trained temporally (``train.temporal`` on, or
``auto`` with ``node_time``; :func:`~fleetgnn.train.setup.uses_node_time`) computes every row
as that run evaluated: node ``i`` embedded at its node time from the neighbourhood the temporal
sampler draws with the run's fanouts, strategy and seed under evaluation's fixed key
(:func:`~fleetgnn.engines.temporal_node.temporal_node_rows`; ``embed --layer K`` samples ``K``
hops with the last ``K`` fanouts, those the model's first ``K`` layers trained on), never
from edges of its time or later. A run of the Python API records no ``train.temporal``: its
rows are full-neighbour ones.

A link-prediction run (``train.task=link``): its model is the encoder with the decoder on top.
``embed --layer L`` writes the encoder's output, the embeddings the decoder scores (with the
``dot`` decoder an edge's logit is the inner product of two rows: retrieval is an
inner-product search over ``embeddings.npy``). ``predict`` takes the node pairs to score
(``pairs``, a file: :func:`~fleetgnn.graph.pairs.read_pairs`), computes every node's embedding
as ``embed`` does, and writes for pair ``i``:

=================  ====================  =====================================================
pairs.npy          ``[P, 2]`` int64      the pairs, as read
logits.npy         ``[P]`` float32       the decoder's score
probabilities.npy  ``[P]`` float32       its sigmoid (calibrated under ``link_loss=bce``;
                                         under ``bpr`` only the order means something)
=================  ====================  =====================================================

Both run the encoder on the run's message-passing graph by default (``edges="train"``: the
training edges of its edge split, the graph it was trained and evaluated on, so held-out edges
stay held out), or on every edge of the dataset (``edges="all"``: scoring new pairs with every
known edge).

With ``nproc > 1`` the work is spread over that many processes on this host (torch's elastic
launcher, as ``fleetgnn train --nproc``); under ``torchrun`` every rank runs the call and the
ranks share it. Either way rank ``r`` computes a contiguous range of nodes and writes its rows of
the same files (on several hosts, ``out`` must be on a file system every host sees). The files
are written in a temporary directory next to ``out`` (named after its owner process, space
reserved before writing, so a full disk is one line) and renamed into place once complete; the
hidden layers' scratch files go to a temporary directory in the run directory, removed at the end.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fleetgnn.config import Config
from fleetgnn.config.textfile import load_yaml_file
from fleetgnn.engines.chunks import Chunking
from fleetgnn.engines.common import DTYPES, normalize_rows, resolve_device, stored_values
from fleetgnn.engines.edges import EdgeRows
from fleetgnn.engines.inference import stream_inference
from fleetgnn.engines.rowfiles import RowFile, RowWriter
from fleetgnn.errors import ConfigError, DatasetError
from fleetgnn.graph import Graph, open_dataset
from fleetgnn.graph.compact_rows import applied_feature_dtype
from fleetgnn.graph.dataset import fsync_dir, replace_dir, write_json_atomic
from fleetgnn.graph.edge_split import edge_split_for
from fleetgnn.graph.files import apply_umask, sweep_stale, temp_prefix
from fleetgnn.graph.pairs import read_pairs
from fleetgnn.graph.rows import RowReader
from fleetgnn.graph.time_split import split_by_time
from fleetgnn.nn import build_model
from fleetgnn.nn.decoders import LinkModel, build_decoder
from fleetgnn.sampling import GraphTopology
from fleetgnn.train.checkpoint import CheckpointDir, CheckpointError, load_checkpoint
from fleetgnn.train.resolve import resolve_feature_norm, resolve_threads
from fleetgnn.train.setup import graph_model_kwargs, uses_node_time, uses_time
from fleetgnn.types import PathLikeStr

#: Checkpoints ``predict``/``embed`` can load.
CHECKPOINTS: tuple[str, ...] = ("best", "last")
#: Version of the output's ``meta.json`` layout.
EXPORT_FORMAT = 1
#: The message-passing graph of a link run's inference: its training edges, or every edge.
EDGES: tuple[str, ...] = ("train", "all")
#: Pairs scored at once by ``predict`` on a link run.
PAIR_CHUNK = 1 << 16
_DISK_FIX = "free some space there, or write the output to another file system (--out)"


@dataclasses.dataclass(frozen=True)
class ExportJob:
    """One checked ``predict``/``embed`` request (picklable: it travels to every worker).

    Attributes:
        kind: ``"predict"`` or ``"embed"``.
        run_dir: The run directory (absolute).
        out: The output directory (absolute).
        checkpoint: ``"best"`` or ``"last"``.
        checkpoint_path: The file the weights come from.
        dataset: The dataset directory (absolute).
        layer: ``embed``: the layer ``K`` (1-based) whose output is written; ``predict``: the
            model's last layer.
        config: The run's config as a dict.
        device: Where the computation runs (``None``: ``train.device`` of the run).
        overwrite: Replace an existing ``out``.
        chunking: How each rank cuts its nodes into chunks.
        model: The user's model the weights are loaded into (a copy of it), or ``None``: the
            model the run's config builds.
        weights: The model's weights as :func:`prepare_job` loaded them, reused by a rank that
            runs in the same process; ``None`` in a job sent to workers (each loads the file).
        task: ``"node"`` or ``"link"`` (the run's ``train.task``, or a :class:`LinkModel`).
        pairs: ``predict`` on a link run: the file of node pairs to score.
        edges: A link run's message-passing graph: ``"train"`` (its edge split's training
            edges) or ``"all"`` (every edge of the dataset).
        pair_array: The pairs as :func:`prepare_job` read them (``None`` in a job sent to
            workers: rank 0 reads the file again).
        temporal: A node run whose rows are computed at the node times (module docstring).
    """

    kind: str
    run_dir: str
    out: str
    checkpoint: str
    checkpoint_path: str
    dataset: str
    layer: int
    config: dict[str, Any]
    device: str | None = None
    overwrite: bool = False
    chunking: Chunking = dataclasses.field(default_factory=Chunking)
    model: Any = dataclasses.field(default=None, compare=False, repr=False)
    weights: dict[str, torch.Tensor] | None = dataclasses.field(
        default=None, compare=False, repr=False
    )
    task: str = "node"
    pairs: str | None = None
    edges: str = "train"
    pair_array: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)
    temporal: bool = False


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A run directory's ``config.yaml``, read once (bounded: a hostile file is one line).

    Attributes:
        config: The run's config; for a Python-API run (``api``) the defaults with the
            ``data.feature_norm`` its engine config recorded.
        api: The run was trained through the Python API (``Trainer``) with the user's own
            model: its ``config.yaml`` has ``trainer`` and ``engine`` sections, no model config.
    """

    config: Config
    api: bool


# ---------------------------------------------------------------------------------- public API
def predict(
    run_dir: PathLikeStr,
    out: PathLikeStr,
    *,
    checkpoint: str = "best",
    dataset: PathLikeStr | None = None,
    nproc: int = 1,
    overwrite: bool = False,
    device: str | None = None,
    chunking: Chunking | None = None,
    model: torch.nn.Module | None = None,
    pairs: PathLikeStr | None = None,
    edges: str = "train",
) -> Path:
    """Write every node's predicted class and class probabilities (see the module docstring).

    For a link-prediction run: the scores of the node pairs of ``pairs`` instead.

    Args:
        run_dir: A run directory written by ``fleetgnn train`` (its ``config.yaml`` and
            ``checkpoints/``).
        out: Output directory (``predictions.npy``, ``probabilities.npy``, ``meta.json``); must
            not exist unless ``overwrite``.
        checkpoint: ``"best"`` or ``"last"``.
        dataset: Dataset directory (``None``: the run's ``data.dataset``).
        nproc: Processes on this host (ignored under ``torchrun``, which sets the ranks).
        overwrite: Replace an existing ``out`` once the new output is complete.
        device: ``"cpu"``, ``"cuda"`` (each rank its local GPU) or ``None`` (the run's
            ``train.device``).
        chunking: How each rank cuts its nodes into chunks (``None``: the defaults).
        model: Your own model, for a run trained through the Python API (``Trainer``) with a
            model fleetgnn cannot rebuild from ``config.yaml``: the checkpoint's weights are
            loaded into a copy of it (it must be built as for training); ``dataset`` is then
            required unless the run's config names one. ``None``: the model the run's config
            builds (a run of ``fleetgnn train``).
        pairs: A link-prediction run: the file of node pairs to score (``.npy`` ``[P, 2]``, or
            text/CSV with two columns; :func:`~fleetgnn.graph.pairs.read_pairs`); required
            there, refused for node classification.
        edges: A link run's message-passing graph: ``"train"`` or ``"all"`` (module docstring).

    Returns:
        ``out``.

    Raises:
        FleetgnnError: One line: no run or checkpoint there, a dataset that does not fit the
            model, an existing ``out``, a full disk, a bad pairs file.
    """
    job = prepare_job(
        "predict",
        run_dir,
        out,
        None,
        checkpoint,
        dataset,
        overwrite,
        device,
        model=model,
        pairs=pairs,
        edges=edges,
    )
    return run_job(dataclasses.replace(job, chunking=chunking or Chunking()), nproc)


def embed(
    run_dir: PathLikeStr,
    out: PathLikeStr,
    layer: int,
    *,
    checkpoint: str = "best",
    dataset: PathLikeStr | None = None,
    nproc: int = 1,
    overwrite: bool = False,
    device: str | None = None,
    chunking: Chunking | None = None,
    model: torch.nn.Module | None = None,
    edges: str = "train",
) -> Path:
    """Write every node's layer-``layer`` output, ``embeddings.npy`` (see the module docstring).

    For a link-prediction run ``layer = L`` gives the embeddings its decoder scores.

    Args:
        run_dir: A run directory written by ``fleetgnn train``.
        out: Output directory (``embeddings.npy``, ``meta.json``).
        layer: ``K`` in ``[1, L]`` (``L`` = the model's layers; ``K = L`` gives the logits).
        checkpoint: ``"best"`` or ``"last"``.
        dataset: Dataset directory (``None``: the run's ``data.dataset``).
        nproc: Processes on this host (ignored under ``torchrun``).
        overwrite: Replace an existing ``out`` once the new output is complete.
        device: ``"cpu"``, ``"cuda"`` or ``None`` (the run's ``train.device``).
        chunking: How each rank cuts its nodes into chunks (``None``: the defaults).
        model: Your own model, for a run trained through the Python API (``Trainer``) with a
            model fleetgnn cannot rebuild from ``config.yaml``: the checkpoint's weights are
            loaded into a copy of it (it must be built as for training); ``dataset`` is then
            required unless the run's config names one. ``None``: the model the run's config
            builds (a run of ``fleetgnn train``).
        edges: A link run's message-passing graph: ``"train"`` or ``"all"`` (module docstring).

    Returns:
        ``out``.

    Raises:
        FleetgnnError: One line, as :func:`predict`; also a layer outside ``[1, L]``.
    """
    job = prepare_job(
        "embed",
        run_dir,
        out,
        layer,
        checkpoint,
        dataset,
        overwrite,
        device,
        model=model,
        edges=edges,
    )
    return run_job(dataclasses.replace(job, chunking=chunking or Chunking()), nproc)


# ---------------------------------------------------------------------------------- checks
def read_run_config(run_dir: PathLikeStr) -> RunConfig:
    """The run's ``config.yaml``, read once, for :func:`prepare_job` and the CLI.

    Raises:
        ConfigError: No run directory or no ``config.yaml`` there, or a file that is hostile,
            damaged or not a valid config (one line).
    """
    run = Path(run_dir)
    path = run / "config.yaml"
    if not run.is_dir():
        raise ConfigError(f"run directory '{run}' does not exist; pass a run directory")
    if not path.is_file():
        raise ConfigError(
            f"'{run}' has no config.yaml, so it is not a run directory written by "
            f"'fleetgnn train'; pass a run directory"
        )
    raw = load_yaml_file(path, "the run's config")  # bounded: one line on a hostile file
    if isinstance(raw, Mapping) and "trainer" in raw and "engine" in raw and "train" not in raw:
        engine = raw.get("engine")
        conf = engine.get("config") if isinstance(engine, Mapping) else None
        norm = conf.get("feature_norm") if isinstance(conf, Mapping) else None
        norm = norm if norm in ("none", "row") else None  # None: not recorded
        return RunConfig(Config().with_key("data.feature_norm", norm), api=True)
    return RunConfig(Config.from_dict(raw).validate(), api=False)


def _checkpoint_file(run_dir: Path, which: str) -> Path:
    if which not in CHECKPOINTS:
        raise ConfigError(
            f"--checkpoint {which!r} is not one of {', '.join(CHECKPOINTS)}; use best (the "
            f"best-validation epoch) or last (the latest checkpoint)"
        )
    ckdir = CheckpointDir(run_dir / "checkpoints")
    if which == "best":
        if not ckdir.best.is_file():
            raise CheckpointError(
                f"run '{run_dir}' has no best checkpoint ('{ckdir.best}'; it is written when an "
                f"evaluation improves the validation metric); use --checkpoint last"
            )
        return ckdir.best
    found = ckdir.candidates()
    if not found:
        raise CheckpointError(
            f"run '{run_dir}' has no checkpoint ('{ckdir.last}' or '{ckdir.prev}'); train it "
            f"first with 'fleetgnn train'"
        )
    return found[0]


def _model_state(ckpt: Mapping[str, Any], path: Path) -> dict[str, torch.Tensor]:
    """The model's weights in a checkpoint (any engine; DDP's ``module.`` prefix removed)."""
    engine = ckpt.get("engine")
    state = engine.get("model") if isinstance(engine, Mapping) else None
    if not isinstance(state, Mapping) or not state:
        raise CheckpointError(
            f"checkpoint '{path}' holds no model weights (engine.model); it was not written by "
            f"'fleetgnn train'"
        )
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"checkpoint '{path}': model entry {key!r} is not a named tensor; it is damaged"
            )
        out[key.removeprefix("module.")] = value
    return out


def _checkpoint_info(ckpt: Mapping[str, Any], which: str) -> dict[str, Any]:
    """Epoch and step the weights are from (best: the best epoch; last: where training was)."""
    t = ckpt.get("trainer")
    if not isinstance(t, Mapping):
        return {}
    info: dict[str, Any] = {}
    for key in ("epoch", "next_step", "global_step", "best_epoch"):
        v = t.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            info[key] = v
    if which == "best" and "best_epoch" in info:
        info["epoch"] = info["best_epoch"]
    elif info.get("next_step") == 0 and "epoch" in info:
        info["epoch"] = info["epoch"] - 1  # a checkpoint at an epoch end: that epoch is done
    return info


def prepare_job(
    kind: str,
    run_dir: PathLikeStr,
    out: PathLikeStr,
    layer: int | None,
    checkpoint: str,
    dataset: PathLikeStr | None,
    overwrite: bool,
    device: str | None,
    *,
    model: torch.nn.Module | None = None,
    run_config: RunConfig | None = None,
    pairs: PathLikeStr | None = None,
    task: str | None = None,
    edges: str = "train",
) -> ExportJob:
    """Check a request before any worker starts; every refusal is one line.

    Reads the run's config (unless ``run_config`` is that, already read), loads the checkpoint
    (weights only) and checks that the model built from the config accepts its weights, opens
    the dataset, checks ``layer`` and that ``out`` is free (or ``overwrite``); for a link run's
    ``predict``, reads and checks ``pairs``. ``task`` (``"node"``/``"link"``, ``None``: the
    run's) must be the run's. Also sweeps what killed exports left next to ``out``.

    Raises:
        FleetgnnError: What is wrong, naming the argument.
    """
    run = Path(run_dir).absolute()
    recorded = read_run_config(run) if run_config is None else run_config
    cfg = recorded.config
    if recorded.api:  # a Trainer of the Python API: the model is the user's own
        if model is None:
            raise ConfigError(
                f"run '{run}' was trained through the Python API with your own model, which "
                f"cannot be rebuilt from its config.yaml; pass that model: fleetgnn.{kind}("
                f"run_dir, out, {'layer, ' if kind == 'embed' else ''}model=MyModel(...), "
                f"dataset=DIR) (the 'fleetgnn {kind}' command rebuilds only models of "
                f"'fleetgnn train')"
            )
        if dataset is None:
            raise ConfigError(
                f"run '{run}' was trained through the Python API and does not record its "
                f"dataset; pass dataset=DIR"
            )
    if model is not None and not isinstance(model, torch.nn.Module):
        raise ConfigError(f"model= must be a torch.nn.Module, got {type(model).__name__}")
    path = _checkpoint_file(run, checkpoint)
    ckpt = load_checkpoint(path)
    state = _model_state(ckpt, path)
    data = dataset if dataset is not None else cfg.data.dataset
    if not data:
        raise ConfigError(
            f"run '{run}' trained on the generated default dataset (data.dataset is null); pass "
            f"the dataset directory (--dataset)"
        )
    data_path = Path(data).absolute()
    graph = open_dataset(data_path, kind="graph")
    link = cfg.train.task == "link" or isinstance(model, LinkModel)
    run_task = "link" if link else "node"
    _check_task(run, kind, run_task, task, pairs, edges, recorded.api)
    built = _build_model(cfg, graph, link) if model is None else copy.deepcopy(model)
    _load_weights(built, state, path)
    num_layers = int(getattr(built, "num_layers", 0))
    if num_layers < 1:
        raise ConfigError(
            f"model= {type(built).__name__} has no num_layers: pass a layer-wise model "
            f"(fleetgnn.nn.LayerwiseModule), the kind the engines train"
        )
    if kind == "embed":
        if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= num_layers:
            last = "the embeddings the decoder scores" if link else "the logits"
            raise ConfigError(
                f"--layer {layer!r} is outside [1, {num_layers}]: the model has {num_layers} "
                f"layers (--layer {num_layers} is {last})"
            )
    else:
        layer = num_layers
    pair_array = read_pairs(pairs, graph.num_nodes) if kind == "predict" and link else None
    dest = Path(out).absolute()
    if dest.exists() and not overwrite:
        raise ConfigError(
            f"output directory '{dest}' already exists; choose another --out or pass --overwrite"
        )
    if device is not None:
        resolve_device(device, key="--device")
    else:
        try:
            resolve_device(cfg.train.device, key="train.device")
        except ConfigError as e:
            raise ConfigError(f"the run's {e}; or pass --device cpu") from None
    sweep_stale(dest.parent, files=False, legacy_names={dest.name})
    sweep_stale(run, files=False)  # scratch directories of killed inferences
    info = _checkpoint_info(ckpt, checkpoint)
    cfg_dict = cfg.to_dict()
    cfg_dict["data"]["dataset"] = str(data_path)
    return ExportJob(
        kind=kind,
        run_dir=str(run),
        out=str(dest),
        checkpoint=checkpoint,
        checkpoint_path=str(path),
        dataset=str(data_path),
        layer=int(layer),
        config={**cfg_dict, "_checkpoint_info": info},
        device=device,
        overwrite=overwrite,
        model=model,
        weights=state,
        task=run_task,
        pairs=None if pairs is None else str(Path(pairs).absolute()),
        edges=edges,
        pair_array=pair_array,
        temporal=not link and not recorded.api and uses_node_time(cfg.train.temporal, graph),
    )


def _check_task(
    run: Path,
    kind: str,
    run_task: str,
    task: str | None,
    pairs: PathLikeStr | None,
    edges: str,
    api: bool,
) -> None:
    """Refuse a ``task``, ``pairs`` or ``edges`` that does not fit the run (one line)."""
    if task is not None and task not in ("node", "link"):
        raise ConfigError(f"--task {task!r} is not one of node, link")
    if task is not None and task != run_task:
        trained = "link prediction" if run_task == "link" else "node classification"
        raise ConfigError(
            f"--task {task}: run '{run}' trained {trained} (train.task={run_task}); pass "
            f"--task {run_task} or a run of that task"
        )
    if edges not in EDGES:
        raise ConfigError(f"--edges {edges!r} is not one of {', '.join(EDGES)}")
    if run_task == "node":
        if pairs is not None:
            raise ConfigError(
                f"--pairs scores node pairs of a link-prediction run; run '{run}' trained node "
                f"classification (train.task=node)"
            )
        return
    if kind == "predict" and pairs is None:
        raise ConfigError(
            f"run '{run}' trained link prediction: pass the node pairs to score (--task link "
            f"--pairs FILE: two columns of node IDs); its embeddings are 'fleetgnn embed'"
        )
    if api and edges == "train":
        raise ConfigError(
            f"run '{run}' was trained through the Python API and does not record its edge "
            f"split; pass edges='all' (every edge of the dataset is message passing)"
        )


def _build_model(cfg: Config, graph: Graph, link: bool = False) -> nn.Module:
    if link:  # as train.setup.model_from_config: encoder of width link_dim, and the decoder
        if graph.x is None:
            raise DatasetError(
                f"dataset '{graph.name}' has no node features (x); the model needs them"
            )
        t = cfg.train
        kwargs = graph_model_kwargs(cfg, graph)
        encoder = build_model(cfg.model.name, graph.num_features, int(t.link_dim), seed=0, **kwargs)
        return LinkModel(encoder, build_decoder(t.decoder, int(t.link_dim)))
    if graph.x is None:
        raise DatasetError(f"dataset '{graph.name}' has no node features (x); the model needs them")
    classes = graph.num_classes
    if not classes:
        if graph.y is None:
            raise DatasetError(
                f"dataset '{graph.name}' records no num_classes and has no labels; the model's "
                f"output size cannot be checked"
            )
        classes = int(np.max(np.asarray(graph.y))) + 1
    return build_model(
        cfg.model.name, graph.num_features, int(classes), seed=0, **graph_model_kwargs(cfg, graph)
    )


def _load_weights(model: torch.nn.Module, state: Mapping[str, torch.Tensor], path: Path) -> None:
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        detail = " ".join(str(e).split())[:300]
        raise CheckpointError(
            f"checkpoint '{path}' does not fit the model (the one passed, or the one the run's "
            f"config builds for this dataset) ({detail}); pass the model and dataset the run "
            f"trained with"
        ) from None


# ---------------------------------------------------------------------------------- running
def run_job(job: ExportJob, nproc: int = 1) -> Path:
    """Run a checked job: in this process, on ``nproc`` local workers, or as a torchrun rank.

    Raises:
        FleetgnnError: A worker's one-line error.
    """
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        _worker(job, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        return Path(job.out)
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ConfigError(f"--nproc {nproc!r} is invalid: give a number of processes >= 1")
    if nproc == 1:
        _set_threads(1)
        _run_rank(job, None)
        return Path(job.out)
    from fleetgnn.distributed import launch

    try:
        # each worker loads the weights itself: the job travels without them
        sent = dataclasses.replace(job, weights=None, pair_array=None)
        launch(_worker, args=(sent, nproc), nproc=nproc)
    finally:
        # a killed worker leaves its temporary output behind: its owner is gone now
        out = Path(job.out)
        sweep_stale(out.parent, files=False, legacy_names={out.name})
    return Path(job.out)


def _device(job: ExportJob) -> torch.device:
    """The job's device (``--device``, else the run's ``train.device``), checked here."""
    name = job.device or str(job.config["train"]["device"])
    return resolve_device(name, key="--device" if job.device else "train.device")


def _set_threads(local: int) -> None:
    torch.set_num_threads(resolve_threads(None, local, os.environ.get("OMP_NUM_THREADS")))


def _worker(job: ExportJob, nproc: int) -> None:
    """One rank under ``launch`` or ``torchrun`` (module-level, so it pickles)."""
    from fleetgnn.distributed import destroy, init

    _set_threads(nproc)
    cuda = _device(job).type == "cuda"
    ctx = init(device="cuda" if cuda else "cpu")
    try:
        _run_rank(job, ctx)
    finally:
        destroy(ctx)


def _reload_weights(path: Path) -> dict[str, torch.Tensor]:
    """The weights of a checkpoint :func:`prepare_job` has loaded once already, in its process.

    Whatever the load warned about was shown then; a worker loading the same file again stays
    quiet, so a warning is printed once, not once more per rank.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _model_state(load_checkpoint(path), path)


def _output_files(job: ExportJob, graph: Graph, widths: list[int], dtype: Any) -> dict[str, Any]:
    """The files the inference writes: ``name -> (RowWriter kind, dtype, shape)``.

    A link run's ``predict`` writes the embeddings first (scored, then removed by rank 0).
    """
    n = graph.num_nodes
    if job.kind == "predict" and job.task != "link":
        return {
            "predictions.npy": ("class", np.int64, (n,)),
            "probabilities.npy": ("prob", np.float32, (n, widths[-1])),
        }
    return {"embeddings.npy": ("rows", dtype, (n, widths[-1]))}


def _create_outputs(job: ExportJob, files: dict[str, Any]) -> str:
    """Rank 0: the temporary output directory with every file's space reserved."""
    out = Path(job.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(out.name), dir=out.parent))
    try:
        for name, (_, dtype, shape) in files.items():
            RowFile.create(tmp / name, dtype, shape, _DISK_FIX)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return str(tmp)


def _run_rank(job: ExportJob, ctx: Any) -> None:
    """The whole export on one rank (``ctx``: its distributed context, ``None`` alone)."""
    from fleetgnn.engines.collectives import agreed
    from fleetgnn.engines.inference import layer_widths

    cfg_dict = {k: v for k, v in job.config.items() if k != "_checkpoint_info"}
    cfg = resolve_feature_norm(Config.from_dict(cfg_dict).validate())
    comm = ctx.communicator() if ctx is not None else None
    rank = 0 if ctx is None else int(ctx.rank)
    world = 1 if ctx is None else int(ctx.world_size)
    device = _device(job)
    if ctx is not None and device.type == "cuda":
        device = ctx.device  # this rank's GPU
    dtype = DTYPES[cfg.train.dtype]
    graph = _message_passing_graph(job, cfg)
    ckpt_path = Path(job.checkpoint_path)
    link = job.task == "link"
    model = _build_model(cfg, graph, link) if job.model is None else copy.deepcopy(job.model)
    state = job.weights if job.weights is not None else _reload_weights(ckpt_path)
    _load_weights(model, state, ckpt_path)
    model = model.to(device=device, dtype=dtype).eval()
    edges = EdgeRows.of(model, graph, dtype, device, cfg.store.edge_feature_dtype)
    widths = layer_widths(
        model, graph.num_features, job.layer, device=device, dtype=dtype, edges=edges
    )
    files = _output_files(job, graph, widths, torch.empty(0, dtype=dtype).numpy().dtype)
    tmp = Path(agreed(comm, lambda: _create_outputs(job, files), everywhere=False))
    done = False
    writer: RowWriter | None = None
    try:
        writer = RowWriter({kind: RowFile(tmp / name) for name, (kind, _, _) in files.items()})
        reader = RowReader(graph.x)
        norm = cfg.data.feature_norm or "none"
        # the values the trained model read (a dataset's compact rows: as stored)
        stored = applied_feature_dtype(graph.x, cfg.store.feature_dtype)

        def features(ids: torch.Tensor) -> torch.Tensor:
            rows = stored_values(torch.from_numpy(reader.take(ids.numpy())), stored)
            return normalize_rows(rows.to(device=device, dtype=dtype), norm)

        if job.temporal:
            _rows_at_node_times(
                job, cfg, graph, model, features, writer, device, dtype, comm, edges
            )
        else:
            stream_inference(
                model,
                GraphTopology(graph),
                features,
                graph.indptr,
                writer,
                in_width=graph.num_features,
                comm=comm,
                device=device,
                dtype=dtype,
                num_layers=job.layer,
                chunking=job.chunking,
                scratch_dir=job.run_dir,
                same_host=True if ctx is None else bool(ctx.same_host),
                edges=edges,  # the edge rows as the model read them (store.edge_feature_dtype)
            )
        writer.close()
        if comm is not None and world > 1:
            comm.barrier()  # every rank's rows are written
        if rank == 0:
            summary: dict[str, Any] = {}
            if link and job.kind == "predict":
                files, summary = _score_pairs(job, tmp, model, device, dtype)
            _publish(job, tmp, files, widths, world, cfg, graph.num_nodes, summary)
        done = True
    finally:
        if writer is not None:
            writer.close()
        if rank == 0 and not done:
            shutil.rmtree(tmp, ignore_errors=True)


def _rows_at_node_times(
    job: ExportJob,
    cfg: Config,
    graph: Graph,
    model: nn.Module,
    features: Any,
    writer: RowWriter,
    device: torch.device,
    dtype: torch.dtype,
    comm: Any,
    edges: EdgeRows | None,
) -> None:
    """Every node's layer-``job.layer`` rows at its node time, this rank's share to ``writer``.

    The run's temporal sampler (``train.fanouts``, ``train.seed``, ``train.temporal_strategy``)
    with its last ``job.layer`` fanouts, under evaluation's fixed key: the rows the run's
    evaluation computed for the same weights.
    """
    from fleetgnn.engines.temporal_node import temporal_node_rows
    from fleetgnn.sampling import TemporalSampler
    from fleetgnn.tasks import TemporalNodeClassification

    t = cfg.train
    fanouts = list(t.fanouts)
    if len(fanouts) != int(cfg.model.num_layers):
        raise ConfigError(
            f"the run's train.fanouts {fanouts} has not one fanout per layer of its "
            f"{cfg.model.num_layers}-layer model; its rows cannot be sampled at the node times"
        )
    sampler = TemporalSampler(
        GraphTopology(graph),
        fanouts[len(fanouts) - job.layer :],
        seed=int(t.seed),
        strategy=t.temporal_strategy,  # type: ignore[arg-type]
    )
    world = 1 if comm is None else int(comm.world_size)
    rank = 0 if comm is None else int(comm.rank)
    temporal_node_rows(
        model,
        sampler,
        TemporalNodeClassification(graph.node_time, t.temporal_strategy),
        features,
        np.arange(graph.num_nodes, dtype=np.int64),
        writer,
        dtype=dtype,
        device=device,
        edges=edges,  # the edge rows as the model read them (store.edge_feature_dtype)
        share=(rank, world),
    )


def _message_passing_graph(job: ExportJob, cfg: Config) -> Graph:
    """The dataset, or for a link run with ``edges="train"`` its edge split's training graph."""
    graph = open_dataset(job.dataset, kind="graph")
    if job.task != "link" or job.edges == "all":
        return graph
    t = cfg.train
    if uses_time(t.temporal, graph):  # the training edges of the time split (recomputed)
        return split_by_time(graph, t.val_edges, t.test_edges, int(t.seed)).train_graph
    if graph.edge_time is not None:  # train.temporal=off: the times are ignored
        graph = graph.replace(edge_time=None)
    # the split the run trained on (saved with the dataset; drawn identically if absent)
    return edge_split_for(graph, job.dataset, t.val_edges, t.test_edges, int(t.seed)).train_graph


def _score_pairs(
    job: ExportJob, tmp: Path, model: nn.Module, device: torch.device, dtype: torch.dtype
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Rank 0: score the job's pairs from ``tmp/embeddings.npy`` (then removed).

    Reads only the pairs' endpoint rows, :data:`PAIR_CHUNK` pairs at a time.

    Returns:
        The files written (as :func:`_output_files`) and the summary for ``meta.json``.
    """
    pairs = job.pair_array
    if pairs is None:  # a worker's job travels without them
        pairs = read_pairs(str(job.pairs), int(RowFile(tmp / "embeddings.npy").shape[0]))
    num = int(pairs.shape[0])
    files: dict[str, Any] = {
        "pairs.npy": ("pairs", np.int64, (num, 2)),
        "logits.npy": ("logit", np.float32, (num,)),
        "probabilities.npy": ("prob", np.float32, (num,)),
    }
    for name, (_, dt, shape) in files.items():
        RowFile.create(tmp / name, dt, shape, _DISK_FIX)
    out = {kind: RowFile(tmp / name) for name, (kind, _, _) in files.items()}
    emb = RowReader(np.load(tmp / "embeddings.npy", mmap_mode="r"))
    decoder = model.decoder if isinstance(model, LinkModel) else getattr(model, "decoder", None)
    if decoder is None:
        raise ConfigError(f"model= {type(model).__name__} has no decoder; pass a LinkModel")
    prob_sum, above = 0.0, 0
    try:
        with torch.no_grad():
            for a in range(0, num, PAIR_CHUNK):
                chunk = pairs[a : a + PAIR_CHUNK]
                ids, inverse = np.unique(chunk.reshape(-1), return_inverse=True)
                rows = torch.from_numpy(emb.take(ids)).to(device=device, dtype=dtype)
                inverse_t = torch.from_numpy(inverse.reshape(-1, 2)).to(device)
                logits = decoder(rows[inverse_t[:, 0]], rows[inverse_t[:, 1]]).float()
                probs = torch.sigmoid(logits)
                prob_sum += float(probs.double().sum())
                above += int((probs > 0.5).sum())
                out["pairs"].write(a, chunk)
                out["logit"].write(a, logits.cpu().numpy())
                out["prob"].write(a, probs.cpu().numpy())
    finally:
        for f in out.values():
            f.close()
    (tmp / "embeddings.npy").unlink()
    summary = {
        "task": "link",
        "pairs_file": job.pairs,
        "pairs": num,
        "mean_probability": prob_sum / num,
        "above_half": above / num,
    }
    return files, summary


def _publish(
    job: ExportJob,
    tmp: Path,
    files: dict[str, Any],
    widths: list[int],
    world: int,
    cfg: Config,
    num_nodes: int,
    summary: dict[str, Any] | None = None,
) -> None:
    """Rank 0: fsync the files, write ``meta.json`` and move the directory to ``out``."""
    for name in files:
        fd = os.open(tmp / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        apply_umask(tmp / name)
    meta = {
        "format": EXPORT_FORMAT,
        "kind": job.kind,
        "run_dir": job.run_dir,
        "checkpoint": job.checkpoint,
        "checkpoint_path": job.checkpoint_path,
        **job.config.get("_checkpoint_info", {}),
        "dataset": job.dataset,
        "num_nodes": int(num_nodes),
        "model": cfg.model.name,
        "num_layers": int(cfg.model.num_layers),
        "layer": int(job.layer),
        "feature_norm": cfg.data.feature_norm,
        "world_size": world,
        "task": job.task,
        **_link_meta(job, cfg),
        **(summary or {}),
        "ids": (
            "row i is pair i of the pairs file; node IDs are the dataset's"
            if summary
            else "row i is node i of the dataset (its original numbering)"
        ),
        "files": {
            name: {"shape": list(shape), "dtype": np.dtype(dtype).name}
            for name, (_, dtype, shape) in files.items()
        },
    }
    write_json_atomic(tmp / "meta.json", meta)
    out = Path(job.out)
    if out.exists() and not job.overwrite:  # someone created it meanwhile
        raise ConfigError(
            f"output directory '{out}' appeared while writing; choose another --out or pass "
            f"--overwrite"
        )
    replace_dir(tmp, out)
    fsync_dir(out)


def _link_meta(job: ExportJob, cfg: Config) -> dict[str, Any]:
    """A link run's entries of ``meta.json``: the graph and how to use the embeddings."""
    if job.task != "link":
        return {}
    out: dict[str, Any] = {"edges": job.edges, "decoder": cfg.train.decoder}
    if job.kind == "embed" and job.layer == int(cfg.model.num_layers):
        out["retrieval"] = (
            "the decoder's input: a pair's logit is the inner product of its two rows "
            "(inner-product search)"
            if cfg.train.decoder == "dot"
            else f"the decoder's input (decoder {cfg.train.decoder}, which has weights: score "
            f"pairs with 'fleetgnn predict --task link --pairs FILE')"
        )
    return out


def describe(out: PathLikeStr) -> str:
    """One line about a finished export (for the CLI)."""
    meta = json.loads((Path(out) / "meta.json").read_text())
    parts = [f"{n} {tuple(f['shape'])} {f['dtype']}" for n, f in meta["files"].items()]
    epoch = meta.get("epoch")
    at = f", epoch {epoch}" if epoch is not None else ""
    line = f"wrote {', '.join(parts)} to '{out}' (checkpoint {meta['checkpoint']}{at})"
    if "pairs" in meta and "mean_probability" in meta:
        line += (
            f"; {meta['pairs']} pairs scored, mean probability {meta['mean_probability']:.4f}, "
            f"{100 * meta['above_half']:.1f}% above 0.5"
        )
    return line


__all__ = ["CHECKPOINTS", "ExportJob", "embed", "predict", "prepare_job", "run_job"]
