"""``fleetgnn plan``: which engine and knobs for a dataset, a model and a machine, and why.

Also the planning step of ``fleetgnn train --engine auto``. The cost models and the planner live
in :mod:`fleetgnn.cost`; this module parses the command line, measures the ``local`` profile's
process-to-process bandwidth over gloo, and prints the table or the JSON object. With
``--target-acc`` it ranks by time to that validation accuracy, from the epochs-to-target that
:mod:`fleetgnn.cli.target` gathers (given, earlier runs, or a short probe run).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from fleetgnn.cli.options import add_config_options
from fleetgnn.cli.target import (
    TargetRequest,
    add_target_options,
    check_request,
    estimates_for,
    modes_to_probe,
    probe_epochs_to_target,
    target_request,
    with_probes,
)
from fleetgnn.errors import ConfigError

#: ``--shape`` keys.
SHAPE_KEYS: tuple[str, ...] = ("nodes", "edges", "features", "classes", "train", "edge_features")


def parse_shape(text: str) -> dict[str, int]:
    """``nodes=N,edges=E,features=F,classes=C[,train=T][,edge_features=D]`` -> a dict of ints.

    Counts may be written in 1e6 notation; ``edge_features`` is the width of the edge rows a
    model that reads them (``gine``) needs.

    Raises:
        ConfigError: An unknown key, a value that is not a positive count, or a missing key.
    """
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in str(text).split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in SHAPE_KEYS:
            raise ConfigError(
                f"--shape item {item!r}: expected KEY=COUNT with KEY one of {', '.join(SHAPE_KEYS)}"
            )
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"--shape {key}={value!r} is not a number") from None
        if not number >= 1 or number != int(number) or number > 1e15:
            raise ConfigError(f"--shape {key}={value} must be a whole count >= 1")
        out[key] = int(number)
    missing = [k for k in SHAPE_KEYS[:4] if k not in out]
    if missing:
        raise ConfigError(f"--shape needs {', '.join(missing)} (e.g. nodes=2.4e6,edges=6.2e7,...)")
    return out


def _all_to_all_rank(comm: Any, nbytes: int, repeats: int) -> float:
    import torch

    w = comm.world_size
    rows = max(1, nbytes // (4 * 256 * w))
    x = torch.ones(rows * w, 256)
    best = float("inf")
    for _ in range(repeats):
        comm.barrier()
        t0 = time.perf_counter()
        comm.all_to_all(x, [rows] * w, recv_counts=[rows] * w)
        best = min(best, time.perf_counter() - t0)
    return rows * (w - 1) * 256 * 4 / best


def gloo_all_to_all_probe(nbytes: int = 16 << 20, repeats: int = 3) -> float:
    """Bytes/s a rank sends in an all-to-all between 2 gloo processes on this host."""
    from fleetgnn.distributed.testing import run_world

    return float(min(run_world(_all_to_all_rank, 2, nbytes, repeats, timeout_s=120)))


def hardware_profile(name: str, nproc: int) -> Any:
    """The profile ``--hardware`` names (``local``: measured, with a gloo peer probe)."""
    from fleetgnn.cost import load_profile

    if str(name).strip().lower() == "local":
        return load_profile("local", nproc, comm_probe=gloo_all_to_all_probe if nproc > 1 else None)
    return load_profile(name)


def _profiles_epilog() -> str:
    from fleetgnn.cost import PROFILES

    names = ", ".join(PROFILES)
    return f"hardware profiles: local (measured on this machine), {names}, or a YAML file"


def add_plan(sub: Any) -> None:
    """The ``plan`` subcommand's arguments."""
    from fleetgnn.config import ENGINES, ModelConfig

    p = sub.add_parser(
        "plan",
        help="pick the engine and knobs for a dataset, a model and a machine",
        description="Predict every engine's epoch (time, bytes per link, peak memory per tier), "
        "drop those that do not fit, pick the fastest and say why.",
        epilog=_profiles_epilog,  # shown with --help only: the cost package imports torch
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset", type=Path, help="dataset directory (exact counts)")
    src.add_argument(
        "--shape",
        help="plan for a graph described by its counts: nodes=N,edges=E,features=F,classes=C"
        "[,train=T][,edge_features=D] (uniform random neighbours assumed; edge_features: "
        "the edge rows' width, for a model that reads them, e.g. gine)",
    )
    add_config_options(p, "model.hidden=128")
    p.add_argument(
        "--model",
        default=None,
        choices=list(ModelConfig.NAMES),
        help="model.name (default: the --config file's, else sage)",
    )
    p.add_argument(
        "--task",
        default=None,
        choices=["node", "link"],
        help="train.task: node classification or link prediction (only the engines and modes "
        "that train it; edge batches of train.batch_size edges with train.negatives each)",
    )
    p.add_argument("--hardware", default="local", help="profile name or YAML file")
    p.add_argument("--nproc", type=int, default=1, help="ranks (devices) to plan for")
    p.add_argument(
        "--mode",
        default="auto",
        choices=["auto", "full", "minibatch"],
        help="plan full-graph or mini-batch training, or both (auto)",
    )
    p.add_argument(
        "--engine",
        action="append",
        default=None,
        choices=[n for n, s in ENGINES.items() if s.available],
        help="consider only this engine (repeatable; default: every engine of this build)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_target_options(p)


def temporal_seeds(cfg: Any, graph: Any) -> Any:
    """The :class:`~fleetgnn.cost.workload.TemporalSeeds` of ``cfg``'s task on ``graph``.

    ``None`` when the task does not sample in time (``train.temporal`` resolved as the run
    resolves it, :func:`~fleetgnn.train.setup.temporal_kind`) or there is no dataset. A node
    task's seeds are the training nodes at their node times; a link task's are built from the
    task the run builds (:func:`~fleetgnn.train.setup.task_from_config`: the time split, its
    positives' times, the keyed negatives). ``None`` for a typed graph: the planner prices
    its sampling untimed (the typed temporal sampler draws at most as many edges).
    """
    if graph is None:
        return None
    from fleetgnn.graph.hetero import HeteroGraph
    from fleetgnn.train.setup import task_from_config, temporal_kind

    if isinstance(graph, HeteroGraph):  # typed: priced as untimed typed sampling
        temporal_kind(cfg, graph)  # refuses typed link in time in one line
        return None

    kind = temporal_kind(cfg, graph)
    if kind is None:
        return None
    from fleetgnn.cost.workload import NodeTimeSeeds
    from fleetgnn.engines.temporal_link import LinkTimeSeeds

    task = task_from_config(cfg, graph)
    seed = int(cfg.train.seed)
    if kind == "node":
        return NodeTimeSeeds(graph, seed=seed, strategy=str(task.strategy))
    return LinkTimeSeeds(task, seed=seed)


def plan_for(
    cfg: Any,
    graph: Any,
    shape: dict[str, int] | None,
    hardware: str,
    nproc: int,
    mode: str,
    engines: list[str] | None,
    target: TargetRequest | None = None,
    dataset: Path | None = None,
) -> Any:
    """The :class:`~fleetgnn.cost.Plan` of a run config.

    With a ``target`` the plan ranks by time to its accuracy, from the epochs to target given,
    read from earlier runs, and (``--probe-epochs``) measured by a short reference run on
    ``graph`` per mode of the engines that fit still without an exact number.
    """
    from fleetgnn.cost import make_plan, workload_from_config
    from fleetgnn.cost.planner import knobs_from_config

    check_request(target, dataset if graph is not None else None)
    if cfg.data.feature_norm is None and dataset is not None and graph is not None:
        from fleetgnn.graph.dataset import dataset_feature_norm

        # the transform the engines will apply (the dataset's), which the sampled models price
        cfg = cfg.with_key("data.feature_norm", dataset_feature_norm(dataset))
    temporal = temporal_seeds(cfg, graph)
    if temporal is not None and mode != "full" and not engines:
        # only sampled batches have a "now": the engines that sample this task in time
        from fleetgnn.engines.link import temporal_pairs

        mode, engines = "minibatch", sorted({e for e, _ in temporal_pairs(temporal.kind)})
    wl = workload_from_config(cfg, graph=graph, shape=shape, temporal=temporal)
    hw = hardware_profile(hardware, nproc)
    epochs = int(cfg.train.epochs)
    knobs = knobs_from_config(cfg)
    common = {"mode": mode, "engines": engines, "epochs": epochs, "knobs": knobs}
    if target is None:
        return make_plan(wl, hw, nproc, **common)
    estimates = estimates_for(target, cfg)
    plan = make_plan(
        wl, hw, nproc, **common, target_acc=target.target_acc, epochs_to_target=estimates
    )
    probes = [
        probe_epochs_to_target(
            cfg, graph, dataset, m, int(target.probe_epochs or 0), target.target_acc
        )
        for m in modes_to_probe(plan, target)
    ]
    if not probes:
        return plan
    return make_plan(  # re-ranked with the probes' numbers; the predictions are reused
        wl,
        hw,
        nproc,
        **common,
        target_acc=target.target_acc,
        epochs_to_target=with_probes(estimates, probes),
        predictions=plan.predictions,
    )


def run_plan(args: argparse.Namespace) -> int:
    """Run ``fleetgnn plan``; returns the exit status (1 when nothing fits)."""
    from fleetgnn.graph import open_dataset
    from fleetgnn.train import load_config, resolve_task_defaults

    overrides = list(args.overrides)
    if args.model:
        overrides.append(f"model.name={args.model}")
    if args.task:
        overrides.append(f"train.task={args.task}")
    target = target_request(args)  # bad values refused before any work
    cfg = resolve_task_defaults(load_config(args.config, overrides))
    if args.nproc < 1:
        raise ConfigError(f"--nproc {args.nproc} must be >= 1")
    check_request(target, args.dataset)
    graph = open_dataset(args.dataset) if args.dataset is not None else None
    shape = parse_shape(args.shape) if args.shape is not None else None
    plan = plan_for(
        cfg, graph, shape, args.hardware, args.nproc, args.mode, args.engine, target, args.dataset
    )
    if args.json:
        print(json.dumps(plan.to_dict()))
    else:
        print(plan.table())
    return 0 if plan.choice is not None else 1
