"""``fleetgnn train``: resolve the config and dataset, build the engine, run the Trainer."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

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
    from fleetgnn.graph.synthetic import prepare_synthetic, spec_for

    preset, scale, seed = data_cfg.preset, float(data_cfg.scale), int(data_cfg.seed)
    spec_for(preset, scale)  # validates the preset name and scale before any work
    cache = Path(getattr(data_cfg, "cache_dir", None) or default_cache_dir())
    path = cache / "datasets" / f"synthetic-{preset}-x{scale:g}-s{seed}"
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
    }
    out = []
    for attr, key in flags.items():
        value = getattr(args, attr, None)
        if value is not None:
            out.append(f"{key}={value}")
    return out + list(args.overrides)


def run_train(args: argparse.Namespace) -> int:
    """Run ``fleetgnn train`` for parsed arguments; returns the exit status."""
    from fleetgnn.engines import build_engine
    from fleetgnn.train import Trainer, load_config

    resume = args.resume is not None
    if resume:
        run_dir = Path(args.resume)
        cfg_path = run_dir / "config.yaml"
        if not cfg_path.is_file():
            raise ConfigError(
                f"--resume {run_dir}: no config.yaml there; point --resume at a run directory "
                f"written by 'fleetgnn train'"
            )
        cfg = load_config(cfg_path, list(args.overrides))
    else:
        cfg = load_config(args.config, _overrides(args))
        run_dir = Path(
            args.run_dir
            or cfg.run_dir
            or Path("runs")
            / f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.model.name}-{cfg.train.engine}"
        )
    cfg.run_dir = str(run_dir)
    graph, _ = resolve_dataset(cfg.data, show_progress=args.progress)
    engine = build_engine(graph, cfg)
    Trainer(engine, cfg, run_dir, show_progress=args.progress).fit(resume=resume)
    return 0
