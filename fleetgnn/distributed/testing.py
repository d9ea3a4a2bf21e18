"""Multi-process test helper: run a function on every rank of a real gloo group.

``run_world(fn, world_size, *args, device="cpu")`` spawns ``world_size`` fresh processes (start
method ``spawn``), joins them into a gloo group through a ``file://`` store in a private temporary
directory (no ports), calls ``fn(comm, *args)`` with a
:class:`~fleetgnn.distributed.comm.Communicator` on each rank and returns every rank's result. A
failing rank aborts the others at once and raises :class:`~fleetgnn.distributed.errors.WorkerFailed`
with its traceback; nothing sleeps. With ``device="cuda"`` every rank's communicator serves
``cuda:rank % GPUs``: on a one-GPU machine the ranks share it (the shared-GPU mode of
:func:`~fleetgnn.distributed.init`: gloo moves the CUDA tensors).

Processes are expensive: put several checks into one world and return what the test asserts.
``fn`` and its arguments must be picklable (``fn`` a module-level function).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import pickle
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from typing import Any

import torch
import torch.multiprocessing as mp

from fleetgnn.distributed.comm import Communicator
from fleetgnn.distributed.context import DistContext, _device, destroy, init
from fleetgnn.distributed.errors import DistError, WorkerFailed


def _child(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    tmp: str,
    args: tuple,
    debug: bool,
    timeout_s: float,
    device: str = "cpu",
) -> None:
    result_path = os.path.join(tmp, f"result-{rank}.pkl")
    try:
        import torch.distributed as dist

        torch.set_num_threads(1)
        dev = _device(device, rank)  # cuda: rank % GPUs, made current
        store = dist.FileStore(os.path.join(tmp, "store"), world_size)
        dist.init_process_group(
            "gloo",
            store=store,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        comm = Communicator(None, rank=rank, world_size=world_size, debug=debug, device=dev)
        payload: tuple[str, Any] = ("ok", fn(comm, *args))
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - report everything, including SystemExit
        payload = ("error", traceback.format_exc())
    with open(result_path + ".tmp", "wb") as f:
        pickle.dump(payload, f)
    os.replace(result_path + ".tmp", result_path)
    # skip interpreter teardown (slow with torch loaded); the result is on disk
    os._exit(0)


def run_world(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout_s: float = 120,
    debug: bool = False,
    device: str = "cpu",
) -> list[Any]:
    """Run ``fn(comm, *args)`` on ``world_size`` spawned ranks of a gloo group; results by rank.

    Args:
        fn: Module-level function taking a :class:`~fleetgnn.distributed.comm.Communicator` first.
        world_size: Number of ranks (>= 1).
        *args: Passed to ``fn`` on every rank (picklable).
        timeout_s: Wall-clock limit for the whole world; also the collective timeout.
        debug: Create the communicators in debug mode.
        device: ``"cpu"`` or ``"cuda"`` (each rank on ``cuda:rank % GPUs``, gloo collectives).

    Returns:
        ``[result of rank 0, result of rank 1, ...]``.

    Raises:
        WorkerFailed: A rank raised (its traceback), died (its exit code or signal) or the world
            timed out; the remaining ranks are killed.
    """
    if int(world_size) < 1:
        raise DistError(f"run_world(world_size={world_size}): need at least 1 rank.")
    if device not in ("cpu", "cuda"):
        raise DistError(f"run_world(device={device!r}): use 'cpu' or 'cuda'.")
    if device == "cuda" and not torch.cuda.is_available():
        raise DistError("run_world(device='cuda') needs CUDA, which is not available here.")
    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="fleetgnn-world-")
    procs = []
    try:
        for rank in range(world_size):
            p = ctx.Process(
                target=_child,
                args=(fn, rank, world_size, tmp, args, debug, timeout_s, device),
                name=f"fleetgnn-rank{rank}",
            )
            p.start()
            procs.append(p)
        results: dict[int, Any] = {}
        failures: dict[int, str] = {}
        pending = {p.sentinel: r for r, p in enumerate(procs)}
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=timeout_s)
        while pending and not failures:
            left = (deadline - datetime.datetime.now()).total_seconds()
            ready = wait(list(pending), timeout=max(left, 0.0))
            if not ready:
                for rank in pending.values():
                    failures[rank] = f"TimeoutError: world did not finish within {timeout_s} s"
                break
            for s in ready:
                rank = pending.pop(s)
                procs[rank].join()
                status, value = _read_result(tmp, rank, procs[rank].exitcode)
                if status == "ok":
                    results[rank] = value
                else:
                    failures[rank] = value
        if failures:
            raise WorkerFailed(failures, what="run_world rank")
        return [results[r] for r in range(world_size)]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        shutil.rmtree(tmp, ignore_errors=True)


def _read_result(tmp: str, rank: int, exitcode: int | None) -> tuple[str, Any]:
    path = os.path.join(tmp, f"result-{rank}.pkl")
    if not os.path.exists(path):
        if exitcode is not None and exitcode < 0:
            return "error", f"process killed by signal {-exitcode}"
        return "error", f"process exited with code {exitcode} before reporting a result"
    with open(path, "rb") as f:
        return pickle.load(f)


def context_of(comm: Communicator) -> DistContext:
    """The :class:`DistContext` of a ``run_world`` rank (one host, gloo, the rank's device).

    The group belongs to ``run_world``, so the context does not own it.
    """
    return DistContext(
        rank=comm.rank,
        world_size=comm.world_size,
        local_rank=comm.rank,
        local_world_size=comm.world_size,
        backend="gloo",
        device=comm.device,
        group=comm.group,
        owns_group=False,
    )


@contextlib.contextmanager
def context_or_own(comm: Communicator | None, device: str = "cpu") -> Iterator[DistContext]:
    """The context of ``comm`` (a ``run_world`` rank), or of a one-process group of its own.

    For ``comm=None`` the group is made here and destroyed on exit, so an in-process test
    leaves no default process group behind.
    """
    if comm is not None:
        yield context_of(comm)
        return
    own = init(device=device)
    try:
        yield own
    finally:
        destroy(own)
