"""Run a function on N local worker processes through torch's elastic launcher.

:func:`launch` is what ``fleetgnn train --nproc N`` calls: it starts ``torch.distributed``'s
elastic agent in this process (``torch.distributed.launcher.api.elastic_launch``, the machinery
behind ``torchrun``) with a c10d rendezvous on loopback, and the agent spawns the workers, sets
``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` (so
:func:`fleetgnn.distributed.init` works in them unchanged), restarts the whole group up to
``max_restarts`` times when a worker fails, and collects return values. The rendezvous endpoint is
``127.0.0.1:0``: the store binds a port the OS picks (what ``torchrun --standalone`` does), so
there is no fixed port and no race for a port found free earlier.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from fleetgnn.distributed.errors import DistError, WorkerFailed

_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing")


def _run_worker(fn: Callable[..., Any], *args: Any) -> Any:
    """Worker entry point: run ``fn`` and tear down any process group it left initialised."""
    import torch.distributed as dist

    try:
        return fn(*args)
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


@contextlib.contextmanager
def _private_worker_store() -> Iterator[None]:
    """Give every attempt's workers a fresh store instead of the agent's shared one.

    With the shared store (torch's default for the c10d rendezvous), keys written by the workers
    of a failed attempt survive into the restarted attempt, and a restarted rank can read a dead
    peer's address (pytorch/pytorch#135712: "connection refused" or a hang after a restart).
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` makes rank 0 of each attempt host a new store; the
    agent reads it during rendezvous, so it is set for the duration of the launch only.
    """
    key = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
    saved = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Mute the elastic agent's own logging (its failure dumps) unless ``verbose``."""
    if verbose:
        yield
        return
    saved = {}
    for name in _LOGGERS:
        lg = logging.getLogger(name)
        saved[name] = lg.level
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def _failure_text(failure: Any) -> str:
    """The error text of one ``ProcessFailure``: exception + traceback, or the signal/exit code."""
    data = getattr(failure, "error_file_data", None)
    if isinstance(data, dict):
        msg = data.get("message")
        if isinstance(msg, dict):
            stack = (msg.get("extraInfo") or {}).get("py_callstack")
            if stack:
                return str(stack)
            if msg.get("message"):
                return str(msg["message"])
        elif msg:
            return str(msg)
    text = str(getattr(failure, "message", "") or "")
    code = getattr(failure, "exitcode", None)
    signal_name = ""
    if hasattr(failure, "signal_name"):
        with contextlib.suppress(Exception):
            signal_name = failure.signal_name()
    if code is not None and code < 0 and signal_name:
        return f"killed by {signal_name} (exit code {code}). {text}".strip()
    return text or f"exited with code {code}"


def launch(
    fn: Callable[..., Any],
    args: tuple = (),
    nproc: int = 2,
    max_restarts: int = 0,
    run_id: str | None = None,
    monitor_interval: float = 0.1,
    *,
    verbose: bool = False,
) -> dict[int, Any]:
    """Run ``fn(*args)`` on ``nproc`` local workers with torch's elastic launcher.

    Each worker is a fresh process (start method ``spawn``) with the launcher's environment; call
    :func:`fleetgnn.distributed.init` inside ``fn`` to join the group. If any worker fails, the
    agent stops the others and restarts all of them (up to ``max_restarts`` times; a worker can read
    ``TORCHELASTIC_RESTART_COUNT`` to know its attempt).

    Args:
        fn: A picklable, module-level function (not a lambda or closure).
        args: Arguments for ``fn`` (picklable).
        nproc: Number of workers (>= 1).
        max_restarts: Group restarts allowed after failures (>= 0).
        run_id: Rendezvous id (a fresh random one if None).
        monitor_interval: Seconds between the agent's health checks of the workers (> 0).
        verbose: Let the elastic agent log (its startup info and failure dumps); off by default
            since failures are raised as :class:`WorkerFailed`.

    Returns:
        ``{rank: return value of fn on that rank}``.

    Raises:
        DistError: Invalid arguments or an unpicklable ``fn``.
        WorkerFailed: Workers still failed after the last restart: the failing rank(s) and
            their error text (``.failures``).
    """
    if not isinstance(nproc, int) or nproc < 1:
        raise DistError(f"launch(nproc={nproc!r}): need an integer >= 1 worker processes.")
    if not isinstance(max_restarts, int) or max_restarts < 0:
        raise DistError(f"launch(max_restarts={max_restarts!r}): need an integer >= 0.")
    if not monitor_interval > 0:
        raise DistError(f"launch(monitor_interval={monitor_interval!r}): need seconds > 0.")
    try:
        pickle.dumps((fn, tuple(args)))
    except Exception as e:  # noqa: BLE001 - any pickling failure means the same thing here
        raise DistError(
            f"launch: fn={getattr(fn, '__qualname__', fn)!r} or its args cannot be pickled "
            f"({type(e).__name__}: {e}); workers are spawned, so pass a module-level function "
            "and picklable arguments (no lambdas, closures or open handles)."
        ) from e

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=run_id or f"fleetgnn-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        start_method="spawn",
    )
    with _quiet(verbose), _private_worker_store():
        try:
            return dict(elastic_launch(config, _run_worker)(fn, *args))
        except ChildFailedError as e:
            failures = {int(rank): _failure_text(f) for rank, f in e.failures.items()}
            raise WorkerFailed(failures) from None
