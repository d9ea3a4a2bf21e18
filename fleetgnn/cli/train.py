"""``fleetgnn train``: resolve the config and dataset, build the engine, run the Trainer.

Before any worker starts (and before any torch work), the whole run is checked in this process:
the config (keys, types, ranges, byte budgets), the device, the engine's availability and process
count, the dataset, the device topology, and that the run directory does not already hold a run
(``--resume`` continues one, ``--overwrite`` replaces it). The values the config leaves open
(``train.threads``, the model's ``null`` fields, ``data.feature_norm``: the transform the
dataset's ``meta.json`` records) are resolved and recorded in ``config.yaml``.

A typed (heterogeneous) dataset directory trains on ``reference``, ``minibatch`` or ``split``
with a typed model (``model.name`` rgcn, rgat or hetero-sage; R-GAT not on ``split``; node
classification on the target type, or link prediction on ``train.link_relation``; fanouts per
relation from ``train.relation_fanouts``); other engines, models and tasks are refused in one
line before any worker starts, and ``--engine auto`` plans only the typed engines.

Ctrl-C stops the run (every worker, for a distributed one) and prints where it can be resumed
from; the exit status is 130 (143 for SIGTERM, which stops the run the same way).

Hostile or damaged run files are refused with one line before they are used: a config file or a
``--set`` value is read with the bounds of :mod:`fleetgnn.config.textfile` (a regular file, at
most 1 MiB, UTF-8, YAML without anchors, aliases or tags, at most 32 levels deep), a
``metrics.jsonl`` that is not UTF-8 or holds a malformed line is refused. A fresh run records
the dataset's absolute path in ``config.yaml`` (so ``--resume`` works from any directory);
``--resume`` without a checkpoint says it starts from the beginning. At the start, leftovers of
killed runs are swept and reported: temporary files in the run directory and its
``checkpoints/``, temporary directories of an interrupted generation of the default dataset, and
shared-memory segments of dead processes.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import shlex
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from fleetgnn.cli.messages import printable
from fleetgnn.errors import ConfigError, DatasetError, FleetgnnError
from fleetgnn.graph import Graph, HeteroGraph, open_dataset


def default_cache_dir() -> Path:
    """Where generated default datasets are cached (``$XDG_CACHE_HOME/fleetgnn``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetgnn"


def resolve_dataset(
    data_cfg: object, show_progress: bool = True
) -> tuple[Graph | HeteroGraph, Path]:
    """Open ``data.dataset`` (homogeneous or typed), or generate (once, cached) the default."""
    dataset = getattr(data_cfg, "dataset", None)
    if dataset:
        path = Path(dataset)
        return open_dataset(path), path
    from fleetgnn.cli.progress import task_progress
    from fleetgnn.graph.synthetic import generator_version, prepare_synthetic, spec_for

    preset, scale, seed = data_cfg.preset, float(data_cfg.scale), int(data_cfg.seed)
    spec = spec_for(preset, scale)  # validates the preset name and scale before any work
    cache = Path(getattr(data_cfg, "cache_dir", None) or default_cache_dir())
    # the key covers the whole spec, so a changed preset definition never reuses a stale cache
    key = f"{generator_version(spec)}:{spec!r}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    path = cache / "datasets" / f"synthetic-{preset}-x{scale:g}-s{seed}-{digest}"
    if not (path / "meta.json").is_file():
        with task_progress(f"generating synthetic {preset} x{scale:g}", show_progress) as progress:
            try:
                prepare_synthetic(path, preset=preset, scale=scale, seed=seed, progress=progress)
            except DatasetError:
                if not (path / "meta.json").is_file():  # another process may have won the race
                    raise
    return open_dataset(path), path


def feature_width(graph: Graph | HeteroGraph) -> int | None:
    """``F``; for a typed graph its widest feature table (``None``: no features)."""
    if isinstance(graph, HeteroGraph):
        return max((int(f.shape[1]) for f in graph.x.values()), default=None)
    return graph.num_features


def _overrides(args: argparse.Namespace) -> list[str]:
    flags = {
        "dataset": "data.dataset",
        "model": "model.name",
        "mode": "train.mode",
        "engine": "train.engine",
        "epochs": "train.epochs",
        "seed": "train.seed",
        "nproc": "train.nproc",
        "max_restarts": "train.max_restarts",
        "task": "train.task",
    }
    out = []
    for attr, key in flags.items():
        value = getattr(args, attr, None)
        if value is not None:
            out.append(f"{key}={value}")
    return out + list(args.overrides)


class TrainInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during ``fleetgnn train``.

    Attributes:
        note: The line to print (``""``: print nothing, e.g. on the ranks other than 0 under
            torchrun).
        signum: The signal that stopped the run (``SIGINT`` or ``SIGTERM``).
    """

    def __init__(self, note: str, signum: int = signal.SIGINT) -> None:
        super().__init__(note)
        self.note = note
        self.signum = int(signum)


def check_metrics_file(path: Path) -> None:
    """Refuse a ``metrics.jsonl`` that resuming would choke on, in one line.

    Raises:
        FleetgnnError: Not a regular file, too large, not UTF-8, a line nested too deeply to
            parse, or an epoch line whose ``epoch`` is not an integer.
    """
    import json

    from fleetgnn.train.metrics import read_metrics_text

    if not os.path.lexists(path):
        return
    # only the one line is known bad: the others are a run's history, kept
    fix = "remove or fix that line (the only one known bad), or start a fresh run directory"
    text = read_metrics_text(path)  # a regular file, bounded, UTF-8
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except RecursionError:
            raise FleetgnnError(
                f"metrics file '{path}' line {i + 1} nests too deeply to parse; it is corrupt: "
                f"{fix}"
            ) from None
        except ValueError:
            continue  # torn last line, or reported by the metrics reader
        if not isinstance(rec, dict) or "event" in rec:
            continue
        epoch = rec.get("epoch", -1)
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise FleetgnnError(
                f"metrics file '{path}' line {i + 1}: 'epoch' is {repr(epoch)[:60]}, not an "
                f"integer; it is corrupt: {fix}"
            )


def _sweep_leftovers(run_dir: Path, cfg: Any, quiet: bool, files: bool, segments: bool) -> None:
    """Remove (and report) what killed runs left behind.

    Temporary files and directories with ``files`` (rank 0 only), this host's shared-memory
    segments with ``segments`` (one rank per host).
    """
    from fleetgnn.cli.report import report_removed
    from fleetgnn.graph.files import sweep_stale

    removed: list[object] = []
    if files:
        removed += [*sweep_stale(run_dir), *sweep_stale(run_dir / "checkpoints")]
        if not getattr(cfg.data, "dataset", None):
            cache = Path(getattr(cfg.data, "cache_dir", None) or default_cache_dir())
            removed += sweep_stale(cache / "datasets", files=False)
    if segments:
        from fleetgnn.distributed.launch import sweep_stale_launch_files
        from fleetgnn.distributed.shm import sweep_stale_segments

        removed += [
            f"removed stale shared-memory segment '{p}' (owner process is gone)"
            for p in sweep_stale_segments()
        ]
        removed += [
            f"removed stale launcher {what} '{p}' (owner process is gone)"
            for what, p in sweep_stale_launch_files()
        ]
    report_removed(removed, "train", quiet)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (it may be replaced after setup)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def show_log(quiet: bool) -> None:
    """Print the ``fleetgnn`` logger's lines on stderr, bare (INFO and up; errors only if quiet).

    Engines log the choices they make for the run there (e.g. the minibatch engine's two-sided
    gather across hosts, on rank 0). Idempotent: one handler per process.
    """
    logger = logging.getLogger("fleetgnn")
    handler = next((h for h in logger.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    handler.setLevel(logging.ERROR if quiet else logging.INFO)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)


def _torchrun_env() -> dict[str, int] | None:
    """RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and the restart count when this is a torchrun worker."""
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        return None
    world = int(os.environ["WORLD_SIZE"])
    return {
        "rank": int(os.environ["RANK"]),
        "world_size": world,
        "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", world)),
        "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0),
    }


def _auto_run_dir(cfg: Any) -> Path:
    """``runs/<time>-<model>-<engine>``, with a ``-N`` suffix if that directory already exists."""
    base = Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.model.name}-{cfg.train.engine}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def check_run_dir_free(run_dir: Path) -> None:
    """Refuse to start a fresh run in a directory that already holds one.

    Raises:
        ConfigError: ``run_dir`` has a ``config.yaml``, ``summary.json``, ``metrics.jsonl`` or
            ``checkpoints/``; the message offers ``--resume``, a new directory, or ``--overwrite``.
    """
    from fleetgnn.train.rundir import run_markers

    found = run_markers(run_dir)
    if not found:
        return
    quoted = shlex.quote(str(run_dir))
    raise ConfigError(
        f"run directory '{run_dir}' already holds a run ({', '.join(found)}); continue it with "
        f"'fleetgnn train --resume {quoted}', pick a new --run-dir, or add --overwrite to "
        f"replace it"
    )


#: The run's record of the dataset it trains on (path and :func:`dataset_fingerprint`).
DATASET_RECORD = "dataset.json"


def record_dataset(run_dir: Path, dataset: Path, resume: bool, accept: bool, quiet: bool) -> None:
    """Record the dataset's fingerprint in ``RUN_DIR/dataset.json``; on resume, compare first.

    Raises:
        ConfigError: ``--resume`` of a run whose dataset's files changed since it started
            (another ``prepare``, an edit), unless ``accept`` (``--accept-changed-dataset``).
    """
    from fleetgnn.config.textfile import load_json_file
    from fleetgnn.graph import dataset_fingerprint
    from fleetgnn.graph.dataset import atomic_write_text

    current = dataset_fingerprint(dataset)
    path = run_dir / DATASET_RECORD
    if resume and os.path.lexists(path):
        fix = "delete it to resume without the check"
        saved = load_json_file(path, "dataset record", max_bytes=1 << 16, fix=fix)
        old = saved.get("fingerprint") if isinstance(saved, dict) else None
        if old == current:
            return
        if old is not None and not accept:
            raise ConfigError(
                f"--resume {run_dir}: the dataset '{dataset}' changed since the run started (its "
                f"files' fingerprint is {current}, the run recorded {str(old)[:32]}): it was "
                f"prepared again or edited; resume on the original data, or add "
                f"--accept-changed-dataset to continue on the new data on purpose"
            )
        if old is not None and not quiet:
            print(
                f"fleetgnn train: warning: --resume {run_dir}: continuing on the changed dataset "
                f"'{dataset}' (--accept-changed-dataset)",
                file=sys.stderr,
                flush=True,
            )
    record = {"dataset": str(Path(dataset).absolute()), "fingerprint": current}
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")


def _interrupted_note(run_dir: Path) -> str:
    """The line printed after Ctrl-C: where the run stopped and how to resume it."""
    from fleetgnn.train import resume_point

    if not (run_dir / "config.yaml").is_file():
        return "interrupted before training started; nothing to resume"
    epoch, step = resume_point(run_dir) or (0, 0)
    return (
        f"interrupted at epoch {epoch} step {step}; resume with: fleetgnn train --resume "
        f"{shlex.quote(str(run_dir))}"
    )


def _drop_unstarted(run_dir: Path) -> None:
    """Remove what a fresh run that never started training wrote (its dataset record).

    The lock's release then removes the directory it created (:func:`release_run_dir`), so an
    interrupted or timed-out start leaves no stub behind.
    """
    from fleetgnn.train.rundir import run_markers

    if not run_markers(run_dir):
        with contextlib.suppress(OSError):
            (run_dir / DATASET_RECORD).unlink(missing_ok=True)


def _warn_oversubscribed(nproc: int, device: str) -> None:
    """Say so when ``--nproc`` workers outnumber the CPU cores (or GPUs) here; the run goes on."""
    from fleetgnn.distributed.launch import oversubscription

    note = oversubscription(nproc, device)
    if note is not None:
        print(f"fleetgnn train: warning: {note}", file=sys.stderr, flush=True)


def _preflight(cfg: Any, graph: Graph | HeteroGraph) -> None:
    """Checks that would otherwise fail inside every worker, run once before any starts.

    Raises:
        FleetgnnError: The device cannot be used here, or the dataset cannot be trained on (one
            line, naming the key).
    """
    from fleetgnn.config.run import HETERO_MODEL_DEFAULTS
    from fleetgnn.engines.common import require_trainable
    from fleetgnn.engines.link import refuse_temporal
    from fleetgnn.tasks import NODE_CLASSIFICATION, LinkPrediction
    from fleetgnn.train import check_device
    from fleetgnn.train.hooks import check_trainer_settings
    from fleetgnn.train.setup import temporal_kind

    check_device(cfg)
    check_trainer_settings(cfg)
    kind = temporal_kind(cfg, graph)  # typed link: None, or refused when its times would be used
    if isinstance(graph, HeteroGraph):
        _typed_preflight(cfg, graph)
        if kind is not None:  # typed node in time: reference and minibatch (mode=minibatch)
            from fleetgnn.engines.temporal_node import refuse_typed_temporal

            refuse_typed_temporal(cfg.train.engine, cfg.train.mode)
        return
    if kind is not None:  # a full graph has no "now": refused before any worker starts
        refuse_temporal(cfg.train.engine, cfg.train.mode, kind)
    link = cfg.train.task == "link"  # reads no labels: a graph of features and edges trains
    require_trainable(graph, LinkPrediction if link else NODE_CLASSIFICATION)
    if cfg.model.name in HETERO_MODEL_DEFAULTS:
        raise ConfigError(
            f"model.name={cfg.model.name} is a typed model (one weight per relation) but "
            f"'{graph.name}' has one node type and one relation; prepare a typed dataset (e.g. "
            f"'fleetgnn prepare synthetic --preset mag-like'), or pick a homogeneous model"
        )
    if cfg.train.relation_fanouts:
        raise ConfigError(
            f"train.relation_fanouts is for typed graphs; '{graph.name}' has one relation: set "
            f"train.fanouts and leave train.relation_fanouts empty"
        )


def _typed_preflight(cfg: Any, graph: HeteroGraph) -> None:
    """What a typed run needs: a typed engine and model, node classification, a labelled target."""
    from fleetgnn.config.run import HETERO_MODEL_DEFAULTS, TYPED_LINK_ENGINES
    from fleetgnn.engines.common import TYPED_ENGINES, refuse_typed
    from fleetgnn.sampling.hetero import relation_fanouts

    if cfg.train.engine not in TYPED_ENGINES:
        refuse_typed(cfg.train.engine, graph)  # one line naming the engines that train it
    if cfg.model.name not in HETERO_MODEL_DEFAULTS:
        raise ConfigError(
            f"'{graph.name}' is a typed graph: model.name={cfg.model.name} is homogeneous (one "
            f"weight for every relation); choose one of {', '.join(HETERO_MODEL_DEFAULTS)} "
            f"(--model rgcn)"
        )
    s = graph.schema
    if cfg.train.task == "link":
        from fleetgnn.graph.edge_split import resolve_relation

        if cfg.train.link_relation is None:
            rels = ", ".join(",".join(r) for r in s.relations)
            raise ConfigError(
                f"train.task=link on the typed graph '{graph.name}' needs train.link_relation: "
                f"one of {rels}"
            )
        resolve_relation(graph, cfg.train.link_relation)  # one line listing the relations
        if cfg.train.engine not in TYPED_LINK_ENGINES:
            from fleetgnn.engines.typed_link import typed_link_engine

            typed_link_engine(cfg.train.engine)  # one line naming the engines that train it
    elif s.target is None or graph.y is None or graph.train_mask is None:
        raise DatasetError(
            f"typed dataset '{graph.name}' has no target type, labels or train_mask; training "
            f"needs all three (prepare it with labels on one node type)"
        )
    if cfg.train.relation_fanouts:
        try:
            relation_fanouts(s, cfg.train.relation_fanouts)
        except ConfigError as e:
            raise ConfigError(f"train.relation_fanouts: {e}") from None


def check_topology(cfg: Any, torchrun: dict[str, int] | None) -> None:
    """Read and check ``store.topology`` for the run's world size, torch-free.

    Done right after the config is loaded, before torch is imported: a hostile topology (a link
    to ``/dev/zero``, a FIFO, a huge file) is refused in one line, in the memory of a process
    that has not loaded torch.

    Raises:
        ConfigError: The topology cannot be read or is not an ``N x N`` matrix for the world
            size (``train.nproc``, or torchrun's world).
    """
    from fleetgnn.config import engine_spec
    from fleetgnn.config.knobs import TieredStore
    from fleetgnn.config.topology import topology_matrix

    spec = engine_spec(cfg.train.engine)
    uses_topology = issubclass(spec.config_cls, TieredStore)  # store.topology is one of its knobs
    if spec.distributed and uses_topology and cfg.store.topology is not None:
        world = cfg.train.nproc if torchrun is None else torchrun["world_size"]
        topology_matrix(cfg.store.topology, world, key="store.topology")


def _plan_engine(
    cfg: Any, run_dir: Path, hardware: str, progress: bool, quiet: bool, target: Any = None
) -> Any:
    """``--engine auto``: the planner's engine, mode and knobs, the plan in RUN_DIR/plan.json.

    With a ``target`` (``--target-acc`` and its estimates) the plan ranks by time to it.
    """
    import dataclasses

    from fleetgnn.cli.plan import plan_for
    from fleetgnn.config import engine_spec
    from fleetgnn.engines.link import temporal_pairs
    from fleetgnn.train.setup import temporal_kind

    graph, path = resolve_dataset(cfg.data, show_progress=progress)
    nproc = int(cfg.train.nproc)
    mode = cfg.train.mode or "auto"
    engines, note = None, ""
    kind = temporal_kind(cfg, graph)
    if kind is not None and mode != "full":  # mode=full: refused by the preflight, one line
        from fleetgnn.engines.temporal_node import TYPED_TEMPORAL_NODE_ENGINES

        # only sampled batches have a "now": the engines that sample this task in time
        pairs = TYPED_TEMPORAL_NODE_ENGINES if isinstance(graph, HeteroGraph) else None
        mode, engines = "minibatch", sorted({e for e, _ in pairs or temporal_pairs(kind)})
        note = f" (temporal {kind} task: planned over {', '.join(engines)} in mode=minibatch)"
    from fleetgnn.train import resolve_task_defaults

    # the run's model: link prediction's GAE defaults are resolved before its workers start
    planned = resolve_task_defaults(cfg)
    plan = plan_for(planned, graph, None, hardware, nproc, mode, engines, target, path)
    if plan.choice is None:
        raise ConfigError(f"--engine auto: {plan.reason}")
    train = dataclasses.replace(cfg.train, engine=plan.choice, mode=plan.mode)
    if not engine_spec(plan.choice).distributed and train.nproc > 1:
        # the one-process run was predicted fastest: it runs alone, whatever --nproc said
        train = dataclasses.replace(train, nproc=1)
    cfg = dataclasses.replace(cfg, train=train)
    knobs = plan.predictions[plan.choice].knobs
    if plan.choice == "offload":
        cfg = cfg.with_key("offload.chunks", int(knobs["chunks"]))
    if plan.choice == "minibatch":  # the store the plan priced (unset budgets are unlimited)
        for name in ("device_budget", "host_budget"):
            key = f"store.{name}"
            cfg = cfg.with_key(key, cfg.get(key) or str(int(knobs[name])))
    cfg = cfg.validate()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "plan.json").write_text(json.dumps(plan.to_dict(), indent=1) + "\n")
    if not quiet:
        print(f"planner ({plan.hardware}): {plan.choice}{note}. {plan.reason}", flush=True)
    return cfg


def run_train(args: argparse.Namespace) -> int:
    """Run ``fleetgnn train`` for parsed arguments; returns the exit status.

    Rank 0's process (this one, or the first worker under torchrun) holds the run directory's
    lock (:mod:`fleetgnn.train.rundir`) from when the directory is known until the run ends.

    Raises:
        FleetgnnError: A user error (one line), found before any worker starts where possible.
        TrainInterrupted: Ctrl-C; its note says where to resume from.
    """
    with contextlib.ExitStack() as held:
        return _run_train(args, held)


def _run_train(args: argparse.Namespace, held: contextlib.ExitStack) -> int:
    from fleetgnn.cli.target import target_request
    from fleetgnn.config import engine_spec, load_config

    quiet = bool(getattr(args, "quiet", False))
    overwrite = bool(getattr(args, "overwrite", False))
    progress = bool(args.progress) and not quiet
    resume = args.resume is not None
    torchrun = _torchrun_env()
    is_rank0 = torchrun is None or torchrun["rank"] == 0
    if resume and overwrite:
        raise ConfigError(
            "--resume continues a run and --overwrite replaces one; pass only one of them"
        )
    auto = getattr(args, "engine", None) == "auto"
    target = target_request(args)
    if target is not None and not auto:
        raise ConfigError(
            "--target-acc ranks the engines of --engine auto by time to the target (it does "
            "not stop training): add --engine auto, or drop it"
        )
    if auto:
        if resume:
            raise ConfigError(
                "--engine auto plans a new run; --resume continues with the run's own engine "
                "(drop --engine auto)"
            )
        if torchrun is not None:
            raise ConfigError(
                "--engine auto plans before workers start: use --nproc N instead of torchrun, "
                "or run 'fleetgnn plan' and pass its choice to --engine"
            )
        # a placeholder the plan replaces, valid for the mode and --nproc asked for
        holder = "minibatch" if getattr(args, "mode", None) == "minibatch" else "fullgraph"
        args = argparse.Namespace(**{**vars(args), "engine": holder})
    overrides = _overrides(args)
    if resume:
        run_dir = Path(args.resume)
        from fleetgnn.train.rundir import check_run_dir_path

        check_run_dir_path(run_dir)  # one line, not ENAMETOOLONG from the first stat
        cfg_path = run_dir / "config.yaml"
        if not cfg_path.is_file():
            raise ConfigError(
                f"--resume {run_dir}: no config.yaml there; point --resume at a run directory "
                f"written by 'fleetgnn train'"
            )
        check_metrics_file(run_dir / "metrics.jsonl")
        # flags and --set apply on top of the run's config (e.g. --epochs 6 extends the run);
        # the Trainer refuses changes that would change what the checkpoint means
        cfg = load_config(cfg_path, overrides)
        check_topology(cfg, torchrun)
    else:
        cfg = load_config(args.config, overrides)
        if not auto:  # --engine auto: checked once the plan has chosen the engine
            check_topology(cfg, torchrun)
        if cfg.data.dataset:  # recorded absolute: --resume works from any directory
            cfg = cfg.with_key("data.dataset", str(Path(cfg.data.dataset).absolute()))
        given = args.run_dir or cfg.run_dir
        run_dir = Path(given) if given else _auto_run_dir(cfg)
        # a group restarted by torchrun's agent runs this command again: it resumes (run_worker)
        restarted = torchrun is not None and torchrun["restart_count"] > 0
        if not overwrite and not restarted:
            check_run_dir_free(run_dir)
    import torch

    from fleetgnn.train import (
        CheckpointDir,
        Trainer,
        check_resumable,
        engine_from_config,
        finished_reason,
        resolve_device_name,
        resolve_feature_norm,
        resolve_model_defaults,
        resolve_task_defaults,
        resolve_threads,
        small_graph,
    )

    cfg = cfg.with_key("run_dir", str(run_dir))
    if is_rank0:  # before anything is written or swept there
        from fleetgnn.train.rundir import run_dir_lock

        held.enter_context(run_dir_lock(run_dir))
    if auto:
        hardware = getattr(args, "hardware", "local")
        cfg = _plan_engine(cfg, run_dir, hardware, progress, quiet, target)
        check_topology(cfg, torchrun)
    local_rank0 = torchrun is None or os.environ.get("LOCAL_RANK", "0") == "0"
    _sweep_leftovers(run_dir, cfg, quiet, files=is_rank0, segments=local_rank0)
    spec = engine_spec(cfg.train.engine)
    if not spec.available:  # before generating data or starting workers
        from fleetgnn.engines import engine_class

        engine_class(spec.name)  # raises the one-line "not available in this build" error
    if torchrun is not None and not spec.distributed and torchrun["world_size"] > 1:
        raise ConfigError(
            f"train.engine={spec.name!r} runs in a single process but torchrun started "
            f"{torchrun['world_size']}; run it without torchrun, or pick a distributed engine"
        )
    if torchrun is not None:
        local = torchrun["local_world_size"]
    else:
        local = cfg.train.nproc if spec.distributed else 1
    # resolved once, recorded in config.yaml, applied before any torch work
    omp = os.environ.get("OMP_NUM_THREADS")
    threads_defaulted = cfg.train.threads is None and not (omp or "").strip().isdigit()
    cfg = cfg.with_key("train.threads", resolve_threads(cfg.train.threads, local, omp))
    if not resume:  # a resumed run keeps the values its config.yaml recorded
        cfg = resolve_task_defaults(cfg)
    cfg = resolve_model_defaults(cfg)
    cfg = resolve_feature_norm(cfg)  # the dataset's transform, unless data.feature_norm is set
    cfg = resolve_device_name(cfg)  # train.device=auto -> the device that runs, recorded
    if torchrun is None and spec.distributed and not quiet:  # before the workers' slow start
        _warn_oversubscribed(int(cfg.train.nproc), str(cfg.train.device))
    if not resume:  # config.yaml says which mode ran (a resumed run keeps what it recorded)
        cfg = cfg.with_key("train.mode", cfg.mode)
    if resume:  # what the workers would refuse after loading everything, refused now
        state = check_resumable(run_dir, cfg)  # the latest checkpoint, loaded (mapped) once
        note = finished_reason(state, int(cfg.train.epochs), cfg.train.max_steps)
        if note is not None and is_rank0:  # even with --quiet: the command trains nothing
            print(f"fleetgnn train: --resume {run_dir}: {note}", file=sys.stderr, flush=True)
        if not CheckpointDir(run_dir / "checkpoints").candidates() and is_rank0 and not quiet:
            print(
                f"fleetgnn train: --resume {run_dir}: no checkpoint in "
                f"'{run_dir / 'checkpoints'}'; starting the run from the beginning",
                file=sys.stderr,
                flush=True,
            )
    torch.set_num_threads(cfg.train.threads)
    show_log(quiet)
    from fleetgnn.distributed.launch import WorkerStartTimeout

    try:
        graph, path = resolve_dataset(cfg.data, show_progress=progress)
        width = feature_width(graph)
        if threads_defaulted and small_graph(graph.num_nodes, width, cfg.model.hidden):
            cfg = cfg.with_key(
                "train.threads", 1
            )  # recorded in config.yaml; workers get it in their config
            torch.set_num_threads(1)
        _preflight(cfg, graph)
        if is_rank0:
            accept = bool(getattr(args, "accept_changed_dataset", False))
            record_dataset(run_dir, path, resume, accept, quiet)
        if is_rank0 and not quiet:
            print(f"run directory: {printable(str(run_dir))}", flush=True)
        if spec.distributed:
            _run_distributed(cfg, run_dir, path, resume, progress, quiet)
        else:
            from fleetgnn.train.oom import device_memory_guard

            with device_memory_guard(spec.name, 0, cfg.train.device) as phase:
                with engine_from_config(cfg, graph) as engine:
                    trainer = Trainer.from_config(
                        engine, cfg, run_dir, show_progress=progress, quiet=quiet
                    )
                    phase.trainer = trainer
                    trainer.fit(resume=resume, overwrite=True)  # checked above (--overwrite)
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", None) or signal.SIGINT
        note = _interrupted_note(run_dir) if is_rank0 else ""
        if is_rank0 and not resume:
            _drop_unstarted(run_dir)
        raise TrainInterrupted(note, signum) from None
    except WorkerStartTimeout:
        if is_rank0 and not resume:
            _drop_unstarted(run_dir)
        raise
    if is_rank0 and not quiet:
        shown = printable(str(run_dir))  # a name in other bytes: \xNN for them, not a crash
        print(f"run directory: {shown} (summary.json, metrics.jsonl, checkpoints/)", flush=True)
    return 0


def _run_distributed(
    cfg: Any, run_dir: Path, dataset: Path, resume: bool, progress: bool, quiet: bool
) -> None:
    """Run a distributed engine: in this process under torchrun, else via the elastic launcher.

    ``fleetgnn train --nproc N`` starts N workers on this host through
    :func:`fleetgnn.distributed.launch` (torch's elastic agent); with
    ``train.max_restarts > 0`` a failed group is restarted and every worker resumes from the run's
    latest checkpoint.
    """
    from fleetgnn.distributed import launch
    from fleetgnn.distributed.errors import WorkerFailed

    payload = (cfg.to_dict(), str(run_dir), str(dataset), resume, progress, quiet)
    if _torchrun_env() is not None:  # already a torchrun worker
        run_worker(*payload)
        return

    def progress_line(line: str) -> None:  # "12 of 16 workers ready (9 s, giving up at 460 s)"
        print(f"fleetgnn train: {line}", flush=True)  # with the epoch lines: not an error

    try:
        launch(
            run_worker,
            args=payload,
            nproc=cfg.train.nproc,
            max_restarts=cfg.train.max_restarts,
            on_progress=None if quiet else progress_line,
            next_step="each now opens the dataset and builds its engine",
        )
    except WorkerFailed as err:  # a SIGKILLed worker: add the memory the planner predicted
        from fleetgnn.cli.oom import explain_sigkill

        raise explain_sigkill(err, cfg, dataset, run_dir) from None


def run_worker(
    cfg_dict: dict[str, Any],
    run_dir: str,
    dataset: str,
    resume: bool,
    progress: bool,
    quiet: bool = False,
) -> dict[str, Any] | None:
    """One rank of a distributed run (module-level, so the launcher can pickle it).

    Sets the intra-op threads first (``train.threads``; resolved here from torchrun's
    ``LOCAL_WORLD_SIZE`` when the config leaves it ``null``). A worker of a restarted group
    (``TORCHELASTIC_RESTART_COUNT > 0``) resumes from the latest checkpoint and records a
    ``restart`` event in ``metrics.jsonl`` with the ranks that failed.
    """
    import torch

    from fleetgnn.cli.messages import one_line_warning_format
    from fleetgnn.distributed import destroy, init, restart_info
    from fleetgnn.train import Config, Trainer, engine_from_config, resolve_threads
    from fleetgnn.train.oom import device_memory_guard

    warnings.formatwarning = one_line_warning_format("train")  # as the launcher prints them
    if int(os.environ.get("RANK", "0")) != 0:  # every rank resumes; rank 0 says it
        warnings.filterwarnings("ignore", message=".*resuming from the previous checkpoint")
    cfg = Config.from_dict(cfg_dict).validate()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    threads = resolve_threads(cfg.train.threads, local, os.environ.get("OMP_NUM_THREADS"))
    cfg = cfg.with_key("train.threads", threads)
    torch.set_num_threads(cfg.train.threads)  # before any torch work in this process
    show_log(quiet)
    ctx = init(device=str(cfg.train.device).split(":", 1)[0])
    guard = device_memory_guard(cfg.train.engine, ctx.rank, ctx.device)
    try:
        with guard as phase, engine_from_config(cfg, open_dataset(dataset), ctx) as engine:
            restart = restart_info()
            trainer = Trainer.from_config(
                engine,
                cfg,
                Path(run_dir),
                show_progress=progress and ctx.rank == 0,
                quiet=quiet,
                lock_run_dir=False,  # held by the launching process (or this one, re-entrant)
            )
            phase.trainer = trainer
            if restart is not None:
                failures = restart["failures"]
                trainer.log_event(
                    "restart",
                    attempt=restart["attempt"],
                    failed_ranks=sorted(failures),
                    failures={str(r): m for r, m in sorted(failures.items())},
                )
            summary = trainer.fit(resume=resume or restart is not None, overwrite=True)
        return summary if ctx.rank == 0 else None
    finally:
        destroy(ctx)
