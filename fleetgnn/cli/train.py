"""``fleetgnn train``: resolve the config and dataset, build the engine, run the Trainer."""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path
from typing import Any

from fleetgnn.errors import ConfigError, DatasetError
from fleetgnn.graph import Graph, open_dataset


def default_cache_dir() -> Path:
    """Where generated default datasets are cached (``$XDG_CACHE_HOME/fleetgnn``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetgnn"


def resolve_dataset(data_cfg: object, show_progress: bool = True) -> tuple[Graph, Path]:
    """Open ``data.dataset``, or generate (once, cached) the embedded synthetic default."""
    dataset = getattr(data_cfg, "dataset", None)
    if dataset:
        path = Path(dataset)
        return open_dataset(path), path
    from fleetgnn.cli.progress import task_progress
    from fleetgnn.graph.synthetic import GENERATOR_VERSION, prepare_synthetic, spec_for

    preset, scale, seed = data_cfg.preset, float(data_cfg.scale), int(data_cfg.seed)
    spec = spec_for(preset, scale)  # validates the preset name and scale before any work
    cache = Path(getattr(data_cfg, "cache_dir", None) or default_cache_dir())
    # the key covers the whole spec, so a changed preset definition never reuses a stale cache
    key = f"{GENERATOR_VERSION}:{spec!r}"
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
    }
    out = []
    for attr, key in flags.items():
        value = getattr(args, attr, None)
        if value is not None:
            out.append(f"{key}={value}")
    return out + list(args.overrides)


def run_train(args: argparse.Namespace) -> int:
    """Run ``fleetgnn train`` for parsed arguments; returns the exit status."""
    from fleetgnn.config import engine_spec
    from fleetgnn.train import Trainer, engine_from_config, load_config

    resume = args.resume is not None
    if resume:
        run_dir = Path(args.resume)
        cfg_path = run_dir / "config.yaml"
        if not cfg_path.is_file():
            raise ConfigError(
                f"--resume {run_dir}: no config.yaml there; point --resume at a run directory "
                f"written by 'fleetgnn train'"
            )
        # flags and --set apply on top of the run's config (e.g. --epochs 6 extends the run);
        # the Trainer refuses changes that would change what the checkpoint means
        cfg = load_config(cfg_path, _overrides(args))
    else:
        cfg = load_config(args.config, _overrides(args))
        run_dir = Path(
            args.run_dir
            or cfg.run_dir
            or Path("runs")
            / f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.model.name}-{cfg.train.engine}"
        )
    cfg.run_dir = str(run_dir)
    spec = engine_spec(cfg.train.engine)
    if not spec.available:  # before generating data or starting workers
        from fleetgnn.engines import engine_class

        engine_class(spec.name)  # raises the one-line "not available in this build" error
    if spec.distributed:
        return _run_distributed(cfg, run_dir, resume, args.progress)
    graph, _ = resolve_dataset(cfg.data, show_progress=args.progress)
    with engine_from_config(cfg, graph) as engine:
        Trainer.from_config(engine, cfg, run_dir, show_progress=args.progress).fit(resume=resume)
    return 0


def _run_distributed(cfg: Any, run_dir: Path, resume: bool, progress: bool) -> int:
    """Run a distributed engine: in this process under torchrun, else via the elastic launcher.

    ``fleetgnn train --nproc N`` starts N workers on this host through
    :func:`fleetgnn.distributed.launch` (torch's elastic agent); with
    ``train.max_restarts > 0`` a failed group is restarted and every worker resumes from the run's
    latest checkpoint.
    """
    from fleetgnn.distributed import launch

    # generate the default dataset once, before any worker starts
    _, path = resolve_dataset(cfg.data, show_progress=progress)
    payload = (cfg.to_dict(), str(run_dir), str(path), resume, progress)
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:  # already a torchrun worker
        run_worker(*payload)
        return 0
    launch(run_worker, args=payload, nproc=cfg.train.nproc, max_restarts=cfg.train.max_restarts)
    return 0


def run_worker(
    cfg_dict: dict[str, Any], run_dir: str, dataset: str, resume: bool, progress: bool
) -> dict[str, Any] | None:
    """One rank of a distributed run (module-level, so the launcher can pickle it)."""
    from fleetgnn.distributed import destroy, init
    from fleetgnn.train import Config, Trainer, engine_from_config

    cfg = Config.from_dict(cfg_dict).validate()
    ctx = init()
    try:
        with engine_from_config(cfg, open_dataset(dataset), ctx) as engine:
            restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
            trainer = Trainer.from_config(
                engine, cfg, Path(run_dir), show_progress=progress and ctx.rank == 0
            )
            summary = trainer.fit(resume=resume or restarted)
        return summary if ctx.rank == 0 else None
    finally:
        destroy(ctx)
