"""Pieces every engine shares: data checks, features, model/optimizer checks, loss, metrics.

Engines take the user's model, optimizer and loss; they check them here, and evaluate with
numerators and denominators summed over ranks, so their results are comparable bit for bit with
the single-process reference.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fleetgnn.config import ENGINES, ReferenceEngineConfig
from fleetgnn.distributed import Communicator, DistContext
from fleetgnn.distributed.context import auto_device_type
from fleetgnn.errors import ConfigError, DatasetError
from fleetgnn.graph import Graph
from fleetgnn.graph.compact import feature_codec
from fleetgnn.graph.compact_rows import applied_feature_dtype
from fleetgnn.graph.rows import RowReader
from fleetgnn.nn import check_model
from fleetgnn.nn.pyg import PygModel
from fleetgnn.sampling import SeedLoader
from fleetgnn.tasks import NODE_CLASSIFICATION, Task, check_label_range
from fleetgnn.tasks.base import LossFn as LossFn
from fleetgnn.tasks.node import check_label_bounds
from fleetgnn.tasks.node import cross_entropy as cross_entropy

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}
SPLITS: tuple[str, ...] = ("train", "val", "test")
#: The compute dtype of each ``autocast`` setting (:class:`~fleetgnn.config.knobs.Precision`).
AUTOCAST_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16}


def autocast_dtype(config: Any) -> torch.dtype | None:
    """The dtype ``config.autocast`` computes in and rows travel in (``None``: no autocast)."""
    setting = getattr(config, "autocast", None)
    return None if setting is None else AUTOCAST_DTYPES[setting]


def autocast(device: torch.device | str, config: Any) -> contextlib.AbstractContextManager[Any]:
    """The mixed-precision context of a training step on ``device`` (a no-op without autocast).

    ``torch.autocast`` in :func:`autocast_dtype` of ``config``: matrix products run in bfloat16
    on float32 parameters; fleetgnn's graph ops cast their inputs back to float32 and reduce
    there (:func:`fleetgnn.ops.float32_inputs`).
    """
    dtype = autocast_dtype(config)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def resolve_device(device: str | torch.device, key: str = "device") -> torch.device:
    """The :class:`torch.device` of ``device``, checked against this machine.

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"`` (CUDA where it is available,
            else the CPU) or a :class:`torch.device`.
        key: The config key named in error messages (e.g. ``"train.device"``).

    Raises:
        ConfigError: ``device`` is not a device name, or names CUDA on a machine where CUDA is not
            available (a CPU-only torch build, or no visible GPU), or a GPU index that does not
            exist.
    """
    if isinstance(device, str) and device == "auto":
        device = auto_device_type()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(
            f"{key}={device!r} is not a device; use 'cpu', 'cuda', 'cuda:N' or 'auto'"
        ) from e
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                f"this torch ({torch.__version__}) is built without CUDA"
                if torch.version.cuda is None
                else "no GPU is visible"
            )
            raise ConfigError(
                f"{key}={str(device)!r} but CUDA is not available on this machine ({why}); "
                f"use {key}=cpu"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ConfigError(
                f"{key}={str(device)!r} but this machine has {count} visible GPU(s), "
                f"cuda:0..cuda:{count - 1}; pick one of those"
            )
    elif dev.type != "cpu":
        raise ConfigError(
            f"{key}={str(device)!r} is not supported; use 'cpu', 'cuda', 'cuda:N' or 'auto'"
        )
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def device_clock(device: torch.device | str) -> Callable[[], float]:
    """A clock for phase timers on ``device``: ``time.perf_counter`` after the device's queue.

    CUDA runs kernels asynchronously: a timer read straight after a launch measures the launch,
    not the work. On CUDA the clock first waits for the device (``torch.cuda.synchronize``), so
    every phase is charged with its own kernels (at the price of the overlap between phases that
    an unsynchronised step would have); on the CPU it is ``time.perf_counter`` itself.
    """
    dev = torch.device(device)
    if dev.type != "cuda":
        return time.perf_counter

    def clock() -> float:
        torch.cuda.synchronize(dev)
        return time.perf_counter()

    return clock


def peak_device_memory(device: torch.device | str, *, reset: bool = False) -> dict[str, int]:
    """The CUDA allocator's peak since the last reset on ``device`` (``{}`` on the CPU).

    ``{"allocator_peak": torch.cuda.max_memory_allocated, "allocator_reserved_peak":
    torch.cuda.max_memory_reserved}``, in bytes; ``reset`` starts a new window afterwards (the
    Trainer resets at every epoch start, so ``metrics.jsonl`` holds each epoch's own peak).
    """
    dev = torch.device(device)
    if dev.type != "cuda":
        return {}
    out = {
        "allocator_peak": int(torch.cuda.max_memory_allocated(dev)),
        "allocator_reserved_peak": int(torch.cuda.max_memory_reserved(dev)),
    }
    if reset:
        torch.cuda.reset_peak_memory_stats(dev)
    return out


#: Engines that train typed graphs (:mod:`fleetgnn.engines.typed`): the registry's ``typed``.
TYPED_ENGINES: tuple[str, ...] = tuple(n for n, s in ENGINES.items() if s.typed)


def refuse_typed(engine: str, graph: Any) -> None:
    """Raise a one-line :class:`ConfigError` when ``engine`` cannot train the typed ``graph``.

    ``fullgraph`` and ``offload`` partition one feature table of one row width and one CSC
    (their exchange plans, halos and chunks); neither has per-relation hops yet. ``reference``,
    ``minibatch`` and ``split`` train typed graphs through :func:`~fleetgnn.engines.build_engine`
    (their typed classes in :mod:`fleetgnn.engines.typed` and, for ``split``,
    :mod:`fleetgnn.engines.split_relations`).
    """
    from fleetgnn.graph.hetero import HeteroGraph

    if not isinstance(graph, HeteroGraph):
        return
    if engine in TYPED_ENGINES:
        raise ConfigError(
            f"typed graph '{graph.name}': build the {engine} engine with "
            f"fleetgnn.engines.build_engine (or engine_from_config), which picks its typed class"
        )
    raise ConfigError(
        f"the {engine} engine does not train typed graphs ('{graph.name}' has "
        f"{len(graph.schema.node_types)} node types); use engine {' or '.join(TYPED_ENGINES)}"
    )


def require_trainable(graph: Graph, task: Task | type[Task] = NODE_CLASSIFICATION) -> None:
    """Raise :class:`DatasetError` unless ``graph`` has what ``task`` (or its class) trains on.

    Every task needs node features; one that trains on node labels
    (:attr:`~fleetgnn.tasks.Task.needs_labels`: node classification) needs labels and a
    training split too. Link prediction does not: a graph of features and edges trains.
    """
    refuse_typed("reference", graph)
    if task.needs_labels and (graph.y is None or graph.train_mask is None):
        what = "labels (y)" if graph.y is None else "train_mask"
        raise DatasetError(
            f"dataset '{graph.name}' has no {what}; node classification trains on labels and a "
            f"train_mask: prepare it with them (e.g. 'fleetgnn prepare edgelist --labels "
            f"FILE'), or train link prediction (--task link), which reads neither"
        )
    if graph.x is None:
        raise DatasetError(
            f"dataset '{graph.name}' has no node features (x); training needs them; prepare the "
            f"dataset with --features"
        )


def num_classes_of(graph: Graph) -> int:
    """The class count: ``graph.num_classes``, else ``max(y) + 1``."""
    return int(graph.num_classes or int(np.max(np.asarray(graph.y))) + 1)


def labels_and_masks(
    graph: Graph,
    lo: int = 0,
    hi: int | None = None,
    device: torch.device | str = "cpu",
    num_classes: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Labels ``[R]`` and split masks of rows ``[lo, hi)`` as owned tensors on ``device``.

    ``num_classes``: check once, on the host, that every masked label lies in ``[0, C)``
    (:func:`~fleetgnn.tasks.check_label_range`), so no step's loss needs to.
    """
    hi = graph.num_nodes if hi is None else hi
    y = torch.from_numpy(np.array(graph.y[lo:hi], dtype=np.int64))
    masks = {
        s: torch.from_numpy(np.array(getattr(graph, f"{s}_mask")[lo:hi], dtype=bool))
        for s in SPLITS
        if getattr(graph, f"{s}_mask") is not None
    }
    if num_classes is not None:
        check_label_range(y, list(masks.values()), num_classes)
    return y.to(device), {s: m.to(device) for s, m in masks.items()}


class LabelRows:
    """A graph's labels read per batch: ``labels[ids]`` is an owned int64 tensor ``[len(ids)]``.

    The sampled engines (``minibatch``, ``split``) need the labels of each batch's seeds only, so
    they keep the dataset's own array (a memory map for an opened dataset) instead of an int64
    copy of all ``N`` labels (8 bytes per node per process). Rows of a memory-mapped ``.npy``
    are read with ``pread`` (:class:`~fleetgnn.graph.rows.RowReader`), so the label file's pages
    never become resident in the process either; the values are those of
    ``labels_and_masks(graph)[0][ids]``.

    Args:
        y: The labels ``[N]`` (any integer array; a memory map is fine).
        num_classes: Check each read's labels lie in ``[0, C)`` as they are read, on the host
            (the engines read training and validation nodes' labels only); ``None``: no check.
    """

    def __init__(self, y: Any, num_classes: int | None = None) -> None:
        self._rows = RowReader(y)
        self.num_nodes = int(y.shape[0])
        self.num_classes = num_classes

    def __len__(self) -> int:
        return self.num_nodes

    def __getitem__(self, ids: torch.Tensor | np.ndarray) -> torch.Tensor:
        """The int64 labels of ``ids`` (any order, repeats allowed), on the CPU."""
        idn = ids.cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
        y = self._rows.take(idn.astype(np.int64, copy=False)).astype(np.int64)
        if self.num_classes is not None:
            check_label_range(y, [np.ones(y.shape[0], dtype=bool)], self.num_classes)
        return torch.from_numpy(y)


@dataclasses.dataclass(frozen=True)
class NodeLabels:
    """What a task reads of a rank's rows for node labels (:func:`node_labels`).

    For a task that reads no labels (:attr:`~fleetgnn.tasks.Task.needs_labels` false: link
    prediction) it holds nothing: no labels, no masks, no training rows, no classes, and
    nothing of the dataset's label or mask arrays is read.

    Attributes:
        y: int64 labels ``[R]`` of the rows, on the device (``None``: not read).
        masks: The split masks present, bool ``[R]`` on the device (empty: not read).
        train: The rows of the training nodes, 0-based among the ``R`` rows, int64 on the CPU.
        num_classes: ``C`` (``None``: not read).
        num_train: Training nodes of the whole graph (a full-graph step's loss divisor).
    """

    y: torch.Tensor | None
    masks: dict[str, torch.Tensor]
    train: torch.Tensor
    num_classes: int | None
    num_train: int

    def __repr__(self) -> str:
        rows = "-" if self.y is None else str(int(self.y.shape[0]))
        return (
            f"NodeLabels(rows={rows}, splits={sorted(self.masks)}, train={self.num_train}, "
            f"num_classes={self.num_classes})"
        )


def node_labels(
    task: Task, graph: Graph, device: torch.device | str = "cpu", *, rows: Graph | None = None
) -> NodeLabels:
    """The :class:`NodeLabels` ``task`` reads of ``rows`` (``None``: every row of ``graph``).

    Args:
        task: The engine's task; one without :attr:`~fleetgnn.tasks.Task.needs_labels` gets an
            empty :class:`NodeLabels` and no array of ``graph`` is read.
        graph: The whole dataset (its class count and training-node count).
        device: Where the labels and masks go.
        rows: This rank's rows (:meth:`~fleetgnn.partition.PartitionBook.part_rows`).
    """
    if not task.needs_labels:
        return NodeLabels(None, {}, torch.empty(0, dtype=torch.int64), None, 0)
    own = graph if rows is None else rows
    num_classes = num_classes_of(graph)
    y, masks = labels_and_masks(own, num_classes=num_classes)  # checked on the host
    train = torch.nonzero(masks["train"]).view(-1)
    num_train = int(np.count_nonzero(np.asarray(graph.train_mask)))
    on = {s: m.to(device) for s, m in masks.items()}
    return NodeLabels(y.to(device), on, train, num_classes, num_train)


def label_rows(task: Task, graph: Graph) -> LabelRows | None:
    """The sampled engines' per-batch labels (:class:`LabelRows`; ``None``: ``task`` reads none)."""
    return LabelRows(graph.y, num_classes_of(graph)) if task.needs_labels else None


def seed_loader(task: Task, graph: Graph, batch_size: int, **kwargs: Any) -> SeedLoader | None:
    """A :class:`~fleetgnn.sampling.SeedLoader` (``kwargs``: its own) of the training nodes.

    ``None`` for a task that reads no labels: its steps' seeds are edges
    (:class:`~fleetgnn.engines.link.EdgeBatches`), and a graph without labels has no
    training nodes.
    """
    if not task.needs_labels:
        return None
    train = torch.from_numpy(np.flatnonzero(np.asarray(graph.train_mask)))
    return SeedLoader(train, batch_size, **kwargs)


def presample_seeds(task: Task, graph: Graph) -> torch.Tensor:
    """The nodes a pre-sampling placement samples around (int64 IDs, ascending).

    The training nodes of a task that trains on labels; otherwise the endpoints of the link
    task's training pairs, the nodes its edge batches sample around.
    """
    if task.needs_labels:
        return torch.from_numpy(np.flatnonzero(np.asarray(graph.train_mask)))
    src, dst = task.train_pairs()  # type: ignore[attr-defined]
    return torch.unique(torch.cat([src, dst]))


def check_labels(logits: torch.Tensor, target: torch.Tensor) -> None:
    """Raise :class:`~fleetgnn.errors.GraphError` unless integer ``target`` lies in ``[0, C)``.

    For evaluation code that reads labels itself; training labels are checked once where they
    are loaded (:func:`labels_and_masks`, :class:`LabelRows`), so the per-step loss
    (:func:`loss_sum`) does not sync the device for it.

    ``C`` is ``logits.shape[1]``. One min/max over the batch's labels (one device sync); a label
    outside the range would otherwise be an ``IndexError`` (CPU) or a device assert (CUDA) in
    the loss. Targets of another dtype or shape (a custom loss's) are left alone.
    """
    if logits.ndim != 2 or target.ndim != 1 or target.numel() == 0:
        return
    if target.dtype.is_floating_point or target.dtype == torch.bool:
        return
    lo, hi = (int(v) for v in torch.stack(torch.aminmax(target)).tolist())
    check_label_bounds(lo, hi, int(logits.shape[1]))


def loss_sum(loss: LossFn, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum of ``loss``'s per-node losses over the batch (engines scale it themselves).

    Node classification's :meth:`~fleetgnn.tasks.NodeClassification.loss_terms` total; the
    labels were range-checked when they were loaded, so this costs no device sync.

    Raises:
        ConfigError: If ``loss`` does not return one value per node.
    """
    return NODE_CLASSIFICATION.loss_terms(loss, logits, target).total


def prepare_model(
    model: torch.nn.Module,
    device: torch.device | str,
    dtype: torch.dtype,
    engine: str | None = None,
) -> torch.nn.Module:
    """Check the layer protocol and move ``model`` to ``device``/``dtype`` (in place).

    ``engine`` (its name) must be able to host the model (:func:`~fleetgnn.nn.check_model`).
    The parameters stay the same objects, so an optimizer built before the move still holds them.
    """
    return check_model(model, engine).to(device=device, dtype=dtype)


def broadcast_parameters(model: torch.nn.Module, comm: Any) -> None:
    """Copy rank 0's parameters and buffers into every rank's ``model`` (in place; collective).

    One metered broadcast per tensor through ``comm``, so a model initialised differently on
    each rank (another seed, a user's script) still trains as one model.
    """
    with torch.no_grad():
        for t in model.state_dict().values():
            comm.broadcast(t, src=0)


def default_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """The optimizer an engine uses when none is given: Adam, lr 0.01."""
    return torch.optim.Adam(model.parameters(), lr=0.01)


def check_optimizer(optimizer: Any, model: torch.nn.Module) -> torch.optim.Optimizer:
    """Return ``optimizer`` if it optimizes exactly ``model``'s parameters.

    Raises:
        ConfigError: If it is not an optimizer or holds other tensors than the model's.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigError(
            f"'optimizer' must be a torch.optim.Optimizer over the model's parameters (got "
            f"{type(optimizer).__name__})"
        )
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    mine = {id(p) for p in model.parameters() if p.requires_grad}
    if not held <= {id(p) for p in model.parameters()} or not mine <= held:
        raise ConfigError(
            "'optimizer' must be built over the same model's parameters (e.g. "
            "torch.optim.Adam(model.parameters())); it holds other tensors or misses some"
        )
    return optimizer


@dataclasses.dataclass(frozen=True)
class DistSetup:
    """What a distributed engine runs on, fixed at construction (:func:`setup_distributed`).

    Attributes:
        config: The engine's checked typed config.
        ctx: This process's :class:`~fleetgnn.distributed.DistContext`.
        clock: The phase clock on :attr:`device` (:func:`device_clock`).
        dtype: The config's floating-point dtype.
        seed: The config's seed.
        comm: The metered communicator of the context's group (debug mode from
            ``config.debug_collectives``).
    """

    config: Any
    ctx: Any
    clock: Callable[[], float]
    dtype: torch.dtype
    seed: int
    comm: Any

    @property
    def device(self) -> torch.device:
        """The context's device (the rank's GPU, or the CPU)."""
        return self.ctx.device

    @property
    def meter(self) -> Any:
        """The traffic meter of :attr:`comm`."""
        return self.comm.meter

    @property
    def rank(self) -> int:
        """This process's rank in the group."""
        return int(self.ctx.rank)

    @property
    def world_size(self) -> int:
        """The group's size."""
        return int(self.ctx.world_size)

    def __repr__(self) -> str:
        return (
            f"DistSetup(rank={self.rank}/{self.world_size}, device={self.device}, "
            f"dtype={self.dtype}, config={type(self.config).__name__})"
        )


def engine_config(name: str, config: Any, config_cls: type) -> Any:
    """``config`` checked to be the engine's ``config_cls`` (``None``: its defaults).

    Raises:
        ConfigError: If ``config`` is another engine's config.
    """
    cfg = config if config is not None else config_cls()
    if not isinstance(cfg, config_cls):
        raise ConfigError(
            f"the {name} engine needs a {config_cls.__name__} (got {type(cfg).__name__})"
        )
    return cfg


def one_process_setup(engine: Any, config: Any) -> Any:
    """The prologue of the one-process engines (``reference``, typed and typed link).

    Checks ``config`` is a :class:`~fleetgnn.config.ReferenceEngineConfig` (``None``: its
    defaults) and sets ``config``, ``mode``, ``device``, ``clock``, ``dtype`` and ``seed`` on
    ``engine``; returns the config.

    Raises:
        ConfigError: If ``config`` is another engine's config.
    """
    cfg = engine_config(engine.name, config, ReferenceEngineConfig)
    engine.config, engine.mode = cfg, cfg.mode
    engine.device = resolve_device(cfg.device)
    engine.clock = device_clock(engine.device)
    engine.dtype = DTYPES[cfg.dtype]
    engine.seed = int(cfg.seed)
    return cfg


def setup_distributed(
    name: str,
    graph: Graph,
    config: Any,
    config_cls: type,
    ctx: Any,
    task: Task = NODE_CLASSIFICATION,
) -> DistSetup:
    """The prologue every distributed engine shares: its :class:`DistSetup`.

    Checks ``config`` is a ``config_cls`` (``None``: its defaults) and that ``graph`` can be
    trained on, and initialises the process group on ``config.device`` when ``ctx`` is ``None``.

    Args:
        name: The engine's name (for error messages).
        graph: The dataset.
        config: The engine's typed config (``None``: defaults).
        config_cls: The engine's config class.
        ctx: This process's context (``None``: :func:`~fleetgnn.distributed.init`).
        task: The engine's task (what of the dataset it reads: :func:`require_trainable`).

    Raises:
        ConfigError: If ``config`` is another engine's config, or its ``device`` contradicts the
            context's (``"cpu"`` for a rank on a GPU, or ``"cuda"`` for a CPU rank).
        DatasetError: If the graph has no features, or no labels or training split for a task
            that trains on them.
    """
    cfg = engine_config(name, config, config_cls)
    refuse_typed(name, graph)
    require_trainable(graph, task)
    return dist_setup(name, cfg, ctx)


def dist_setup(name: str, cfg: Any, ctx: Any) -> DistSetup:
    """A checked engine config's :class:`DistSetup` on ``ctx`` (``None``: a new process group).

    The process group is initialised on ``cfg.device`` when ``ctx`` is ``None``; the
    communicator meters its traffic (``cfg.debug_collectives`` checks every collective).

    Raises:
        ConfigError: If ``cfg.device`` contradicts the context's device.
    """
    from fleetgnn.distributed import TrafficMeter, init

    wanted = str(cfg.device).split(":", 1)[0]
    if ctx is None:
        ctx = init(device=wanted)
    elif wanted != "auto" and wanted != ctx.device.type:
        raise ConfigError(
            f"the {name} engine's config says device={cfg.device!r} but its process group "
            f"runs on {ctx.device} (init(device=...)); give both the same device, or "
            "device='auto' to follow the group"
        )
    return DistSetup(
        config=cfg,
        ctx=ctx,
        clock=device_clock(ctx.device),
        dtype=DTYPES[cfg.dtype],
        seed=int(cfg.seed),
        comm=ctx.communicator(TrafficMeter(), debug=cfg.debug_collectives),
    )


def setup_model(
    engine: Any,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    loss: LossFn | None,
    *,
    broadcast: bool = True,
) -> torch.nn.Module:
    """Check and place the model, start every rank from rank 0's parameters, set the optimizer.

    Sets ``engine.num_layers``, ``engine.optimizer`` (``None``: Adam, lr 0.01) and
    ``engine.loss`` (``None``: cross-entropy); returns the model moved to ``engine.device`` and
    ``engine.dtype``. ``broadcast``: copy rank 0's parameters to every rank through
    ``engine.comm`` (collective; a no-op on one rank or without a communicator).
    """
    module = prepare_model(model, engine.device, engine.dtype, getattr(engine, "name", None))
    engine.num_layers = int(module.num_layers)
    comm = getattr(engine, "comm", None)
    if broadcast and comm is not None and comm.world_size > 1:
        broadcast_parameters(module, comm)
    engine.optimizer = (
        default_optimizer(module) if optimizer is None else check_optimizer(optimizer, module)
    )
    engine.loss = loss if loss is not None else cross_entropy
    classes = getattr(engine, "num_classes", None)  # the typed engines keep it
    task, graph = getattr(engine, "task", None), getattr(engine, "graph", None)
    if classes is None and task is not None and task.needs_labels and graph is not None:
        classes = num_classes_of(graph)  # a node task scores one output per class
    if loss is None and classes is not None:
        check_output_width(module, int(classes))
    if isinstance(module, PygModel) and (width := module.in_width()) is not None:
        check_input_width(module, width)
    return module


def check_input_width(module: PygModel, width: int) -> None:
    """Check the rows of the model's first forward have the ``width`` its first layer takes.

    A forward pre-hook that removes itself after the first forward. Without it a PyG model
    built for other features fails inside its first layer with torch's "mat1 and mat2 shapes
    cannot be multiplied", naming neither the model nor the dataset.

    Raises:
        ConfigError: At the first forward, the input rows are ``[N, F]`` with ``F != width``.
    """

    def hook(mod: torch.nn.Module, args: Any, kwargs: Any) -> None:
        handle.remove()
        x = args[1] if len(args) > 1 else kwargs.get("x")
        if isinstance(x, torch.Tensor) and x.dim() == 2 and x.shape[1] != width:
            raise ConfigError(
                f"the model {_module_name(mod)} takes {width} input features per node (its "
                f"first layer's in_channels) but the dataset's rows have {x.shape[1]}: build it "
                f"with in_channels={x.shape[1]}"
            )

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)


def check_output_width(module: torch.nn.Module, num_classes: int) -> None:
    """Check the model's first output against the classes: ``[B, num_classes]``, once.

    A forward hook that removes itself after the first forward, so later steps cost nothing.
    Without it a model with more outputs than classes trains with no word (12 outputs for 7
    classes: the extra columns only ever lose) and one with fewer fails inside the loss with
    torch's "Target 5 is out of bounds".

    Raises:
        ConfigError: At the first forward, the output is not ``[B, num_classes]``: one line
            naming the model and both shapes.
    """

    def hook(mod: torch.nn.Module, args: Any, out: Any) -> None:
        handle.remove()
        if isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[1] != num_classes:
            raise ConfigError(
                f"the model {_module_name(mod)} returns {list(out.shape)} on the first batch; "
                f"node classification on this dataset expects [{out.shape[0]}, {num_classes}] "
                f"(one score per class, {num_classes} classes): make its last layer output "
                f"{num_classes} features (e.g. out_channels={num_classes})"
            )

    handle = module.register_forward_hook(hook)


def _module_name(module: torch.nn.Module) -> str:
    """``GraphSAGE`` for a model, ``from_pyg(GraphSAGE)`` for an adapted PyG one."""
    if isinstance(module, PygModel):
        return f"from_pyg({type(module.pyg).__name__})"
    return type(module).__name__


def check_fanouts(fanouts: Sequence[int], model: torch.nn.Module) -> None:
    """Raise :class:`ConfigError` unless there is one fanout per model layer."""
    n = int(getattr(model, "num_layers", 0))
    if len(fanouts) != n:
        raise ConfigError(
            f"'fanouts' has {len(fanouts)} entries {list(fanouts)} but the model has {n} layers; "
            f"give one fanout per layer, e.g. fanouts={[10] * n}"
        )


#: Bytes of feature rows :func:`node_features` reads, converts and normalises per step.
FEATURE_BLOCK_BYTES = 8 << 20


def node_features(
    graph: Graph,
    dtype: torch.dtype,
    feature_norm: str = "none",
    feature_dtype: str | None = None,
) -> torch.Tensor:
    """The feature matrix as an owned tensor, normalised per ``data.feature_norm``.

    With ``feature_dtype`` (``store.feature_dtype``) each row first takes the values its
    compact stored form reads back (:func:`stored_values`), as the unified store's gather
    returns them; a dataset written compact reads its rows as stored
    (:func:`~fleetgnn.graph.compact_rows.applied_feature_dtype`).

    One copy: the ``[N, F]`` result of ``dtype`` is filled in row blocks of about
    :data:`FEATURE_BLOCK_BYTES`, each converted and normalised in place (the values of
    ``normalize_rows(x.to(dtype), feature_norm)``, bit for bit), so the peak is the result plus
    one block's temporaries, not three full copies. Rows of a memory-mapped dataset are read
    with ``pread`` (:class:`~fleetgnn.graph.rows.RowReader`): its pages stay in the page cache
    instead of becoming resident in the process as well.

    Raises:
        ConfigError: An unknown ``feature_norm``.
    """
    _check_feature_norm(feature_norm)
    x = graph.x
    codec = feature_codec(applied_feature_dtype(x, feature_dtype))
    n, f = (int(s) for s in x.shape)
    out = torch.empty((n, f), dtype=dtype)
    wide = max(x.dtype.itemsize, out.element_size())
    step = max(1, FEATURE_BLOCK_BYTES // max(1, f * wide))
    reader = RowReader(x)
    try:
        for a in range(0, n, step):
            b = min(n, a + step)
            rows = reader.slice(a, b) if reader.reads_file else np.asarray(x[a:b])
            if codec is not None:
                rows = codec.round_trip(torch.from_numpy(np.ascontiguousarray(rows))).numpy()
            block = out[a:b]
            np.copyto(block.numpy(), rows, casting="unsafe")  # the cast .to(dtype) makes
            if feature_norm == "row":  # normalize_rows, in place
                block.div_(block.abs().sum(dim=1, keepdim=True).clamp_min(1e-12))
    finally:
        reader.close()
    return out


def stored_values(x: torch.Tensor, feature_dtype: str | None) -> torch.Tensor:
    """Feature rows ``x`` with the values their ``store.feature_dtype`` form reads back.

    What the unified store's gather returns for the same rows
    (:meth:`FeatureCodec.round_trip <fleetgnn.graph.compact.FeatureCodec.round_trip>`, in
    ``x``'s dtype), for the engines that hold their features whole; ``x`` when ``None``.
    """
    codec = feature_codec(feature_dtype)
    return x if codec is None else codec.round_trip(x)


def normalize_rows(x: torch.Tensor, feature_norm: str) -> torch.Tensor:
    """Apply ``data.feature_norm`` to rows of features (row-wise, so any subset of rows works).

    ``"row"`` scales each row to unit L1 norm: GCN's row normalisation for non-negative
    bag-of-words features, and still well defined when features can be negative.
    """
    _check_feature_norm(feature_norm)
    if feature_norm == "row":
        return x / x.abs().sum(dim=1, keepdim=True).clamp_min(1e-12)
    return x


def _check_feature_norm(feature_norm: str) -> None:
    if feature_norm not in ("none", "row"):
        raise ConfigError(f"'data.feature_norm' must be 'none' or 'row' (got {feature_norm!r})")


def split_metrics(
    logits: torch.Tensor,
    y: torch.Tensor,
    masks: Mapping[str, torch.Tensor],
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, float]:
    """Accuracy per split and the mean validation loss of the rows this rank holds.

    Node classification's evaluation (:meth:`~fleetgnn.tasks.NodeClassification.evaluate`):
    every rank computes ``(correct, count)`` per split and the summed validation loss over its
    rows; ``reduce`` (e.g. :meth:`~fleetgnn.distributed.Communicator.all_reduce_sum`) adds them
    over ranks before the divisions, so the result equals the single-process value.

    Args:
        logits: ``[R, C]`` logits of this rank's rows.
        y: ``[R]`` labels of the same rows.
        masks: Split name -> bool ``[R]`` over the same rows.
        reduce: Sums a float64 tensor over ranks (``None``: one process).

    Returns:
        ``{"train_acc", "val_acc", "test_acc", "val_loss"}`` for the splits present (NaN where a
        split is empty everywhere).
    """
    return NODE_CLASSIFICATION.evaluate(logits, y, masks, reduce)


def metrics_from_sums(keys: Sequence[str], t: torch.Tensor, has_val: bool) -> dict[str, float]:
    """The metrics of :func:`split_metrics` from its sums (already summed over ranks).

    See :meth:`~fleetgnn.tasks.NodeClassification.metrics_from_sums`.
    """
    return NODE_CLASSIFICATION.metrics_from_sums(keys, t, has_val)


# ---------------------------------------------------------------------------------- memory
def process_memory() -> dict[str, int]:
    """This process's ``RssAnon`` (now) and ``VmHWM`` (peak RSS) in bytes, from ``/proc``.

    Returns:
        ``{"rss_anon": ..., "rss_peak": ...}`` with the keys ``/proc/self/status`` has; empty
        where there is no ``/proc``.
    """
    keys = {"RssAnon:": "rss_anon", "VmHWM:": "rss_peak"}
    out: dict[str, int] = {}
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/status") as f:
            for line in f:
                name = line.split(maxsplit=1)[0] if line.strip() else ""
                if name in keys:
                    out[keys[name]] = int(line.split()[1]) * 1024  # kB
    return out


class HeldBytes:
    """Bytes of the in-memory tensors and arrays reachable from some objects, each buffer once.

    :meth:`add` walks containers (lists, tuples, sets, dicts) and fleetgnn objects (their
    ``__dict__`` and ``__slots__``); torch tensors count their whole storage, numpy arrays their
    owning buffer; a buffer seen before (e.g. a tensor made with ``torch.from_numpy``) counts
    once. Memory maps (file-backed, not anonymous memory) are left out, and so are
    communicators and contexts (no state of the rank's own). A sparse CSR tensor counts its
    offsets, indices and values (cached matrices share them with their structure).

    Attributes:
        by_device: Bytes per device type (``"cpu"``, ``"cuda"``) over every :meth:`add`.
    """

    def __init__(self) -> None:
        self._objs: set[int] = set()
        self._alive: list[torch.Tensor] = []
        self._bufs: set[tuple[str, int]] = set()
        self.by_device: dict[str, int] = {}

    def add(self, *roots: object) -> int:
        """Walk ``roots``; returns the bytes of the buffers not counted before."""
        total = 0
        stack = list(roots)
        while stack:
            obj = stack.pop()
            if obj is None or isinstance(obj, str | int | float | bool) or id(obj) in self._objs:
                continue
            self._objs.add(id(obj))
            if isinstance(obj, torch.Tensor):
                if obj.layout == torch.strided and not obj.is_meta:
                    st = obj.untyped_storage()
                    total += self._count(obj.device.type, st.data_ptr(), st.nbytes())
                elif obj.layout == torch.sparse_csr:  # a cached matrix: its three arrays
                    parts = (obj.crow_indices(), obj.col_indices(), obj.values())
                    self._alive.extend(parts)  # fresh objects: their ids must stay unique
                    stack.extend(parts)
            elif isinstance(obj, np.ndarray):
                base = obj
                while isinstance(base.base, np.ndarray):
                    base = base.base
                if not isinstance(base, np.memmap):
                    total += self._count("cpu", base.__array_interface__["data"][0], base.nbytes)
            elif isinstance(obj, list | tuple | set | frozenset):
                stack.extend(obj)
            elif isinstance(obj, dict):
                stack.extend(obj.values())
            elif isinstance(obj, Communicator | DistContext):
                continue
            elif type(obj).__module__.startswith("fleetgnn."):
                stack.extend(getattr(obj, "__dict__", {}).values())
                for cls in type(obj).__mro__:
                    slots = getattr(cls, "__slots__", ())
                    for name in (slots,) if isinstance(slots, str) else slots:
                        stack.append(getattr(obj, name, None))
        return total

    def _count(self, device: str, ptr: int, nbytes: int) -> int:
        key = (device, ptr)
        if ptr == 0 or key in self._bufs:
            return 0
        self._bufs.add(key)
        self.by_device[device] = self.by_device.get(device, 0) + int(nbytes)
        return int(nbytes)
