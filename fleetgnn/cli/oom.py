"""What ``fleetgnn train`` adds when a worker was SIGKILLed: the planner's predicted memory.

The launcher's line for a worker killed by SIGKILL already says whether the kernel counted an
OOM kill (:func:`~fleetgnn.distributed.launch.oom_kills`). When it did, or when no count is
readable (the line says ``out of memory``), the CLI, which knows the run's config and dataset,
adds what the cost model predicted each rank would hold for this engine and config
(:func:`~fleetgnn.cost.planner.predict_engine`), so a user can compare it with the machine's
memory: ``...; the planner predicted about 563.0 MB per rank for minibatch (device
64.0 MB + host 192.3 MB + workspace 306.6 MB; fleetgnn plan --dataset DIR shows more)``. The
prediction comes from the run's ``plan.json`` when ``--engine auto`` wrote one (the hardware it
was planned for), else from the ``local`` hardware profile (its quick calibration, cached). If
planning fails or takes longer than :data:`PLAN_TIMEOUT_S`, the note is left out: the failure
itself is what must be reported, and promptly.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fleetgnn.config.textfile import MAX_YAML_BYTES, load_json_file
from fleetgnn.distributed.errors import WorkerFailed
from fleetgnn.distributed.launch import OOM_HINT
from fleetgnn.errors import FleetgnnError
from fleetgnn.graph.loaders._io import human_bytes

__all__ = ["explain_sigkill", "predicted_memory"]

_TIERS = ("device", "host")
#: Seconds the prediction may take before the failure is reported without it.
PLAN_TIMEOUT_S = 30.0


def _from_plan_file(run_dir: Path, engine: str) -> tuple[dict[str, int], dict[str, int]] | None:
    """``(memory, workspace)`` of ``engine`` in ``run_dir/plan.json``, if there is one."""
    path = run_dir / "plan.json"
    if not path.is_file():
        return None
    try:
        data = load_json_file(path, "plan", max_bytes=MAX_YAML_BYTES, error=FleetgnnError)
    except FleetgnnError:
        return None  # a damaged plan: report the failure without its prediction
    if not isinstance(data, dict):
        return None
    pred = (data.get("engines") or {}).get(engine)
    if not isinstance(pred, dict) or not isinstance(pred.get("memory"), dict):
        return None
    return dict(pred["memory"]), dict(pred.get("workspace") or {})


def _predict(cfg: Any, dataset: Path, engine: str) -> tuple[dict[str, int], dict[str, int]]:
    """``(memory, workspace)`` the cost model predicts per rank for the run, local hardware."""
    from fleetgnn.cost import load_profile
    from fleetgnn.cost.planner import knobs_from_config, predict_engine, workload_from_config
    from fleetgnn.graph import open_dataset

    nproc = int(cfg.train.nproc)
    wl = workload_from_config(cfg, graph=open_dataset(dataset, kind="graph"))
    hw = load_profile("local", nproc, quick=True)
    pred = predict_engine(engine, wl, hw, nproc, knobs_from_config(cfg).get(engine, {}))
    return dict(pred.memory), dict(pred.workspace)


def predicted_memory(cfg: Any, dataset: str | Path, run_dir: str | Path) -> str | None:
    """``the planner predicted about X per rank for ENGINE (device D + host H + workspace W)``.

    ``None`` when the prediction cannot be made (an engine the cost model does not price, a
    dataset it cannot read, any planning error): the caller reports the failure without it.
    """
    engine = str(cfg.train.engine)
    result: list[tuple[dict[str, int], dict[str, int]]] = []

    def work() -> None:
        try:
            result.append(
                _from_plan_file(Path(run_dir), engine) or _predict(cfg, Path(dataset), engine)
            )
        except Exception:  # noqa: BLE001, S110 - a note on an error path never replaces the error
            pass

    thread = threading.Thread(target=work, name="fleetgnn-oom-plan", daemon=True)
    thread.start()
    thread.join(PLAN_TIMEOUT_S)
    if not result:
        return None
    memory, workspace = result[0]
    parts = [(t, int(memory.get(t, 0) or 0)) for t in _TIERS]
    parts.append(("workspace", sum(int(v or 0) for v in workspace.values())))
    total = sum(v for _, v in parts)
    if total <= 0:
        return None
    detail = " + ".join(f"{name} {human_bytes(v)}" for name, v in parts if v)
    return (
        f"the planner predicted about {human_bytes(total)} per rank for {engine} ({detail}; "
        f"fleetgnn plan --dataset {dataset} shows more)"
    )


def explain_sigkill(
    err: WorkerFailed, cfg: Any, dataset: str | Path, run_dir: str | Path
) -> WorkerFailed:
    """``err`` with the planner's prediction appended (in place) when a worker ran out of memory.

    That is a worker killed by SIGKILL when the kernel's OOM killer counted a kill during the run,
    or when no count is readable; a SIGKILL with no OOM kill counted gets no prediction.
    """
    text = str(err)
    if f"SIGKILL (exit -9): {OOM_HINT}" not in text:
        return err
    note = predicted_memory(cfg, dataset, run_dir)
    if note:
        err.args = (f"{text}; {note}",)
    return err
